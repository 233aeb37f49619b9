"""`mlcostd report` over a store whose raw ticks retention (or the size cap) removed: the
money of the part pruned comes from the rollups, each part once, and the review's spend is
the report's (probe 149 H1: with raw_retention 3m, `--since 1h` said $1.34, its review $0.87,
for a host that spent $2.92)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from daemon.commands import report
from daemon.sources.sample import GpuSample, Sample
from daemon.store import facts, queries
from daemon.store.writer import Store
from tests.daemon.test_report_review import TRAIN
from tests.daemon.test_store import drain

RATE = 7.2  # $/h: $0.002 a second


def pruned_store(db: Path, start: int = -1200, ticks: int = 2400,
                 **limits: float) -> tuple[float, float]:
    """A daemon that ran from `start` seconds after an hour (20 minutes before it) for `ticks`
    seconds, a tick a second at RATE, its GPU held by one process throughout; its ledger's
    hour spend as it charged it (a run's first tick charges nothing; each other the second
    before it), handed over to the last tick. Raw ticks kept 8 minutes (or as `limits` say), so
    the last hour's first minutes, and the hour before, are in the rollups only. Returns (first
    tick, last tick)."""
    hour = int(time.time() // 3600 * 3600) - 3 * 3600  # a past hour: the store stopped
    first = hour + start + 1
    gpus = (GpuSample(0, "GPU-0", "A100", utilization=90.0, power_watts=300.0,
                      memory_used_bytes=30 << 30, memory_total_bytes=40 << 30),)
    charged: dict[int, float] = {}
    for ts in range(first + 1, first + ticks):
        charged[(ts - 1) // 3600 * 3600] = charged.get((ts - 1) // 3600 * 3600, 0.0) + 1.0
    with Store(db, **{"raw_retention_s": 480, **limits}) as store:  # type: ignore[arg-type]
        for i in range(ticks):
            assert store.write(Sample(ts=first + i, tick=i + 1, gpus=gpus, processes=(TRAIN,)))
            if i % 300 == 299:
                drain(store)  # (the daemon's housekeeping, between its ticks)
        key = (TRAIN.pid, TRAIN.start_time)
        facts.write_spend(store, {h: [s, RATE / 3600 * s, 0.0, 0.0, 0.0]
                                  for h, s in charged.items()},
                          {(h, key): [s, RATE / 3600 * s] for h, s in charged.items()})
        store.set_meta(queries.SPEND_THROUGH, first + ticks - 1)
        store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                                "price": {"per_hour": RATE, "gpu_count": 1, "source": "test"}})
        drain(store)
    return first, first + ticks - 1


@pytest.fixture(scope="module")
def pruned(tmp_path_factory) -> tuple[Path, float, float]:
    db = tmp_path_factory.mktemp("pruned") / "mlcost.db"
    first, last = pruned_store(db)
    with Store.reader(db) as reader:  # the raw ticks left: the last 8 to 9 minutes
        kept = reader.query("SELECT min(ts) AS ts FROM ticks")[0]["ts"] / 1000
    assert last - 9 * 60 <= kept <= last - 7 * 60
    return db, first, last


@pytest.fixture(scope="module")
def young(tmp_path_factory) -> tuple[Path, float, float]:
    """A run that started 10 minutes into the hour, 20 minutes before the window's end: its
    hour's spend row covers those 20 minutes, not the hour (probe 149's host C)."""
    db = tmp_path_factory.mktemp("young") / "mlcost.db"
    first, last = pruned_store(db, start=600, ticks=1200)
    return db, first, last


def spent_in(first: float, last: float, since: float) -> float:
    """What the run charged in the window of `since` seconds to its last tick: each tick
    inside the second before it, the run's first nothing."""
    return RATE / 3600 * min(since, last - first)


@pytest.mark.parametrize("since", [180, 300, 600, 900, 1200, 1800, 2400, 3600, 7200, 86400])
@pytest.mark.parametrize("store", ["pruned", "young"])
def test_a_range_across_the_pruned_ticks_counts_what_the_rollups_hold_once(store, since,
                                                                           request):
    db, first, last = request.getfixturevalue(store)
    with Store.reader(db) as reader:
        document = report.build(reader, since, until=last)
    spent = spent_in(first, last, since)
    assert document["spend"]["total"] == pytest.approx(spent, abs=0.01), document["window"]
    assert document["review"]["spend"]["total"] == pytest.approx(
        document["spend"]["total"], abs=0.005)
    by_job = {row["name"]: row["cost"] for row in document["review"]["by"]["job"]}
    assert by_job == {"train.py": pytest.approx(spent, abs=0.01)}


def test_a_window_before_the_ticks_kept_reads_the_rollups(young):
    """A 10-minute window whose first minutes retention removed is read from the rollups (the
    spend row of the hour it is in began before the first raw tick left: the store read as if
    nothing had been pruned, and the window's spend was its raw ticks')."""
    db, first, last = young
    with Store.reader(db) as reader:
        assert queries.first_recorded(reader) == first - first % 60
        document = report.build(reader, 600, until=last)
    assert document["window"]["source"] == "rollups"
    assert document["spend"]["total"] == pytest.approx(spent_in(first, last, 600), abs=0.005)


def test_a_store_the_size_cap_pruned_counts_what_the_rollups_hold(tmp_path):
    """The size cap prunes the oldest raw ticks (mid-minute, by batches) with the default
    retention, keeping the rollups and the hour spend: the spend of a range across them is
    the money spent in it."""
    db = tmp_path / "mlcost.db"
    first, last = pruned_store(db, raw_retention_s=6 * 3600, max_bytes=300_000)
    with Store.reader(db) as reader:
        kept = reader.query("SELECT min(ts) AS ts FROM ticks")[0]["ts"] / 1000
        assert first + 1200 < kept < last - 60  # (into the second hour; its spend rows kept)
        assert len(reader.query("SELECT 1 FROM rollups WHERE kind = 2 AND key = 0")) == 8
        for since in (300, 900, 1200, 1800, 3600):
            document = report.build(reader, since, until=last)
            spent = spent_in(first, last, since)
            assert document["spend"]["total"] == pytest.approx(spent, abs=0.01), since
            assert document["review"]["spend"]["total"] == pytest.approx(spent, abs=0.01), since


@pytest.mark.parametrize("before", [5, 30, 90])
def test_a_window_from_just_before_the_first_tick_kept_counts_the_seconds_before_it(pruned,
                                                                                   before):
    """A window that starts a few seconds before the first raw tick left: its spend is not
    only its raw ticks' (what the review says too)."""
    db, first, last = pruned
    with Store.reader(db) as reader:
        kept = reader.query("SELECT min(ts) AS ts FROM ticks")[0]["ts"] / 1000
        document = report.build(reader, last - kept + before, until=last)
    spent = spent_in(first, last, last - kept + before)
    assert document["spend"]["total"] == pytest.approx(spent, abs=0.005)
    assert document["review"]["spend"]["total"] == pytest.approx(spent, abs=0.005)


def test_what_the_minutes_left_do_not_hold_was_charged_before_them(pruned, tmp_path):
    """Minute retention removed the run's first 10 minutes' rollups too (its cut moves a
    batch at a time, mid-hour): the hour's row is placed by the minutes left for what they
    hold, the rest before them. (All of it in the minutes left, a window from the first of
    them counted 20 minutes for 10.)"""
    import shutil
    import sqlite3

    db, first, last = pruned
    copy = tmp_path / "mlcost.db"
    shutil.copy(db, copy)
    cut = (first - 1 + 600) * 1000  # 10 minutes into the run
    conn = sqlite3.connect(copy)
    with conn:
        conn.execute("DELETE FROM rollups WHERE res = 60 AND bucket < ?", (cut,))
    conn.close()
    with Store.reader(copy) as reader:
        for since in (1500, 1800, 2400, 3600):
            document = report.build(reader, since, until=last)
            total = document["spend"]["total"]
            assert document["review"]["spend"]["total"] == pytest.approx(total, abs=0.005)
            if since <= 1800:  # from the minutes left: what was spent
                assert total == pytest.approx(spent_in(first, last, since), abs=0.01), since
            else:  # (where in the 50 minutes before them is gone: by the clock, never more)
                assert spent_in(first, last, 1800) < total < spent_in(first, last, since)
