"""The spend a store recorded, as a cost ledger: what the daemon's ledger charged over a range,
read back from its hour spend rows (daemon.store.facts.write_spend). The review reads a period
with it; a daemon that starts on a store reads the current day and month with it, so its
budgets count what the runs before it spent (daemon.analysis.budgets).

And the spend of the ticks after the store's last hand-over (`unrecorded`): a live store read
between two rounds, or a run killed before its next round, whose next start writes them as the
hour spend that run would have written. One replay for both, so a report, the day's spend and
the budgets say the same dollars."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.analysis.busy import IdleThresholds
from daemon.analysis.cost import HostPrice, ProcessKey, burn, gpu_wasted_per_hour
from daemon.analysis.ledger import RUN_START_READING, CostLedger, recording_gap_s, run_starts
from daemon.analysis.meters import StorageCost, UnitCostMeter
from daemon.analysis.price_history import PRICE_READING, PriceHistory
from daemon.sources.sample import GPU_OK
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.store.schema import SPEND_METRICS, SPEND_PROCESS, SPEND_UNACCOUNTED

SPEND_NAMES = {code: name for name, code in SPEND_METRICS.items()}


def recorded_ledger(reader: StoreReader, start: float, end: float,
                    jobs: Mapping[str, str] | None) -> tuple[CostLedger, dict[Any, Any]] | None:
    """A CostLedger filled with the spend recorded over [start, end] (summed per UTC day;
    hours cut by the range placed by their ticks), and the process facts by (pid,
    start_time); None when the store recorded no spend there (a store written before hour
    spend was kept)."""
    rows = queries.spend_by_day(reader, start, end, gpu_waste=_gpu_waste(_thresholds(reader)))
    if not rows:
        return None
    facts = queries.process_facts(reader, {key for _, key, metric, _, _ in rows
                                           if metric == SPEND_PROCESS})
    # a time in the range -> (host dollars by name, process dollars, [seconds charged, seconds
    # of recording gaps no tick charged])
    parts: dict[float, tuple[dict[str, float], dict[Any, list[Any]], list[float]]] = {}
    for at, key, metric, seconds, dollars in rows:
        host, procs, charged = parts.setdefault(at, ({}, {}, [0.0, 0.0]))
        if metric == SPEND_PROCESS:
            fact = facts.get(key)
            if fact is not None:  # (its seconds last: the seconds it was charged there)
                procs[(fact["pid"], fact["start_time"])] = [
                    dollars, fact["user"], fact["command"], fact["owner"], seconds]
        elif metric in SPEND_NAMES:
            host[SPEND_NAMES[metric]] = dollars
            charged[0] = max(charged[0], seconds)
        elif metric == SPEND_UNACCOUNTED and key == 0:
            charged[1] += seconds
    ledger = CostLedger(jobs)
    for at, (host, procs, charged) in sorted(parts.items()):
        ledger.add_recorded(at, charged[0], host, {k: tuple(v[:4]) for k, v in procs.items()},
                            unaccounted=charged[1],
                            process_seconds={k: v[4] for k, v in procs.items()})
    by_key = {(f["pid"], f["start_time"]): f for f in facts.values()}
    return ledger, by_key


# Every tick after the hand-over is read where there are up to this many (a crashed run leaves
# one [cost].evaluate_every of them, 30 at the default 1 s and 30 s); more are read evenly
# spread, each charging the time since the one before it (capped as the ledger caps a gap).
UNRECORDED_MAX_TICKS = 3600


@dataclass
class Unrecorded:
    """The spend of a store's ticks after its last hand-over (queries.spend_through): charged
    as the daemon's ledger charged them, not yet in its hour spend rows. `ledger` holds them in
    its unrecorded hour rows (CostLedger.take_unrecorded: what the daemon hands the store);
    `through` is its last tick, `ticks` how many were read (the last handed over with them);
    `processes` each process's (user, command, owner)."""

    ledger: CostLedger
    through: float
    ticks: int
    processes: dict[ProcessKey, tuple[str, str, Mapping[str, str]]]

    def add_to(self, target: CostLedger, since: float | None = None) -> float:
        """Charge these hour rows (those of hours from `since` on, an hour's start; all where
        None) to `target`, as recorded spend; returns the seconds added."""
        with self.ledger.lock:
            hosts = dict(self.ledger.unrecorded_host)
            procs = dict(self.ledger.unrecorded_processes)
        added = 0.0
        for hour, (seconds, total, idle, wasted, storage, unaccounted) in sorted(hosts.items()):
            if since is not None and hour + 3600 <= since:
                continue
            charged = {key: (dollars, *self.processes.get(key, ("", "", {})))
                       for (at, key), (_, dollars) in procs.items() if at == hour}
            target.add_recorded(float(hour), seconds, {
                "total": total, "idle": idle, "wasted": wasted, "storage": storage}, charged,
                unaccounted=unaccounted,
                process_seconds={key: spent for (at, key), (spent, _) in procs.items()
                                 if at == hour})
            added += seconds
        return added


def unrecorded(reader: StoreReader, end: float, jobs: Mapping[str, str] | None, *,
               start: float | None = None, prices: PriceHistory | None = None,
               thresholds: IdleThresholds | None = None,
               interval: float | None = None) -> Unrecorded | None:
    """The spend of the store's ticks up to `end` after its last hand-over (from `start` on,
    where given), as the daemon's ledger charges them: each tick the time since the tick before
    it (from the last tick the hand-over held), a gap capped, nothing across a daemon start.
    A daemon SIGKILLed (or whose host lost power) leaves up to one [cost].evaluate_every of
    them: the next start writes them to its store (daemon.runtime.resume.spend_before), a
    report of a store nobody records into now adds them. Prices, [idle] threshold and interval
    as the store recorded them where not given. None where the store holds no tick there, never
    handed any spend over and records no daemon start (a store from before hour spend was
    kept), or has no price to charge them with; its `ledger.seconds` is 0 where none of its
    ticks there charged anything (the last handed over only)."""
    through = queries.spend_through(reader)
    if through is not None and through >= end:
        return None
    host = queries.recorded_host(reader)
    if interval is None:
        value = host.get("interval_s")
        interval = float(value) if isinstance(value, int | float) and math.isfinite(
            value) and value > 0 else 1.0  # (a store's file may come from anyone)
    # (every start and price change the store holds: a few rows, each only on a change)
    readings = queries.meter_readings(reader, 0.0, end,
                                      kinds=(RUN_START_READING[0], PRICE_READING))
    starts = run_starts(readings)
    lo = start if start is not None else 0.0
    if through is not None:
        # from the last tick handed over (its interval was): the ones after it are charged
        cut = max(through, lo)
        base = reader.query("SELECT max(ts) AS ts FROM ticks WHERE ts >= ? AND ts <= ?",
                            (round(lo * 1000), round(cut * 1000)))[0]["ts"]
        lo = base / 1000 if isinstance(base, int) else cut
    elif not starts:  # a store from before hour spend was kept: it has none to add to
        return None
    # (else a run SIGKILLed before its first round handed nothing over: every tick is charged)
    count = reader.query("SELECT count(*) AS n FROM ticks WHERE ts >= ? AND ts <= ?",
                         (round(lo * 1000), round(end * 1000)))[0]["n"]
    if not isinstance(count, int) or count < 1:
        return None
    if prices is None:
        prices = PriceHistory.from_readings(readings, HostPrice.from_dict(host.get("price")))
    if thresholds is None:
        pct = host.get("idle_utilization_pct")
        thresholds = IdleThresholds(idle_utilization_pct=float(pct)) if isinstance(
            pct, int | float) and not isinstance(pct, bool) else IdleThresholds()
    samples = reader.samples(lo, end, max_samples=min(count, UNRECORDED_MAX_TICKS))
    ledger = CostLedger(jobs, max_gap_s=recording_gap_s(interval), run_starts=starts)
    ledger.set_storage(_storage_walked(reader, lo, end))
    processes: dict[ProcessKey, tuple[str, str, Mapping[str, str]]] = {}
    for sample in samples:
        price = prices.at(sample.ts)
        if price is None:
            return None
        cost = burn(sample, price, thresholds)
        ledger.add(cost)
        for key, proc in cost.processes.items():
            processes[key] = (proc.user, proc.command, proc.owner)
    return Unrecorded(ledger, samples[-1].ts if samples else lo, len(samples), processes)


def _thresholds(reader: StoreReader) -> IdleThresholds:
    """The [idle] settings the store's daemon charged by (as it recorded them; else the
    defaults)."""
    pct = queries.recorded_host(reader).get("idle_utilization_pct")
    return IdleThresholds(idle_utilization_pct=float(pct)) if isinstance(
        pct, int | float) and not isinstance(pct, bool) and math.isfinite(pct) \
        else IdleThresholds()


def _gpu_waste(thresholds: IdleThresholds) -> queries.GpuWaste:
    """The part of one GPU's price it wasted at a tick, as `burn` charges it
    (`gpu_wasted_per_hour` at the [idle] threshold the store's daemon ran with), for placing an
    hour's recorded waste by the ticks a range cuts it at (queries.spend_by_day)."""
    idle_pct = thresholds.idle_utilization_pct

    def wasted(status: str, utilization: float | None) -> float:
        return gpu_wasted_per_hour(1.0, utilization, status == GPU_OK, idle_pct)

    return wasted


def _storage_walked(reader: StoreReader, since: float, end: float) -> list[StorageCost]:
    """The storage the ledger charged by from `since` on: its last walk before `end`
    ([cost].storage_paths; each round records every path's size at one time)."""
    walked = queries.meter_readings(reader, since, end, kinds=("storage",))
    last = max((ts for found in walked.values() for ts, _, _ in found), default=None)
    items = []
    for (_, path), found in walked.items():
        for ts, size, detail in found:
            price = detail.get("price_per_gb_month")
            if ts != last or not isinstance(price, int | float) or not math.isfinite(price) \
                    or not math.isfinite(size) or size < 0 or price < 0:
                continue  # (an older walk's path; a damaged or hostile row)
            files, error = detail.get("files"), detail.get("error")
            items.append(StorageCost(path, int(size), files if isinstance(files, int) else 0,
                                     detail.get("complete") is not False, float(price),
                                     size / 2**30 * price,
                                     error if isinstance(error, str) else None))
    return items


# A target's dollars (a job label, an owner job, a process id 'pid:start_time', or
# EVERY_PROCESS) between two instants, as the daemon's ledger charged them; None where nothing
# there was charged.
CostBetween = Callable[[str, float, float], float | None]
Readings = Mapping[tuple[str, str], Sequence[tuple[float, float, Mapping[str, Any]]]]
# The target of every process the store recorded (`mlcostd profile --latency`: the profiled
# command's tree, whatever their job labels).
EVERY_PROCESS = "(command)"


def recorded_cost_between(reader: StoreReader, jobs: Mapping[str, str] | None, *,
                          prices: PriceHistory | None = None,
                          thresholds: IdleThresholds | None = None,
                          interval: float | None = None) -> CostBetween:
    """A target's dollars between two instants from what the store recorded: its hour spend
    over them (an hour they cut counts by its ticks inside), and the ticks after the store's
    last hand-over charged as the ledger charges them (`unrecorded`)."""
    def between(target: str, since: float, until: float) -> float | None:
        found = recorded_ledger(reader, since, until, jobs)
        ledger = found[0] if found is not None else CostLedger(jobs)
        tail = unrecorded(reader, until, jobs, start=since, prices=prices,
                          thresholds=thresholds, interval=interval)
        if tail is not None:
            tail.add_to(ledger)
        if found is None and tail is None:
            return None
        return (sum(ledger.by_process.values()) if target == EVERY_PROCESS
                else ledger.cost_of(target))
    return between


def unit_meters(readings: Readings) -> dict[str, UnitCostMeter]:
    """A UnitCostMeter per unit-cost counter the store read, by its reading name."""
    meters = {}
    for (kind, name), found in readings.items():
        if kind != "unit" or not found:
            continue
        detail = found[-1][2]
        meters[name] = UnitCostMeter(
            target=str(detail.get("target") or "?"), url=str(detail.get("url") or ""),
            metric=str(detail.get("metric") or ""), unit=str(detail.get("unit") or "units"),
            per=float(detail.get("per") or 1_000_000.0), labels=dict(detail.get("labels") or {}))
    return meters


def unit_costs(readings: Readings, start: float, end: float,
               cost_between: CostBetween) -> list[dict[str, Any]]:
    """The unit cost of each recorded counter over [start, end] (the report's `unit_costs`, its
    spend and its review alike): its target's dollars between the counter's first and last
    reading in the range, over the units counted between them (a counter reset counts again
    from its new value). What /v1/now's meter divides, whatever share of the range the
    readings span: a target that spent only part of the range, or a range longer than the
    readings, gives the same figure (probe 126 F6: a 1-hour range over 75 s of readings read
    1/48 of the unit cost, scaled by the share of the range the readings spanned)."""
    out = []
    for name, meter in unit_meters(readings).items():
        found = [r for r in readings[("unit", name)] if start <= r[0] <= end]
        spend = (cost_between(meter.target, found[0][0], found[-1][0]) if len(found) >= 2
                 else None)
        if spend is None:
            out.append(meter.as_dict())
            continue
        units = sum(b[1] - a[1] if b[1] >= a[1] else b[1]
                    for a, b in zip(found, found[1:], strict=False))
        meter.observe(0.0, 0.0, found[0][0])
        meter.observe(spend, units, found[-1][0])
        out.append(meter.as_dict())
    return out
