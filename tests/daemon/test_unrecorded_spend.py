"""A daemon killed between two rounds (SIGKILL, a host that lost power) leaves the ticks it
recorded after its last hand-over of hour spend in no spend row (probe 115's F4): the next
start read only the rows, so the day's spend went backwards on every crash ($0.806 shown, $0.74
read back) and a report said two totals for one range (its window $1.22, its review $1.00).
Stores written as the daemon writes them: each run's ticks through the real writer, charged by
its own CostLedger, handed over as hour spend up to a tick of its choosing, then "killed"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon import clock
from daemon import config as config_module
from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.ledger import CostLedger
from daemon.analysis.meters import StorageCost
from daemon.analysis.recorded_spend import recorded_ledger
from daemon.runtime import resume
from daemon.runtime.price_host import build_analyzer
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store import facts, queries
from daemon.store.reader import StoreReader
from daemon.store.writer import Store
from tests.livedaemon import ROOT

PRICE = HostPrice(32.7726, 2, "on-demand", "p4d.24xlarge", "aws", "us-east-1", "test", None)
TRAIN = ProcessSample(pid=100, start_time=1_780_000_000.0, ppid=1, user="alice",
                      command="python train.py", gpus=(GpuUse(0, 30 << 30, 90.0),))
GPUS = (GpuSample(0, "GPU-0", "A100", utilization=90.0, memory_used_bytes=30 << 30,
                  memory_total_bytes=40 << 30),
        GpuSample(1, "GPU-1", "A100", utilization=0.0, memory_used_bytes=0,
                  memory_total_bytes=40 << 30))


def killed_run(store: Store, times: list[float], handed: int, tick: int,
               storage: tuple[StorageCost, ...] = ()) -> CostLedger:
    """One run as the daemon records it: its start and price, each tick written and charged,
    the spend handed over (rows and spend_through in one transaction, and the storage walk's
    sizes, as Daemon._record_costs does) after its tick `handed`, then killed: nothing more.
    Returns its ledger (what its /v1/now counted)."""
    resume.record_start(store, times[0] - 0.5)
    resume.record_price(store, PRICE, times[0] - 0.5)
    ledger = CostLedger()
    ledger.set_storage(storage)
    for i, ts in enumerate(times):
        sample = Sample(ts=ts, tick=tick + i + 1, gpus=GPUS, processes=(TRAIN,))
        store.write(sample)
        ledger.add(burn(sample, PRICE))
        if i == handed:
            with store.facts_batched():
                facts.write_spend(store, *ledger.take_unrecorded())
                store.set_meta(queries.SPEND_THROUGH, ledger.last_ts)
            facts.write_meter_readings(store, ts, [
                ("storage", item.path, float(item.bytes), {
                    "price_per_gb_month": item.price_per_gb_month, "files": item.files,
                    "complete": item.complete, "error": item.error}) for item in storage])
    return ledger


def open_store(db: Path) -> Store:
    store = Store(str(db))
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0, "price": PRICE.as_dict()})
    return store


def started(store: Store):
    """What a daemon starting on `store` takes on (resume.spend_before): its analyzer."""
    config = config_module.from_dict({"daemon": {"db": store.path}}, where="test")
    analyzer = build_analyzer(config, PRICE, None)
    resume.spend_before(analyzer, store, config)
    return analyzer


def test_the_ticks_after_the_last_hand_over_are_charged_as_the_ledger_charged_them(tmp_path):
    """The recorded-spend function: the rows hold the ticks up to the hand-over, `unrecorded`
    the ones after it, and the two add up to what the run's own ledger charged."""
    from daemon.analysis.recorded_spend import unrecorded

    db = tmp_path / "mlcost.db"
    t0 = time.time() - 100
    times = [t0 + i * 1.0 for i in range(35)]
    store = open_store(db)
    live = killed_run(store, times, handed=19, tick=0)
    store.close()
    with StoreReader(str(db)) as reader:
        rows = recorded_ledger(reader, t0 - 60, time.time(), None)
        tail = unrecorded(reader, time.time(), None)
    assert rows is not None and tail is not None
    assert rows[0].total == pytest.approx(PRICE.per_hour * 19 / 3600, rel=1e-5)  # (µ$ rows)
    # the 15 ticks after the hand-over, each the second before it (from the one handed over)
    assert tail.ticks == 16 and tail.through == pytest.approx(times[-1], abs=1e-3)
    assert tail.ledger.seconds == pytest.approx(15.0, abs=1e-3)
    assert tail.ledger.total == pytest.approx(PRICE.per_hour * 15 / 3600, rel=1e-4)
    tail.add_to(rows[0])
    assert rows[0].total == pytest.approx(live.total, rel=1e-4)
    assert rows[0].by_process[(TRAIN.pid, TRAIN.start_time)] == pytest.approx(
        live.by_process[(TRAIN.pid, TRAIN.start_time)], rel=1e-4)
    assert rows[0].by_user["alice"] == pytest.approx(live.by_user["alice"], rel=1e-4)


def test_a_crash_loop_loses_none_of_the_days_spend_and_the_report_says_one_figure(tmp_path):
    """Two runs killed between rounds, each start reading the store: the day's spend and the
    budgets go on from what every run's ledger charged, the store's rows hold it after each
    start, and the report's window spend, its review and its by-day say the same."""
    db = tmp_path / "mlcost.db"
    t0 = time.time() - 200
    first = [t0 + i * 1.0 for i in range(35)]
    second = [first[-1] + 20 + i * 1.0 for i in range(25)]
    store = open_store(db)
    run1 = killed_run(store, first, handed=19, tick=0)
    store.close()

    store = open_store(db)  # the second start, on the store the first left
    analyzer = started(store)
    day = clock.utc_day(first[-1])
    assert analyzer.spend_today(first[-1]) == pytest.approx(run1.by_day[day], rel=1e-4)
    with StoreReader(str(db)) as reader:  # written to the store: the next start reads it
        assert queries.spend_through(reader) == pytest.approx(first[-1], abs=1e-3)
        rows = recorded_ledger(reader, t0 - 60, time.time(), None)
        assert rows is not None and rows[0].total == pytest.approx(run1.total, rel=1e-4)
    run2 = killed_run(store, second, handed=9, tick=len(first))
    store.close()

    store = open_store(db)  # the third start
    analyzer = started(store)
    both = run1.by_day[day] + run2.by_day.get(day, 0.0)
    assert analyzer.spend_today(first[-1]) == pytest.approx(both, rel=1e-4)
    store.close()
    again = open_store(db)  # a start after one that charged them charges them once
    assert started(again).spend_today(first[-1]) == pytest.approx(both, rel=1e-4)
    again.close()

    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--json",
                          "--since", "10m"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    total = run1.total + run2.total
    assert document["spend"]["total"] == pytest.approx(total, rel=1e-3)
    assert document["review"]["spend"]["total"] == pytest.approx(total, rel=1e-3)
    assert sum(document["review"]["spend"]["by_day"].values()) == pytest.approx(total, rel=1e-3)


def test_a_run_killed_before_its_first_hand_over_is_charged_at_the_next_start(tmp_path):
    """A run SIGKILLed before its first round handed any spend over (the first comes 2 s after
    a start): its ticks are in the store and no row; the next start charges them all."""
    db = tmp_path / "mlcost.db"
    t0 = time.time() - 60
    times = [t0 + i * 0.5 for i in range(10)]
    store = open_store(db)
    live = killed_run(store, times, handed=len(times), tick=0)  # (never handed over)
    store.close()
    store = open_store(db)
    analyzer = started(store)
    store.close()
    assert live.total > 0
    assert analyzer.spend_today(times[-1]) == pytest.approx(
        live.by_day[clock.utc_day(times[-1])], rel=1e-4)


def test_the_storage_the_ledger_charged_is_charged_after_the_hand_over_too(tmp_path):
    """[cost].storage_paths: the ledger charges the last walk's sizes each tick; the ticks
    after the hand-over are charged for them as well, at the walk's price."""
    from daemon.analysis.recorded_spend import unrecorded

    db = tmp_path / "mlcost.db"
    t0 = time.time() - 100
    times = [t0 + i * 1.0 for i in range(30)]
    checkpoints = StorageCost("/data/ckpt", 500 << 30, 12, True, 0.08, 500 * 0.08)
    store = open_store(db)
    store.write(Sample(ts=t0 - 600, tick=1, gpus=GPUS, processes=(TRAIN,)))  # an older run's
    facts.write_meter_readings(store, t0 - 600, [("storage", "/old", float(1 << 40), {
        "price_per_gb_month": 0.08, "files": 1, "complete": True, "error": None})])
    live = killed_run(store, times, handed=9, tick=1, storage=(checkpoints,))
    store.close()
    with StoreReader(str(db)) as reader:
        tail = unrecorded(reader, time.time(), None)
        rows = recorded_ledger(reader, t0 - 60, time.time(), None)
    assert tail is not None and rows is not None
    assert tail.ledger.storage == pytest.approx(checkpoints.per_hour * 20 / 3600, rel=1e-4)
    tail.add_to(rows[0])
    assert rows[0].storage == pytest.approx(live.storage, rel=1e-4)
    assert rows[0].total == pytest.approx(live.total, rel=1e-4)
