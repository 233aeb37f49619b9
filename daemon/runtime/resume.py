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
from daemon.analysis.balance import LOW_UTILIZATION
from daemon.analysis.cost import HostPrice
from daemon.analysis.idle import BUDGET_EXCEEDED, GPU_HELD_IDLE, GPU_UNHELD_IDLE, HOST_IDLE
from daemon.analysis.ledger import RUN_START_READING, CostLedger, recording_gap_s
from daemon.analysis.price_history import PRICE_NAME, PRICE_READING, charged_as
from daemon.analysis.recorded_spend import recorded_ledger, unrecorded
from daemon.config import Config
from daemon.store import facts, queries
from daemon.store.writer import Store

log = logging.getLogger(__name__)

# Events that last while a condition holds: a run leaves them open when it stops. (A budget
# crossing stands for its period: it stays, and `spend_before` hands it to the budgets.)
LASTING_EVENTS = (GPU_HELD_IDLE, GPU_UNHELD_IDLE, HOST_IDLE, LOW_UTILIZATION)


def end_left_open(store: Store, config: Config) -> None:
    """End what the run before this one left open (a GPU idle when it stopped) at its last
    tick: this run sees for itself what holds now."""
    facts.end_events_left_open(store, LASTING_EVENTS, recording_gap_s(config.daemon.interval))


def spend_before(analyzer: Analyzer, store: Store, config: Config) -> None:
    """Hand `analyzer` this month's spend that the store recorded before this start and the
    budget crossings left open (not raised, nor posted, again in their period; ended in the
    store where their period is over). The ticks a run recorded after its last hand-over (it
    was SIGKILLed, or its host lost power, between two rounds) are charged first, as its ledger
    charged them, and written to the store as the hour spend that run would have written: the
    day's spend, the budgets and every report then count them (recorded_spend.unrecorded)."""
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
        log.warning("the run before this start stopped without handing over its last %s of "
                    "spend (killed, or its host lost power): $%.2f, charged now from the %d "
                    "ticks it recorded after its last hand-over", clock.duration(
                        tail.ledger.seconds), tail.ledger.total, tail.ticks)
    before = found[0] if found is not None else None
    for event in analyzer.resume(before, raised, now):
        facts.write_event(store, event.as_dict())
    if before is not None and before.total > 0:
        log.info("spend the store recorded before this start: $%.2f today, $%.2f this month "
                 "(UTC); today's spend and the budgets count on from there",
                 before.by_day.get(clock.utc_day(now), 0.0),
                 before.by_month.get(clock.utc_month(now), 0.0))


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
