"""The analyzer: per tick burn, ledger, idle events and budgets; every ~30 s the rules.

`update(sample)` is the cheap per-tick part (pure arithmetic over the sample). `evaluate()` runs
the recommendation rules over a window of samples kept at a coarser step. `poll_slow()` does the
blocking work (storage walk, Prometheus counters): run it beside the tick, in a thread.

`update` and `record` run on the event loop while `poll_slow`, `inputs` and `snapshot` may run
in threads: the analyzer's lock guards its window, events and book, the ledger's lock its tables
(always taken in that order), and no lock is held across blocking work.

Busy and idle come from one place: the `IdleThresholds` given here feed the burn, the idle
detector and the rules alike.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from daemon.analysis.book import DEFAULT_HOLD_S, RecommendationBook
from daemon.analysis.budgets import BudgetWatch
from daemon.analysis.busy import IdleThresholds
from daemon.analysis.cost import Burn, BurnMemo, HostPrice, burn, gpu_holders
from daemon.analysis.cost_state import CostState, ProcessCost
from daemon.analysis.energy import EnergyMeter
from daemon.analysis.idle import Event, IdleDetector
from daemon.analysis.kinds import Kind
from daemon.analysis.latency import LatencyMeter
from daemon.analysis.ledger import CostLedger
from daemon.analysis.meters import UnitCostMeter, storage_cost
from daemon.analysis.rules import Finding, evaluate
from daemon.analysis.rules.idle import at_work, is_periodic, work_reasons
from daemon.analysis.rules.window import (
    ProcessHistory,
    ProcessWindow,
    analysis_of_ticks,
)
from daemon.analysis.totals import GpuTotals
from daemon.analysis.window_ticks import WINDOW_S, StepMeans, WindowTick, window_tick
from daemon.clock import utc_day
from daemon.sources.sample import Sample
from daemon.wire import process_key
from pricing.grid import GridIntensity, grid_intensity

WINDOW_STEP_S = 5.0  # keep at most one sample per 5 s for the rules
RECENT_EVENTS = 50
# A process held its GPU when a run began where that run read it this soon after its start
# (its first tick comes after NVML's first readings and, simulated, its workloads' attach), and
# it started before the run by more than this (a process's start time from /proc is good to a
# second: the boot time it counts from is whole seconds).
HELD_AT_START_WITHIN_S = 30.0
STARTED_BEFORE_MIN_S = 2.0


def unseen_before(start_time: float, first_ts: float, run_start: float) -> float:
    """How long a process ran before mlcostd first read it (at `first_ts`) in the run that
    began at `run_start`, where it held its GPU already as the run began: what it did before
    is unseen. 0 where that run read it later (a process that started while mlcostd ran was
    read from its first GPU use) or it started with the run."""
    if first_ts - run_start > HELD_AT_START_WITHIN_S:
        return 0.0
    unseen = run_start - start_time
    return unseen if unseen > STARTED_BEFORE_MIN_S else 0.0
PROCESS_TARGET = re.compile(r"\d+:\d+\.\d+")  # a process rule's target (wire.process_key)


class Analyzer:
    def __init__(
        self,
        price: HostPrice,
        catalog: Any = None,
        thresholds: IdleThresholds | None = None,
        *,
        jobs: Mapping[str, str] | None = None,
        budgets: Mapping[str, Any] | None = None,
        storage_paths: Mapping[str, float] | Sequence[str] | None = None,
        unit_costs: Sequence[UnitCostMeter] = (),
        latency: Sequence[LatencyMeter] = (),
        window_s: float = WINDOW_S,
        window_step_s: float = WINDOW_STEP_S,
        limits: Mapping[str, float] | None = None,
        recommendation_hold_s: float = DEFAULT_HOLD_S,
        grid_g_per_kwh: float = 0.0,
        grid_region: str = "",
    ) -> None:
        self.thresholds = thresholds or IdleThresholds()
        # The rules' idle times default to the idle events' ([idle] settings); a config may
        # still set them apart.
        self.limits = {"idle_held_min_s": self.thresholds.gpu_held_after_s,
                       "host_idle_min_s": self.thresholds.host_after_s, **(limits or {})}
        self.price = price
        self.catalog = catalog
        self.ledger = CostLedger(jobs)
        self.gpu_totals = GpuTotals()  # per-GPU dollars and joules: the /metrics counters
        self.energy = EnergyMeter(self.ledger.labeler.label)  # joules per process, job, ns
        self.grid_setting = (grid_g_per_kwh, grid_region)  # [energy]
        self.idle = IdleDetector(self.thresholds)
        self.budgets = BudgetWatch(budgets)
        self.book = RecommendationBook(hold_s=recommendation_hold_s)
        self.resolved_unwritten: list[dict[str, Any]] = []  # notices the store has not yet
        self.storage_paths = storage_paths or []
        for meter in unit_costs:
            self.ledger.add_meter(meter)
        for histogram in latency:
            self.ledger.add_latency(histogram)
        self.window_s = window_s
        self.window_step_s = window_step_s
        self._step = StepMeans()  # the ticks since the last window tick
        # compact ticks (window_ticks.WindowTick), not whole Samples: 360 of them stay in memory
        self.window: deque[WindowTick] = deque()
        self.latest: Burn | None = None
        self._burn_memo = BurnMemo()  # each GPU's last split: kept while its inputs are
        self.latest_sample: Sample | None = None
        self.recent: deque[Event] = deque(maxlen=RECENT_EVENTS)
        # The processes the latest round of the rules called periodic jobs between runs
        # ('pid:start_time' -> their runs in the window; rules/idle.py's is_periodic)
        self._periodic: dict[str, int] = {}
        # The processes ('pid:start_time') the latest round of the rules found at work or
        # serving on idle GPUs (rules/idle.py's at_work, by which host_idle holds back): the
        # host_idle event holds back for them too
        self._at_work: frozenset[str] = frozenset()
        # ... with what of it GET /v1/idle cannot read in a tick alone (rules/idle.py's
        # work_reasons: the window's signs of work, a parent that serves, a poll between sleeps)
        self._working: dict[str, tuple[str, ...]] = {}
        # When this run began (the daemon's start; else its first sample), and what it saw of
        # each process ('pid:start_time') before the window: ProcessHistory, kept from round to
        # round (only for the processes of the latest window) and taken over from the store at
        # a start (daemon.runtime.resume.seen_before)
        self.run_started_at: float | None = None
        self._history: dict[str, ProcessHistory] = {}
        self.lock = threading.Lock()  # see the module docstring

    def resume(self, spent_before: CostLedger | None,
               budget_events: Iterable[Mapping[str, Any]], ts: float) -> list[Event]:
        """Carry on from the runs before this daemon on its store: what they spent this month
        (daemon.analysis.recorded_spend) and the budget crossings they left open. Returns
        those of periods over by `ts`, ended (BudgetWatch.resume), for the store."""
        return self.budgets.resume(spent_before, budget_events, ts)

    def seen_before(self, history: Mapping[str, ProcessHistory]) -> None:
        """Take over what runs before this one saw of the processes still running (the store's
        record of each pid and start time: daemon.runtime.resume.seen_before)."""
        with self.lock:
            for key, seen in history.items():
                self._history.setdefault(key, seen)

    def history(self) -> dict[str, ProcessHistory]:
        """What was seen of each process before the latest window (ProcessHistory)."""
        with self.lock:
            return dict(self._history)

    def _remember(self, processes: Sequence[ProcessWindow]) -> None:
        """Keep what this round's window saw of each of its processes for the rounds after it
        (a run of kernels leaves the window after 30 minutes; a periodic job's next run may come
        hours later). Under the lock; only the window's processes are kept."""
        kept: dict[str, ProcessHistory] = {}
        for proc in processes:
            was = proc.history or ProcessHistory(proc.first_at)
            works = [t for t in (was.work_at, proc.work_at) if t is not None]
            kept[proc.id] = ProcessHistory(
                min(was.first_ts, proc.first_at), was.unseen_s, max(was.kernel_s, proc.kernel_s),
                max(works) if works else None, was.resumed_at)
        self._history = kept

    def spend_today(self, ts: float) -> float:
        """The host's spend on ts's UTC day: recorded before this start (kept by the budgets,
        which count the same day), and charged since."""
        day = utc_day(ts)
        before = self.budgets.recorded
        return (before.by_day.get(day, 0.0) if before is not None else 0.0) \
            + self.ledger.by_day.get(day, 0.0)

    def set_price(self, price: HostPrice) -> None:
        """A new price (live refresh, config reload) applies from the next tick."""
        self.price = price

    def update(self, sample: Sample) -> list[Event]:
        """One tick: burn, ledger, idle events, budgets. Returns the events opened or closed."""
        with self.lock:
            return self._update(sample)

    def _update(self, sample: Sample) -> list[Event]:
        if self.run_started_at is None:
            self.run_started_at = sample.ts
        holders = gpu_holders(sample)  # grouped once for the burn and the energy split
        current = burn(sample, self.price, self.thresholds, holders, self._burn_memo)
        self.latest, self.latest_sample = current, sample
        seconds = self.ledger.add(current)
        self.gpu_totals.add(sample, current, seconds)
        self.energy.add(sample, seconds, holders)
        events = self.idle.update(sample, current, self._at_work)
        events += self.budgets.update(self.ledger, sample.ts)
        self.recent.extend(events)
        window, step = self.window, self._step
        step.add(sample)  # the window tick stands for every tick since the last one
        if not window or sample.ts - window[-1].ts >= self.window_step_s:
            window.append(window_tick(sample, current, window[-1] if window else None, step))
            step.clear()
        while window and sample.ts - window[0].ts > self.window_s:
            window.popleft()
        keep = 4 * max(len(sample.processes), 64)
        if len(self.ledger.by_process) > keep:  # (the set of live keys only when it is used)
            self.ledger.forget_exited({p.key for p in sample.processes}, keep=keep)
        return events

    def evaluate(self, phase_balances: Mapping[Any, Any] | None = None,
                 checkpoint_times: Mapping[str, Sequence[float]] | None = None
                 ) -> list[Finding]:
        """The rules over the window (run every ~30 s, not per tick)."""
        found = self.analyze(self.inputs(), phase_balances, checkpoint_times)
        self.record(found)
        return found

    def inputs(self) -> tuple[list[WindowTick], list[Event]]:
        """A copy of what the rules read, taken where the ticks run (cheap), so `analyze` can
        run in another thread while ticks go on."""
        with self.lock:
            return list(self.window), list(self.budgets.events())

    def analyze(self, inputs: tuple[list[WindowTick], list[Event]],
                phase_balances: Mapping[Any, Any] | None = None,
                checkpoint_times: Mapping[str, Sequence[float]] | None = None,
                kinds: Mapping[str, Kind] | None = None) -> list[Finding]:
        """The rules over a copied window (safe in a thread: of the shared state it only
        leaves, under the lock, the periodic jobs it found, for `periodic`, and the processes
        it found at work, for the host_idle event).
        `kinds`: each process's workload kind by 'pid:start_time' (daemon.analysis.kinds)."""
        window, budget_events = inputs
        if not window:
            return []
        with self.lock:
            history = dict(self._history)
            run_start = self.run_started_at if self.run_started_at is not None else window[0].ts
        analysis = analysis_of_ticks(window, phase_balances, self.price, self.catalog,
                                     jobs=self.ledger.labeler,
                                     checkpoint_times=checkpoint_times,
                                     budget_events=budget_events, limits=self.limits,
                                     thresholds=self.thresholds, kinds=kinds,
                                     request_counters=self.request_counters(),
                                     history=history)
        # a process new to this run's rounds: whether it held its GPU before this run began
        fresh = {proc.id: ProcessHistory(proc.first_at, unseen_before(
            proc.start_time, proc.first_at, run_start))
            for proc in analysis.processes if proc.history is None}
        if fresh:
            analysis = replace(analysis, processes=tuple(
                replace(proc, history=fresh[proc.id]) if proc.id in fresh else proc
                for proc in analysis.processes))
        busy = at_work(analysis)
        # (of those at work: a periodic job stopped by a signal gets the SIGTERM, and its host
        # the stop, so GET /v1/idle does not count it either)
        periodic = {proc.id: proc.work_runs for proc in busy if is_periodic(proc)}
        working = frozenset(proc.id for proc in busy)
        reasons = {proc.id: tuple(why) for proc in busy if (why := work_reasons(proc, analysis))}
        with self.lock:
            self._periodic, self._at_work, self._working = periodic, working, reasons
            self._remember(analysis.processes)
        return evaluate(analysis)

    def working(self) -> dict[str, tuple[str, ...]]:
        """The processes ('pid:start_time') the latest round of the rules found at work for what
        a tick alone does not show (rules/idle.py's work_reasons), with those reasons: what GET
        /v1/idle counts as at work beside the tick's evidence, so that it and host_idle
        agree."""
        with self.lock:
            return dict(self._working)

    def periodic(self) -> dict[str, int]:
        """The processes ('pid:start_time') the latest round of the rules called periodic jobs
        between runs (rules/idle.py's is_periodic: the fact by which host_idle holds back and
        idle_gpu_held says "release the GPU between runs"), with their runs in the window: what
        GET /v1/idle counts as at work, so that it and host_idle agree."""
        with self.lock:
            return dict(self._periodic)

    def record(self, found: list[Finding]) -> list[dict[str, Any]]:
        """Keep the recommendations of one evaluation in the book (first and last seen), and
        return their documents as the book has them (with how long each has stood, which counts
        as observed evidence): what the store should keep."""
        with self.lock:
            self._record(found)
            entries, hold = self.book.entries, self.book.hold_s
            return [entries[r.id].as_dict(hold) if r.id in entries else r.as_dict()
                    for r in found]

    def _record(self, found: list[Finding]) -> None:
        if found or self.window:
            ts = self.window[-1].ts if self.window else 0.0
            last = self.latest_sample
            present = ({process_key(*p.key) for p in last.processes} if last is not None
                       else None)

            def exited(target: str) -> bool:
                """A process target ('pid:start_time') no longer in the latest sample."""
                return (present is not None and PROCESS_TARGET.fullmatch(target) is not None
                        and target not in present)

            self.resolved_unwritten += self.book.record(found, ts, exited)

    def take_resolved(self) -> list[dict[str, Any]]:
        """The "recommendation_resolved" notices since the last call (the store keeps them as
        events, so reports and replays show when advice went)."""
        with self.lock:
            taken, self.resolved_unwritten = self.resolved_unwritten, []
            return taken

    def request_counters(self) -> dict[str, dict[str, Any]]:
        """The configured request counters ([[cost.unit_costs]] with unit "requests") by
        their target (a job label or 'pid:start_time'), as last read: the idle server's rate
        and cost per request."""
        with self.ledger.lock:
            meters = list(self.ledger.meters)
        return {m.target: m.as_dict() for m in meters if m.unit == "requests"}

    def poll_slow(self) -> None:
        """Blocking work: storage sizes and unit-cost counters. Run in a thread, rarely."""
        if self.storage_paths:
            self.ledger.set_storage(storage_cost(self.storage_paths))
        if self.ledger.meters:
            self.ledger.poll_unit_costs()
        if self.ledger.latency:
            self.ledger.poll_latency()

    def grid(self) -> GridIntensity:
        """The grid intensity for carbon: [energy], else the priced host's region."""
        g_per_kwh, region = self.grid_setting
        return grid_intensity(self.price.provider, self.price.region,
                              override_g_per_kwh=g_per_kwh, override_region=region)

    def snapshot(self, shares: bool = True) -> dict[str, Any]:
        """JSON-ready state for the tests and tools that read a dict (the API reads
        `cost_state`). `shares=False`: without each process's split of its burn by GPU."""
        with self.lock:
            state = self._cost_state()
            b = self.latest
            processes: dict[str, Any] = {}
            if b is not None:
                for key, proc in b.processes.items():
                    shown = state.processes[process_key(*key)]
                    processes[process_key(*key)] = {
                        "pid": key[0], "start_time": key[1], "user": proc.user,
                        "job": shown.job, "burn_per_hour": shown.burn_per_hour,
                        "cost": shown.cost,
                        "shares": [s.as_dict() for s in proc.shares] if shares else [],
                        "energy": shown.energy,
                    }
        return {"burn": dict(state.burn, price=state.price), "cost": state.ledger,
                "processes": processes, "events": state.events,
                "recommendations": state.recommendations, "energy": state.energy}

    def cost_state(self) -> CostState:
        """The state /v1/now shows, typed (see CostState). On the loop or in a thread."""
        with self.lock:
            return self._cost_state()

    def _cost_state(self) -> CostState:
        b = self.latest
        processes: dict[str, ProcessCost] = {}
        grid = self.grid()
        if b is not None:
            # each table read under one hold of its lock, not once per process
            costs = self.ledger.process_costs(b.processes)
            energies = self.energy.process_documents(b.processes, grid)
            get_energy, new_tuple = energies.get, tuple.__new__
            for key, proc in b.processes.items():
                cost, job = costs[key]
                processes[process_key(*key)] = new_tuple(ProcessCost, (
                    proc.burn_per_hour, cost, job, get_energy(key)))
        events = [e.as_dict() for e in self.idle.active()]
        events += [e.as_dict() for e in self.budgets.events()]
        events += [e.as_dict() for e in self.idle.closed][-20:]
        events += list(self.book.resolved)  # recommendations that went, and why
        price = b.price if b is not None else self.price
        return CostState(
            price=price.as_dict(),
            burn=({
                "total_per_hour": b.total_per_hour, "wasted_per_hour": b.wasted_per_hour,
                "idle_per_hour": b.idle_per_hour, "price_per_gpu": b.price_per_gpu,
                "price_source": b.price.source, "gpus": [g.as_dict() for g in b.gpus],
                "unread_gpus": b.unread_gpus,
                # GPUs the price counts that NVML does not list, charged (idle, wasted)
                "unseen_gpus": b.unseen_gpus, "unseen_per_hour": b.unseen_per_hour,
                "warning": b.warning,
            } if b is not None else {
                # No tick priced yet (a daemon just started): the rates are unknown, not $0 (a
                # $32.77/h host read `burn $0.00/h` until its first tick, probe 154 H1)
                "total_per_hour": None, "wasted_per_hour": None, "idle_per_hour": None,
                "price_per_gpu": self.price.per_gpu, "price_source": self.price.source,
                "gpus": [], "unread_gpus": 0, "unseen_gpus": 0, "unseen_per_hour": None,
                "warning": "",
            }),
            ledger=self.ledger.as_dict(by_process=False),
            processes=processes,
            events=events,
            recommendations=self._recommendations(),
            energy=self.energy.snapshot(grid),
            spend_today=self.spend_today(b.ts) if b is not None else None,
            budgets=tuple(self.budgets.status(self.ledger, b.ts)) if b is not None else ())

    def recommendations(self) -> list[dict[str, Any]]:
        """The active recommendations' documents (the snapshot's, without the rest of it)."""
        with self.lock:
            return self._recommendations()

    def _recommendations(self) -> list[dict[str, Any]]:
        return [e.as_dict(self.book.hold_s) for e in self.book.active()]
