"""Each process's phase balance over a rolling window, kept in memory as the facts arrive.

What daemon.analysis.balance reads back from the store (the processes' first and last sample,
their low-utilization windows, their stack samples), kept here as the tick, the windows and
the sampler hand them over, so the daemon's phase column and its rules read a balance that is
as new as the last tick, without a store read. The store stays the record: reports and replay
read it (balance.py); both feed the same `phase_balance`.

Everything older than the window is dropped as new facts come in, so memory is bounded by the
window (and by MAX_SAMPLES_PER_PROCESS stack samples per process). On the event loop only.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from daemon.analysis.phase_balance import (
    NO_SAMPLES,
    SampleSplit,
    SampleTally,
    StackSample,
    balance_of,
    checkpoint_starts,
    sample_split,
)
from daemon.analysis.window_ticks import WINDOW_S
from daemon.sources.frames import Frame
from daemon.sources.sample import Sample
from daemon.wire import CHECKPOINT, RECENT_PHASE_S

MAX_SAMPLES_PER_PROCESS = 4096  # a bound beside the window's: the sampler is rate-limited anyway
FORGET_EVERY_S = 10.0  # facts past the window are dropped this often (memory, not results)

ProcessId = tuple[int, float]  # (pid, start_time)
KEEP_MARGIN_S = 1e-3  # a kept balance is looked at again this much before it may run out


def recent_phase(samples: Sequence[StackSample], since: float) -> str:
    """The phase most of `samples` (in time order, the last taken at `since` or later) say
    over the RECENT_PHASE_S up to the last one, none before `since`; of phases as many, the one
    sampled last."""
    last = samples[-1]
    start = max(since, last.ts - RECENT_PHASE_S)
    counts: dict[str, int] = {}
    for sample in reversed(samples):  # newest first: the first phase to a count leads the tie
        if sample.ts < start:
            break
        counts[sample.phase] = counts.get(sample.phase, 0) + 1
    return max(counts, key=counts.__getitem__)  # the first of the largest: sampled last


@dataclass
class _Process:
    first_seen: float
    last_seen: float
    last_with_gpu: float | None = None  # the last tick it held a GPU
    # low-utilization windows: [started_at, ended_at or None while open]
    windows: list[list[float | None]] = field(default_factory=list)
    samples: deque[StackSample] = field(default_factory=deque)  # in time order
    # what a split needs of `samples`, kept as they come and go: a split costs the process's
    # phases and stacks, not its samples (up to MAX_SAMPLES_PER_PROCESS each)
    tally: SampleTally = field(default_factory=SampleTally)
    # the split last asked for, by (the tally's version, samples left out before and after
    # the range asked for): computed once per new sample, not once per tick
    split: tuple[tuple[int, int, int], SampleSplit] | None = None
    facts: int = 0  # windows and samples handed over: a change makes its balance new
    # the balance last shown with some drift allowed: (facts, held a GPU, until, balance)
    shown: tuple[int, bool, float, dict[str, Any]] | None = None
    order: int = 0  # when it was first kept (the order balances lists processes in)
    # latest_phase's last answer: (facts, since, phase), asked again every tick until a fact
    # of it changes
    now_phase: tuple[int, float, str | None] | None = None


@dataclass
class _View:
    """The balances a live view was last given (LivePhases.balances with drift), by process,
    in the order the processes were first kept."""

    drift: float
    length: float  # until - since: the window moves with the ticks, its length stays
    until: float
    shown: dict[ProcessId, dict[str, Any]] = field(default_factory=dict)
    due: list[tuple[float, int, ProcessId]] = field(default_factory=list)  # a heap
    # those whose kept balance may run out before the next tick: looked at in the next call
    # whatever its time, without a push and a pop through `due` (a young process's balance
    # moves past its drift every tick: all of them, while the daemon is young)
    next_call: list[ProcessId] = field(default_factory=list)
    # its latest time in `due` (or in `next_call`, where it is looked at whatever the time)
    kept_until: dict[ProcessId, float] = field(default_factory=dict)
    last_order: int = 0  # the latest-kept process listed


class LivePhases:
    """Phase balances and checkpoint times over the last `window_s`, as new as the last fact."""

    def __init__(self, interval_s: float, window_s: float = WINDOW_S,
                 since: float | None = None) -> None:
        """`since`: when it began to be handed every fact (the daemon's start: nothing of
        its run comes before it, and what the store holds from before is a previous run's);
        else from its first tick on."""
        self.interval_s = interval_s
        self.window_s = window_s
        self.since: float | None = since  # the earliest time this holds every fact of
        self._processes: dict[ProcessId, _Process] = {}
        self._frames: dict[str, tuple[Frame, ...]] = {}  # one tuple per stack, shared
        self._forgot_at = float("-inf")
        self.version = 0  # changes with every fact: a balance computed at one version holds
        self._created = 0  # processes kept so far (their `order`)
        self._last_tick: float | None = None  # the last tick's time (on_tick)
        # A live view's balances (drift > 0), kept between calls over a window that moves with
        # the ticks: each process is looked at again only when a fact of it changed (`_dirty`)
        # or when its balance may no longer stand (`_due`: a heap of (until, order, key)).
        self._view: _View | None = None
        self._dirty: set[ProcessId] = set()

    def _process(self, key: ProcessId, ts: float) -> _Process:
        proc = self._processes.get(key)
        if proc is None:
            proc = self._new(key, ts)
        return proc

    def _new(self, key: ProcessId, ts: float) -> _Process:
        self._created += 1
        proc = self._processes[key] = _Process(ts, ts, order=self._created)
        self._dirty.add(key)
        return proc

    def on_tick(self, sample: Sample) -> None:
        """The processes this tick saw (and which of them hold a GPU); older facts dropped."""
        ts = sample.ts
        if self.since is None:
            self.since = ts
        processes = self._processes
        dirty = self._dirty
        before = self._last_tick
        for p in sample.processes:
            key = p.key
            proc = processes.get(key)
            if proc is None:
                proc = self._new(key, ts)
            elif proc.last_seen != before:  # seen again after a gap: may be back in range
                dirty.add(key)
            proc.last_seen = ts
            if p.gpus:
                if proc.last_with_gpu != before:  # holds a GPU again: its balance may change
                    dirty.add(key)
                proc.last_with_gpu = ts
        self._last_tick = ts
        self.version += 1
        horizon = ts - self.window_s
        self.since = max(self.since, horizon)
        if horizon - self._forgot_at >= FORGET_EVERY_S:  # balances read only their range
            self._forget_before(horizon)
            self._forgot_at = horizon

    def window_opened(self, key: ProcessId, started_at: float) -> None:
        """A low-utilization window of `key` qualified (it began at `started_at`)."""
        proc = self._process(key, started_at)
        if not proc.windows or proc.windows[-1][1] is not None:
            proc.windows.append([started_at, None])
        proc.facts += 1
        self.version += 1
        self._dirty.add(key)

    def window_closed(self, key: ProcessId, ended_at: float) -> None:
        proc = self._processes.get(key)
        if proc is not None and proc.windows and proc.windows[-1][1] is None:
            proc.windows[-1][1] = ended_at
            proc.facts += 1
            self.version += 1
            self._dirty.add(key)

    def add_stack(self, key: ProcessId, ts: float, thread_id: int, stack_hash: str,
                  frames: Iterable[tuple[str, str, int]], phase: str,
                  gpu_util: float | None, reason: str | None) -> None:
        """One classified stack sample kept in a window (what the store gets too)."""
        shared = self._frames.get(stack_hash)
        if shared is None:
            shared = self._frames[stack_hash] = tuple(Frame(*f) for f in frames)
        proc = self._process(key, ts)
        samples, tally = proc.samples, proc.tally
        if len(samples) >= MAX_SAMPLES_PER_PROCESS:
            tally.remove(samples.popleft())
        sample = StackSample(
            ts, key[0], thread_id, stack_hash, shared, phase, gpu_util or 0.0, reason or "")
        if samples and ts < samples[-1].ts:  # a dump that ended after a later one: in place
            at = len(samples)
            while at and samples[at - 1].ts > ts:
                at -= 1
            samples.insert(at, sample)
        else:
            samples.append(sample)
        tally.add(sample)
        proc.facts += 1
        self.version += 1
        self._dirty.add(key)

    def latest_phase(self, key: ProcessId, since: float) -> str | None:
        """What `key` does now by the stacks sampled in the low-utilization window open since
        `since` (/v1/now's `phase_now` there): `recent_phase` of those taken in the
        RECENT_PHASE_S up to the last one. A window that just opened has its own few samples (a
        job that computes most of the time reads checkpoint as soon as a save is sampled); a
        window open for minutes (a data-starved job, a server at a sliver of its SMs) reads what
        most of its recent samples say, not the one sample taken last (a starved job's column
        went data_wait, compute, data_wait with each dump). None where no sample was taken since."""
        proc = self._processes.get(key)
        if proc is None or not proc.samples:
            return None
        kept = proc.now_phase
        if kept is not None and kept[0] == proc.facts and kept[1] == since:
            return kept[2]
        samples = proc.samples
        last = samples[-1]
        if last.ts < since:
            phase = None
        elif len(samples) == 1 or samples[-2].ts < since:  # one sample in the window (a new one)
            phase = last.phase
        else:
            phase = recent_phase(samples, since)
        proc.now_phase = (proc.facts, since, phase)
        return phase

    def _forget_before(self, horizon: float) -> None:
        for key in [k for k, p in self._processes.items() if p.last_seen < horizon]:
            del self._processes[key]
            self._dirty.add(key)
        for proc in self._processes.values():
            samples, tally = proc.samples, proc.tally
            while samples and samples[0].ts < horizon:
                tally.remove(samples.popleft())
            while proc.windows and (proc.windows[0][1] or float("inf")) < horizon:
                del proc.windows[0]
        # Changes no view will look at (none kept, or of processes it neither lists nor kept)
        # go: with no client asking, they would pile up.
        view = self._view
        if view is None:
            self._dirty.clear()
        else:
            self._dirty = {key for key in self._dirty if key in self._processes
                           or key in view.shown or key in view.kept_until}
        if len(self._frames) > 4 * MAX_SAMPLES_PER_PROCESS:  # stacks no sample refers to
            used = {s.stack_hash for p in self._processes.values() for s in p.samples}
            self._frames = {h: f for h, f in self._frames.items() if h in used}

    def covers(self, since: float) -> bool:
        """Whether every fact from `since` on is held here (else read the store)."""
        return self.since is not None and since >= self.since - self.interval_s

    def balances(self, since: float, until: float,
                 drift: float = 0.0) -> dict[ProcessId, dict[str, Any]]:
        """Phase balance of every process seen in [since, until], as balance.phase_balances
        computes it from the store. `drift` > 0 (a live view asking every tick, over a window
        that moves with it): a process whose windows and samples did not change keeps the
        balance it was last given while its time grew by at most `drift` of it (its shares
        then moved by at most that much), instead of one built anew per process per tick; and
        between two such calls only the processes whose facts changed, or whose kept balance
        may have run out, are looked at (the answer is the same as a walk over all)."""
        if drift <= 0:
            result = {}
            for key, proc in self._processes.items():
                entry = self._entry(proc, since, until, drift)
                if entry is not None:
                    result[key] = entry[0]
            return result
        view = self._view
        if (view is None or view.drift != drift or view.length != until - since
                or until < view.until):
            view = self._view = _View(drift, until - since, until)
            self._dirty.clear()
            look_at: Iterable[ProcessId] = list(self._processes)
        else:
            view.until = until
            due = view.due
            look_at = self._dirty
            look_at.update(view.next_call)  # (looking at one early gives what it was given)
            view.next_call = []
            kept_until = view.kept_until
            while due and due[0][0] < until:
                at, _, key = heapq.heappop(due)
                if kept_until.get(key) == at:  # (not an entry a later look replaced)
                    look_at.add(key)
            self._dirty = set()
        shown, due, kept_until = view.shown, view.due, view.kept_until
        next_call, next_tick = view.next_call, until + self.interval_s
        processes = self._processes
        heappush = heapq.heappush
        reorder = False
        for key in look_at:
            kept = processes.get(key)
            entry = self._entry(kept, since, until, drift) if kept is not None else None
            if entry is None or kept is None:
                shown.pop(key, None)
                kept_until.pop(key, None)
                if kept is not None and kept.first_seen > until:  # (looked at each call)
                    kept_until[key] = until
                    heapq.heappush(due, (until, kept.order, key))
                continue
            if key not in shown and kept.order < view.last_order:
                reorder = True  # a process kept before the last one listed comes back
            balance, keep_until = entry
            shown[key] = balance
            if kept.order > view.last_order:
                view.last_order = kept.order
            kept_until[key] = keep_until
            if keep_until < next_tick:
                next_call.append(key)
            else:
                heappush(due, (keep_until, kept.order, key))
        if reorder:  # listed in the order the processes were first kept, as a walk lists them
            view.shown = {key: shown[key] for key in processes if key in shown}
        if len(due) > 2 * len(kept_until) + 64:  # entries that later looks replaced
            view.due = [(at, processes[key].order, key) for key, at in kept_until.items()]
            heapq.heapify(view.due)
        return dict(view.shown)

    def _entry(self, proc: _Process, since: float, until: float,
               drift: float) -> tuple[dict[str, Any], float] | None:
        """One process's balance over [since, until] (None: not in range), and until when a
        live view (`drift` > 0, the window moving with the ticks) may keep it without looking
        at it again, whatever the ticks bring but new facts (then `_dirty` says so): its time
        in range, its GPU and its samples stay in range, and its drift stays within bounds."""
        # (min and max spelled out: this runs per process per tick while processes are young)
        last_seen, first_seen, gpu_at = proc.last_seen, proc.first_seen, proc.last_with_gpu
        if last_seen < since or first_seen > until:
            return None
        samples = proc.samples
        # Samples before `since` and after `until` (at either end: they come in time order);
        # the rest are in range, the latest at `last_sample`.
        before = after = 0
        last_sample = samples[-1].ts if samples else None
        if samples and samples[0].ts < since:
            for s in samples:
                if s.ts >= since:
                    break
                before += 1
        if samples and last_sample is not None and last_sample > until:
            last_sample = None
            for s in reversed(samples):
                if s.ts <= until:
                    last_sample = s.ts
                    break
                after += 1
        in_range = len(samples) - before - after
        held_gpu = gpu_at is not None and gpu_at >= since
        if not held_gpu and in_range <= 0:
            return None
        seen_s = ((last_seen if last_seen <= until else until)
                  - (first_seen if first_seen >= since else since) + self.interval_s)
        shown = proc.shown
        if (drift > 0 and shown is not None and shown[0] == proc.facts
                and shown[1] == held_gpu and 0 <= until - shown[2] <= drift * seen_s):
            balance = shown[3]
        else:
            busy = 0.0
            if held_gpu:
                busy = seen_s - self._low_seconds(proc, since, until)
                if not busy > 0.0:
                    busy = 0.0
            balance = balance_of(self._split(proc, before, after), seen_s, busy)
            if drift > 0:
                proc.shown = shown = (proc.facts, held_gpu, until, balance)
        if drift <= 0 or shown is None:
            return balance, until
        # Kept while, at a later `until` u (since = u - length), it stays in range even if it
        # is not seen again (last_seen >= since), holds its GPU or a sample in range, and
        # u - shown_until <= drift * seen_s(u), where seen_s falls by at most u - until.
        length = until - since
        stays = last_seen + length
        holds = (gpu_at + length if held_gpu and gpu_at is not None
                 else (last_sample or 0.0) + length)
        if holds < stays:
            stays = holds
        slack = until + (drift * seen_s - (until - shown[2])) / (1.0 + drift)
        return balance, (stays if stays <= slack else slack) - KEEP_MARGIN_S

    @staticmethod
    def _split(proc: _Process, before: int, after: int) -> SampleSplit:
        """The split of `proc`'s samples but the first `before` and the last `after`: its
        tally's, less those left out (a few: the oldest samples wait up to FORGET_EVERY_S to
        be dropped), or a tally of those kept where most are left out."""
        samples, tally = proc.samples, proc.tally
        if len(samples) <= before + after:
            return NO_SAMPLES
        which = (tally.version, before, after)
        if proc.split is not None and proc.split[0] == which:
            return proc.split[1]
        if not before and not after:
            split = tally.split()
        elif before + after <= len(samples) // 2:
            less = tally.copy()
            for s in islice(samples, before):
                less.remove(s)
            for s in islice(reversed(samples), after):
                less.remove(s)
            split = less.split()
        else:
            split = sample_split(islice(samples, before, len(samples) - after))
        proc.split = (which, split)
        return split

    @staticmethod
    def _low_seconds(proc: _Process, since: float, until: float) -> float:
        low = 0.0
        for started, ended in proc.windows:
            assert started is not None
            end = until if ended is None or ended > until else ended
            spent = end - (started if started > since else since)
            if spent > 0.0:
                low += spent
        return low

    def checkpoint_times(self, since: float, until: float) -> dict[ProcessId, list[float]]:
        """Per process: when each checkpoint its stacks show in [since, until] began
        (balance.checkpoint_times, keyed by (pid, start_time))."""
        found: dict[ProcessId, list[float]] = {}
        for key, proc in self._processes.items():
            if not any(s.phase == CHECKPOINT and since <= s.ts <= until for s in proc.samples):
                continue
            windows = []
            for started, ended in proc.windows:
                assert started is not None
                end = until if ended is None else ended
                if started <= until and end >= since:
                    windows.append((started, end))
            starts = checkpoint_starts(
                ((s.ts, s.phase) for s in proc.samples if since <= s.ts <= until), windows)
            if starts:
                found[key] = starts
        return found
