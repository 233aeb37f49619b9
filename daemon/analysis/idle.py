"""Idle detection: GPUs held but idle, GPUs nobody uses, and a whole host that could be stopped.

An idle period starts at the first tick a GPU is idle by `daemon.analysis.busy.gpu_is_busy` at
`[idle].utilization` (any busy tick before the event opens ends the period). Once the period has
lasted `*_after_s`, an event opens (its `started_at` is the start of the period, and `cost_so_far`
counts from there). An open event closes only after utilization has stayed at or above
`resume_utilization_pct` for `close_after_s` (hysteresis: a one-tick blip neither opens nor
closes an event); `ended_at` is when the resumed activity began.

Events are kept per target: "gpu:N" (held by a process -> kind gpu_held_idle, with the holders;
held by nobody -> gpu_unheld_idle) and "host" (host_idle: every GPU idle, held or not; a GPU at
work is never idle, even when NVML lists no process on it; nor is a host with a process that
the latest round of the rules found at work or serving, `at_work`: the host_idle rule's own
fact (rules/idle.py's at_work), so the event, the rule and GET /v1/idle agree that a server
waiting for requests keeps its host; such a process also ends an open host_idle event, as a
busy GPU does).
Time comes from the samples, never the wall clock, so tests run on simulated time.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from daemon.analysis.busy import IdleThresholds
from daemon.analysis.cost import Burn
from daemon.sources.sample import GPU_OK, GpuUse, ProcessSample, Sample
from daemon.wire import process_key

GPU_HELD_IDLE = "gpu_held_idle"
GPU_UNHELD_IDLE = "gpu_unheld_idle"
HOST_IDLE = "host_idle"
BUDGET_EXCEEDED = "budget_exceeded"  # raised by daemon.analysis.budgets, same Event type


def event_id(kind: str, target: str, started_at: float) -> str:
    """An idle event's id, 'kind:target:started_at' (the start to the millisecond): the same
    for the live event and its replay from the store."""
    return f"{kind}:{target}:{started_at:.3f}"


@dataclass(frozen=True)
class Event:
    kind: str
    target: str
    started_at: float
    ended_at: float | None
    cost_so_far: float
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        return self.ended_at is None

    @property
    def id(self) -> str:
        return event_id(self.kind, self.target, self.started_at)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "target": self.target,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "cost_so_far": self.cost_so_far, "detail": self.detail}


@dataclass
class _Period:
    """One target's current idle period."""

    idle_since: float
    last_ts: float
    cost: float = 0.0
    busy_since: float | None = None
    event: Event | None = None


class IdleDetector:
    """Feed one sample (and its burn) per tick; get back the events opened or closed."""

    def __init__(self, thresholds: IdleThresholds | None = None) -> None:
        self.t = thresholds or IdleThresholds()
        self._periods: dict[str, _Period] = {}
        self.closed: deque[Event] = deque(maxlen=self.t.history)

    def active(self) -> list[Event]:
        """Open events, with their cost so far."""
        return [p.event for p in self._periods.values() if p.event is not None]

    def events(self) -> list[Event]:
        """Open events, then recently closed ones (newest first)."""
        return self.active() + list(reversed(self.closed))

    def update(self, sample: Sample, burn: Burn | None = None,
               at_work: Collection[str] = ()) -> list[Event]:
        """`at_work`: the processes ('pid:start_time') the latest round of the rules found at
        work or serving (Analyzer's, from rules/idle.py's at_work): while one of them is in
        the sample, the host is not idle."""
        ts = sample.ts
        t = self.t
        changed: list[Event] = []
        # each GPU's holders: grouped once a tick, and only for a tick with a GPU that is or
        # was idle (most ticks of a busy host have none: a pass over every process less)
        uses: dict[int, list[tuple[ProcessSample, GpuUse]]] | None = None
        per_gpu = burn.price_per_gpu if burn is not None else 0.0
        ok_gpus = [g for g in sample.gpus if g.status == GPU_OK and g.utilization is not None]
        idle = {g.index: t.gpu_is_busy(g.utilization) is False for g in ok_gpus}
        all_quiet = bool(ok_gpus) and all(idle.values())
        for gpu in ok_gpus:
            util: float = gpu.utilization  # type: ignore[assignment]
            target = f"gpu:{gpu.index}"
            if not idle[gpu.index] and target not in self._periods:
                continue  # busy, and no idle period to end: nothing to do (as _step says)
            if uses is None:
                uses = {}
                for proc in sample.processes:
                    for use in proc.gpus:
                        uses.setdefault(use.gpu_index, []).append((proc, use))
            # the holders, described only for a GPU that is or was idle (an event's detail)
            held = [{"id": process_key(proc.pid, proc.start_time), "pid": proc.pid,
                     "start_time": proc.start_time, "user": proc.user, "command": proc.command,
                     "memory_bytes": use.memory_bytes} for proc, use in uses.get(gpu.index, ())]
            kind = GPU_HELD_IDLE if held else GPU_UNHELD_IDLE
            after = t.gpu_held_after_s if held else t.gpu_unheld_after_s
            detail = {"gpu": gpu.index, "uuid": gpu.uuid, "name": gpu.name,
                      "utilization": util, "holders": held,
                      "price_per_hour": per_gpu}
            self._step(target, kind, ts, idle[gpu.index],
                       util >= t.resume_utilization_pct, after, per_gpu, detail, changed)
        gpu_procs = sum(1 for p in sample.processes if p.gpus)
        # A GPU at work is work, whether or not NVML lists its process (another PID
        # namespace, a container without hostPID, a vGPU): never an idle host to stop. Nor is
        # a host with a GPU it has no reading of (lost, timed out; NVML missing: no GPU at
        # all): every GPU lost read as an idle host, stop it (probe 115).
        every_read = bool(ok_gpus) and len(ok_gpus) == len(sample.gpus)
        # A process at work or serving (the host_idle rule's fact) keeps the host, however
        # idle its GPUs read: stopping the host would stop it (probe 121 F12).
        working = bool(at_work) and any(process_key(p.pid, p.start_time) in at_work
                                        for p in sample.processes)
        host_quiet = (every_read and all(idle.values()) and (gpu_procs == 0 or all_quiet)
                      and not working)
        host_busy = working or any(
            g.utilization >= t.resume_utilization_pct for g in ok_gpus)  # type: ignore[operator]
        total = burn.total_per_hour if burn is not None else 0.0
        self._step("host", HOST_IDLE, ts, host_quiet, host_busy, t.host_after_s, total,
                   {"gpu_processes": gpu_procs, "gpus": len(sample.gpus),
                    "price_per_hour": total,
                    "why": ("no process holds a GPU and every GPU is idle" if gpu_procs == 0
                            else "every GPU is idle")},
                   changed)
        return changed

    def _step(self, target: str, kind: str, ts: float, quiet: bool, busy: bool, after_s: float,
              price_per_hour: float, detail: dict[str, Any], changed: list[Event]) -> None:
        detail["cost_at"] = ts  # the tick its cost so far reaches (a report cuts it to its end)
        period = self._periods.get(target)
        if period is None:
            if quiet:
                self._periods[target] = _Period(idle_since=ts, last_ts=ts)
            return
        dt = max(ts - period.last_ts, 0.0)
        period.last_ts = ts
        if period.event is None:
            if not quiet:
                del self._periods[target]  # not idle long enough: start again
                return
            period.cost += price_per_hour * dt / 3600.0
            if ts - period.idle_since >= after_s:
                period.event = Event(kind, target, period.idle_since, None, period.cost, detail)
                changed.append(period.event)
            return
        # An open event: close it only after sustained activity.
        if busy:
            if period.busy_since is None:
                period.busy_since = ts
            if ts - period.busy_since >= self.t.close_after_s:
                ended = replace(period.event, ended_at=period.busy_since)
                self.closed.append(ended)
                changed.append(ended)
                del self._periods[target]
                return
        elif quiet:
            period.busy_since = None
        if period.busy_since is None:
            period.cost += price_per_hour * dt / 3600.0
        if kind != period.event.kind:
            # The holders changed (a process exited, or one attached): a different finding.
            ended = replace(period.event, ended_at=ts, cost_so_far=period.cost)
            self.closed.append(ended)
            changed.append(ended)
            period.idle_since, period.cost = ts, 0.0
            period.event = Event(kind, target, ts, None, 0.0, detail)
            changed.append(period.event)
            return
        period.event = replace(period.event, cost_so_far=period.cost, detail=detail)


def costed_to(events: list[dict[str, Any]], end: float) -> list[dict[str, Any]]:
    """`events` with the cost of each one still open at `end` as of `end`. An idle event's
    cost is written at each rule evaluation (its detail's `cost_at`, the tick it reaches), so
    a snapshot's ended up to one evaluation short of its end (probe 151 F9: 9 s of $4.10/h),
    and a range of the live store that ends before the event did was charged after its end.
    Moved at the event's `price_per_hour` from `cost_at` to `end` (never under 0); events
    without both (a store from before `cost_at`, other kinds) are left as stored."""
    for event in events:
        ended = event.get("ended_at")
        if isinstance(ended, int | float) and ended <= end:
            continue
        detail = event.get("detail")
        cost = event.get("cost_so_far")
        if not isinstance(detail, dict) or not _finite(cost):
            continue
        price, at = detail.get("price_per_hour"), detail.get("cost_at")
        if not (_finite(price) and _finite(at)) or price < 0 or at == end:
            continue
        event["cost_so_far"] = max(float(cost) + float(price) * (end - float(at)) / 3600.0, 0.0)
        event["detail"] = dict(detail, cost_at=end)
    return events


def _finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
