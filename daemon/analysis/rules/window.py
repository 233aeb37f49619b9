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
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, compress, filterfalse, repeat
from math import isnan
from operator import add, attrgetter, gt, itemgetter, lt, sub
from typing import Any

from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, IdleThresholds, gpu_is_busy
from daemon.analysis.cost import Burn, HostPrice, burn
from daemon.analysis.host_signals import MULTIPROCESSING_HELPERS
from daemon.analysis.kinds import (
    BATCH_INFERENCE,
    ONLINE_INFERENCE,
    OTHER,
    Kind,
    without_server_addresses,
)
from daemon.analysis.ledger import JobLabeler
from daemon.analysis.rules.thresholds import (
    CHECKPOINT_WRITE_MIN_BYTES,
    DEFAULT_LIMITS,
    INFERENCE_COMMAND,
    WELL_USED_UTILIZATION_PCT,
)
from daemon.analysis.window_ticks import (
    BURN,
    CPU,
    IOWAIT,
    NUMBERS,
    READ,
    WRITE,
    ProcessKey,
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



# Kernels of its own at this level (percent) make a window step part of a run of work.
WORK_RUN_MIN_PCT = 1.0


def _runs_at_or_above(signal: Sequence[float], level: float) -> int:
    """How many separate runs of `signal` are at or above `level` (NaN: below)."""
    runs, inside = 0, False
    for value in signal:
        now = value >= level
        if now and not inside:
            runs += 1
        inside = now
    return runs


def _seconds_of_kernels(ts: Sequence[float], signal: Sequence[float],
                        until: float) -> tuple[float, float]:
    """Seconds of kernels (percent / 100 x seconds) in `signal` at the times `ts`: before
    `until`, and in all. Each kept tick stands for the time since the one before it (its value
    is the mean of the ticks between), at most the median gap (a gap where the process was not
    seen is no time it ran for); the first stands for no known time (it is one reading, of
    NVML's last second) and is not counted."""
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    if not gaps:
        return 0.0, 0.0
    longest = statistics.median(gaps)
    before = total = 0.0
    for at, v, gap in zip(ts[1:], signal[1:], gaps, strict=True):
        if v > 0:  # (NaN: not read)
            ran = v / 100.0 * min(gap, longest)
            total += ran
            if at < until:
                before += ran
    return before, total


@dataclass(frozen=True)
class ProcessHistory:
    """What mlcostd saw of one process (one pid and start time) before a window: in its earlier
    rounds of the rules (daemon.analysis.analyzer.Analyzer) and, after a restart, in what the
    store recorded of it (daemon.runtime.resume.seen_before). A window holds 30 minutes; a
    periodic job's run may be older, or before the restart."""

    # mlcostd's first reading of it (this run's, or a run before it on the store)
    first_ts: float
    # How long it ran before that reading, where it already held its GPU when the run that
    # first read it began (what it did then is unseen); 0: seen from its first GPU use.
    unseen_s: float = 0.0
    # The most seconds of its kernels seen in one window (or one run of the store), and the
    # last time it ran kernels at WORK_RUN_MIN_PCT or more (None: never seen to).
    kernel_s: float = 0.0
    work_at: float | None = None
    # When mlcostd watched it again after a gap in its recording (it was stopped, or restarted
    # slower than a tick or two): a run in the gap is unseen, so its idle is counted from here.
    resumed_at: float | None = None


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
    # Separate runs of its SM signal at or above WORK_RUN_MIN_PCT in the window (a cron-like
    # job: one run per period); counted only for a process whose GPUs idle at the window's end.
    work_runs: int = 0
    # Its worker processes at its last tick: children that hold no GPU and are no helper of
    # multiprocessing's (MULTIPROCESSING_HELPERS); and the top stacks of their phase balances
    # (py-spy dumps them where it waits on them: attribution), those with the most samples
    # first.
    workers: int = 0
    worker_stacks: tuple[Mapping[str, Any], ...] = ()
    # Its own CPU time over its trailing idle span, in cores (0.5: half a CPU busy); None where
    # there is no idle span or fewer than two readings of its CPU time in it.
    cpu_idle_cores: float | None = None
    # Ticks of its trailing idle span at which its SM signal read above 0, where the last of
    # them is in the span's later half: short kernels of its own now and then (a frame scored
    # every few seconds) that average far below WORK_RUN_MIN_PCT. A warm-up pass as it went
    # idle, nothing after it, reads 0. 0 where there is no idle span.
    kernel_ticks_idle: int = 0
    # Seconds of its kernels in the window before its trailing idle span (_seconds_of_kernels:
    # its SM signal, percent / 100, times the time each kept tick stands for), so 100% for 2 s
    # reads 2 s, a kernel at half the SMs for 2 s 1 s. What it ran before it went idle: a
    # warm-up pass (a fraction of a second) or a run of work (a periodic eval's seconds). 0
    # where there is no idle span or nothing before it.
    kernel_s_before_idle: float = 0.0
    # Its first tick in the window, the seconds of its kernels in the whole window, and its
    # last tick whose SM signal read WORK_RUN_MIN_PCT or more (None: none in the window); the
    # two read only where its GPUs idle at the window's end (0 and None otherwise).
    first_at: float = 0.0
    kernel_s: float = 0.0
    work_at: float | None = None
    # What mlcostd saw of it before the window (ProcessHistory; None: nothing, it is new).
    history: ProcessHistory | None = None

    @property
    def watched_since(self) -> float:
        """When mlcostd first read it: before the window where its history says so."""
        return min(self.history.first_ts, self.first_at) if self.history else self.first_at

    @property
    def unseen_s(self) -> float:
        """How long it ran before mlcostd first read it, holding its GPU already (0: seen from
        its first GPU use)."""
        return self.history.unseen_s if self.history else 0.0

    @property
    def kernel_s_seen(self) -> float:
        """The most seconds of its kernels seen before it went idle: in this window, or in one
        before it (its history, across a restart too)."""
        earlier = self.history.kernel_s if self.history else 0.0
        return max(self.kernel_s_before_idle, earlier)

    def idle_watched_s(self, end: float) -> float:
        """How long mlcostd has watched it without a run of its kernels, up to `end`: since its
        last run seen (in the window or before it), else since it first read it, and not from
        before a gap in mlcostd's recording (ProcessHistory.resumed_at)."""
        history = self.history
        ran = [t for t in (self.work_at, history.work_at if history else None,
                           history.resumed_at if history else None) if t is not None]
        return max(end - max([self.watched_since, *ran]), 0.0)

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
        """GPUs doing work (not idle now, busy on average), held or not: what a smaller host
        must carry. A GPU at work whose process NVML does not list (processes that live less
        than a tick, another PID namespace, a container without hostPID) is work all the same:
        counted only when held, a resize dropped it (probe 115). A GPU held but idle is the
        idle-GPU rule's business, not a reason to stay big."""
        return tuple(g for g in self.gpus
                     if gpu_is_busy(g.utilization_mean, self.idle_utilization_pct)
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


# Runs shorter than this are read tick by tick: on a churning host (every tick a different
# layout) setting up a run's columns costs more than it saves.
SHORT_RUN = 4


class _Run:
    """Consecutive ticks ticks[start:stop] whose process columns line up: the same keys, parents
    and GPU uses, so a process is at the same position j at each of them. A column of the
    run's ticks joined into one sequence (tick after tick) holds a process's readings over the
    run as one strided view (`of`), read and summed at C speed, not tick by tick: the rules
    read each tick at ~60 evaluations, and a steady host makes a few runs of a window's 361
    ticks (WindowTick shares the keys and parents tuples with the tick before when they did not
    change). Each column is joined by the pass over the run's processes that reads it
    (`_add_run`) and dropped after it: at 256 processes a window's columns together are ~6 MB."""

    def __init__(self, ticks: Sequence[WindowTick], start: int,
                 positions: dict[ProcessKey, int], children: dict[int, list[int]]) -> None:
        self.ticks = ticks
        self.start, self.stop = start, start + len(ticks)
        self.positions = positions  # each process's j
        self.children = children  # by parent pid: its children's js
        self.width = len(ticks[0].keys)  # processes at each tick
        self.uses = len(ticks[0].use_gpu)  # GPU uses at each tick

    @cached_property
    def ts(self) -> array[float]:
        return array("d", [t.ts for t in self.ticks])

    def joined(self, column: Callable[[WindowTick], array[float]]) -> memoryview[float]:
        """A column of its ticks (`attrgetter("util_mean")`, ...), one after the other."""
        return _joined(map(column, self.ticks))

    def field(self, offset: int) -> memoryview[float]:
        """One of the processes' numbers (WRITE, BURN, ...) at its ticks, one after the other:
        `width` a tick. (Sliced tick by tick: ~0.5 ms at 256 processes over 361 ticks, where
        joining all four and slicing once costs a 3 MB column, measured.)"""
        joined = bytearray()
        for t in self.ticks:
            joined += t.numbers[offset::NUMBERS]  # (each slice dropped at once)
        return memoryview(joined).cast("d")

    @cached_property
    def gpm(self) -> bool:
        """Whether a GPU reported GPM SM activity at a tick of the run (none: no process's
        gpm_mean is anything but NaN)."""
        return any(g.sm_activity is not None for t in self.ticks for g in t.gpus)

    def of(self, joined: memoryview[float], at: int, per_tick: int) -> memoryview[float]:
        """The run's readings at `at` of a joined column with `per_tick` values a tick (a view:
        nothing copied)."""
        return joined[at::per_tick]


def _joined(columns: Iterable[array[float]]) -> memoryview[float]:
    """The columns of a run's ticks, one after the other, as one sequence of doubles: a view of
    the one copy (copying a window's numbers, 3 MB at 256 processes, again into an array cost
    ~1 ms more, most of it page faults, measured)."""
    return memoryview(b"".join(columns)).cast("d")


def _kept(view: memoryview[float]) -> array[float]:
    """A process's readings of a joined column, copied out to be kept past the column's pass
    (a view would keep the whole column)."""
    return array("d", view.tobytes())


def _same_layout(a: WindowTick, b: WindowTick) -> bool:
    """Whether process j of tick a is process j of tick b, with the same parent and GPUs."""
    return ((a.keys is b.keys or a.keys == b.keys) and (a.ppids is b.ppids or a.ppids == b.ppids)
            and a.use_first == b.use_first and a.use_gpu == b.use_gpu)


def _layout_runs(ticks: Sequence[WindowTick]) -> list[_Run]:
    """The window cut into maximal runs of ticks with the same layout (_same_layout)."""
    runs: list[_Run] = []
    positions: dict[ProcessKey, int] = {}
    children: dict[int, list[int]] = {}
    start = 0
    for stop in range(1, len(ticks) + 1):
        if stop < len(ticks) and _same_layout(ticks[stop - 1], ticks[stop]):
            continue
        s = ticks[start]
        if start == 0 or s.keys is not ticks[start - 1].keys or s.ppids is not ticks[
                start - 1].ppids:  # (the same tuples: the same maps)
            positions, children = {}, {}
            for j, (key, ppid) in enumerate(zip(s.keys, s.ppids, strict=True)):
                positions[key] = j
                children.setdefault(ppid, []).append(j)
        runs.append(_Run(ticks[start:stop], start, positions, children))
        start = stop
    return runs


class _Series:
    """A process's values over the window, for a mean, which needs no order: those read tick
    by tick and the views of runs' columns, not copied into one list."""

    __slots__ = ("at_ticks", "runs")

    def __init__(self) -> None:
        self.at_ticks = array("d")
        self.runs: list[Sequence[float]] = []

    def fmean(self) -> tuple[float, int]:
        """statistics.fmean of its values, and how many they are (none: 0.0). fmean is
        math.fsum over the count: correctly rounded in any order, the same from pieces."""
        count = len(self.at_ticks) + sum(map(len, self.runs))
        return (math.fsum(chain(self.at_ticks, *self.runs)) / count if count else 0.0), count

    def fmean_read(self, *, unread_as_zero: bool = False) -> tuple[float, int]:
        """fmean of its values that are not NaN (unread), or of all with NaN read as 0."""
        mean, count = self.fmean()
        if not isnan(mean):  # (nothing unread: the usual case)
            return mean, count
        values = chain(self.at_ticks, *self.runs)
        read = _Series()
        read.at_ticks.extend((0.0 if isnan(value) else value for value in values)
                             if unread_as_zero else filterfalse(isnan, values))
        return read.fmean()


def _highest(values: Sequence[float]) -> float | None:
    """The highest value that is not NaN; None: none."""
    top = max(values, default=None)  # (max passes over a NaN, unless it comes first)
    if top is None or not isnan(top):
        return top
    return max(filterfalse(isnan, values), default=None)


def _write_growth(column: Sequence[float],
                  before: float | None) -> tuple[list[float], float | None]:
    """Each tick's growth of a write counter (NaN: unread) over its reading before, `before`
    at the first; 0 where it was not read or is lower (a counter that restarted wrote nothing).
    And its last reading (`before` if none)."""
    growth: list[float] = []
    for value in column:
        if isnan(value):
            growth.append(0)
            continue
        growth.append(0 if before is None else max(value - before, 0))
        before = value
    return growth, before


def _steady(column: Sequence[float]) -> bool:
    """Whether a counter was read at every tick and never went down (its growth is then the
    difference of its readings: nothing to clamp)."""
    if isnan(sum(column)):
        return False
    listed = list(column)
    return sorted(listed) == listed  # (sorting a sorted list is one pass)


class _ProcessTrack:
    """One GPU process over the window, gathered run by run, oldest first: what its
    ProcessWindow is made of. `add_tick` and the `add_run_*` passes gather the same readings,
    tick by tick and by columns; what depends on the order of the ticks (first and last I/O
    counters, write bursts, the SM signal by time) is kept in order, so both give the same
    window. What it keeps of a run's columns is copied out (`_kept`), not viewed."""

    def __init__(self, key: ProcessKey, id: str, phases: Mapping[str, Any],
                 checkpoints: list[float] | None) -> None:
        self.key, self.id, self.phases = key, id, phases
        # Its workers at its last tick (see ProcessWindow.workers), and every process's phases.
        self.workers: tuple[ProcessKey, ...] = ()
        self.phases_of: Mapping[Any, Mapping[str, Any]] = {}
        # Its checkpoints from its stacks; None: from write bursts, gathered in `bursts`.
        self.checkpoints = checkpoints
        self.last: tuple[WindowTick, int]  # where it was last seen
        self.ts = array("d")  # the ticks it held a GPU at
        # At each: the mean utilization of its GPUs (NaN: none read), how many were below
        # WELL_USED_UTILIZATION_PCT, its burn (NaN: not in the tick's burn), and its SM signal:
        # GPM SM activity where there is, else its own SM share.
        self.utils = _Series()
        self.low = 0
        self.burn_rates = _Series()
        self.sms = _Series()
        self.own_sm = _Series()
        self.signal = array("d")  # the one or the other, in tick order (as ts)
        self.cpu = array("d")  # its own CPU seconds (NaN: unread), in tick order (as ts)
        self.d_ticks = 0  # ticks with a thread of it or its children in D state
        self.memory_by_gpu: dict[int, int] = {}
        # Per process of its tree (it and its children): first and last counter readings, its
        # last write counter reading.
        self.io_first: dict[ProcessKey, float] = {}
        self.io_last: dict[ProcessKey, float] = {}
        self.read_first: dict[ProcessKey, float] = {}
        self.read_last: dict[ProcessKey, float] = {}
        self.prev_written: dict[ProcessKey, float] = {}
        # Times of its tree's write bursts >= CHECKPOINT_WRITE_MIN_BYTES (consecutive ticks
        # merge), and whether its last tick was in one.
        self.bursts: list[float] = []
        self.in_burst = False

    def add_tick(self, s: WindowTick, me: int, workers: list[int] | None) -> None:
        """Its readings at one tick (WindowTick: NaN for None; byte counts below 2**53 are
        exact as doubles, and so are their differences)."""
        numbers, in_d = s.numbers, s.in_d
        first, past = s.use_first[me], s.use_first[me + 1]
        mem_by_gpu = self.memory_by_gpu
        for held_index, memory in zip(s.use_gpu[first:past], s.use_memory[first:past],
                                      strict=True):
            used = 0 if isnan(memory) else int(memory)
            most = mem_by_gpu.get(held_index, 0)
            mem_by_gpu[held_index] = used if used > most else most
        self.ts.append(s.ts)
        # (its means at this tick, worked out when the tick entered the window; NaN: none)
        mean = s.util_mean[me]
        self.utils.at_ticks.append(mean)
        if mean < WELL_USED_UTILIZATION_PCT:
            self.low += 1
        activity = s.gpm_mean[me]
        if not isnan(activity):
            self.sms.at_ticks.append(activity)
            self.signal.append(activity)
        else:  # No GPM (before Hopper): its own SM share stands in for activity.
            self.own_sm.at_ticks.append(s.own_sm[me])
            self.signal.append(s.own_sm[me])
        self.burn_rates.at_ticks.append(numbers[NUMBERS * me + BURN])
        self.cpu.append(numbers[NUMBERS * me + CPU])
        if in_d[me] or (workers and any(in_d[t] for t in workers)):
            self.d_ticks += 1
        written = 0.0
        for t in (me, *workers) if workers else (me,):
            at, tree_key = NUMBERS * t, s.keys[t]
            iowait_s, read_b, write_b = (numbers[at + IOWAIT], numbers[at + READ],
                                         numbers[at + WRITE])
            if not isnan(iowait_s):
                self.io_first.setdefault(tree_key, iowait_s)
                self.io_last[tree_key] = iowait_s
            if not isnan(read_b):
                self.read_first.setdefault(tree_key, read_b)
                self.read_last[tree_key] = read_b
            if self.checkpoints is None and not isnan(write_b):
                if tree_key in self.prev_written:
                    written += max(write_b - self.prev_written[tree_key], 0)
                self.prev_written[tree_key] = write_b
        if self.checkpoints is None:  # (_add_writes, for one tick)
            if written >= CHECKPOINT_WRITE_MIN_BYTES:
                if not self.in_burst:
                    self.bursts.append(s.ts)
                self.in_burst = True
            else:
                self.in_burst = False

    # add_run_*: its readings at a run's ticks, by columns, each method reading one column for
    # every process before the next is joined (_add_run); together the same as add_tick at each.

    def add_run_burn(self, run: _Run, burns: memoryview[float], me: int) -> None:
        """Its burn at each tick (`burns`: the run's burns, run.field(BURN))."""
        self.burn_rates.runs.append(_kept(run.of(burns, me, run.width)))

    def add_run_cpu(self, run: _Run, cpus: memoryview[float], me: int) -> None:
        """Its CPU time at each tick (`cpus`: the run's, run.field(CPU)), in tick order."""
        self.cpu.frombytes(run.of(cpus, me, run.width).tobytes())

    def add_run_io(self, run: _Run, writes: memoryview[float] | None,
                   tree: Sequence[int]) -> None:
        """Its tree's I/O counters, and their writes unless its checkpoints are known (`writes`:
        the run's write counters, run.field(WRITE); None when no process needs them)."""
        self._add_counter(run, tree, IOWAIT, self.io_first, self.io_last)
        self._add_counter(run, tree, READ, self.read_first, self.read_last)
        if self.checkpoints is None:
            assert writes is not None
            self._add_run_writes(run, writes, tree)

    def add_run_utils(self, run: _Run, util_mean: memoryview[float], me: int) -> None:
        """The mean utilization of its GPUs at each tick, and how often it was low."""
        utils = _kept(run.of(util_mean, me, run.width))
        self.utils.runs.append(utils)
        self.low += sum(map(lt, utils, repeat(WELL_USED_UTILIZATION_PCT)))  # (NaN: not low)

    def add_run_signal(self, run: _Run, gpm_mean: memoryview[float] | None,
                       own_sm: memoryview[float] | None, me: int) -> bool:
        """Its SM signal: GPM SM activity where its GPUs report it, else its own SM share
        (`gpm_mean`: None where no GPU reports GPM in the run). False, with nothing added, where
        it needs `own_sm` and that is None."""
        activity = run.of(gpm_mean, me, run.width) if gpm_mean is not None else None
        if activity is not None and not isnan(sum(activity)):  # GPM at each tick
            self.sms.runs.append(_kept(activity))
            self.signal.frombytes(activity.tobytes())
        elif own_sm is None:
            return False
        elif activity is None:  # none
            own = run.of(own_sm, me, run.width)
            self.own_sm.runs.append(_kept(own))
            self.signal.frombytes(own.tobytes())
        else:
            own = run.of(own_sm, me, run.width)
            self.sms.runs.append(array("d", filterfalse(isnan, activity)))
            self.own_sm.runs.append(array("d", compress(own, map(isnan, activity))))
            self.signal.extend(own_share if isnan(gpm) else gpm
                               for gpm, own_share in zip(activity, own, strict=True))
        self.ts += run.ts
        return True

    def add_run_memory(self, run: _Run, use_memory: memoryview[float], me: int) -> None:
        """The most memory it held on each of its GPUs."""
        s = run.ticks[0]
        mem_by_gpu = self.memory_by_gpu
        for use in range(s.use_first[me], s.use_first[me + 1]):
            top = _highest(run.of(use_memory, use, run.uses))
            used = 0 if top is None else int(top)
            held_index = s.use_gpu[use]
            most = mem_by_gpu.get(held_index, 0)
            mem_by_gpu[held_index] = used if used > most else most

    def add_run_d(self, run: _Run, in_d: bytes, me: int, tree: Sequence[int]) -> None:
        """The ticks at which a thread of it or of its children was in D state."""
        if len(tree) > 1:
            columns = [in_d[t::run.width] for t in tree]
            self.d_ticks += sum(map(any, zip(*columns, strict=True)))
        else:
            mine = in_d[me::run.width]
            self.d_ticks += len(mine) - mine.count(0)

    def _add_run_writes(self, run: _Run, writes_at: memoryview[float], tree: Sequence[int],
                        ) -> None:
        """Its tree's writes at the run's ticks (add_tick's `written`): the growth of the sum of
        the counters that only grew (exact: byte counts below 2**53), plus the clamped growth
        of the others."""
        keys = run.ticks[0].keys
        if len(tree) == 1:  # (most processes have no children)
            tree_key = keys[tree[0]]
            writes = run.of(writes_at, tree[0], run.width)
            before = self.prev_written.get(tree_key)
            if not isnan(sum(writes)):
                self.prev_written[tree_key] = writes[-1]
                first = 0 if before is None else max(writes[0] - before, 0)
                # (a fall, unclamped, stays below the burst line all the same)
                if (first < CHECKPOINT_WRITE_MIN_BYTES and
                        max(map(sub, writes[1:], writes), default=0) < CHECKPOINT_WRITE_MIN_BYTES):
                    self.in_burst = False  # (no burst: the usual case)
                else:
                    self._add_writes(run.ts, [first, *map(sub, writes[1:], writes)])
                return
            growth, last = _write_growth(writes, before)
            if last is not None:
                self.prev_written[tree_key] = last
            self._add_writes(run.ts, growth)
            return
        steady: list[memoryview[float]] = []
        first = 0.0  # at the run's first tick, over each counter's reading before the run
        others: list[list[float]] = []
        for t in tree:
            tree_key = keys[t]
            writes = run.of(writes_at, t, run.width)
            before = self.prev_written.get(tree_key)
            if _steady(writes):
                steady.append(writes)
                if before is not None:
                    first += max(writes[0] - before, 0)
                self.prev_written[tree_key] = writes[-1]
            else:
                growth, last = _write_growth(writes, before)
                others.append(growth)
                if last is not None:
                    self.prev_written[tree_key] = last
        written = [first]
        if steady:
            total = steady[0] if len(steady) == 1 else list(map(sum, zip(*steady, strict=True)))
            written += map(sub, total[1:], total)
        else:
            written += repeat(0.0, len(run.ticks) - 1)
        for growth in others:
            written = list(map(add, written, growth))
        self._add_writes(run.ts, written)

    def _add_writes(self, times: Sequence[float], written: Sequence[float]) -> None:
        """Its tree's writes at these ticks: a burst starts at one at or above
        CHECKPOINT_WRITE_MIN_BYTES after one below."""
        if max(written) < CHECKPOINT_WRITE_MIN_BYTES:
            self.in_burst = False
            return
        big = [delta >= CHECKPOINT_WRITE_MIN_BYTES for delta in written]
        self.bursts += compress(times, map(gt, big, [self.in_burst, *big[:-1]]))
        self.in_burst = big[-1]

    def window(self, idle_s: float, end: float, labeler: JobLabeler, kind: Kind,
               inference_command: re.Pattern[str],
               history: ProcessHistory | None = None) -> ProcessWindow:
        """Its ProcessWindow; its GPUs idle for its last `idle_s`, the window ending at `end`."""
        pid, start_time = self.key
        last_tick, last_j = self.last
        last_proc = last_tick.process(last_j)  # who it is, as last seen
        ts = self.ts
        seconds = ts[-1] - ts[0]
        ticks_seen = len(ts)
        iowait = sum(max(self.io_last[k] - self.io_first[k], 0.0) for k in self.io_last)
        read = sum(max(self.read_last[k] - self.read_first[k], 0) for k in self.read_last)
        idle_since = ts[-1] - idle_s
        in_idle = ([v for at, v in zip(ts, self.signal, strict=True) if at >= idle_since]
                   if idle_s > 0 else [])
        work_runs = _runs_at_or_above(self.signal, WORK_RUN_MIN_PCT) if idle_s > 0 else 0
        kernel_at = ([at for at, v in zip(ts, self.signal, strict=True)
                      if at >= idle_since and v > 0] if idle_s > 0 else [])
        kernel_ticks_idle = (len(kernel_at) if kernel_at and kernel_at[-1] >= ts[-1] - idle_s / 2
                             else 0)
        cpu_read = ([(at, v) for at, v in zip(ts, self.cpu, strict=True)
                     if at >= idle_since and not isnan(v)] if idle_s > 0 else [])
        cpu_idle_cores = (max(cpu_read[-1][1] - cpu_read[0][1], 0.0)
                          / (cpu_read[-1][0] - cpu_read[0][0])
                          if len(cpu_read) >= 2 and cpu_read[-1][0] > cpu_read[0][0] else None)
        # (only where its GPUs idle, as the rules read them: a run of a process at work now is
        # still in the window at the rounds after it goes idle, and the analyzer keeps it then)
        kernel_s_before_idle, kernel_s = (_seconds_of_kernels(ts, self.signal, idle_since)
                                          if idle_s > 0 else (0.0, 0.0))
        work_at = (next((at for at, v in zip(reversed(ts), reversed(self.signal), strict=True)
                         if v >= WORK_RUN_MIN_PCT), None) if idle_s > 0 else None)
        utilization, read_utils = self.utils.fmean_read()
        burn_per_hour, _ = self.burn_rates.fmean_read(unread_as_zero=True)
        sm_activity, with_gpm = self.sms.fmean()
        own_sm, with_own = self.own_sm.fmean()
        return ProcessWindow(
            id=self.id, pid=pid, start_time=start_time, user=last_proc.user,
            command=last_proc.command, job=labeler.label(last_proc.command, last_proc.owner),
            gpus=tuple(sorted(self.memory_by_gpu)), seconds=seconds,
            runtime_s=max(end - start_time, 0.0),
            burn_per_hour=burn_per_hour,
            memory_peak_bytes=max(self.memory_by_gpu.values(), default=0),
            gpu_utilization_mean=utilization,
            gpu_well_used_fraction=(read_utils - self.low) / ticks_seen,
            gpu_low_fraction=self.low / ticks_seen,
            sm_activity_mean=(sm_activity if with_gpm else own_sm if with_own else None),
            trailing_idle_s=idle_s,
            sm_activity_idle_mean=statistics.fmean(in_idle) if in_idle else None,
            work_runs=work_runs,
            iowait_fraction=min(iowait / seconds, 1.0) if seconds > 0 else 0.0,
            d_state_fraction=self.d_ticks / ticks_seen,
            read_bytes_per_s=read / seconds if seconds > 0 else 0.0,
            checkpoint_times=tuple(self.checkpoints if self.checkpoints is not None else
                                   self.bursts),
            inference=is_inference(kind, last_proc.command, inference_command),
            phases=self.phases,
            memory_by_gpu=self.memory_by_gpu,
            sm_signal=("GPM SM activity" if with_gpm else "process SM share" if with_own else
                       None),
            kind=kind, ppid=last_proc.ppid, workers=len(self.workers),
            worker_stacks=_worker_stacks(self.workers, self.phases_of),
            cpu_idle_cores=cpu_idle_cores, kernel_ticks_idle=kernel_ticks_idle,
            kernel_s_before_idle=kernel_s_before_idle,
            first_at=ts[0], kernel_s=kernel_s, work_at=work_at, history=history,
        )

    @staticmethod
    def _add_counter(run: _Run, tree: Sequence[int], offset: int,
                     first: dict[ProcessKey, float], last: dict[ProcessKey, float]) -> None:
        """The first and last readings over the run of a counter (at `offset` in numbers) of
        each process of the tree; one first read here goes in where add_tick would put it (by
        tick, then place in the tree)."""
        new = []
        ticks = run.ticks
        for place, t in enumerate(tree):
            at = NUMBERS * t + offset
            # (a counter is read at nearly every tick: both searches stop at once)
            opened = next((i for i, tick in enumerate(ticks) if not isnan(tick.numbers[at])),
                          None)
            if opened is None:
                continue  # never read in this run
            closed = next(i for i in range(len(ticks) - 1, -1, -1)
                          if not isnan(ticks[i].numbers[at]))
            tree_key = ticks[0].keys[t]
            if tree_key in last:
                last[tree_key] = ticks[closed].numbers[at]
            else:
                new.append((opened, place, tree_key, ticks[opened].numbers[at],
                            ticks[closed].numbers[at]))
        for _, _, tree_key, opening, closing in sorted(new, key=itemgetter(0, 1)):
            first[tree_key] = opening
            last[tree_key] = closing


def _process_tracks(runs: Sequence[_Run], phases: Mapping[Any, Mapping[str, Any]],
                    checkpoint_times: Mapping[str, Sequence[float]] | None,
                    ) -> dict[ProcessKey, _ProcessTrack]:
    """Each process that held a GPU in the window, in the order they first did, with its
    readings at the ticks it did."""
    tracks: dict[ProcessKey, _ProcessTrack] = {}
    for run in runs:
        use_first = run.ticks[0].use_first
        members: list[tuple[_ProcessTrack, int]] = []  # the run's GPU processes and their js
        for key, j in run.positions.items():
            if use_first[j + 1] > use_first[j]:  # it holds a GPU
                track = tracks.get(key)
                if track is None:
                    pid_id = process_key(*key)
                    # Checkpoints seen in its stacks are exact; write bursts are the fallback
                    # without them. Writes its stacks show as output (logs, metrics) are no
                    # checkpoints: no cadence.
                    observed = (checkpoint_times or {}).get(pid_id)
                    proc_phases = phases.get(pid_id) or phases.get(key[0]) or {}
                    cps = (sorted(observed) if observed else
                           [] if OUTPUT in proc_phases and CHECKPOINT not in proc_phases else
                           None)
                    track = tracks[key] = _ProcessTrack(key, pid_id, proc_phases, cps)
                    track.phases_of = phases
                track.last = (run.ticks[-1], j)
                track.workers = _workers_at(run.ticks[-1], run.children.get(key[0], ()))
                members.append((track, j))
        if len(run.ticks) < SHORT_RUN:
            for track, j in members:
                workers = run.children.get(track.key[0])  # its children, if any
                for s in run.ticks:
                    track.add_tick(s, j, workers)
        else:
            _add_run(run, members)
    return tracks


def _workers_at(tick: WindowTick, children: Sequence[int]) -> tuple[ProcessKey, ...]:
    """The worker processes among `children` (their js) at `tick`: those that hold no GPU (a
    rank the job started is a peer) and are no helper of multiprocessing's."""
    return tuple(tick.keys[t] for t in children if not tick.holds_gpu(t) and not any(
        helper in tick.who[t][1] for helper in MULTIPROCESSING_HELPERS))


# Top stacks of its workers named in a ProcessWindow.
WORKER_STACKS_KEPT = 3


def _worker_stacks(workers: Sequence[ProcessKey], phases: Mapping[Any, Mapping[str, Any]],
                   ) -> tuple[Mapping[str, Any], ...]:
    """The top stacks of the workers' phase balances, of all their phases, those with the most
    samples first (the same line in several workers counts once, with all their samples)."""
    by_line: dict[tuple[Any, Any], dict[str, Any]] = {}
    for worker in workers:
        for phase in (phases.get(process_key(*worker)) or phases.get(worker[0]) or {}).values():
            for stack in phase.get("top_stacks") or ():
                line = (stack.get("file"), stack.get("line"))
                kept = by_line.get(line)
                if kept is None:
                    by_line[line] = {**stack, "samples": int(stack.get("samples") or 0)}
                else:
                    kept["samples"] += int(stack.get("samples") or 0)
    ranked = sorted(by_line.values(), key=lambda s: -s["samples"])
    return tuple(ranked[:WORKER_STACKS_KEPT])


def _add_run(run: _Run, members: Sequence[tuple[_ProcessTrack, int]]) -> None:
    """The run's readings of its GPU processes (track, j), column by column: each column is
    joined, read for every process, and dropped before the next is joined. (Each process's
    readings of one column go to its own state, so the order of the passes does not matter.)"""
    trees = [(track, j, (j, *workers) if (workers := run.children.get(track.key[0])) else (j,))
             for track, j in members]  # (with its children's js)
    # The SM signal first, while little is kept: GPM where the GPUs report it, else the
    # processes' own SM shares; both only for a process with GPM at some of the ticks.
    gpm_mean = run.joined(attrgetter("gpm_mean")) if run.gpm else None
    own_sm = None if run.gpm else run.joined(attrgetter("own_sm"))
    mixed = []  # (those with GPM at some of the run's ticks only)
    for track, j, _ in trees:
        if not track.add_run_signal(run, gpm_mean, own_sm, j):
            mixed.append((track, j))
    if mixed:
        own_sm = run.joined(attrgetter("own_sm"))
        for track, j in mixed:
            track.add_run_signal(run, gpm_mean, own_sm, j)
    del gpm_mean, own_sm
    burns = run.field(BURN)
    for track, j, _ in trees:
        track.add_run_burn(run, burns, j)
    del burns
    cpus = run.field(CPU)
    for track, j, _ in trees:
        track.add_run_cpu(run, cpus, j)
    del cpus
    writes = run.field(WRITE) if any(t.checkpoints is None for t, _ in members) else None
    for track, _, tree in trees:
        track.add_run_io(run, writes, tree)
    del writes
    util_mean = run.joined(attrgetter("util_mean"))
    for track, j, _ in trees:
        track.add_run_utils(run, util_mean, j)
    del util_mean
    use_memory = run.joined(attrgetter("use_memory"))
    for track, j, _ in trees:
        track.add_run_memory(run, use_memory, j)
    del use_memory
    in_d = b"".join(t.in_d for t in run.ticks)
    for track, j, tree in trees:
        track.add_run_d(run, in_d, j, tree)


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
    history: Mapping[str, ProcessHistory] | None = None,
) -> Analysis:
    """Aggregate a window of ticks (oldest first; daemon.analysis.window_ticks) into an
    Analysis. `checkpoint_times` adds checkpoint times per process id to those seen as write
    bursts; `thresholds` (the [idle] settings) say what a busy GPU is; `history`, what was seen
    of each process ('pid:start_time') before the window."""
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
    # The window in runs of ticks whose process columns line up (a steady host: a few).
    runs = _layout_runs(ticks)
    # Per GPU.
    util_series: dict[int, list[float]] = {}
    sm_series: dict[int, list[float]] = {}
    mem_peak: dict[int, int] = {}
    mem_total: dict[int, int] = {}
    names: dict[int, str] = {}
    held: set[int] = set()
    for run in runs:
        held.update(run.ticks[0].use_gpu)  # (a run's GPU uses are those of each of its ticks)
    util_at: list[dict[int, float]] = []  # busy or idle: each GPU's peak since the tick before
    unread_at: list[bool] = []  # a GPU of the tick has no reading (lost, timed out, failing)
    for s in ticks:
        tick_utils: dict[int, float] = {}
        peaks = s.peak_util
        unread = False
        for g in s.gpus:
            names[g.index] = g.name
            if g.memory_total_bytes:
                mem_total[g.index] = g.memory_total_bytes
            if g.status != GPU_OK or g.utilization is None:
                unread = True
                continue
            tick_utils[g.index] = peaks.get(g.index, g.utilization)
            util_series.setdefault(g.index, []).append(g.utilization)
            if g.sm_activity is not None:
                sm_series.setdefault(g.index, []).append(g.sm_activity)
            if g.memory_used_bytes is not None:
                mem_peak[g.index] = max(mem_peak.get(g.index, 0), g.memory_used_bytes)
        util_at.append(tick_utils)
        unread_at.append(unread)

    def trailing(idle_at: Callable[[int], bool | None]) -> float:
        """Seconds at the end of the window for which idle_at(i) held (None: stop)."""
        since = None
        for i in range(len(ticks) - 1, -1, -1):
            if not idle_at(i):
                break
            since = ticks[i].ts
        return 0.0 if since is None else end - since

    def trailing_from(i: int) -> float:
        """Seconds from tick i to the end of the window (0 from past the last tick)."""
        return 0.0 if i >= len(ticks) else end - ticks[i].ts

    last_busy: dict[int, int] = {}

    def busy_until(index: int) -> int:
        """The last tick at which GPU `index` was not idle (-1: idle throughout)."""
        if index not in last_busy:
            i = len(ticks) - 1
            while i >= 0 and idle(util_at[i].get(index)):
                i -= 1
            last_busy[index] = i
        return last_busy[index]

    def idle_from(key: ProcessKey, mine: list[int]) -> int:
        """The first tick of the window's end at each of which process `key` was there and
        every GPU in `mine` idle (len(ticks): not at the last tick)."""
        since = 1 + max(busy_until(index) for index in mine)
        for run in reversed(runs):
            if run.stop <= since:
                break
            if key not in run.positions:
                return run.stop
        return since

    gpus = []
    for index in sorted(names):
        series = util_series.get(index, [])
        sm = sm_series.get(index)
        gpus.append(GpuWindow(
            index, names[index], mem_total.get(index, 0), mem_peak.get(index, 0),
            statistics.fmean(series) if series else 0.0, _p95(series),
            statistics.fmean(sm) if sm else None, index in held,
            trailing_from(busy_until(index) + 1)))
    # Per process (GPU processes; children fold into their parent's I/O evidence), run by run.
    processes = []
    for key, track in _process_tracks(runs, phases, checkpoint_times).items():
        idle_s = trailing_from(idle_from(key, sorted(track.memory_by_gpu)))
        processes.append(track.window(idle_s, end, labeler, (kinds or {}).get(track.id) or Kind(),
                                      inference_command, (history or {}).get(track.id)))
    processes.sort(key=lambda p: -p.burn_per_hour)
    # Every GPU read and idle, whether or not a process holds one: a GPU at work whose process
    # NVML does not list (another PID namespace, a vGPU) keeps the host from idling, and so
    # does a GPU with no reading (lost, timed out): what it does is not known, and a host is
    # never stopped because mlcostd could not see it (every GPU lost read "idle": probe 115).
    host_trailing = trailing(lambda i: not unread_at[i] and bool(util_at[i])
                             and all(idle(u) for u in util_at[i].values()))
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
    to a kind does its command line (INFERENCE_COMMAND, less the options naming a server it
    connects to: a worker's `--server HOST:PORT`) stand in."""
    if kind.kind in (BATCH_INFERENCE, ONLINE_INFERENCE):
        return True
    return kind.kind == OTHER and inference_command.search(
        without_server_addresses(command)) is not None
