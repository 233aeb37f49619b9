"""Tie low-utilization time to code: windows per process, stacks in them, phase balance.

A process holding GPU memory whose SM share drops below `low_sm_share` starts a dip. From the
first tick of the dip, its Python stack is dumped with py-spy (rate-limited by the sampler)
and classified. When the dip has lasted `min_window` seconds it becomes a low-utilization
window: stored as an event with its start, end and GPUs, and its stack samples are stored. A
dip that ends sooner is dropped with its samples. When the main process waits on a DataLoader
queue, its worker processes are dumped too, so the worker's reading line is found.

The tick only updates windows and schedules dumps; the dumps run as asyncio tasks beside it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.balance import LOW_UTILIZATION
from daemon.analysis.phases import (
    classify,
    source_reader,
    user_frame,
    waits_on_data_queue,
)
from daemon.config import AttributionConfig
from daemon.sources.sample import ProcessSample, Sample
from daemon.sources.stacks import (
    OK,
    RATE_LIMITED,
    DumpResult,
    StackSampler,
    main_thread,
    stack_hash,
)
from daemon.store import facts
from daemon.store.facts import StackRow
from daemon.store.writer import Store
from daemon.wire import process_key

log = logging.getLogger(__name__)

MAX_PENDING_ROWS = 64  # stack rows kept per dip before it qualifies


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
class _Signals:
    """What the classifier needs from consecutive samples of one process."""

    state: str = "S"
    iowait: float | None = None
    iowait_growing: bool = False
    last_leaf: str | None = None


class Attribution:
    def __init__(self, config: AttributionConfig, store: Store,
                 sampler: StackSampler | None = None) -> None:
        self.config = config
        self.store = store
        self.sampler = sampler if sampler is not None else StackSampler(
            min_interval_s=config.dump_interval, global_max_per_s=config.dumps_per_second,
            cpu_budget_ratio=config.cpu_budget)
        self._dips: dict[tuple[int, float], _Dip] = {}
        self._signals: dict[tuple[int, float], _Signals] = {}
        self._in_flight: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._children: dict[int, list[ProcessSample]] = {}
        self.status_by_key: dict[str, dict[str, Any]] = {}
        self.samples_kept = 0

    # -- per tick --------------------------------------------------------------------------

    def on_tick(self, sample: Sample) -> None:
        """Update windows and signals; schedule dumps for processes in a dip. Cheap."""
        config = self.config
        children: dict[int, list[ProcessSample]] = {}
        seen = set()
        for proc in sample.processes:
            self._update_signals(proc)
            if not proc.gpus:
                children.setdefault(proc.ppid, []).append(proc)
                continue
            key = proc.key
            seen.add(key)
            holds_memory = any((use.memory_bytes or 0) > 0 for use in proc.gpus)
            share = sum(use.sm_share for use in proc.gpus) / len(proc.gpus)
            dip = self._dips.get(key)
            below = holds_memory and share < config.low_sm_share
            if dip is None and below:
                dip = _Dip(proc.pid, proc.start_time, sample.ts,
                           tuple(use.gpu_index for use in proc.gpus))
                self._dips[key] = dip
            if dip is None:
                continue
            if below or (holds_memory and share < config.high_sm_share):
                dip.last_below = sample.ts
                if not dip.qualified and sample.ts - dip.started_at >= config.min_window:
                    self._qualify(dip)
                if config.stacks:
                    self._schedule(proc, share)
            else:
                self._end(key, dip, sample.ts)
        for key in [k for k in self._dips if k not in seen]:
            self._end(key, self._dips[key], sample.ts)
        self._children = children
        live = {p.key for p in sample.processes}
        for key in [k for k in self._signals if k not in live]:
            del self._signals[key]

    def _update_signals(self, proc: ProcessSample) -> None:
        signals = self._signals.setdefault(proc.key, _Signals())
        signals.state = proc.state
        if proc.iowait_seconds is not None and signals.iowait is not None:
            signals.iowait_growing = proc.iowait_seconds > signals.iowait
        else:
            signals.iowait_growing = proc.threads_in_d > 0
        signals.iowait = proc.iowait_seconds

    def _qualify(self, dip: _Dip) -> None:
        dip.qualified = True
        facts.write_event(self.store, self._event(dip, None))
        if dip.pending:
            self.samples_kept += facts.write_stacks(self.store, dip.pending)
            dip.pending = []

    def _end(self, key: tuple[int, float], dip: _Dip, ts: float) -> None:
        if dip.qualified:
            facts.write_event(self.store, self._event(dip, ts))
        del self._dips[key]

    @staticmethod
    def _event(dip: _Dip, ended_at: float | None) -> dict[str, Any]:
        return {"kind": LOW_UTILIZATION, "target": process_key(dip.pid, dip.start_time),
                "started_at": dip.started_at, "ended_at": ended_at,
                "detail": {"pid": dip.pid, "start_time": dip.start_time, "gpus": list(dip.gpus)}}

    def active_windows(self) -> list[dict[str, Any]]:
        return [self._event(d, None) for d in self._dips.values() if d.qualified]

    # -- stacks ----------------------------------------------------------------------------

    def _schedule(self, proc: ProcessSample, share: float) -> None:
        if proc.pid in self._in_flight:
            return
        self._in_flight.add(proc.pid)
        task = asyncio.get_running_loop().create_task(
            self._sample(proc, share), name=f"stacks-{proc.pid}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sample(self, proc: ProcessSample, share: float) -> None:
        try:
            result = await self.sampler.dump(proc.pid)
            rows = self._rows(proc, result, share)
            if rows and result.ok:
                thread = main_thread(result.threads)
                if thread is not None and waits_on_data_queue([thread]):
                    for worker in self._children.get(proc.pid, [])[:4]:
                        worker_result = await self.sampler.dump(worker.pid)
                        rows += self._rows(worker, worker_result, share)
            self._keep(proc.key, rows)
        except Exception:  # attribution must never take the daemon down
            log.exception("stack sampling of pid %d failed", proc.pid)
        finally:
            self._in_flight.discard(proc.pid)

    def _rows(self, proc: ProcessSample, result: DumpResult, share: float) -> list[StackRow]:
        if result.status != RATE_LIMITED:
            self.status_by_key[process_key(proc.pid, proc.start_time)] = {
                "status": result.status, "error": result.error, "ts": result.ts}
            facts.write_stack_status(self.store, proc.pid, proc.start_time, result.ts,
                                            result.status, result.error)
        if result.status != OK:
            return []
        thread = main_thread(result.threads)
        if thread is None or not thread.frames:
            return []
        signals = self._signals.get(proc.key, _Signals())
        leaf = user_frame(thread.frames)
        leaf_text = f"{leaf.filename}:{leaf.line}" if leaf else None
        repeated = leaf_text is not None and leaf_text == signals.last_leaf
        signals.last_leaf = leaf_text
        verdict = classify([thread], gpu_busy=False, proc_state=signals.state,
                           iowait_growing=signals.iowait_growing, repeated_leaf=repeated,
                           source_line=source_reader(proc.pid))
        frames = tuple((f.name, f.filename, f.line) for f in thread.frames)
        return [StackRow(result.ts, proc.pid, proc.start_time, thread.thread_id,
                         stack_hash(thread.frames), frames, verdict.phase, share)]

    def _keep(self, key: tuple[int, float], rows: list[StackRow]) -> None:
        dip = self._dips.get(key)
        if dip is None or not rows:
            return  # the dip ended while py-spy ran: too short to count
        if dip.qualified:
            self.samples_kept += facts.write_stacks(self.store, rows)
        elif len(dip.pending) < MAX_PENDING_ROWS:
            dip.pending.extend(rows)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
