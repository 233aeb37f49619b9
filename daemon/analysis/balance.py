"""Phase balance from the store: how each process's time split between compute and the phases
of its low-utilization windows, and when its stacks show it checkpointing. Read-only: the report,
the API, replay and the rules use these over a StoreReader."""

from __future__ import annotations

from typing import Any

from daemon.analysis.phase_balance import StackSample, checkpoint_starts, phase_balance
from daemon.sources.frames import Frame
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.wire import process_key

LOW_UTILIZATION = "low_utilization"  # the event kind of a window
# A stretch in the middle band (daemon.runtime.attribution): the process worked, but its stacks
# were sampled there too (more slowly), and they split its time as a window's do.
MID_UTILIZATION = "mid_utilization"
SAMPLED = (LOW_UTILIZATION, MID_UTILIZATION)  # events whose time the stack samples split


def phase_balances(reader: StoreReader, since: float, until: float, interval_s: float,
                   processes: list[dict[str, Any]] | None = None,
                   ) -> dict[tuple[int, float], dict[str, Any]]:
    """Phase balance of every process with samples or windows in [since, until].

    Per process: its time in the window is from its first to its last sample (plus one tick);
    the time outside low-utilization windows (and middle-band stretches: SAMPLED) counts as
    compute for GPU processes; their time is split by its stack samples' phases. `processes` is the window summary's list when the
    caller has read it already.
    """
    if processes is None:
        processes = reader.window_summary(since, until)["processes"]
    windows = queries.events(reader, since, until)
    low: dict[str, float] = {}
    for event in windows:
        if event["kind"] not in SAMPLED:
            continue
        start = max(event["started_at"], since)
        end = min(event["ended_at"] if event["ended_at"] is not None else until, until)
        low[event["target"]] = low.get(event["target"], 0.0) + max(0.0, end - start)
    samples_by_proc: dict[tuple[int, float], list[StackSample]] = {}
    frames_of: dict[str, tuple[Frame, ...]] = {}  # one tuple per stack, shared by its samples
    for row in queries.stack_samples(reader, since, until):
        frames = frames_of.get(row["hash"])
        if frames is None:
            frames = frames_of[row["hash"]] = tuple(
                Frame(name, filename, line) for name, filename, line in row["frames"])
        samples_by_proc.setdefault((row["pid"], round(row["start_time"], 3)), []).append(
            StackSample(row["ts"], row["pid"], row["thread"], row["hash"], frames,
                        row["phase"], row["gpu_util"] or 0.0, row.get("reason") or ""))
    result = {}
    for proc in processes:
        key = (proc["pid"], round(proc["start_time"], 3))
        samples = samples_by_proc.get(key, [])
        window_low = low.get(process_key(proc["pid"], proc["start_time"]), 0.0)
        if not proc["gpus"] and not samples:
            continue
        seen_s = proc["last_seen"] - proc["first_seen"] + interval_s
        if proc["gpus"]:
            busy = max(0.0, seen_s - window_low)
        else:
            busy = 0.0  # a worker has no GPU time of its own
        result[(proc["pid"], proc["start_time"])] = phase_balance(samples, seen_s, busy)
    return result


def checkpoint_times(reader: StoreReader, since: float,
                     until: float) -> dict[str, list[float]]:
    """Per process ('pid:start_time'): when each checkpoint its stacks show began
    (phase_balance.checkpoint_starts).

    The observed checkpoint cadence, for the spot advice (how much work an interruption loses).
    """
    windows: dict[str, list[tuple[float, float]]] = {}
    for event in queries.events(reader, since, until):
        if event["kind"] in SAMPLED:
            end = event["ended_at"] if event["ended_at"] is not None else until
            windows.setdefault(event["target"], []).append((event["started_at"], end))
    samples: dict[str, list[tuple[float, str]]] = {}
    for row in queries.stack_samples(reader, since, until):  # (oldest first)
        key = process_key(row["pid"], row["start_time"])
        if key in windows:
            samples.setdefault(key, []).append((row["ts"], row["phase"]))
    found = {key: checkpoint_starts(taken, windows[key]) for key, taken in samples.items()}
    return {key: times for key, times in found.items() if times}
