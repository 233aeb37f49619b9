"""The review a team signs off (`mlcostd report --since 30d --by kind,job,user`): spend per day
and per month with the trend against the previous period of equal length, by kind, job and
user, unit costs with their trend, storage, waste, energy, and what became of the
recommendations (acted on, snoozed, ignored, new).

Its dollars are what the daemon's cost ledger charged, as the store recorded them per UTC hour
(daemon.store.facts.write_spend): the figures /v1/now showed, for any range the store keeps,
read in a few thousand rows however long the range. An hour the range cuts counts by its raw
ticks inside the range (by the clock where raw retention removed them: queries.spend_by_day).
Meter readings (storage sizes, unit-cost counters) price what the meters measured then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from daemon import clock
from daemon.analysis.ledger import RUN_START_READING, CostLedger, run_starts
from daemon.analysis.meters import StorageCost
from daemon.analysis.range_ticks import not_recorded_s
from daemon.analysis.recorded_spend import (
    CostBetween,
    recorded_cost_between,
    recorded_ledger,
    unit_costs,
)
from daemon.store import queries
from daemon.store.reader import StoreReader

Readings = Mapping[tuple[str, str], Sequence[tuple[float, float, dict[str, Any]]]]


def storage_items(readings: Readings, at: float) -> list[StorageCost]:
    """The storage walk in force at `at`: each path's latest reading at or before it."""
    items = []
    for (kind, path), found in readings.items():
        if kind != "storage":
            continue
        before = [r for r in found if r[0] <= at] or list(found[:1])
        ts, size, detail = before[-1]
        price = float(detail.get("price_per_gb_month") or 0.0)
        items.append(StorageCost(path, int(size), int(detail.get("files") or 0),
                                 bool(detail.get("complete", True)), price,
                                 size / 2**30 * price, detail.get("error")))
    return items


# A trend needs a period before that was recorded about as long as this one: a store that began
# recording a day before a 30-day range would otherwise show +100,000 %.
TREND_MIN_COVERAGE = 0.5  # the period before's recorded time over this period's
# A recommendation first raised this close to the range's end, neither acted on nor snoozed,
# is new, not ignored: nobody has had a working day to act on it yet.
NEW_RECOMMENDATION_S = 24 * 3600.0


def _trend(now: float | None, before: float | None) -> float | None:
    """Percent change from `before` to `now`; None where there is nothing to compare with."""
    if now is None or before is None or before <= 0:
        return None
    return round((now - before) / before * 100, 1)


def _split(ledger: CostLedger, facts: Mapping[Any, Any], by: str,
           kinds: Mapping[Any, Any]) -> dict[str, float]:
    if by == "job":
        return dict(ledger.by_job)
    if by == "user":
        return dict(ledger.by_user)
    out: dict[str, float] = {}
    for key, cost in ledger.by_process.items():  # by kind ((pid, start_time) -> its kind)
        kind = kinds.get(key)
        name = kind.get("kind") if isinstance(kind, dict) else None
        name = name if isinstance(name, str) and name else "unknown"
        out[name] = out.get(name, 0.0) + cost
    return out


def review(reader: StoreReader, start: float, end: float, *, by: Sequence[str],
           jobs: Mapping[str, str] | None, kinds: Mapping[Any, Any],
           energy: Mapping[str, Any] | None,
           recommendations: Sequence[Mapping[str, Any]],
           current: tuple[CostLedger, dict[Any, Any]] | None = None,
           spend_to: float | None = None,
           cost_between: CostBetween | None = None) -> dict[str, Any]:
    """The review's part of the report document (README "The review"): keys are added,
    never renamed. `current`: recorded_ledger over [start, end], where the caller has it;
    `spend_to`: where its spend reaches, where the caller charged the ticks after the store's
    last hand-over (else the store's spend_through); `cost_between`: a target's dollars between
    two instants (recorded_spend.recorded_cost_between, where the caller has one), for the unit
    costs."""
    span = end - start
    current = current or recorded_ledger(reader, start, end, jobs)
    previous = recorded_ledger(reader, start - span, start, jobs)
    out: dict[str, Any] = {"since": start, "until": end, "days": round(span / 86400, 2),
                           "previous": {"since": start - span, "until": start},
                           "from": "recorded hour spend" if current else None}
    if current is None:  # the same keys, null (a contract's key is never left out)
        out["previous"].update(recorded_s=previous[0].seconds if previous else 0.0, trend=None)
        out["spend"] = dict.fromkeys(("total", "previous_total", "trend_pct", "per_day",
                                      "per_day_over_s", "per_day_basis"), None)
        out["spend"].update(by_day={}, by_month={})
        out["waste"] = dict.fromkeys(("idle", "wasted", "wasted_share", "previous_wasted",
                                      "trend_pct"), None)
        out["storage"] = {"cost": None, "previous_cost": None}
        out["by"] = {key: [] for key in by}
        out["unit_costs"] = []
    else:
        ledger, facts = current
        recorded_before = previous[0] if previous else None
        # its figures are shown; trends only against a period recorded about as long
        comparable = (recorded_before is not None and recorded_before.seconds
                      >= TREND_MIN_COVERAGE * ledger.seconds)
        before = recorded_before if comparable else None
        out["previous"].update(
            recorded_s=recorded_before.seconds if recorded_before else 0.0,
            trend=None if comparable else (
                f"no trend: the period before was recorded for "
                f"{clock.duration(recorded_before.seconds)}, under half of the "
                f"{clock.duration(ledger.seconds)} recorded in this one"
                if recorded_before is not None and recorded_before.seconds > 0 else
                "no trend: nothing was recorded in the period before"))
        # Per day of the window; a store younger than the window counts its days from its
        # first record (a 2-minute-old store read "$33.86/day" over 10 minutes for $190/day)
        # to where its recorded spend reaches (a live daemon hands it over every round: a
        # minute-old store read "$1,040.76/day" for a $1,321/day host).
        # The same for any window the recorded spend has not reached the end of yet (the
        # daemon hands it over every round): the spend counts to its last hand-over.
        first = queries.first_recorded(reader)
        lo = first if first is not None and start < first < end else start
        through = spend_to if spend_to is not None else queries.spend_through(reader)
        hi = max(lo, through) if through is not None and through < end else end
        counted, basis = hi - lo, None
        # the time in it between two runs (no daemon recorded: charged nothing), said
        # beside the days it counts by (probe 155 M3: "$749.46/day over the 103 s the store
        # holds", 35 s of them with no daemon running)
        missed = not_recorded_s(reader, lo, hi, run_starts(queries.meter_readings(
            reader, lo, hi, kinds=(RUN_START_READING[0],))), queries.recorded_range(reader))
        if counted <= 0:  # the window's spend is not handed over yet: nothing to count by
            basis = (f"none of the window's spend is recorded yet (the store's reaches "
                     f"{clock.local_time(through or hi, date=False)})")
        elif hi < end:
            basis = (f"over the {clock.duration(counted)} of spend the store holds (to "
                     f"{clock.local_time(hi, date=False)})")
        elif lo > start:
            basis = f"over the {clock.duration(counted)} the store holds"
        if counted > 0 and missed >= 1 and (missed >= 60 or missed >= 0.01 * counted):
            basis = ((basis or f"over the {clock.duration(counted)}")
                     + f", {clock.duration(missed)} of them not recorded (no daemon running)")
        out["spend"] = {
            "total": ledger.total,
            "previous_total": recorded_before.total if recorded_before else None,
            "trend_pct": _trend(ledger.total, before.total if before else None),
            "by_day": dict(sorted(ledger.by_day.items())),
            "by_month": dict(sorted(ledger.by_month.items())),
            "per_day": ledger.total / (counted / 86400) if counted > 0 else None,
            "per_day_over_s": counted,
            "per_day_basis": basis,
        }
        out["waste"] = {
            "idle": ledger.idle, "wasted": ledger.wasted,
            "wasted_share": ledger.wasted / ledger.total if ledger.total > 0 else None,
            "previous_wasted": recorded_before.wasted if recorded_before else None,
            "trend_pct": _trend(ledger.wasted, before.wasted if before else None)}
        out["storage"] = {"cost": ledger.storage,
                          "previous_cost": recorded_before.storage if recorded_before else None}
        out["by"] = {}
        for key in by:
            now_split = _split(ledger, facts, key, kinds)
            before_split = _split(before, previous[1], key, kinds) if previous and before else {}
            out["by"][key] = [{"name": name, "cost": cost,
                               "previous": before_split.get(name),
                               "trend_pct": _trend(cost, before_split.get(name))}
                              for name, cost in sorted(now_split.items(), key=lambda i: -i[1])]
        readings = queries.meter_readings(reader, start - span, end)
        between = cost_between or recorded_cost_between(reader, jobs)
        units_now = unit_costs(readings, start, end, between)
        units_before = unit_costs(readings, start - span, start, between) if before else []
        before_of = {(u["target"], u["metric"]): u.get("unit_cost") for u in units_before}
        out["unit_costs"] = [dict(u, previous_unit_cost=before_of.get((u["target"], u["metric"])),
                                  trend_pct=_trend(u.get("unit_cost"),
                                                   before_of.get((u["target"], u["metric"]))))
                             for u in units_now]
    out["energy"] = dict(energy) if energy else None
    out["recommendations"] = _outcomes(reader, start, end, recommendations)
    return out


def _outcomes(reader: StoreReader, start: float, end: float,
              recommendations: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each recommendation of the range as acted on (a real action ran, its outcome), snoozed
    (until when), new (neither, first raised in the NEW_RECOMMENDATION_S before the range's
    end) or ignored (neither, and older), with its monthly savings."""
    snoozed, actions = queries.snoozes_and_actions(reader, start, end)
    out: dict[str, list[dict[str, Any]]] = {"acted": [], "snoozed": [], "ignored": [],
                                            "new": []}
    for rec in recommendations:
        rec_id = str(rec.get("id"))
        entry = {"id": rec_id, "rule": rec.get("rule"), "target": rec.get("target"),
                 "summary": rec.get("summary"),
                 "savings_per_month": rec.get("savings_per_month"),
                 "first_seen": rec.get("first_seen"), "last_seen": rec.get("last_seen")}
        real = [a for a in actions.get(rec_id, []) if not a.get("dry_run")]
        if real:
            out["acted"].append(dict(entry, outcome=real[-1].get("outcome"),
                                     who=real[-1].get("who"), at=real[-1].get("at")))
        elif rec_id in snoozed:
            out["snoozed"].append(dict(entry, snoozed_until=snoozed[rec_id]))
        elif (isinstance(entry["first_seen"], int | float)
              and entry["first_seen"] > end - NEW_RECOMMENDATION_S):
            out["new"].append(entry)
        else:
            out["ignored"].append(entry)
    return out
