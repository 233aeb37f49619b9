"""The spend a store recorded, as a cost ledger: what the daemon's ledger charged over a range,
read back from its hour spend rows (daemon.store.facts.write_spend). The review reads a period
with it; a daemon that starts on a store reads the current day and month with it, so its
budgets count what the runs before it spent (daemon.analysis.budgets)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daemon.analysis.ledger import CostLedger
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.store.schema import SPEND_METRICS, SPEND_PROCESS

SPEND_NAMES = {code: name for name, code in SPEND_METRICS.items()}


def recorded_ledger(reader: StoreReader, start: float, end: float,
                    jobs: Mapping[str, str] | None) -> tuple[CostLedger, dict[Any, Any]] | None:
    """A CostLedger filled with the spend recorded over [start, end] (summed per UTC day;
    hours cut by the range placed by their ticks), and the process facts by (pid,
    start_time); None when the store recorded no spend there (a store written before hour
    spend was kept)."""
    rows = queries.spend_by_day(reader, start, end)
    if not rows:
        return None
    facts = queries.process_facts(reader, {key for _, key, metric, _, _ in rows
                                           if metric == SPEND_PROCESS})
    parts: dict[float, tuple[dict[str, float], dict[Any, list[Any]], list[float]]] = {}
    for at, key, metric, seconds, dollars in rows:
        host, procs, charged = parts.setdefault(at, ({}, {}, [0.0]))
        if metric == SPEND_PROCESS:
            fact = facts.get(key)
            if fact is not None:
                procs[(fact["pid"], fact["start_time"])] = [
                    dollars, fact["user"], fact["command"], fact["owner"]]
        elif metric in SPEND_NAMES:
            host[SPEND_NAMES[metric]] = dollars
            charged[0] = max(charged[0], seconds)
    ledger = CostLedger(jobs)
    for at, (host, procs, charged) in sorted(parts.items()):
        ledger.add_recorded(at, charged[0], host, {k: tuple(v) for k, v in procs.items()})
    by_key = {(f["pid"], f["start_time"]): f for f in facts.values()}
    return ledger, by_key
