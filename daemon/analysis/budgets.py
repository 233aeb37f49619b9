"""Budgets per user, job and host, daily and monthly (UTC), checked against the cost ledger.

Config (a plain dict, e.g. a TOML table):

    {"host": {"daily": 500, "monthly": 12000},
     "user": {"alice": {"daily": 100}},
     "job": {"train.py": {"monthly": 3000}, "namespace:ml": {"daily": 200}},
     "webhook": "https://hooks.example/mlcost"}

A job is a job label (daemon.analysis.ledger.JobLabeler) or an owner job such as
"namespace:ml", "slurm_account:physics" or "systemd_unit:vllm.service" (ledger.owner_jobs).

Crossing a budget records one `budget_exceeded` Event per budget and period (no repeat until the
next day or month) and, with a webhook, POSTs the event as JSON from a background thread (urllib,
2 s timeout), so the tick never waits on the network. Bodies and errors go through the
redaction of daemon.sources.redact: nothing that leaves the host carries a secret.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from daemon.analysis.idle import BUDGET_EXCEEDED, Event
from daemon.analysis.ledger import CostLedger, is_owner_job
from daemon.clock import utc_day
from daemon.config import check_budgets
from daemon.sources.redact import redact_document, redact_text

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 2.0
WEBHOOK_QUEUE = 100  # undelivered posts kept; beyond that they are dropped and counted
SCOPES = ("host", "user", "job")


@dataclass(frozen=True, slots=True)
class Budget:
    scope: str  # "host" | "user" | "job"
    name: str  # user name or job label; "host" for the host
    period: str  # "daily" | "monthly"
    limit: float  # dollars

    @property
    def target(self) -> str:
        return "host" if self.scope == "host" else f"{self.scope}:{self.name}"


def parse_budgets(config: Mapping[str, Any] | None) -> tuple[list[Budget], str]:
    """Budgets and the webhook URL from the [cost.budgets] table. The table is checked by
    daemon.config.check_budgets (one set of rules and messages); a bad entry raises its
    ValueError naming the key, the value and what is allowed."""
    table = dict(config or {})
    check_budgets(table)
    named = [("host", "host", table["host"])] if "host" in table else []
    for scope in ("user", "job"):
        named += [(scope, str(name), limits) for name, limits in table.get(scope, {}).items()]
    budgets = [Budget(scope, name, period, float(limit))
               for scope, name, limits in named for period, limit in limits.items()]
    return budgets, str(table.get("webhook", ""))


class Webhook:
    """POSTs JSON to one URL from one background thread; never blocks the caller."""

    def __init__(self, url: str, timeout_s: float = WEBHOOK_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self.last_error: str | None = None
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(WEBHOOK_QUEUE)
        self._thread = threading.Thread(target=self._run, name="mlcost-webhook", daemon=True)
        self._thread.start()

    def post(self, payload: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            # Webhook bodies leave the host: the same redaction as every command line.
            body = json.dumps(redact_document(payload)).encode()
            request = urllib.request.Request(
                self.url, data=body, method="POST",
                headers={"Content-Type": "application/json", "User-Agent": "mlcostd"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    # the status is the answer: one network read at most, so a trickling
                    # receiver cannot hold the sender past its timeout
                    response.read1(1024)
                self.sent += 1
            except Exception as exc:  # noqa: BLE001 - any failure is a status, never a crash
                self.failed += 1
                # The URL itself may be a secret (a Slack webhook, a ?token=).
                self.last_error = redact_text(f"POST {self.url}: {exc}")
                log.warning("budget webhook failed: %s", self.last_error)
            finally:
                self._queue.task_done()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until queued posts are delivered or failed (tests, shutdown)."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout_s)

    def close(self) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass


class BudgetWatch:
    """Checks budgets against a ledger each tick; each crossing becomes one Event."""

    def __init__(self, config: Mapping[str, Any] | None = None,
                 webhook: Webhook | None = None) -> None:
        self.budgets, url = parse_budgets(config)
        self.webhook = webhook or (Webhook(url) if url else None)
        self.fired: dict[tuple[Budget, str], Event] = {}
        # What the runs before this daemon spent, as the store recorded it (`resume`): a budget
        # is for a day or a month, not for the time since the daemon last started.
        self.recorded: CostLedger | None = None
        self._day: str | None = None  # the UTC day of the last update

    def resume(self, recorded: CostLedger | None, raised: Iterable[Mapping[str, Any]],
               ts: float) -> list[Event]:
        """Carry on from the runs before this one: `recorded` holds what they spent in the
        current day and month (daemon.analysis.recorded_spend), added to this run's ledger;
        `raised` are the budget_exceeded events the store holds open (as
        daemon.store.queries.open_events reads them): a budget already crossed in its current
        period does not fire (nor post) again, and a crossing whose period is over is returned
        ended at its period's end, for the store."""
        self.recorded = recorded
        day = utc_day(ts)
        ended = []
        for event in raised:
            detail = event.get("detail")
            if event.get("kind") != BUDGET_EXCEEDED or not isinstance(detail, dict):
                continue
            period, period_id = str(detail.get("period")), str(detail.get("period_id"))
            stored = Event(BUDGET_EXCEEDED, str(event.get("target")), float(event["started_at"]),
                           None, float(event.get("cost_so_far") or 0.0), detail)
            if period_id != _current(period, day):
                end = period_end(period, period_id)
                if end is not None and end <= ts:
                    ended.append(replace(stored, ended_at=end))
                continue
            for budget in self.budgets:
                if (budget.target == stored.target and budget.period == period
                        and budget.limit == detail.get("limit")):
                    self.fired[(budget, period_id)] = stored
        return ended

    def spent(self, ledger: CostLedger, budget: Budget, day: str) -> tuple[str, float]:
        """The period id ('2025-01-31' or '2025-01') and the dollars spent in it: this run's
        and, after `resume`, what the runs before it recorded."""
        period_id = _current(budget.period, day)
        spent = _spent_in(ledger, budget, period_id)
        if self.recorded is not None:
            spent += _spent_in(self.recorded, budget, period_id)
        return period_id, spent

    def update(self, ledger: CostLedger, ts: float) -> list[Event]:
        """New crossings since the last call (each budget fires once per period), and the
        crossings whose period ended since, ended at its end: a budget crossed yesterday is
        not a standing event (nor recommendation) today."""
        if not self.budgets:
            return []
        day = utc_day(ts)
        new = self._end_past(day) if day != self._day else []
        self._day = day
        for budget in self.budgets:
            period_id, spent = self.spent(ledger, budget, day)
            if spent < budget.limit or (budget, period_id) in self.fired:
                continue
            event = Event(BUDGET_EXCEEDED, budget.target, ts, None, spent, {
                "scope": budget.scope, "name": budget.name, "period": budget.period,
                "period_id": period_id, "limit": budget.limit, "spent": spent,
                "summary": f"{budget.target} spent ${spent:,.2f} of its {budget.period} budget "
                           f"${budget.limit:,.2f} ({period_id}, UTC)",
            })
            self.fired[(budget, period_id)] = event
            new.append(event)
            if self.webhook is not None:
                self.webhook.post({"source": "mlcost", **event.as_dict()})
        return new

    def _end_past(self, day: str) -> list[Event]:
        """The crossings of periods before `day`'s, ended at their period's end, and let go."""
        ended = []
        for key, event in list(self.fired.items()):
            budget, period_id = key
            if period_id != _current(budget.period, day):
                del self.fired[key]
                end = period_end(budget.period, period_id)
                ended.append(replace(event, ended_at=end if end is not None else event.started_at))
        return ended

    def events(self) -> list[Event]:
        return list(self.fired.values())

    def status(self, ledger: CostLedger, ts: float) -> list[dict[str, Any]]:
        """Where each budget stands in its current period (`/v1/now`'s `budgets`): its target,
        period, limit, the dollars spent (the runs before this start included) and whether it
        was crossed."""
        day = utc_day(ts)
        out = []
        for budget in self.budgets:
            period_id, spent = self.spent(ledger, budget, day)
            out.append({"scope": budget.scope, "name": budget.name, "target": budget.target,
                        "period": budget.period, "period_id": period_id,
                        "limit": budget.limit, "spent": spent,
                        "crossed": (budget, period_id) in self.fired})
        return out


def _current(period: str, day: str) -> str:
    """The id of the `period` ('daily' or 'monthly') that UTC `day` is in."""
    return day if period == "daily" else day[:7]


def period_end(period: str, period_id: str) -> float | None:
    """When a budget period ends (epoch s, UTC): the day's or the month's end; None for an id
    that is not such a date."""
    try:
        if period == "daily":
            start = datetime.strptime(period_id, "%Y-%m-%d")
            end = start + timedelta(days=1)
        elif period == "monthly":
            start = datetime.strptime(period_id, "%Y-%m")
            end = (start.replace(day=28) + timedelta(days=4)).replace(day=1)
        else:
            return None
    except ValueError:
        return None
    return end.replace(tzinfo=timezone.utc).timestamp()


def _spent_in(ledger: CostLedger, budget: Budget, period_id: str) -> float:
    """The dollars `ledger` charged to `budget`'s host, user or job in the period `period_id`."""
    daily = budget.period == "daily"
    if budget.scope == "host":
        return (ledger.by_day if daily else ledger.by_month).get(period_id, 0.0)
    table: Mapping[tuple[str, str], float]
    if budget.scope == "user":
        table = ledger.by_user_day if daily else ledger.by_user_month
    elif is_owner_job(budget.name):  # [cost.budgets.job."namespace:ml"]
        table = ledger.by_owner_day if daily else ledger.by_owner_month
    else:
        table = ledger.by_job_day if daily else ledger.by_job_month
    return table.get((budget.name, period_id), 0.0)
