"""Tie low-utilization time to code: windows per process, stacks in them, phase balance.

A process holding GPU memory whose SM share drops below `low_sm_share` starts a dip. From the
first tick of the dip, its Python stack is dumped with py-spy and classified: each tick, as many
dumps as the sampler's rate limit allows go to the processes in a dip that have waited longest
since their last dump, so at hundreds of processes every one gets its turn (less often). When
the dip has lasted `min_window` seconds (by the tick grid: a few ms of tick jitter do not count)
it becomes a low-utilization window: stored as an event with its start, end and GPUs, and its
stack samples are stored. A dip that ends sooner is dropped with its samples. When the main
process waits on a DataLoader queue, its worker processes are dumped too, so the worker's
reading line is found.

Beside the stacks, each tick keeps every process's last few samples as the tick read them (CPU,
read and write bytes, D state, iowait, its GPUs' utilization; the counters' snapshots are
worked out from them only for a process being sampled) and, for processes in a dip whose sample
may come within those snapshots only, its main thread's CPU time (run or waiting for a core). A dump is classified with the HostSignals of those last seconds, so a
blocking call into C that leaves no Python frame is still told apart (daemon.analysis.phases),
and each stored stack sample keeps the reason of its phase.

The middle band: a process whose SM share stays below `mid_sm_share` (60%) for `mid_after`
(15 s) but at or above `low_sm_share`, so that it opens no window (a main thread that hashes
47 ms between 50-ms kernels keeps its GPU 45% busy), has its stacks sampled too, more slowly:
one dump per process every `mid_dump_interval` (10 s), at most `mid_dumps_per_second` over all
of them, and only with what the sampler has left after the windows' dumps, so a host of
hundreds of such processes runs py-spy no more than that. From its first sample kept, the
stretch is stored as a `mid_utilization` event; the phase balance splits its time by its
samples as it splits a window's, so the line that keeps its GPU waiting is named. It is
working: a main thread that only waits there counts as compute, never `idle` (no idle rule
may come of its samples). It ends when its share reaches mid_sm_share or a dip begins (the
window's samples take over). Its bound, 60%, lies between the jobs that keep their own GPU
waiting (the corpus's train_shards_mp ranks at 45-48% and write_embeddings at 47-52% on a quiet
host) and those that are fed (a DataLoader job with four loaders at 59-65% a tick, 61% on average;
services at 61-69%): a fed job sampled in a short recording has too few samples for its phase
shares to be judged (daemon.analysis.compare), where without them they were known from its GPU.

Where py-spy may not read a process (ptrace denied: its status is permission_denied) or stacks
are off (`[attribution] stacks = false`, `mlcostd run --no-stacks`), each sample is classified
from /proc alone instead (daemon.analysis.proc_phases): a lower-confidence phase whose evidence
says "from /proc, no stacks". A process denied once is not handed to py-spy again.

The tick only updates windows and schedules dumps; the dumps run as asyncio tasks beside it.
Each dump starts at a random point within its tick (`dump_spread_s`, the daemon's tick, at most
half of dump_interval): on the tick grid alone, a loop whose period is a multiple or fraction of
the interval between dumps (0.25 s, 0.5 s, 1 s) was read at the same point of its step every
time, and a loaded host that stretched that interval to two steps of the starved profile's loop
read its 32% of compute as half of its time. The turns still come every dump_interval on
average; the sampler's own limit per process is dump_interval less the spread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import islice
from operator import itemgetter
from typing import Any, NamedTuple

from daemon.analysis.balance import LOW_UTILIZATION, MID_UTILIZATION
from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, gpu_is_busy
from daemon.analysis.host_signals import (
    MULTIPROCESSING_HELPERS,
    HostSignals,
    cpu_demand,
    gpu_quiet_share,
)
from daemon.analysis.kinds import Kind, frame_markers
from daemon.analysis.live_phases import LivePhases
from daemon.analysis.phases import WITH_GPU_IDLE, classify, waits_on_data_queue
from daemon.analysis.proc_phases import classify_from_proc
from daemon.analysis.proc_phases import where as proc_where
from daemon.analysis.source_lines import Credentials, credentials, source_reader
from daemon.analysis.stack_rules import user_frame
from daemon.config import AttributionConfig
from daemon.sources.proc_state import BlockedReads, read_facts
from daemon.sources.procs import MainThreadClock, ThreadTimes
from daemon.sources.sample import ProcessSample, Sample
from daemon.sources.stacks import (
    OK,
    PERMISSION_DENIED,
    RATE_LIMITED,
    DumpResult,
    StackSampler,
    main_thread,
    stack_hash,
)
from daemon.store import facts
from daemon.store.facts import StackRow
from daemon.store.writer import Store
from daemon.wire import COMPUTE, IDLE, SYNC, process_key

log = logging.getLogger(__name__)

MAX_PENDING_ROWS = 64  # stack rows kept per dip before it qualifies
SIGNAL_TICKS = 4  # snapshots kept per process: the signals cover the last ~3 ticks (a dump's gap)
WORKING_CPU = 0.25  # a worker or a peer on a CPU this share of the time is working
STATUS_SLACK = 64  # stack statuses of exited processes kept before they are pruned
# /proc samples (a few preads each, no ptrace) a second over all processes in windows without
# stacks: four times py-spy's default dumps_per_second, as each costs ~1/100 of a dump
PROC_SAMPLES_PER_S = 8.0


@dataclass
class _Dip:
    """A process below the threshold: a window once it lasts long enough."""

    pid: int
    start_time: float
    started_at: float
    gpus: tuple[int, ...]
    qualified: bool = False
    pending: list[StackRow] = field(default_factory=list)
    last_below: float = 0.0


@dataclass
class _Stretch:
    """A process in the middle band (see the module doc): its stacks sampled every
    mid_dump_interval. Its event starts with its first stack sample kept (`started_at`), so
    no stretch's time goes without a sample to split it."""

    pid: int
    start_time: float
    gpus: tuple[int, ...]
    started_at: float | None = None
    scheduled_at: float = 0.0  # the tick its last dump was taken at


class _Snapshot(NamedTuple):
    """One process's counters at one tick (cumulative, as read). A named tuple: one is made per
    process per tick, and a frozen dataclass costs ~5x as much to build."""

    ts: float
    cpu_seconds: float
    main_times: ThreadTimes | None  # its main thread's clocks (only while in a dip)
    read: int | None  # the larger of storage bytes and syscall bytes
    written: int | None  # storage bytes (what reaches a file system)
    # Syscall bytes written less those read: bytes a process sends out (a socket, a pipe to
    # another process). A process that writes into a pipe it reads itself (a reader thread
    # feeding the main thread) sends nothing out: its writes are input moving, not output.
    sent: int | None
    in_d: bool
    iowait: float | None
    gpu_utilization: float | None  # mean over the GPUs it holds
    # its CPU time and its waited-for children's (whose I/O its counters include from then on)
    tree_cpu_seconds: float = 0.0


# One process at one tick as the tick saw it: (ts, its sample, its main thread's clocks (only
# while in a dip), the GPUs' utilization that tick by index). A plain tuple of what the tick
# already holds: kept per process per tick, turned into a _Snapshot only when a sample of the
# process (or of its parent) reads its signals, a few processes a tick.
_Seen = tuple[float, ProcessSample, ThreadTimes | None, dict[int, float | None]]


# In a window, a quiet share under this changes the CPU figure a reason quotes enough to say so.
WEIGHED_SAID_UNDER = 0.9


def _weighed_in_band(host: HostSignals, share: float) -> HostSignals:
    """`host` with its CPU weighed against the time its GPU is quiet: in the middle band that is
    only part of the time, and in a window where its GPU's measured utilization says it still
    works (a host-bound loop that a loaded host slowed under low_sm_share); where the GPU idles
    throughout it is all of it, and nothing changes. 45 ms of hashing per 50-ms kernel is on a CPU ~48% of the time, all of the time
    its GPU waits. The main thread's demand (its run-queue wait left out) is weighed against
    the GPU's quiet share of the same time (gpu_quiet_share, from the GPU's utilization over
    the signals' seconds), which leaves out the same queued time: against the wall time the
    GPU was quiet, which holds it, a tokenizing loop whose main thread queued a third of the
    time read 0.496, under ON_CPU_MIN (probe 144, F3). The process's CPU (a share
    of the wall time) is weighed against the wall time the GPU was quiet. Where the GPU was
    quiet too little of that time (GPU_QUIET_MIN: the CPU ran beside the GPU's work) a share
    stands as it is; without the utilization the SM share stands for it, as before."""
    main, process = host.main_thread_cpu, host.process_cpu
    utilization = host.gpu_utilization
    own: float | None
    wall: float | None
    if utilization is None:
        own = wall = 1.0 - min(max(share, 0.0), 100.0) / 100.0
    else:
        own = gpu_quiet_share(utilization, host.main_thread_queued)
        wall = gpu_quiet_share(utilization, None)
    if main is not None and own:
        main = min(1.0, main / own)
    if process is not None and wall:
        process = min(1.0, process / wall)
    return replace(host, main_thread_cpu=main, process_cpu=process)


def _snapshot(seen: _Seen) -> _Snapshot:
    ts, proc, main, utilization = seen
    utils = []
    for use in proc.gpus:
        util = utilization.get(use.gpu_index)
        if util is not None:
            utils.append(util)
    return _Snapshot(
        ts, proc.cpu_seconds, main, _larger(proc.read_bytes, proc.read_chars), proc.write_bytes,
        None if proc.write_chars is None or proc.read_chars is None
        else proc.write_chars - proc.read_chars,
        proc.state == "D" or proc.threads_in_d > 0, proc.iowait_seconds,
        sum(utils) / len(utils) if utils else None,
        proc.cpu_seconds + proc.children_cpu_seconds)


@dataclass
class _Signals:
    """What the classifier needs from consecutive samples of one process: the last
    SIGNAL_TICKS ticks' views of it, and the user frame its last stack dump stopped in."""

    seen: deque[_Seen] = field(default_factory=lambda: deque(maxlen=SIGNAL_TICKS))
    last_leaf: str | None = None

    @property
    def snapshots(self) -> list[_Snapshot]:
        return [_snapshot(seen) for seen in self.seen]

    @property
    def state(self) -> str:
        return self.seen[-1][1].state if self.seen else "S"

    @property
    def iowait_growing(self) -> bool:
        """Its iowait grew since the tick before; where that is not known, a thread in D."""
        if not self.seen:
            return False
        proc = self.seen[-1][1]
        before = self.seen[-2][1].iowait_seconds if len(self.seen) >= 2 else None
        if proc.iowait_seconds is not None and before is not None:
            return proc.iowait_seconds > before
        return proc.threads_in_d > 0


# One process waiting for its turn: (when it was last sampled, the process, its SM share).
_InLine = tuple[float, ProcessSample, float]
_LAST_SAMPLED = itemgetter(0)


def _larger(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _rate(first: float | None, last: float | None, seconds: float) -> float | None:
    if first is None or last is None or seconds <= 0:
        return None
    return max(last - first, 0.0) / seconds


def _sent(first: _Snapshot, last: _Snapshot, seconds: float) -> float | None:
    """Bytes/s sent through syscalls less those read (negative: it read more), or None."""
    if first.sent is None or last.sent is None or seconds <= 0:
        return None
    return (last.sent - first.sent) / seconds


class Attribution:
    def __init__(self, config: AttributionConfig, store: Store,
                 sampler: StackSampler | None = None, *,
                 idle_utilization_pct: float = DEFAULT_IDLE_UTILIZATION_PCT,
                 sample_always: bool = False, interval_s: float = 1.0,
                 dump_spread_s: float = 0.0, started_at: float | None = None,
                 connections_opened: Callable[[tuple[int, float]], int | None] | None = None,
                 kind_of: Callable[[tuple[int, float]], Kind | None] | None = None
                 ) -> None:
        self.config = config
        # A process's ESTABLISHED TCP connections that it opened, by key, as its kind read them
        # (None: no kind yet): HostSignals.connections_opened. And its kind, by key (None: no
        # kind yet): whether its connections all go to its own job's GPU processes
        # (HostSignals.job_peers_only), whether it is an interactive prompt
        # (HostSignals.interactive_prompt).
        self.connections_opened = connections_opened
        self.kind_of = kind_of
        # Each dump waits a random 0..dump_spread_s first (see the module doc); a test on its
        # own clock leaves it 0.
        self.dump_spread_s = max(0.0, min(dump_spread_s, config.dump_interval / 2))
        self._delayed = 0  # dumps taken but waiting for their point in the tick
        # `mlcostd profile`: every GPU process, and every process whose parent is not
        # recorded (the profiled command before it touches a GPU), is in a window from its
        # first tick and has its stacks sampled every tick, busy or not; the phase balance is
        # then the share of its stack samples in each phase (compute included).
        self.sample_always = sample_always
        # A dip is a window once it has lasted min_window by the tick grid: ticks come
        # interval_s apart give or take a few ms, and `ts - started_at >= 3.0` dropped a 4-tick
        # dip whose ticks were 2.999 s apart (half the demo's 4-s checkpoint stalls).
        ticks = max(1, math.ceil(config.min_window / interval_s - 1e-9))
        self._window_after_s = (ticks - 0.5) * interval_s
        # A process's next turn (a stack dump or a /proc sample) comes dump_interval after its
        # last by the same grid: `ts - last >= dump_interval` made a tick 0.999 s after the
        # last turn's wait one more tick, every other turn (a dump every 2 ticks of 1 s at
        # dump_interval = 1 s, 2 or 3 ticks at the default 2 s).
        turn_ticks = max(1, math.ceil(config.dump_interval / interval_s - 1e-9))
        self._turn_after_s = (turn_ticks - 0.5) * interval_s
        self.idle_utilization_pct = idle_utilization_pct  # [idle].utilization: busy or not
        self.store = store
        self.sampler = sampler if sampler is not None else StackSampler(
            min_interval_s=config.dump_interval - self.dump_spread_s,
            global_max_per_s=config.dumps_per_second,
            cpu_budget_ratio=config.cpu_budget)
        self._dips: dict[tuple[int, float], _Dip] = {}
        self._signals: dict[tuple[int, float], _Signals] = {}
        self._in_flight: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._children: dict[int, list[ProcessSample]] = {}
        # the last tick's processes, and its GPU processes by parent (built when first asked)
        self._processes: tuple[ProcessSample, ...] = ()
        self._gpu_children: dict[int, list[ProcessSample]] | None = None
        self._main_threads = MainThreadClock()
        # What a blocked main thread waits on (a pipe, inotify), read in a worker of its own
        # right after its dump: never on the loop (probe 146, H1).
        self._blocked = BlockedReads()
        # Processes py-spy may not read (permission denied): classified from /proc from then on.
        self._denied: set[tuple[int, float]] = set()
        self._proc_sampled_at: dict[tuple[int, float], float] = {}
        self._proc_samples_per_tick = max(1, math.ceil(PROC_SAMPLES_PER_S * interval_s))
        # When each process in a window was last handed to py-spy (the longest waiting first),
        # and how many dumps a tick the sampler allows on average (for the clocks read).
        self._dumped_at: dict[tuple[int, float], float] = {}
        self._dumps_per_tick = max(1, math.ceil(config.dumps_per_second * interval_s))
        # The middle band (see the module doc): off under `mlcostd profile` (it samples all)
        # or at mid_sm_share 0. When each process's share went below mid_sm_share (and stayed),
        # its open stretch, when it was last dumped, and the dumps it may take now (a credit
        # of mid_dumps_per_second that ticks add to, at most one tick's or one dump's worth).
        self._mid_on = config.mid_sm_share > config.low_sm_share and not sample_always
        self._mid_after_s = max(0.0, config.mid_after - interval_s / 2)
        mid_ticks = max(1, math.ceil(config.mid_dump_interval / interval_s - 1e-9))
        self._mid_turn_after_s = (mid_ticks - 0.5) * interval_s
        self._mid_credit_per_tick = config.mid_dumps_per_second * interval_s
        self._mid_credit = 0.0
        self._band_since: dict[tuple[int, float], float] = {}
        self._stretches: dict[tuple[int, float], _Stretch] = {}
        self._mid_dumped_at: dict[tuple[int, float], float] = {}
        # Processes in a window whose main-thread clock is read this tick: those whose stack
        # dump or /proc sample may come within the signals' snapshots (see _clocks_due).
        self._clock_due: set[tuple[int, float]] = set()
        self._dips_ended = False  # since the main-thread clocks last closed those not in a dip
        self.status_by_key: dict[str, dict[str, Any]] = {}
        self.samples_kept = 0
        # Kind markers seen in ANY thread of a dump (a server's serve_forever runs in a thread
        # while its main thread joins): (pid, start_time) -> marker -> when last seen.
        self.frame_markers: dict[tuple[int, float], dict[str, float]] = {}
        # each process's phase balance over the last 30 min, fed what the store is fed from
        # `started_at` (the daemon's start) on
        self.phases = LivePhases(interval_s, since=started_at)

    # -- per tick --------------------------------------------------------------------------

    def on_tick(self, sample: Sample) -> None:
        """Update windows and signals; schedule dumps for processes in a dip. Cheap."""
        config = self.config
        self.phases.on_tick(sample)
        children: dict[int, list[ProcessSample]] = {}
        seen = set()
        ts = sample.ts
        utilization = {g.index: g.utilization for g in sample.gpus}
        always_sampled = self.sample_always
        recorded = {p.pid for p in sample.processes} if always_sampled else set()
        from_proc: list[tuple[ProcessSample, float]] = []  # in a window, no stacks: /proc
        stacked: list[tuple[ProcessSample, float]] = []  # in a window, py-spy may dump it
        # (this loop runs per process per tick: what it reads of self and the config is read
        # once, and one process's signals are updated here, not through a call)
        signals_of, dips, denied = self._signals, self._dips, self._denied
        clock_due = self._clock_due
        low, high, stacks = config.low_sm_share, config.high_sm_share, config.stacks
        window_after = self._window_after_s
        mid_on, mid, band_since = self._mid_on, config.mid_sm_share, self._band_since
        mid_after, stretches = self._mid_after_s, self._stretches
        banded: list[tuple[ProcessSample, float]] = []  # in the middle band: dumped slower
        for proc in sample.processes:
            key = proc.key
            signals = signals_of.get(key)
            if signals is None:  # (not setdefault: that builds a _Signals per process per tick)
                signals = signals_of[key] = _Signals()
            # The main thread's clock only for processes in a dip whose sample may come within
            # the snapshots kept: one pread each, and only there.
            signals.seen.append((ts, proc, self._main_threads.times(proc.pid, proc.start_time)
                                 if key in clock_due and (key in dips or key in stretches)
                                 else None, utilization))
            uses = proc.gpus
            always = always_sampled and (bool(uses) or proc.ppid not in recorded)
            if not uses:
                children.setdefault(proc.ppid, []).append(proc)
                if not always:
                    continue
            seen.add(key)
            # (one loop, not any() and sum() over generators)
            holds_memory = False
            share = 0.0
            for use in uses:
                holds_memory = holds_memory or (use.memory_bytes or 0) > 0
                share += use.sm_share
            if uses:
                share /= len(uses)
            sustained = False  # below mid_sm_share for mid_after
            if mid_on:
                if holds_memory and share < mid:
                    since = band_since.get(key)
                    if since is None:
                        band_since[key] = since = ts
                    sustained = ts - since >= mid_after
                elif key in band_since:
                    del band_since[key]
            dip = dips.get(key)
            below = always or (holds_memory and share < low)
            if dip is None and below:
                dip = dips[key] = _Dip(proc.pid, proc.start_time, ts,
                                       tuple(use.gpu_index for use in uses))
            if dip is None:
                if sustained and stacks and key not in denied:
                    banded.append((proc, share))
                    if key not in stretches:
                        stretches[key] = _Stretch(proc.pid, proc.start_time,
                                                  tuple(use.gpu_index for use in uses))
                continue
            if uses and not dip.gpus:  # a profiled command that took its GPU since
                dip.gpus = tuple(use.gpu_index for use in uses)
            if below or (holds_memory and share < high):
                dip.last_below = ts
                if not dip.qualified and (always or ts - dip.started_at >= window_after):
                    self._qualify(dip)
                if stacks and key not in denied:
                    stacked.append((proc, share))
                else:
                    from_proc.append((proc, share))
            else:
                self._end(key, dip, ts)
        for key in [k for k in dips if k not in seen]:
            self._end(key, dips[key], ts)
        if stretches and len(stretches) > len(banded):  # left the band, a dip, or gone
            now_banded = {proc.key for proc, _ in banded}
            for key in [k for k in stretches if k not in now_banded]:
                self._end_stretch(key, ts)
        if len(band_since) > len(seen):  # (a process that left keeps no entry)
            for key in [k for k in band_since if k not in seen]:
                del band_since[key]
        self._children = children
        self._processes, self._gpu_children = sample.processes, None  # (built when asked)
        # Each kind of sample takes its turns from one line of its candidates, the longest
        # unsampled first (one sort a tick), and the clocks are read for the next in that line.
        line = self._line(from_proc, self._proc_sampled_at)
        taken = self._sample_due_from_proc(line, sample.ts)
        self._clock_due = self._clocks_due(line, taken, self._proc_samples_per_tick)
        line = self._line(stacked, self._dumped_at)
        taken = self._dump_due(line, sample.ts)
        self._clock_due |= self._clocks_due(line, taken, self._dumps_per_tick)
        if mid_on:
            self._mid_credit = min(self._mid_credit + self._mid_credit_per_tick,
                                   max(1.0, self._mid_credit_per_tick))
            if banded:
                line = self._line(banded, self._mid_dumped_at)
                mid_taken = self._mid_dump_due(line, sample.ts, len(taken))
                self._clock_due |= self._clocks_due(line, mid_taken, 1)
        # Every process of this tick has its signals: more signals than processes, and some
        # process left since the last tick. Only then is what is kept per process pruned (most
        # ticks none left). (A dump that finishes after its process left may add a marker or
        # a denial for it: pruned at the next departure.)
        if len(self._signals) > len(sample.processes):
            self._forget_gone({p.key for p in sample.processes})
        if len(self.status_by_key) > len(sample.processes) + STATUS_SLACK:  # bounded
            keys = {process_key(*p.key) for p in sample.processes}
            self.status_by_key = {k: v for k, v in self.status_by_key.items() if k in keys}
        if self._dips_ended:  # their main threads' clocks are read no more
            self._dips_ended = False
            self._main_threads.keep_only(set(self._dips) | set(self._stretches))

    def _forget_gone(self, live: set[tuple[int, float]]) -> None:
        """Drop what is kept for processes no longer on the host (not in `live`)."""
        for key in [k for k in self._signals if k not in live]:
            del self._signals[key]
        for key in [k for k in self.frame_markers if k not in live]:
            del self.frame_markers[key]
        self._denied &= live
        for key in [k for k in self._proc_sampled_at if k not in live]:
            del self._proc_sampled_at[key]
        for key in [k for k in self._dumped_at if k not in live]:
            del self._dumped_at[key]
        for key in [k for k in self._mid_dumped_at if k not in live]:
            del self._mid_dumped_at[key]
        self._blocked.forget(live)

    def host_signals(self, proc: ProcessSample, of_job: ProcessSample | None = None
                     ) -> HostSignals | None:
        """The signals of `proc` over its last snapshots, its children's I/O added; None until
        two ticks have been seen. `of_job`: the parent it is a worker of (its sends count as
        output only as far as they leave that job)."""
        own = self._signals.get(proc.key)
        if own is None or len(own.seen) < 2:
            return None
        snapshots = own.snapshots
        first, last = snapshots[0], snapshots[-1]
        seconds = last.ts - first.ts
        if seconds <= 0:
            return None
        read = _rate(first.read, last.read, seconds) or 0.0
        # Output: to storage, or sent out through syscalls net of what the process and its
        # children read (summed over them, then netted): a Pool worker's results through a pipe
        # are the parent's reads, input moving within the job, not a checkpoint (a job that
        # wrote no file read "now every 17 s" of blocking_checkpoint).
        storage = _rate(first.written, last.written, seconds) or 0.0
        sent = _sent(first, last, seconds)
        in_d = any(s.in_d for s in snapshots)
        tree_cpu = _rate(first.tree_cpu_seconds, last.tree_cpu_seconds, seconds) or 0.0
        children_running = 0
        for child in self._children.get(proc.pid, []):
            kid = self._signals.get(child.key)
            if kid is None or len(kid.seen) < 2:
                continue
            now = kid.seen[-1][1]
            children_running += now.state in ("R", "D") or now.threads_in_d > 0
            kid_first, kid_last = _snapshot(kid.seen[0]), _snapshot(kid.seen[-1])
            span = kid_last.ts - kid_first.ts
            read += _rate(kid_first.read, kid_last.read, span) or 0.0
            storage += _rate(kid_first.written, kid_last.written, span) or 0.0
            kid_sent = _sent(kid_first, kid_last, span)
            if kid_sent is not None:
                sent = kid_sent if sent is None else sent + kid_sent
            tree_cpu += _rate(kid_first.tree_cpu_seconds, kid_last.tree_cpu_seconds,
                              span) or 0.0
        written = max(storage, sent or 0.0)
        if of_job is not None and written > storage:
            # A worker dumped for its parent: what it sends out counts only as far as it leaves
            # the job (the parent's and its workers' sends net of their reads).
            job = self.host_signals(of_job)
            written = max(storage, min(written, job.write_per_s if job is not None else 0.0))
        mains = [(s.ts, t) for s in snapshots if (t := s.main_times) is not None]
        main_cpu = main_queued = main_woke = None
        if len(mains) >= 2:
            (since, before), (until, after) = mains[0], mains[-1]
            main_cpu = cpu_demand(after.on_cpu - before.on_cpu, after.queued - before.queued,
                                  until - since)
            main_queued = _rate(before.queued, after.queued, until - since)
            (_, last_but_one), (_, last_one) = mains[-2], mains[-1]
            if last_but_one.runs is not None and last_one.runs is not None:
                main_woke = (last_one.runs > last_but_one.runs
                             or last_one.queued > last_but_one.queued)
        utils = [s.gpu_utilization for s in snapshots if s.gpu_utilization is not None]
        kind = self.kind_of(proc.key) if self.kind_of is not None else None
        return HostSignals(
            seconds=seconds, main_thread_cpu=main_cpu, main_thread_queued=main_queued,
            main_thread_woke=main_woke,
            process_cpu=_rate(first.cpu_seconds, last.cpu_seconds, seconds),
            read_per_s=read, write_per_s=written, tree_cpu=tree_cpu,
            children_running=children_running, d_state=in_d,
            iowait_growing=(first.iowait is not None and last.iowait is not None
                            and last.iowait > first.iowait),
            gpu_busy=gpu_is_busy(sum(utils) / len(utils), self.idle_utilization_pct)
            if utils else None,
            gpu_utilization=sum(utils) / len(utils) / 100.0 if utils else None,
            gpu_held=any(seen[1].gpus for seen in own.seen),
            connections_opened=(None if self.connections_opened is None
                                else self.connections_opened(proc.key)),
            job_peers_only=kind is not None and kind.job_peers_only,
            interactive_prompt=kind is not None and kind.interactive_prompt)

    def _qualify(self, dip: _Dip) -> None:
        dip.qualified = True  # (at this tick: its last below)
        facts.write_event(self.store, self._event(dip, None), raised_at=dip.last_below)
        self.phases.window_opened((dip.pid, dip.start_time), dip.started_at)
        if dip.pending:
            self._write_stacks(dip.pending)
            dip.pending = []

    def _write_stacks(self, rows: list[StackRow]) -> None:
        """Stack samples of a window: to the store (the record) and to the live balance."""
        self.samples_kept += facts.write_stacks(self.store, rows)
        for row in rows:
            self.phases.add_stack((row.pid, row.start_time), row.ts, row.thread_id,
                                  row.stack_hash, row.frames, row.phase, row.gpu_util,
                                  row.reason)

    def _end(self, key: tuple[int, float], dip: _Dip, ts: float) -> None:
        if dip.qualified:
            facts.write_event(self.store, self._event(dip, ts))
            self.phases.window_closed(key, ts)
        del self._dips[key]
        self._dips_ended = True

    def _end_stretch(self, key: tuple[int, float], ts: float) -> None:
        stretch = self._stretches.pop(key)
        if stretch.started_at is not None:
            facts.write_event(self.store, self._stretch_event(stretch, ts))
            self.phases.window_closed(key, ts)
        self._dips_ended = True  # (its main thread's clock is read no more)

    @staticmethod
    def _stretch_event(stretch: _Stretch, ended_at: float | None) -> dict[str, Any]:
        assert stretch.started_at is not None
        return {"kind": MID_UTILIZATION, "target": process_key(stretch.pid, stretch.start_time),
                "started_at": stretch.started_at, "ended_at": ended_at,
                "detail": {"pid": stretch.pid, "start_time": stretch.start_time,
                           "gpus": list(stretch.gpus)}}

    @staticmethod
    def _event(dip: _Dip, ended_at: float | None) -> dict[str, Any]:
        return {"kind": LOW_UTILIZATION, "target": process_key(dip.pid, dip.start_time),
                "started_at": dip.started_at, "ended_at": ended_at,
                "detail": {"pid": dip.pid, "start_time": dip.start_time, "gpus": list(dip.gpus)}}

    def active_windows(self) -> list[dict[str, Any]]:
        return [self._event(d, None) for d in self._dips.values() if d.qualified]

    def window_phases(self) -> dict[str, str]:
        """What most of the recent stacks sampled in each open low-utilization window say
        (LivePhases.latest_phase), by process key (/v1/now's `phase_now` there): what the
        process does now, not its balance's top."""
        found = {}
        for dip in self._dips.values():
            if dip.qualified:
                phase = self.phases.latest_phase((dip.pid, dip.start_time), dip.started_at)
                if phase is not None:
                    found[process_key(dip.pid, dip.start_time)] = phase
        return found

    # -- stacks ----------------------------------------------------------------------------

    def _dump_due(self, line: list[_InLine], ts: float) -> set[tuple[int, float]]:
        """Stack dumps of the processes in a window whose turn it is (one per dump_interval
        each), the longest undumped first (`line`, see `_line`), as many as the sampler allows
        now: the rate limit goes round all of them instead of to the first in process order,
        and a tick makes a task per dump taken, not per process in a window. Returns the
        processes handed to py-spy."""
        allowed = self.sampler.available() - self._delayed
        if allowed <= 0 or not line:
            return set()
        in_flight = self._in_flight
        taken = set()
        for last, proc, share in self._turns(
                [entry for entry in line if entry[1].pid not in in_flight], ts, allowed):
            key = proc.key
            self._dumped_at[key] = ts
            taken.add(key)
            self._schedule(proc, share, last)
        return taken

    def _mid_dump_due(self, line: list[_InLine], ts: float, window_dumps: int
                      ) -> set[tuple[int, float]]:
        """Stack dumps of the processes in the middle band whose turn it is (one per
        mid_dump_interval each), the longest undumped first, as many as the middle band's
        credit allows (mid_dumps_per_second) within what the sampler has left after this
        tick's `window_dumps`: windows come first. Returns the processes handed to py-spy."""
        allowed = min(int(self._mid_credit),
                      self.sampler.available() - self._delayed - window_dumps)
        if allowed <= 0:
            return set()
        in_flight = self._in_flight
        taken = set()
        turn_after = self._mid_turn_after_s
        for last, proc, share in [entry for entry in line
                                  if entry[1].pid not in in_flight][:allowed]:
            if ts - last < turn_after:
                break  # (the longest undumped first: the rest waited less)
            key = proc.key
            self._mid_dumped_at[key] = ts
            self._stretches[key].scheduled_at = ts  # (before its rows come: _keep)
            self._mid_credit -= 1.0
            taken.add(key)
            self._schedule(proc, share, last, stretch=self._stretches[key])
        return taken

    def _schedule(self, proc: ProcessSample, share: float, dumped_before: float, *,
                  stretch: _Stretch | None = None) -> None:
        """Dump `proc` in a task: for its window, or for its middle-band `stretch`."""
        self._in_flight.add(proc.pid)
        task = asyncio.get_running_loop().create_task(
            self._sample(proc, share, dumped_before, stretch), name=f"stacks-{proc.pid}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sample(self, proc: ProcessSample, share: float, dumped_before: float,
                      stretch: _Stretch | None = None) -> None:
        in_band = stretch is not None
        try:
            if self.dump_spread_s > 0:
                self._delayed += 1
                try:
                    await asyncio.sleep(random.uniform(0.0, self.dump_spread_s))
                finally:
                    self._delayed -= 1
            # whose rights the frames' source lines are read with: those it had before its
            # dump, and still has after it (source_reader)
            rights = credentials(proc.pid)
            result = await self.sampler.dump(proc.pid)
            turns = self._mid_dumped_at if in_band else self._dumped_at
            if result.status == RATE_LIMITED and proc.key in turns:
                turns[proc.key] = dumped_before  # not dumped: its turn stays
            rows = self._rows(proc, result, share, rights,
                              busy_elsewhere=share >= self.config.high_sm_share,
                              in_band=in_band, gpu_works=share >= self.config.low_sm_share,
                              blocked_on=await self._blocked_on(proc, result))
            if rows and result.ok:
                if waits_on_data_queue(result.threads):
                    for worker in self._children.get(proc.pid, [])[:4]:
                        worker_rights = credentials(worker.pid)
                        worker_result = await self.sampler.dump(worker.pid)
                        rows += self._rows(worker, worker_result, share, worker_rights,
                                           busy_elsewhere=False, of_job=proc,
                                           blocked_on=await self._blocked_on(worker,
                                                                             worker_result))
            self._keep(proc.key, rows, stretch)
        except Exception:  # attribution must never take the daemon down
            log.exception("stack sampling of pid %d failed", proc.pid)
        finally:
            self._in_flight.discard(proc.pid)

    def _sample_due_from_proc(self, line: list[_InLine], ts: float) -> set[tuple[int, float]]:
        """/proc samples of the processes in a window whose turn it is (one per dump_interval
        each), the longest unsampled first (`line`, see `_line`), at most PROC_SAMPLES_PER_S a
        second over all: a host of hundreds of processes in windows costs the same per tick as
        one of a dozen, and each process still gets its turn (less often). Returns the
        processes sampled."""
        taken = set()
        for _, proc, share in self._turns(line, ts, self._proc_samples_per_tick):
            taken.add(proc.key)
            self._sample_from_proc(proc, share, ts)
        return taken

    @staticmethod
    def _line(candidates: list[tuple[ProcessSample, float]],
              sampled_at: dict[tuple[int, float], float]) -> list[_InLine]:
        """(last sampled, process, share) of each candidate, the longest unsampled first (the
        never sampled in the candidates' order)."""
        never = float("-inf")
        line = [(sampled_at.get(proc.key, never), proc, share) for proc, share in candidates]
        line.sort(key=_LAST_SAMPLED)
        return line

    def _turns(self, line: list[_InLine], ts: float, limit: int) -> list[_InLine]:
        """The first `limit` of `line` whose turn it is (none in the last dump_interval): in a
        line the longest unsampled first, those are its first ones."""
        turn_after = self._turn_after_s
        return [entry for entry in line[:limit] if ts - entry[0] >= turn_after]

    @staticmethod
    def _clocks_due(line: list[_InLine], taken: set[tuple[int, float]], per_tick: int
                    ) -> set[tuple[int, float]]:
        """The processes in a window whose main-thread clock the next ticks read: those whose
        turn (a /proc sample, or a stack dump) may come before SIGNAL_TICKS more ticks have
        passed, the first SIGNAL_TICKS x `per_tick` (samples a tick) of `line` once the
        processes `taken` this tick have gone to its end, as `_sample_due_from_proc` and
        `_dump_due` take them. A sample's signals then have the clock over all their
        snapshots, as if it were read every tick, at a bounded number of reads a tick instead
        of one per process in a window: 130-250 at 256 processes."""
        wanted = SIGNAL_TICKS * per_tick
        keys = set(islice((key for _, proc, _ in line if (key := proc.key) not in taken),
                          wanted))
        if len(keys) < wanted:  # fewer waiting than that: the ones just sampled come next
            keys |= set(islice((key for _, proc, _ in line if (key := proc.key) in taken),
                               wanted - len(keys)))
        return keys

    def _sample_from_proc(self, proc: ProcessSample, share: float, ts: float) -> None:
        """One /proc-only sample (no ptrace), at most one per dump_interval per process."""
        last = self._proc_sampled_at.get(proc.key)
        if last is not None and ts - last < self._turn_after_s:
            return
        self._proc_sampled_at[proc.key] = ts
        try:
            self._keep(proc.key, [self._proc_row(proc, share, ts)])
        except Exception:  # attribution must never take the daemon down
            log.exception("/proc sampling of pid %d failed", proc.pid)

    def _proc_row(self, proc: ProcessSample, share: float, ts: float) -> StackRow:
        facts_now = read_facts(proc.pid)
        # Its workers: children without a GPU, but not multiprocessing's helpers (a
        # resource tracker or a forkserver waits for nothing the job needs).
        busy_workers = sum(1 for child in self._children.get(proc.pid, [])
                           if not any(helper in child.command for helper in MULTIPROCESSING_HELPERS))
        # Ranks of one job share a parent; mlcostd's own children (simulated workloads) are not
        # a job.
        busy_peers = 0 if proc.ppid in (0, 1, os.getpid()) else sum(
            1 for peer in self._gpu_processes_of(proc.ppid)
            if peer.key != proc.key and self._works(peer))
        verdict = classify_from_proc(facts_now, self.host_signals(proc),
                                     busy_workers=busy_workers, busy_peers=busy_peers)
        frame = proc_where(facts_now)
        return StackRow(ts, proc.pid, proc.start_time, proc.pid, stack_hash([frame]),
                        ((frame.name, frame.filename, frame.line),), verdict.phase, share,
                        verdict.reason)

    def _gpu_processes_of(self, ppid: int) -> list[ProcessSample]:
        """The last tick's GPU processes whose parent is `ppid` (the ranks of one job)."""
        if self._gpu_children is None:
            self._gpu_children = {}
            for proc in self._processes:
                if proc.gpus:
                    self._gpu_children.setdefault(proc.ppid, []).append(proc)
        return self._gpu_children.get(ppid, [])

    def _works(self, proc: ProcessSample) -> bool:
        """Running, blocked on disk, or on a CPU >= WORKING_CPU over its last snapshots."""
        if proc.state in ("R", "D") or proc.threads_in_d:
            return True
        own = self._signals.get(proc.key)
        if own is None or len(own.seen) < 2:
            return False
        (first_ts, first, _, _), (last_ts, last, _, _) = own.seen[0], own.seen[-1]
        cpu = _rate(first.cpu_seconds, last.cpu_seconds, last_ts - first_ts)
        return cpu is not None and cpu >= WORKING_CPU

    async def _blocked_on(self, proc: ProcessSample, result: DumpResult) -> str | None:
        """What the blocked main thread of a dump of `proc` reads, where it is a pipe or
        inotify (`blocked_read`, read in a worker, bounded: BlockedReads); None where its
        main thread runs, or the dump has none."""
        thread = main_thread(result.threads) if result.ok else None
        if thread is None or thread.active:
            return None
        return await self._blocked.read(proc.pid, proc.start_time)

    def _rows(self, proc: ProcessSample, result: DumpResult, share: float,
              rights: Credentials | None, *, busy_elsewhere: bool,
              in_band: bool = False, gpu_works: bool = False,
              of_job: ProcessSample | None = None,
              blocked_on: str | None = None) -> list[StackRow]:
        """The stack row of a dump of `proc` (none where there is nothing to classify).
        `gpu_works`: its SM share was at or above low_sm_share at the dump's tick (in the
        middle band, or in a window's hysteresis, under high_sm_share). `blocked_on`: what its
        blocked main thread reads (`_blocked_on`, read right after the dump)."""
        if result.status != RATE_LIMITED:
            self.status_by_key[process_key(proc.pid, proc.start_time)] = {
                "status": result.status, "error": result.error, "ts": result.ts}
            facts.write_stack_status(self.store, proc.pid, proc.start_time, result.ts,
                                            result.status, result.error)
        if result.status == PERMISSION_DENIED:
            self._denied.add(proc.key)  # ptrace denied: /proc from now on (see the docstring)
            return [self._proc_row(proc, share, result.ts)]
        if result.status != OK:
            return []
        markers = frame_markers(result.threads)
        if markers:
            seen = self.frame_markers.setdefault(proc.key, {})
            seen.update(dict.fromkeys(markers, result.ts))
        thread = main_thread(result.threads)
        if thread is None:
            return []
        host = self.host_signals(proc, of_job)
        if not thread.frames and (host is None or not host.interactive_prompt
                                  or thread.active):
            # (an interactive prompt's main thread reads its user's next line in C: no frame,
            # and still a sample: it waits at the prompt, daemon.analysis.phases)
            return []
        signals = self._signals.get(proc.key, _Signals())
        leaf = user_frame(thread.frames)
        leaf_text = f"{leaf.filename}:{leaf.line}" if leaf else None
        repeated = leaf_text is not None and leaf_text == signals.last_leaf
        signals.last_leaf = leaf_text
        # `busy_elsewhere`: a dump outside a dip (`mlcostd profile` dumps its command
        # throughout) with its SM share at or above high_sm_share, whose main thread only waits,
        # is compute (phases.classify): a thread per GPU (DataParallel's parallel_apply) leaves
        # the main thread in Thread.join while its GPUs work, which read as idle at 90%
        # utilization. The share is the tick's, not the dump's moment: a main thread that reads
        # a batch is data wait however busy the tick was. A DataLoader worker holds no GPU.
        # All its threads: a main thread waiting on a queue that a reader thread fills waits
        # for data, and the sample keeps the reader's stack, whose line is the one to look at.
        if host is not None and not thread.active:
            # What a blocked main thread reads, where it is a pipe (read right after the dump:
            # a thread blocked on a pipe stays so): a read in C leaves no Python frame.
            host = replace(host, main_thread_blocked_on=blocked_on)
        # In the middle band, or in a window back at or above low_sm_share (one that a dip
        # opened lasts while its share stays under high_sm_share: a process whose first ticks
        # read 0 starts in one, and a job steady at 35% never leaves it), its GPU
        # works a third of the time or more, and the samples are read alike (probe 145, H2).
        works = in_band or gpu_works
        where = ("in the middle band" if in_band else
                 "a window, its SM share back at or above low_sm_share")
        # In a window under low_sm_share its GPU may still work part of the time (a tokenizing
        # loop that a loaded host slowed to 23% SM, its main thread queued half the time, read
        # `unknown` at its line, "it needs a core, not less work"): its CPU is weighed against
        # the GPU's quiet share of the same time as in the band, measured (the utilization);
        # where its GPU idled throughout, that share is all of the time and nothing changes.
        quiet = None
        if host is not None and (works or host.gpu_utilization is not None):
            if not works and host.gpu_utilization is not None:
                quiet = gpu_quiet_share(host.gpu_utilization, host.main_thread_queued)
            host = _weighed_in_band(host, share)
        verdict = classify(result.threads, gpu_busy=False, busy_elsewhere=busy_elsewhere,
                           proc_state=signals.state,
                           iowait_growing=signals.iowait_growing, repeated_leaf=repeated,
                           source_line=source_reader(proc.pid, rights), signals=host)
        if works and verdict.phase == IDLE:
            # A main thread that waits waits on that work (a kernel, a thread, a peer), and no
            # idle rule may come of it (a job that sleeps between kernels is throttled, not
            # idle; a server answering 10 requests a second, back at 35% after one tick under
            # 30%, read idle .64 in its select).
            verdict = replace(verdict, phase=COMPUTE, reason=(
                f"waits while its GPU works ({where}): "
                f"{verdict.reason.removesuffix(WITH_GPU_IDLE)}"))
        elif works and verdict.phase == SYNC:
            # A sync there (`.item()`/`.cpu()` on the user's line, or the same line repeating
            # while the host waits) waits on its own GPU's work: the step's compute. The GPU
            # waits only while the host does something else, and those samples name that line;
            # a healthy scorer whose GPU is never idle read ~90% sync and got "keep values on
            # the GPU" as the host's top advice, and so did a server's `.cpu()` of its answer.
            verdict = replace(verdict, phase=COMPUTE, reason=(
                f"waits on its own GPU's work ({where}: its GPU works a third of the time or "
                f"more, so the wait is the step's compute, not a stall): {verdict.reason}"))
        elif works and verdict.phase != COMPUTE:
            verdict = replace(verdict, reason=(
                f"{verdict.reason} ({where}: its CPU weighed against the time its GPU is "
                "quiet)"))
        elif quiet is not None and quiet < WEIGHED_SAID_UNDER and verdict.phase != COMPUTE:
            verdict = replace(verdict, reason=(
                f"{verdict.reason} (its CPU weighed against the time its GPU is quiet, "
                f"{quiet:.0%} of its own)"))
        shown = verdict.thread or thread
        frames = tuple((f.name, f.filename, f.line) for f in shown.frames)
        return [StackRow(result.ts, proc.pid, proc.start_time, shown.thread_id,
                         stack_hash(shown.frames), frames, verdict.phase, share,
                         verdict.reason)]

    def _keep(self, key: tuple[int, float], rows: list[StackRow],
              stretch: _Stretch | None = None) -> None:
        """Keep the rows of a dump for its window (`stretch` None) or its middle-band stretch,
        where that is still open: not one the process began since (that one starts with a
        dump of its own)."""
        if stretch is not None:
            if self._stretches.get(key) is not stretch or not rows:
                return  # it left the band while py-spy ran (a dip's samples take over)
            if stretch.started_at is None:  # its first sample: the stretch is stored
                stretch.started_at = stretch.scheduled_at
                facts.write_event(self.store, self._stretch_event(stretch, None))
                self.phases.window_opened(key, stretch.started_at)
            self._write_stacks(rows)
            return
        dip = self._dips.get(key)
        if dip is None or not rows:
            return  # the dip ended while py-spy ran: too short to count
        if dip.qualified:
            self._write_stacks(rows)
        elif len(dip.pending) < MAX_PENDING_ROWS:
            dip.pending.extend(rows)

    async def dumps_finished(self) -> None:
        """Wait until the stack dumps in flight have been read and kept (a driver that steps
        the daemon tick by tick: the tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._main_threads.close()
        self._blocked.close()
