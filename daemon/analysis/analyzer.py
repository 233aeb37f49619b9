"""The analyzer: per tick burn, ledger, idle events and budgets; every ~30 s the rules.

`update(sample)` is the cheap per-tick part (pure arithmetic over the sample). `evaluate()` runs
the recommendation rules over a window of samples kept at a coarser step. `poll_slow()` does the
blocking work (storage walk, Prometheus counters): run it beside the tick, in a thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from daemon.analysis.budgets import BudgetWatch
from daemon.analysis.cost import (
    Burn,
    CostLedger,
    HostPrice,
    UnitCostMeter,
    burn,
    storage_cost,
)
from daemon.analysis.idle import Event, IdleDetector, IdleThresholds
from daemon.analysis.rules import Recommendation, RecommendationBook, build_analysis, evaluate
from daemon.sources.sample import Sample
from daemon.wire import process_key

WINDOW_S = 1800.0  # the rules look at the last 30 minutes
WINDOW_STEP_S = 5.0  # keep at most one sample per 5 s for the rules
RECENT_EVENTS = 50


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
        window_s: float = WINDOW_S,
        window_step_s: float = WINDOW_STEP_S,
        limits: Mapping[str, float] | None = None,
    ) -> None:
        self.limits = dict(limits or {})
        self.price = price
        self.catalog = catalog
        self.ledger = CostLedger(jobs)
        self.idle = IdleDetector(thresholds)
        self.budgets = BudgetWatch(budgets)
        self.book = RecommendationBook()
        self.storage_paths = storage_paths or []
        for meter in unit_costs:
            self.ledger.add_meter(meter)
        self.window_s = window_s
        self.window_step_s = window_step_s
        self.window: deque[tuple[Sample, Burn]] = deque()
        self.latest: Burn | None = None
        self.latest_sample: Sample | None = None
        self.recent: deque[Event] = deque(maxlen=RECENT_EVENTS)

    def set_price(self, price: HostPrice) -> None:
        """A new price (live refresh, config reload) applies from the next tick."""
        self.price = price

    def update(self, sample: Sample) -> list[Event]:
        """One tick: burn, ledger, idle events, budgets. Returns the events opened or closed."""
        current = burn(sample, self.price)
        self.latest, self.latest_sample = current, sample
        self.ledger.add(current)
        events = self.idle.update(sample, current)
        events += self.budgets.update(self.ledger, sample.ts)
        self.recent.extend(events)
        window = self.window
        if not window or sample.ts - window[-1][0].ts >= self.window_step_s:
            window.append((sample, current))
        while window and sample.ts - window[0][0].ts > self.window_s:
            window.popleft()
        if len(self.ledger.by_process) > 4 * max(len(sample.processes), 64):
            live = {p.key for p in sample.processes}
            self.ledger.forget([k for k in self.ledger.by_process if k not in live])
        return events

    def evaluate(self, phase_balances: Mapping[Any, Any] | None = None,
                 checkpoint_times: Mapping[str, Sequence[float]] | None = None
                 ) -> list[Recommendation]:
        """The rules over the window (run every ~30 s, not per tick)."""
        found = self.analyze(self.inputs(), phase_balances, checkpoint_times)
        self.record(found)
        return found

    def inputs(self) -> tuple[list[tuple[Sample, Burn]], list[Event]]:
        """A copy of what the rules read, taken where the ticks run (cheap), so `analyze` can
        run in another thread while ticks go on."""
        return list(self.window), list(self.budgets.events())

    def analyze(self, inputs: tuple[list[tuple[Sample, Burn]], list[Event]],
                phase_balances: Mapping[Any, Any] | None = None,
                checkpoint_times: Mapping[str, Sequence[float]] | None = None
                ) -> list[Recommendation]:
        """The rules over a copied window; touches no shared state (safe in a thread)."""
        window, budget_events = inputs
        if not window:
            return []
        samples = [s for s, _ in window]
        burns = [b for _, b in window]
        analysis = build_analysis(samples, phase_balances, self.price, self.catalog,
                                  burns=burns, jobs=self.ledger.labeler,
                                  checkpoint_times=checkpoint_times,
                                  budget_events=budget_events, limits=self.limits)
        return evaluate(analysis)

    def record(self, found: list[Recommendation]) -> None:
        """Keep the recommendations of one evaluation in the book (history, snoozes)."""
        if found or self.window:
            ts = self.window[-1][0].ts if self.window else 0.0
            self.book.record(found, ts)

    def poll_slow(self) -> None:
        """Blocking work: storage sizes and unit-cost counters. Run in a thread, rarely."""
        if self.storage_paths:
            self.ledger.set_storage(storage_cost(self.storage_paths))
        if self.ledger.meters:
            self.ledger.poll_unit_costs()

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready state for the API and the TUI."""
        b = self.latest
        processes: dict[str, Any] = {}
        if b is not None:
            for key, proc in b.processes.items():
                processes[process_key(*key)] = {
                    "pid": key[0], "start_time": key[1], "user": proc.user,
                    "job": self.ledger.job_of.get(key),
                    "burn_per_hour": proc.burn_per_hour,
                    "cost": self.ledger.by_process.get(key, 0.0),
                    "shares": [s.as_dict() for s in proc.shares],
                }
        now = self.latest_sample.ts if self.latest_sample is not None else None
        events = [e.as_dict() for e in self.idle.active()]
        events += [e.as_dict() for e in self.budgets.events()]
        events += [e.as_dict() for e in self.idle.closed][-20:]
        return {
            "burn": ({
                "total_per_hour": b.total_per_hour, "wasted_per_hour": b.wasted_per_hour,
                "idle_per_hour": b.idle_per_hour, "price_per_gpu": b.price_per_gpu,
                "price_source": b.price.source, "price": b.price.as_dict(),
                "gpus": [g.as_dict() for g in b.gpus],
            } if b is not None else {
                "total_per_hour": 0.0, "wasted_per_hour": 0.0, "idle_per_hour": 0.0,
                "price_per_gpu": self.price.per_gpu, "price_source": self.price.source,
                "price": self.price.as_dict(), "gpus": [],
            }),
            "cost": {k: v for k, v in self.ledger.as_dict().items() if k != "by_process"},
            "processes": processes,
            "events": events,
            "recommendations": [e.as_dict() for e in self.book.active(now)],
        }
