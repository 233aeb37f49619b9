"""What a daemon that starts on a store takes on from the runs before it (an upgrade, a reboot,
a crash): the events they left open end with them, and the spend they recorded this month, with
the budget crossings they raised, goes to the analyzer, so that "today" and the budgets count
the UTC day and month, not the time since this start. And what it leaves to the readers of its
range: the price it charges, where that is not the price the store last recorded.

Each runs at start, before the first tick (the price again where NVML counts the GPUs late and
the host is priced again). None stops the daemon: a store that cannot be read now is said in
the log, and the day's spend and the budgets then count from this start.
"""

from __future__ import annotations

import logging

from daemon import clock
from daemon.analysis.analyzer import Analyzer
from daemon.analysis.balance import LOW_UTILIZATION, MID_UTILIZATION
from daemon.analysis.cost import HostPrice
from daemon.analysis.idle import BUDGET_EXCEEDED, GPU_HELD_IDLE, GPU_UNHELD_IDLE, HOST_IDLE
from daemon.analysis.ledger import RUN_START_READING, CostLedger, recording_gap_s, run_starts
from daemon.analysis.price_history import PRICE_NAME, PRICE_READING, charged_as
from daemon.analysis.recorded_spend import recorded_ledger, unrecorded
from daemon.config import Config
from daemon.store import facts, queries
from daemon.store.writer import Store

log = logging.getLogger(__name__)

# Events that last while a condition holds: a run leaves them open when it stops. (A budget
# crossing stands for its period: it stays, and `spend_before` hands it to the budgets.)
LASTING_EVENTS = (GPU_HELD_IDLE, GPU_UNHELD_IDLE, HOST_IDLE, LOW_UTILIZATION, MID_UTILIZATION)


def end_left_open(store: Store, config: Config) -> None:
    """End what the run before this one left open (a GPU idle when it stopped) at its last
    tick: this run sees for itself what holds now."""
    facts.end_events_left_open(store, LASTING_EVENTS, recording_gap_s(config.daemon.interval))


def spend_before(analyzer: Analyzer, store: Store, config: Config,
                 lock_left: bool | None = None) -> None:
    """Hand `analyzer` this month's spend that the store recorded before this start and the
    budget crossings left open (not raised, nor posted, again in their period; ended in the
    store where their period is over). The ticks a run recorded after its last hand-over (it
    was SIGKILLed, or its host lost power, between two rounds) are charged first, as its ledger
    charged them, and written to the store as the hour spend that run would have written: the
    day's spend, the budgets and every report then count them (recorded_spend.unrecorded).
    `lock_left`: whether that run left its lock file (daemon.store.lock.PidLock.found_left); a
    run that removed it stopped cleanly, and its hand-over failed (a full disk: probe 142 M5)."""
    now = clock.now()
    month = clock.utc_month_start(now)
    try:
        reader = Store.reader(store.path, timeout_s=5.0)
        try:
            found = recorded_ledger(reader, month, now, config.cost.jobs)
            raised = queries.open_events(reader, BUDGET_EXCEEDED)
            try:
                tail = unrecorded(reader, now, config.cost.jobs)
            except Exception as exc:  # (what the rows hold still counts)
                log.warning("cannot charge the ticks %s holds after its last hand-over of "
                            "spend (%s); the day's spend and the budgets count without them",
                            store.path, exc)
                tail = None
        finally:
            reader.close()
    except Exception as exc:  # a store that cannot be read now must not stop recording
        log.warning("cannot read this month's recorded spend from %s (%s); the day's spend "
                    "and the budgets count from this start", store.path, exc)
        return
    if tail is not None and tail.ledger.seconds > 0:
        if found is None:
            found = CostLedger(config.cost.jobs), {}
        tail.add_to(found[0], since=month)
        hosts, processes = tail.ledger.take_unrecorded()
        with store.facts_batched():  # one transaction: the rows and how far they reach
            facts.write_spend(store, hosts, processes)
            store.set_meta(queries.SPEND_THROUGH, tail.through)
        why = ("it stopped, but could not write it into the store: a full disk or an I/O "
               "error when it stopped" if lock_left is False else
               "killed, or its host lost power")
        log.warning("the run before this start stopped without handing over its last %s of "
                    "spend (%s): $%.2f, charged now from the %d ticks it recorded after its "
                    "last hand-over", clock.duration(tail.ledger.seconds), why,
                    tail.ledger.total, tail.ticks)
    before = found[0] if found is not None else None
    for event in analyzer.resume(before, raised, now):
        facts.write_event(store, event.as_dict())
    if before is not None and before.total > 0:
        log.info("spend the store recorded before this start: $%.2f today, $%.2f this month "
                 "(UTC); today's spend and the budgets count on from there",
                 before.by_day.get(clock.utc_day(now), 0.0),
                 before.by_month.get(clock.utc_month(now), 0.0))


# At most this many processes taken over: those running at the store's last tick (a host runs
# tens; a hostile store's thousands are cut, not read for minutes at a start).
SEEN_BEFORE_MAX_PROCESSES = 1024
# Per-process SM share in proc_gpu_samples: tenths of a percent (tick_rows.proc_gpu_rows).
_SM_PER_PERCENT = 10


def seen_before(analyzer: Analyzer, store: Store, config: Config, started_at: float) -> int:
    """Hand `analyzer` when this run began and what the runs before it on the store saw of the
    processes still running at its last tick (the same pid and start time: a pid reused by
    another process is another process): when they first read it, whether it already held its
    GPU as that run began (Analyzer.unseen_before), the seconds of its kernels and its last run
    over [idle].longest_period. A periodic job asleep through a restart then reads as one whose
    run was seen, not as one that never worked (rules/idle.py). Returns how many were taken
    over; a store that cannot be read leaves them to be seen again, and says so."""
    from daemon.analysis.analyzer import unseen_before
    from daemon.analysis.rules.window import WORK_RUN_MIN_PCT, ProcessHistory
    from daemon.wire import process_key

    analyzer.run_started_at = started_at
    try:
        reader = Store.reader(store.path, timeout_s=5.0)
        try:
            last = reader.query("SELECT max(ts) AS ts FROM ticks")[0]["ts"]
            if not isinstance(last, int):
                return 0
            # (held a GPU at its last ticks: processes.last_ts of a run that was killed is
            # that of its last write of the table, not of its last tick)
            alive = reader.query(
                "SELECT id, pid, start_ms, first_ts FROM processes WHERE id IN (SELECT "
                "DISTINCT proc FROM proc_gpu_samples WHERE ts >= ?) ORDER BY id DESC LIMIT ?",
                (last - round(recording_gap_s(config.daemon.interval) * 1000),
                 SEEN_BEFORE_MAX_PROCESSES))
            rows = [r for r in alive if all(isinstance(r[k], int) for k in
                                            ("id", "pid", "start_ms", "first_ts"))]
            if not rows:
                return 0
            since = last - round(config.idle.longest_period * 1000)
            marks = ", ".join("?" for _ in rows)
            ran = {r["proc"]: r for r in reader.query(
                "SELECT proc, sum(sm) AS sm, count(DISTINCT gpu) AS gpus, "
                f"max(CASE WHEN sm >= ? THEN ts END) AS work_ts FROM proc_gpu_samples "
                f"WHERE ts >= ? AND ts <= ? AND proc IN ({marks}) GROUP BY proc",
                (round(WORK_RUN_MIN_PCT * _SM_PER_PERCENT), since, last,
                 *(r["id"] for r in rows)))}
            starts = run_starts(queries.meter_readings(reader, 0.0, last / 1000,
                                                       kinds=(RUN_START_READING[0],)))
        finally:
            reader.close()
    except Exception as exc:  # a store that cannot be read now must not stop recording
        log.warning("cannot read what %s recorded of the running processes before this start "
                    "(%s); each is watched from now", store.path, exc)
        return 0
    # A gap in the recording (mlcostd stopped for longer than a tick or two): a run in it is
    # unseen, and the processes' idle is counted from this start (ProcessHistory.resumed_at)
    resumed = (started_at if started_at - last / 1000 > recording_gap_s(config.daemon.interval)
               else None)
    history = {}
    for r in rows:
        first_ts, start_time = r["first_ts"] / 1000, r["start_ms"] / 1000
        if not start_time <= first_ts <= last / 1000:
            continue  # (a store's rows may come from anyone: not a reading of it)
        began = [t for t in starts if t <= first_ts]
        got = ran.get(r["id"]) or {}
        sm, gpus, work_ts = got.get("sm"), got.get("gpus"), got.get("work_ts")
        if isinstance(work_ts, int) and not r["first_ts"] <= work_ts <= last:
            work_ts = None
        # (each row stands for a tick's interval; a process on two GPUs counts its mean)
        kernel_s = (float(sm) / _SM_PER_PERCENT / 100 * config.daemon.interval / gpus
                    if isinstance(sm, int | float) and isinstance(gpus, int) and gpus > 0
                    and sm > 0 else 0.0)
        history[process_key(r["pid"], start_time)] = ProcessHistory(
            first_ts, unseen_before(start_time, first_ts, began[-1]) if began else 0.0,
            kernel_s, work_ts / 1000 if isinstance(work_ts, int) else None, resumed)
    analyzer.seen_before(history)
    return len(history)


def record_price(store: Store, price: HostPrice, ts: float) -> bool:
    """Record the price this run charges from `ts` on (daemon.analysis.price_history), unless
    the store's last recorded price charges the same: a report or replay of a past range then
    prices each tick as it was charged. True when a reading was written."""
    charged = price.as_dict()
    last = facts.last_meter_reading(store, PRICE_READING, PRICE_NAME)
    if last is not None and charged_as(last) == charged_as(charged):
        return False
    facts.write_meter_readings(store, ts, [(PRICE_READING, PRICE_NAME, price.per_hour, charged)])
    return True


def record_start(store: Store, ts: float) -> None:
    """Record that a run starts at `ts` (daemon.analysis.ledger.RUN_START_READING): its ledger
    charges nothing before its first tick, and a report of a range across it must not either."""
    kind, name = RUN_START_READING
    facts.write_meter_readings(store, ts, [(kind, name, ts, {})])
