"""[store].max_size: the size cap removes the least needed data first and the money record
last (probe 149 H3: it deleted the hour spend, every round, while stack samples and events
stayed, so today's spend and the budgets restarted from ~0 after a restart), and a store that
cannot get under it says so in /v1/health and, once, in the log."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from daemon import clock
from daemon.analysis.recorded_spend import recorded_ledger
from daemon.api.routes import health_problems
from daemon.store import facts
from daemon.store.schema import HOUR, KIND_SPEND, MICRODOLLARS, SPEND_METRICS
from daemon.store.writer import Store
from tests.daemon.test_store import T0, drain, fill, make_sample, rows

CAP = 1 << 20  # the smallest [store].max_size the config takes
N_PROCESSES = 16


def _hours_today(last_ts: float) -> list[int]:
    """The UTC hour starts (seconds) of the day of `last_ts` up to its hour."""
    day_start = last_ts - last_ts % 86400
    return list(range(int(day_start), int(last_ts) + 1, HOUR))


def _write_today_spend(store: Store, last_ts: float) -> dict[int, float]:
    """One hour spend round for each hour of the day so far, at $12.5 an hour: what the
    daemon's ledger hands over. Returns hour -> dollars."""
    spend = {hour: 12.5 for hour in _hours_today(last_ts)}
    facts.write_spend(store, {hour: [3600.0, dollars, 1.0, 2.0, 0.0]
                              for hour, dollars in spend.items()}, {})
    return spend


def _write_stacks(store: Store, start: float, ticks: int) -> None:
    """A stack sample per process per tick, each stack distinct (what the sampler writes on
    a busy host; the cap never removed them)."""
    for tick in range(ticks):
        ts = start + tick
        facts.write_stacks(store, [facts.StackRow(
            ts=ts, pid=100 + j, start_time=T0 - 1000 + 100 + j, thread_id=1,
            stack_hash=f"h{tick}-{j}", frames=(("step", f"train_{j}.py", tick),),
            phase="compute", gpu_util=50.0, reason="rule") for j in range(N_PROCESSES)])


def _spend_total(path: Path) -> float:
    return rows(path, "SELECT coalesce(sum(sum), 0) FROM rollups WHERE res = ? AND kind = ? "
                "AND key = 0 AND metric = ?", (HOUR, KIND_SPEND, SPEND_METRICS["total"])
                )[0][0] / MICRODOLLARS


def test_under_a_tiny_cap_today_s_hour_spend_survives_and_a_restart_reads_it(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, max_bytes=CAP) as store:
        last = fill(store, 20 * 60, n_gpus=8, n_processes=N_PROCESSES)
        spend = _write_today_spend(store, last)
        _write_stacks(store, T0, 20 * 60)
        assert store.health.bytes_on_disk > 2 * CAP
        drain(store)
        assert _spend_total(path) == pytest.approx(sum(spend.values()))  # the money stays
        assert os.path.getsize(path) <= CAP  # under the cap: what goes first went
        assert store.health.problem is None
        assert store.health.rows_pruned > 0
    expected = sum(spend.values())
    assert _spend_total(path) == pytest.approx(expected)
    # Stack samples went (oldest first), the unrolled minute's raw ticks stayed.
    assert rows(path, "SELECT count(*) FROM stack_samples")[0][0] < 20 * 60 * N_PROCESSES

    # A restart under the same cap: what resume hands today's spend and the budgets.
    with Store(path, max_bytes=CAP) as store:
        drain(store)
        assert store.health.problem is None
        reader = Store.reader(path)
        # (to the day's end: each hour counts whole. A range that cuts the hour of the last
        # tick places it by that hour's raw ticks, by the clock where the cap removed some:
        # queries.spend_by_day, read side, not the cap's)
        try:
            found = recorded_ledger(reader, clock.utc_month_start(last),
                                    last - last % 86400 + 86400, None)
        finally:
            reader.close()
    assert found is not None
    assert found[0].by_day[clock.utc_day(last)] == pytest.approx(expected)


def test_the_hour_spend_goes_last_oldest_first_and_never_this_month_s(tmp_path: Path) -> None:
    """Spend older than the 60 days kept goes once everything else is gone; this month's
    and the last 60 days' stay even where that leaves the store over the cap."""
    path = tmp_path / "s.db"
    old_hour = int(T0 - 90 * 86400) // HOUR * HOUR
    with Store(path, max_bytes=CAP) as store:
        last = fill(store, 5 * 60, n_gpus=8, n_processes=N_PROCESSES)
        facts.write_spend(store, {old_hour: [3600.0, 7.0, 0.0, 0.0, 0.0]}, {})
        spend = _write_today_spend(store, last)
        _write_stacks(store, T0, 5 * 60)
        # open events (a budget crossing stands for its period) the cap may not remove
        for i in range(1500):
            facts.write_event(store, {"kind": "budget_exceeded", "target": f"user:{i}",
                                      "started_at": T0 + i / 10, "ended_at": None,
                                      "cost_so_far": 1.0, "detail": {"note": "x" * 600}})
        drain(store)
        assert os.path.getsize(path) > CAP  # what is left may not go
    assert rows(path, "SELECT count(*) FROM rollups WHERE kind = ? AND bucket = ?",
                (KIND_SPEND, old_hour * 1000))[0][0] == 0
    assert _spend_total(path) == pytest.approx(sum(spend.values()))
    assert rows(path, "SELECT count(*) FROM events")[0][0] == 1500


def test_a_store_that_cannot_get_under_its_cap_says_so_in_health_and_once_in_the_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.db"
    rng = random.Random(5)
    caplog.set_level(logging.INFO, logger="daemon.store")
    with Store(path, max_bytes=CAP) as store:
        last = fill(store, 3 * 60, n_gpus=2, n_processes=4)
        _write_today_spend(store, last)
        for i in range(2000):  # ~1.3 MB of events still open
            facts.write_event(store, {"kind": "budget_exceeded", "target": f"user:{i}",
                                      "started_at": T0 + i / 10, "ended_at": None,
                                      "cost_so_far": 1.0, "detail": {"note": "x" * 600}})
        drain(store)
        health = store.health
        assert health.problem is not None
        problems = health_problems(SimpleNamespace(last_sample=None), health.as_dict())
        assert problems == [health.problem]
        text = health.problem
        assert str(path) in text and "over its [store].max_size 1.00 MiB" in text
        assert "events" in text  # what holds the space
        assert "hour spend since" in text and "kept whatever the size" in text
        # More ticks and rounds, still stuck: said once.
        for tick in range(3 * 60 + 1, 3 * 60 + 150):
            assert store.write(make_sample(tick, T0 + tick - 1, rng, n_gpus=2, n_processes=4))
            store.maintain(0.5)
        assert store.health.problem is not None
        said = [r for r in caplog.records if "over its [store].max_size" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.ERROR
        # A larger cap (as after a restart with it): the problem goes, and the log says so.
        store.max_bytes = 64 << 20
        store.maintain(0.5)
        assert store.health.problem is None
        assert any("under its [store].max_size again" in r.getMessage()
                   for r in caplog.records)
