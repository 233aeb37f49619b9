"""The window the rules read: per-GPU and per-process aggregates of a run of raw Samples.

`build_analysis` turns samples (oldest first) and their burns into an `Analysis`: GPU windows,
process windows (with the phase balance from daemon.analysis.phase_balance, I/O stall evidence and
checkpoint cadence), budget events and the price catalog. Busy and idle are
`daemon.analysis.busy.gpu_is_busy` at the Analysis's `idle_utilization_pct` ([idle].utilization).
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import isnan
from typing import Any

from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, IdleThresholds, gpu_is_busy
from daemon.analysis.cost import Burn, HostPrice, burn
from daemon.analysis.kinds import BATCH_INFERENCE, ONLINE_INFERENCE, OTHER, Kind
from daemon.analysis.ledger import JobLabeler
from daemon.analysis.rules.thresholds import (
    CHECKPOINT_WRITE_MIN_BYTES,
    DEFAULT_LIMITS,
    INFERENCE_COMMAND,
    WELL_USED_UTILIZATION_PCT,
)
from daemon.analysis.window_ticks import (
    BURN,
    IOWAIT,
    NUMBERS,
    READ,
    WRITE,
    WindowTick,
    window_tick,
)
from daemon.sources.sample import GPU_OK, Sample
from daemon.wire import CHECKPOINT, OUTPUT, process_key

GIB = 2**30


@dataclass(frozen=True)
class GpuWindow:
    index: int
    name: str
    memory_total_bytes: int
    memory_peak_bytes: int
    utilization_mean: float
    utilization_p95: float
    sm_activity_mean: float | None
    held: bool  # some process held memory on it at some point
    trailing_idle_s: float  # idle (and lost-free) at the end of the window


@dataclass(frozen=True)
class ProcessWindow:
    id: str  # 'pid:start_time'
    pid: int
    start_time: float
    user: str
    command: str
    job: str
    gpus: tuple[int, ...]
    seconds: float  # seen in the window
    runtime_s: float  # since the process started
    burn_per_hour: float  # mean over the window
    memory_peak_bytes: int  # largest memory on any one GPU
    gpu_utilization_mean: float  # of the GPUs it holds
    gpu_well_used_fraction: float  # ticks with its GPUs at or above WELL_USED_UTILIZATION_PCT
    gpu_low_fraction: float  # ticks with its GPUs below WELL_USED_UTILIZATION_PCT
    sm_activity_mean: float | None
    trailing_idle_s: float  # its GPUs idle at the end of the window
    # The same SM signal over that trailing idle span only: kernels it ran before it went idle
    # (a notebook's warm-up pass) are no sign of work now. None when there is no idle span.
    sm_activity_idle_mean: float | None
    iowait_fraction: float  # iowait seconds growth / window, process + children
    d_state_fraction: float  # ticks with a thread of it or its children in D state
    read_bytes_per_s: float
    checkpoint_times: tuple[float, ...]
    inference: bool
    phases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    memory_by_gpu: Mapping[int, int] = field(default_factory=dict)
    # Which signal sm_activity_mean is: "GPM SM activity" (the GPU's, as the GPU panel's SM
    # column shows it) or "process SM share" (NVML per-process utilization, without GPM).
    sm_signal: str | None = None
    # Its workload kind (daemon.analysis.kinds); `serves`: it listens and has served, so no
    # rule offers it SIGTERM.
    kind: Kind = field(default_factory=Kind)
    ppid: int = 0  # its parent: ranks of one job share one (rules/stragglers.py)

    @property
    def checkpoint_interval_s(self) -> float | None:
        """The one estimate of its checkpoint interval, which every rule uses."""
        return checkpoint_interval(self.checkpoint_times)


@dataclass(frozen=True)
class Analysis:
    window_s: float
    start: float
    end: float
    price: HostPrice
    catalog: Any
    gpus: tuple[GpuWindow, ...]
    processes: tuple[ProcessWindow, ...]
    burn_per_hour: float
    idle_per_hour: float
    wasted_per_hour: float
    host_trailing_idle_s: float
    host_cpus: int
    budget_events: tuple[Any, ...] = ()
    # The busy/idle line ([idle].utilization): daemon.analysis.busy.gpu_is_busy decides with it.
    idle_utilization_pct: float = DEFAULT_IDLE_UTILIZATION_PCT
    # Time thresholds a config may shorten (a simulated host is watched for minutes, not days).
    limits: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    # Configured request counters by target (job label or 'pid:start_time'): UnitCostMeter
    # documents with unit "requests" (daemon.analysis.meters).
    request_counters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def limit(self, name: str) -> float:
        return self.limits.get(name, DEFAULT_LIMITS[name])

    @property
    def gpus_used(self) -> int:
        return sum(1 for g in self.gpus if g.held)

    @property
    def peak_gpu_memory_gib(self) -> float:
        peaks = [g.memory_peak_bytes for g in self.gpus if g.held]
        return max(peaks, default=0) / GIB

    @property
    def working_gpus(self) -> tuple[GpuWindow, ...]:
        """GPUs held and doing work (not idle now, busy on average): what a smaller host must
        carry. A GPU held but idle is the idle-GPU rule's business, not a reason to stay big."""
        return tuple(g for g in self.gpus
                     if g.held and gpu_is_busy(g.utilization_mean, self.idle_utilization_pct)
                     and g.trailing_idle_s < self.limit("idle_held_min_s"))


def checkpoint_interval(times: Sequence[float]) -> float | None:
    """The median gap between checkpoints (robust to one missed or extra one); None below two."""
    if len(times) < 2:
        return None
    return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))


def _p95(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _normalize_phases(phase_balances: Mapping[Any, Any] | None) -> dict[Any, Mapping[str, Any]]:
    """Phase balances keyed by (pid, start_time), 'pid:start_time' or pid: all accepted."""
    out: dict[Any, Mapping[str, Any]] = {}
    for key, value in (phase_balances or {}).items():
        if isinstance(key, tuple):
            out[process_key(*key)] = value
        else:
            out[key if isinstance(key, str) else int(key)] = value
    return out


def _checkpoint_bursts(times_deltas: Sequence[tuple[float, float]]) -> list[float]:
    """Times of write bursts >= CHECKPOINT_WRITE_MIN_BYTES; consecutive ticks merge."""
    bursts: list[float] = []
    in_burst = False
    for ts, delta in times_deltas:
        if delta >= CHECKPOINT_WRITE_MIN_BYTES:
            if not in_burst:
                bursts.append(ts)
            in_burst = True
        else:
            in_burst = False
    return bursts


def build_analysis(
    samples: Sequence[Sample],
    phase_balances: Mapping[Any, Any] | None,
    price: HostPrice,
    catalog: Any = None,
    *,
    burns: Sequence[Burn] | None = None,
    thresholds: IdleThresholds | None = None,
    **options: Any,
) -> Analysis:
    """Aggregate a window of samples (oldest first) into an Analysis. `burns`, when given, are
    the burns of the same samples (saves recomputing them); `thresholds` (the [idle] settings)
    say what a busy GPU is, here and in the burns computed when none are given; `options` are
    `analysis_of_ticks`'s."""
    if not samples:
        raise ValueError("build_analysis needs at least one sample")
    thresholds = thresholds or IdleThresholds()
    burns = list(burns) if burns is not None else [burn(s, price, thresholds) for s in samples]
    ticks: list[WindowTick] = []
    for s, b in zip(samples, burns, strict=True):
        ticks.append(window_tick(s, b, ticks[-1] if ticks else None))
    return analysis_of_ticks(ticks, phase_balances, price, catalog, thresholds=thresholds,
                             **options)


def analysis_of_ticks(
    ticks: Sequence[WindowTick],
    phase_balances: Mapping[Any, Any] | None,
    price: HostPrice,
    catalog: Any = None,
    *,
    jobs: Mapping[str, str] | JobLabeler | None = None,
    checkpoint_times: Mapping[str, Sequence[float]] | None = None,
    budget_events: Iterable[Any] = (),
    host_cpus: int | None = None,
    limits: Mapping[str, float] | None = None,
    thresholds: IdleThresholds | None = None,
    inference_command: re.Pattern[str] = INFERENCE_COMMAND,
    kinds: Mapping[str, Kind] | None = None,
    request_counters: Mapping[str, Mapping[str, Any]] | None = None,
) -> Analysis:
    """Aggregate a window of ticks (oldest first; daemon.analysis.window_ticks) into an
    Analysis. `checkpoint_times` adds checkpoint times per process id to those seen as write
    bursts; `thresholds` (the [idle] settings) say what a busy GPU is."""
    if not ticks:
        raise ValueError("analysis_of_ticks needs at least one tick")
    thresholds = thresholds or IdleThresholds()
    idle_pct = thresholds.idle_utilization_pct

    def idle(utilization: float | None) -> bool:
        return gpu_is_busy(utilization, idle_pct) is False

    labeler = jobs if isinstance(jobs, JobLabeler) else JobLabeler(jobs)
    phases = _normalize_phases(phase_balances)
    start, end = ticks[0].ts, ticks[-1].ts
    window = max(end - start, 0.0)
    # Per GPU.
    util_series: dict[int, list[float]] = {}
    sm_series: dict[int, list[float]] = {}
    mem_peak: dict[int, int] = {}
    mem_total: dict[int, int] = {}
    names: dict[int, str] = {}
    held: set[int] = set()
    util_at: list[dict[int, float]] = []
    for s in ticks:
        tick_utils: dict[int, float] = {}
        for g in s.gpus:
            names[g.index] = g.name
            if g.memory_total_bytes:
                mem_total[g.index] = g.memory_total_bytes
            if g.status != GPU_OK or g.utilization is None:
                continue
            tick_utils[g.index] = g.utilization
            util_series.setdefault(g.index, []).append(g.utilization)
            if g.sm_activity is not None:
                sm_series.setdefault(g.index, []).append(g.sm_activity)
            if g.memory_used_bytes is not None:
                mem_peak[g.index] = max(mem_peak.get(g.index, 0), g.memory_used_bytes)
        util_at.append(tick_utils)
        held.update(s.use_gpu)

    def trailing(idle_at: Callable[[int], bool | None]) -> float:
        """Seconds at the end of the window for which idle_at(i) held (None: stop)."""
        since = None
        for i in range(len(ticks) - 1, -1, -1):
            if not idle_at(i):
                break
            since = ticks[i].ts
        return 0.0 if since is None else end - since

    def gpu_idle(index: int) -> Callable[[int], bool]:
        return lambda i: idle(util_at[i].get(index))

    def process_idle(key: tuple[int, float], mine: list[int]) -> Callable[[int], bool]:
        """Still there, and every GPU it holds idle, at sample i."""
        return lambda i: key in by_key[i] and all(idle(util_at[i].get(g)) for g in mine)

    gpus = []
    for index in sorted(names):
        series = util_series.get(index, [])
        sm = sm_series.get(index)
        gpus.append(GpuWindow(
            index, names[index], mem_total.get(index, 0), mem_peak.get(index, 0),
            statistics.fmean(series) if series else 0.0, _p95(series),
            statistics.fmean(sm) if sm else None, index in held,
            trailing(gpu_idle(index))))
    # Per process (GPU processes; children fold into their parent's I/O evidence).
    # Each tick's process positions by key and by parent (ticks with the same processes share
    # their key and parent columns, and so these maps).
    seen: dict[tuple[int, float], list[int]] = {}
    by_key: list[dict[tuple[int, float], int]] = []
    children: list[dict[int, list[int]]] = []
    keys: dict[tuple[int, float], int] = {}
    kids: dict[int, list[int]] = {}
    for i, s in enumerate(ticks):
        if i == 0 or s.keys is not ticks[i - 1].keys or s.ppids is not ticks[i - 1].ppids:
            keys, kids = {}, {}
            for j, (key, ppid) in enumerate(zip(s.keys, s.ppids, strict=True)):
                keys[key] = j
                kids.setdefault(ppid, []).append(j)
        for key, j in keys.items():
            if s.holds_gpu(j):
                seen.setdefault(key, []).append(i)
        by_key.append(keys)
        children.append(kids)
    processes = []
    for key, idx in seen.items():
        first_i, last_i = idx[0], idx[-1]
        pid = key[0]
        last_proc = ticks[last_i].process(by_key[last_i][key])  # who it is, as last seen
        gpu_set: set[int] = set()
        mem_by_gpu: dict[int, int] = {}
        utils, sms, burn_rates = [], [], []
        own_sm: list[float] = []
        sm_at: list[tuple[float, float]] = []  # (ts, the SM signal at that tick)
        low = well_used = d_ticks = 0
        io_first: dict[tuple[int, float], float] = {}
        io_last: dict[tuple[int, float], float] = {}
        read_first: dict[tuple[int, float], float] = {}
        read_last: dict[tuple[int, float], float] = {}
        writes: list[tuple[float, float]] = []
        prev_written: dict[tuple[int, float], float] = {}
        # The tick's columns, read in place (WindowTick: NaN for None; byte counts below 2**53
        # are exact as doubles, and so are their differences).
        for i in idx:
            s = ticks[i]
            me = by_key[i][key]
            workers = children[i].get(pid)  # its children at this tick, if any
            numbers, in_d = s.numbers, s.in_d
            first, past = s.use_first[me], s.use_first[me + 1]
            mine = s.use_gpu[first:past].tolist()
            gpu_set.update(mine)
            for held_index, memory in zip(mine, s.use_memory[first:past], strict=True):
                used = 0 if isnan(memory) else int(memory)
                most = mem_by_gpu.get(held_index, 0)
                mem_by_gpu[held_index] = used if used > most else most
            # (its means at this tick, worked out when the tick entered the window; NaN: none)
            mean = s.util_mean[me]
            if not isnan(mean):
                utils.append(mean)
                if mean < WELL_USED_UTILIZATION_PCT:
                    low += 1
                else:
                    well_used += 1
            activity = s.gpm_mean[me]
            if not isnan(activity):
                sms.append(activity)
                sm_at.append((s.ts, activity))
            elif mine:
                # No GPM (before Hopper): the process's own SM share stands in for activity.
                own_sm.append(s.own_sm[me])
                sm_at.append((s.ts, own_sm[-1]))
            burned = numbers[NUMBERS * me + BURN]
            burn_rates.append(0.0 if isnan(burned) else burned)
            if in_d[me] or (workers and any(in_d[t] for t in workers)):
                d_ticks += 1
            written = 0.0
            for t in (me, *workers) if workers else (me,):
                at, tree_key = NUMBERS * t, s.keys[t]
                iowait_s, read_b, write_b = (numbers[at + IOWAIT], numbers[at + READ],
                                             numbers[at + WRITE])
                if not isnan(iowait_s):
                    io_first.setdefault(tree_key, iowait_s)
                    io_last[tree_key] = iowait_s
                if not isnan(read_b):
                    read_first.setdefault(tree_key, read_b)
                    read_last[tree_key] = read_b
                if not isnan(write_b):
                    if tree_key in prev_written:
                        written += max(write_b - prev_written[tree_key], 0)
                    prev_written[tree_key] = write_b
            writes.append((s.ts, written))
        seconds = ticks[last_i].ts - ticks[first_i].ts
        ticks_seen = len(idx)
        iowait = sum(max(io_last[k] - io_first[k], 0.0) for k in io_last)
        read = sum(max(read_last[k] - read_first[k], 0) for k in read_last)
        pid_id = process_key(*key)
        # Checkpoints seen in its stacks are exact; write bursts are the fallback without them.
        observed = (checkpoint_times or {}).get(pid_id)
        proc_phases = phases.get(pid_id) or phases.get(pid) or {}
        # Writes its stacks show as output (logs, metrics) are no checkpoints: no cadence.
        cps = (sorted(observed) if observed else
               [] if OUTPUT in proc_phases and CHECKPOINT not in proc_phases else
               _checkpoint_bursts(writes))
        mine_final = sorted(gpu_set)
        idle_s = trailing(process_idle(key, mine_final))
        idle_since = ticks[last_i].ts - idle_s
        in_idle = [v for ts, v in sm_at if ts >= idle_since] if idle_s > 0 else []
        kind = (kinds or {}).get(pid_id) or Kind()
        processes.append(ProcessWindow(
            id=pid_id, pid=pid, start_time=key[1], user=last_proc.user,
            command=last_proc.command, job=labeler.label(last_proc.command, last_proc.owner),
            gpus=tuple(mine_final), seconds=seconds, runtime_s=max(end - key[1], 0.0),
            burn_per_hour=statistics.fmean(burn_rates) if burn_rates else 0.0,
            memory_peak_bytes=max(mem_by_gpu.values(), default=0),
            gpu_utilization_mean=statistics.fmean(utils) if utils else 0.0,
            gpu_well_used_fraction=well_used / ticks_seen, gpu_low_fraction=low / ticks_seen,
            sm_activity_mean=(statistics.fmean(sms) if sms else
                              statistics.fmean(own_sm) if own_sm else None),
            trailing_idle_s=idle_s,
            sm_activity_idle_mean=statistics.fmean(in_idle) if in_idle else None,
            iowait_fraction=min(iowait / seconds, 1.0) if seconds > 0 else 0.0,
            d_state_fraction=d_ticks / ticks_seen,
            read_bytes_per_s=read / seconds if seconds > 0 else 0.0,
            checkpoint_times=tuple(cps),
            inference=is_inference(kind, last_proc.command, inference_command),
            phases=proc_phases,
            memory_by_gpu=mem_by_gpu,
            sm_signal=("GPM SM activity" if sms else "process SM share" if own_sm else None),
            kind=kind, ppid=last_proc.ppid,
        ))
    processes.sort(key=lambda p: -p.burn_per_hour)
    host_trailing = trailing(lambda i: (
        not any(ticks[i].holds_gpu(j) for j in range(len(ticks[i].keys)))
        or all(idle(u) for u in util_at[i].values())))
    return Analysis(
        window_s=window, start=start, end=end, price=price, catalog=catalog,
        gpus=tuple(gpus), processes=tuple(processes),
        burn_per_hour=statistics.fmean(t.total_per_hour for t in ticks),
        idle_per_hour=statistics.fmean(t.idle_per_hour for t in ticks),
        wasted_per_hour=statistics.fmean(t.wasted_per_hour for t in ticks),
        host_trailing_idle_s=host_trailing,
        host_cpus=host_cpus or os.cpu_count() or 1,
        budget_events=tuple(budget_events),
        limits={**DEFAULT_LIMITS, **(limits or {})},
        idle_utilization_pct=idle_pct,
        request_counters=dict(request_counters or {}),
    )


def is_inference(kind: Kind, command: str, inference_command: re.Pattern[str]) -> bool:
    """Whether batching and commitment advice fit a process: its workload kind decides
    (batch or online inference; never training or a notebook), and only where nothing pointed
    to a kind does its command line (INFERENCE_COMMAND) stand in."""
    if kind.kind in (BATCH_INFERENCE, ONLINE_INFERENCE):
        return True
    return kind.kind == OTHER and inference_command.search(command) is not None
