"""The idleness answer: is this host active, since when, why, and how sure (GET /v1/idle,
`mlcostd idle`), for tools that stop idle machines (SkyPilot autostop, dstack, Slurm, cron).

Pure: `answer` reads the /v1/now document of the latest tick (each GPU's busy verdict, each GPU
process's SM share, I/O, CPU, phase and whether it serves), the processes the rules' latest
round called periodic jobs between runs (the caller's Analyzer.periodic: host_idle's own fact)
and the GPU utilization history of a look-back window (`History`, read from the store by the
caller). A host is idle only when
nothing in the latest tick says active *and* no GPU was busy for the whole asked duration, with
the store's ticks covering that duration without holes. Anything not known — no tick yet, a GPU
without a reading, a hole in the history, a history shorter than asked — answers active, with
the reason: a tool that stops machines must never stop one because we could not see it.

The contract is versioned (IDLENESS_VERSION); later versions add keys, never rename them. The
README section "Is this host idle? (autostop)" documents every key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.kinds import ONLINE_INFERENCE
from daemon.analysis.stack_rules import (
    CHILD_WAIT,
    FILE_WAIT,
    JOB_WAIT,
    JOB_WAIT_MIN_SHARE,
    REMOTE_WAIT,
)
from daemon.wire import COMM, COMPUTE, IDLE, UNKNOWN

IDLENESS_VERSION = 1

# What counts as a process being at work while its GPU is quiet. A process reading or writing a
# megabyte a second, or with a thread in uninterruptible (disk) sleep, is feeding or saving a
# job (a data-starved loader, a checkpoint); one using a fifth of a CPU is preprocessing on the
# host. An idle notebook or a stalled loop does neither.
IO_BYTES_PER_S = 1 << 20
IO_WAIT_PERCENT = 10.0
CPU_PERCENT = 20.0
SM_SHARE_PERCENT = 1.0  # a process whose kernels used at least this share of its GPUs' SMs

# How sure each kind of evidence makes us (0-1): kernels are measured directly; a phase comes
# from sampled stacks; CPU alone could be a spin.
KERNELS_CONFIDENCE = 1.0
IO_CONFIDENCE = 0.9
PHASE_CONFIDENCE = 0.8
CPU_CONFIDENCE = 0.7
SERVES_CONFIDENCE = 0.8  # when the kind classifier gave none
# A periodic job between runs (its kernels ran in separate runs of the rules' window: rules/
# idle.py's is_periodic): its runs were measured, that another comes is read from them.
PERIODIC_CONFIDENCE = 0.8
# An idle answer is less sure when a GPU process's phase is not known (its stacks could not be
# sampled: no py-spy, no permission) or when the history is read from minute rollups.
UNKNOWN_PHASE_CONFIDENCE = 0.8
ROLLUP_CONFIDENCE = 0.9

MEASURED = "measured"
FAIL_SAFE = "fail_safe"


@dataclass(frozen=True)
class History:
    """The look-back window the store holds: GPU utilization buckets and the ticks' coverage.

    `gpus` maps a GPU index to its (ts, avg, min, max) buckets of `width_s` seconds (the
    reader's gpu_history); `first_tick` is the earliest tick in the window (None: none);
    `largest_gap_s` the longest time between two ticks in [until - for_s, until], counting
    from `until - for_s` to the first and from the last to `until`."""

    since: float
    until: float
    width_s: float
    first_tick: float | None
    largest_gap_s: float
    gpus: Mapping[int, Sequence[tuple[float, float, float, float]]] = field(default_factory=dict)
    # The first tick after the latest hole in the recording (more than hole_s between two
    # ticks) in the whole look-back window; None: no hole. Idleness is known since then only.
    resumed_at: float | None = None


def near_start(history: History, ts: float, interval_s: float) -> bool:
    """Whether `ts` is at the look-back window's start, within a bucket (or two ticks)."""
    return ts - history.since <= max(history.width_s, 2 * interval_s)


def recorded_from_start(history: History, interval_s: float) -> bool:
    """Whether the history's first tick is at the look-back window's start: the store may hold
    more before it (the daemon was recording then)."""
    return history.first_tick is not None and near_start(history, history.first_tick,
                                                         interval_s)


def hole_s(interval_s: float) -> float:
    """The longest time between two ticks that is no hole in the recording (a tick or two
    late on a loaded host is none; the daemon stopped or stalled is one)."""
    return max(5 * interval_s, 10.0)


def fail_safe(reason: str, *, for_s: float = 0.0, ts: float | None = None) -> dict[str, Any]:
    """The answer when we cannot know: active, with the reason and a confidence of 0."""
    return {"version": IDLENESS_VERSION, "active": True, "since": None,
            "since_is_history_start": False, "idle_for_s": None, "for_s": for_s, "ts": ts,
            "reason": reason, "basis": FAIL_SAFE, "confidence": 0.0, "gpus": [],
            "processes": [], "history": None}


def process_evidence(proc: Mapping[str, Any], runs: int = 0) -> list[tuple[str, float]]:
    """Why one GPU process counts as active now: (evidence, confidence) pairs; [] when idle.
    `runs`: its runs of kernels in the rules' window where the latest round of the rules
    called it a periodic job between runs (Analyzer.periodic), else 0."""
    found: list[tuple[str, float]] = []
    sm = proc.get("sm_share")
    if isinstance(sm, int | float) and sm >= SM_SHARE_PERCENT:
        found.append((f"kernels: {sm:.0f}% SM share", KERNELS_CONFIDENCE))
    kind_conf = proc.get("kind_confidence")
    kind_sure = (float(kind_conf) if isinstance(kind_conf, int | float)
                 and not isinstance(kind_conf, bool) and kind_conf > 0 else SERVES_CONFIDENCE)
    if proc.get("serves"):
        found.append(("serves on a port: a server waiting for requests is active", kind_sure))
    elif proc.get("kind") == ONLINE_INFERENCE:
        found.append(("online inference by its kind: a server waiting for requests is active",
                      kind_sure))
    if waits_for_jobs(proc):
        found.append(("waits for its next job from a queue or a job server (a queue consumer, "
                      "seen in its stacks): a worker between jobs is active", PHASE_CONFIDENCE))
    if runs:
        found.append((f"a periodic job between runs: its kernels ran in {runs} separate runs "
                      "of the rules' window (idle_gpu_held tells it to release the GPU between "
                      "runs; stopping the host would stop its next run)", PERIODIC_CONFIDENCE))
    if _idle_reason_is(proc, CHILD_WAIT):
        found.append(("waits for a child process it started (an external tool, seen in its "
                      "stacks): the child runs on this host", PHASE_CONFIDENCE))
    if _idle_reason_is(proc, REMOTE_WAIT):
        found.append(("retries or polls a remote service between sleeps (seen in its stacks): "
                      "a job waiting on its store goes on when the service answers",
                      PHASE_CONFIDENCE))
    if _idle_reason_is(proc, FILE_WAIT):
        found.append(("sleeps in a loop until a file appears (seen in its stacks): another job "
                      "or a person may be writing it, and it goes on when the file appears",
                      PHASE_CONFIDENCE))
    io = sum(v for v in (proc.get("read_bytes_per_s"), proc.get("write_bytes_per_s"))
             if isinstance(v, int | float))
    if io >= IO_BYTES_PER_S:
        found.append((f"I/O: {io / (1 << 20):.1f} MiB/s", IO_CONFIDENCE))
    in_d = proc.get("threads_in_d")
    if isinstance(in_d, int) and in_d > 0:
        found.append((f"I/O: {in_d} thread(s) in disk sleep", IO_CONFIDENCE))
    wait = proc.get("io_wait_percent")
    if isinstance(wait, int | float) and wait >= IO_WAIT_PERCENT:
        found.append((f"I/O: waits {wait:.0f}% of the time", IO_CONFIDENCE))
    cpu = proc.get("cpu_percent")
    if isinstance(cpu, int | float) and cpu >= CPU_PERCENT:
        found.append((f"CPU: {cpu:.0f}%", CPU_CONFIDENCE))
    # A phase of work the GPU does not show (data wait, checkpoint, eval, sync ...), from its
    # sampled stacks. Compute is left to the kernels, measured: the phase is the balance of a
    # longer window and would keep a loop that stalled minutes ago "computing".
    phase = proc.get("phase")
    if phase == COMM and not found:
        # Nothing else of it works: it waits on its peers. Counted as work all the same, as
        # the host rule counts it: a rank waiting on a peer on another host that works reads
        # the same as a rank of a job that hangs (hung_job says which it may be).
        found.append((f"phase: {COMM}, waiting on its peers with its GPU idle and its CPU "
                      "still (a rank on another host may be working; if every rank of its job "
                      "waits, the job may be hung: see the hung_job finding)", PHASE_CONFIDENCE))
    elif isinstance(phase, str) and phase not in (IDLE, UNKNOWN, COMPUTE):
        found.append((f"phase: {phase}", PHASE_CONFIDENCE))
    return found


def waits_for_jobs(proc: Mapping[str, Any]) -> bool:
    """A queue consumer between jobs, as the rules see one (rules/idle.py's waits_for_jobs):
    the top stack of its idle phase waits for its next job (JOB_WAIT: a broker's queue, a job
    server's socket or long poll) and that phase holds at least JOB_WAIT_MIN_SHARE of its
    window."""
    return _idle_reason_is(proc, JOB_WAIT)


def _idle_reason_is(proc: Mapping[str, Any], prefix: str) -> bool:
    """The top stack of its idle phase has a reason starting with `prefix` (JOB_WAIT,
    CHILD_WAIT, REMOTE_WAIT, FILE_WAIT), and that phase holds at least JOB_WAIT_MIN_SHARE of its window."""
    reasons, shares = proc.get("phase_reasons"), proc.get("phases")
    reason = reasons.get(IDLE) if isinstance(reasons, Mapping) else None
    share = shares.get(IDLE) if isinstance(shares, Mapping) else None
    return (isinstance(reason, str) and reason.startswith(prefix)
            and isinstance(share, int | float) and share >= JOB_WAIT_MIN_SHARE)


def _gpu_entries(now: Mapping[str, Any], history: History, idle_pct: float,
                 window_start: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Per GPU: its verdict now, the last time it was busy, and what is unknown about it."""
    entries, unknown = [], []
    # A bucket's end is where its busy time may have ended, but never after the latest tick
    # (the current bucket runs past it) nor before the first (a minute rollup's bucket starts
    # on the minute, before a daemon that started inside it recorded anything).
    latest = now.get("ts")
    latest = latest if isinstance(latest, int | float) else math.inf
    first = history.first_tick if history.first_tick is not None else -math.inf
    for gpu in now.get("gpus") or []:
        index = gpu.get("index")
        points = history.gpus.get(index, ())
        busy_ends = [min(max(ts + history.width_s, first), latest)
                     for ts, _avg, _low, high in points if high >= idle_pct]
        evidence = []
        busy = gpu.get("busy")
        util = gpu.get("utilization")
        if busy is None:
            status = gpu.get("status") or "unknown"
            unknown.append(f"GPU {index} has no utilization reading ({status})")
            evidence.append(f"no reading ({status})")
        elif busy:
            evidence.append(f"kernels: utilization {util:.0f}%")
        gap = _largest_gap([ts for ts, *_ in points], window_start, history)
        if gap is not None:
            unknown.append(f"GPU {index} has no readings for {gap:.0f} s of the asked window")
        entries.append({"index": index, "uuid": gpu.get("uuid"), "status": gpu.get("status"),
                        "busy": busy, "utilization": util,
                        "last_busy": max(busy_ends) if busy_ends else None,
                        "evidence": evidence})
    return entries, unknown


def _largest_gap(starts: Sequence[float], window_start: float,
                 history: History) -> float | None:
    """The longest run without a bucket inside [window_start, until] when longer than two
    buckets and a few ticks (a GPU lost, then back); None when there is none."""
    inside = [ts for ts in starts if ts + history.width_s > window_start]
    if history.until - window_start <= 0:
        return None
    edges = [window_start - history.width_s, *inside, history.until]
    worst = max(b - a for a, b in zip(edges, edges[1:], strict=False))
    return worst - history.width_s if worst > 3 * history.width_s else None


def answer(now: Mapping[str, Any], history: History | None, *, for_s: float,
           idle_utilization_pct: float, interval_s: float,
           rollups: bool = False, periodic: Mapping[str, int] | None = None,
           working: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """The idleness answer for the latest tick (`now`, the /v1/now document) and the look-back
    `history` (None: not read; then only a `for_s` of 0 can answer idle). `periodic`: the
    processes (by key) the latest round of the rules called periodic jobs between runs, with
    their runs (Analyzer.periodic): at work, as host_idle counts them; `working`: those it found
    at work for what a tick alone does not show, with why (Analyzer.working)."""
    ts = now.get("ts")
    if ts is None:
        return fail_safe("no tick recorded yet: the daemon has just started", for_s=for_s)
    if not now.get("gpus"):
        return fail_safe("no GPU readings in the latest tick (is NVML working? see "
                         "`mlcostd check`)", for_s=for_s, ts=ts)
    if history is None:
        return fail_safe("the history could not be read", for_s=for_s, ts=ts)
    window_start = ts - for_s
    # A GPU's holes are looked for where the ticks are (a short history is said once, below).
    recorded_from = max(window_start, history.first_tick or window_start)
    gpus, unknown = _gpu_entries(now, history, idle_utilization_pct, recorded_from)
    processes = []
    active_now: list[tuple[str, float]] = []
    unknown_phase = False
    for proc in now.get("processes") or []:
        key = proc.get("key")
        evidence = process_evidence(proc, (periodic or {}).get(key, 0)
                                    if isinstance(key, str) else 0)
        evidence += [(why, PHASE_CONFIDENCE) for why in
                     ((working or {}).get(key, ()) if isinstance(key, str) else ())]
        if proc.get("phase") is None and not evidence:
            unknown_phase = True
        processes.append({
            "key": key, "pid": proc.get("pid"), "user": proc.get("user"),
            "command": proc.get("command"), "gpus": [u.get("index") for u in proc.get("gpus")
                                                     or [] if isinstance(u, Mapping)],
            "active": bool(evidence), "kind": proc.get("kind"),
            "serves": bool(proc.get("serves")), "phase": proc.get("phase"),
            "sm_share": proc.get("sm_share"), "evidence": [text for text, _ in evidence]})
        active_now += [(f"pid {proc.get('pid')}: {text}", conf) for text, conf in evidence]
    for gpu in gpus:
        if gpu["busy"]:
            active_now.append((f"GPU {gpu['index']}: {gpu['evidence'][0]}", KERNELS_CONFIDENCE))

    # The ticks must cover the asked window without a hole (the daemon stopped, or stalled).
    tolerance = hole_s(interval_s)
    if for_s > 0 and (history.first_tick is None or history.first_tick > window_start):
        held = ts - history.first_tick if history.first_tick is not None else 0.0
        unknown.append(f"the history holds {held:.0f} s, less than the asked {for_s:.0f} s "
                       "(the daemon has not been recording that long, or keeps its ticks for less: "
                       "[store].raw_retention, 6 h by default)")
    elif for_s > 0 and history.largest_gap_s > tolerance:
        unknown.append(f"the daemon recorded no tick for {history.largest_gap_s:.0f} s of the "
                       "asked window")

    busy_ends = [g["last_busy"] for g in gpus if g["last_busy"] is not None]
    last_busy = max(busy_ends) if busy_ends else None
    history_entry = {"since": history.since, "until": history.until,
                     "first_tick": history.first_tick, "resolution_s": history.width_s,
                     "last_gpu_busy": last_busy}
    base = {"version": IDLENESS_VERSION, "for_s": for_s, "ts": ts, "gpus": gpus,
            "processes": processes, "history": history_entry}

    if active_now:
        text, confidence = max(active_now, key=lambda item: item[1])
        more = f" (and {len(active_now) - 1} more)" if len(active_now) > 1 else ""
        since = _active_since(history, idle_utilization_pct, ts)
        # a stretch that reaches back to the first tick: active since at least then
        from_start = history.first_tick is not None and since <= history.first_tick
        since = max(since, history.first_tick) if history.first_tick is not None else since
        return {**base, "active": True, "since": since, "since_is_history_start": from_start,
                "idle_for_s": None, "reason": f"active now: {text}{more}", "basis": MEASURED,
                "confidence": confidence}
    if unknown:
        return {**base, "active": True, "since": None, "since_is_history_start": False,
                "idle_for_s": None, "reason": "cannot tell, so active: " + "; ".join(unknown),
                "basis": FAIL_SAFE, "confidence": 0.0}
    # Idle now. Since the end of the last busy bucket, else since the history began.
    from_start = last_busy is None or (history.first_tick is not None
                                       and last_busy <= history.first_tick)
    since = (history.first_tick if from_start else last_busy) or ts
    resumed_at = history.resumed_at
    resumed = resumed_at is not None and since < resumed_at
    if resumed_at is not None and resumed:  # nothing is known of the hole: idle since the
        since, from_start = resumed_at, True  # recording resumed, at least
    since = min(since, ts)
    idle_for = ts - since
    confidence = min([1.0]
                     + ([UNKNOWN_PHASE_CONFIDENCE] if unknown_phase else [])
                     + ([ROLLUP_CONFIDENCE] if rollups else []))
    if idle_for < for_s:
        return {**base, "active": True, "since": None, "since_is_history_start": False,
                "idle_for_s": idle_for,
                # whole seconds down: 4.6 s of 5 asked is not "5 s of the asked 5 s"
                "reason": f"idle now, but only for {int(idle_for)} s of the asked "
                          f"{for_s:.0f} s: a GPU was busy until then",
                "basis": MEASURED, "confidence": KERNELS_CONFIDENCE}
    reached = recorded_from_start(history, interval_s)
    held = (f"at least {idle_for:.0f} s (since the recording resumed after a hole)" if resumed
            else f"at least {idle_for:.0f} s (as far back as it looks: "
                 f"{(history.until - history.since) / 3600:.3g} h)" if from_start and reached
            else f"at least {idle_for:.0f} s (all the history holds)" if from_start
            else f"{idle_for:.0f} s")
    return {**base, "active": False, "since": since, "since_is_history_start": from_start,
            "idle_for_s": idle_for,
            "reason": f"idle for {held}: no GPU busy, no process computing, serving or "
                      "doing I/O",
            "basis": MEASURED, "confidence": confidence}


def _active_since(history: History, idle_pct: float, ts: float) -> float:
    """The start of the trailing run of buckets in which some GPU was busy; the latest tick
    when the latest bucket was not busy (active by this tick's evidence only)."""
    busy: dict[float, bool] = {}
    for points in history.gpus.values():
        for start, _avg, _low, high in points:
            busy[start] = busy.get(start, False) or high >= idle_pct
    since = ts
    for start in sorted(busy, reverse=True):
        if not busy[start]:
            break
        since = start
    return since
