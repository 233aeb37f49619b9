"""A daemon that starts again on the store of a run before it (an upgrade, a reboot, a crash):
what that run left open ends with it, and the budgets count the day and month, not the time
since the start. Two real runs of `mlcostd run --simulate single-gpu` (its one GPU unheld and
idle) on one database; a real webhook receiver on a local port."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys

import aiohttp
import livedaemon
import pytest
from livedaemon import poll
from prometheus_client.parser import text_string_to_metric_families
from webhook_receiver import receiving

from daemon import clock
from daemon.wire import Now

TIMEOUT_S = 60.0
SECOND_PRICE = 50.0  # $/h; the first run charges the catalog's g5.xlarge, about $1
IDLE = {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"}  # the least


@pytest.fixture
def hook():
    with receiving() as found:
        yield found


def rows(db, sql, params=()):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def events(db, kind):
    """(started_at, ended_at, detail) of each event of `kind`, in seconds."""
    return [(s / 1000, None if e is None else e / 1000, json.loads(d)) for s, e, d in rows(
        db, "SELECT started_at, ended_at, detail FROM events WHERE kind = ? ORDER BY id",
        (kind,))]


def metric_samples(daemon, name):
    """The samples of one series of the daemon's /metrics, over its unix socket."""
    async def get() -> str:
        connector = aiohttp.UnixConnector(path=str(daemon.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get("http://mlcostd/metrics") as response:
                return await response.text()

    return [s for f in text_string_to_metric_families(asyncio.run(get())) for s in f.samples
            if s.name == name]


def recorded_host_spend(db, since):
    """The host's dollars recorded in the hour spend rows from the hour of `since` on."""
    (micro,) = rows(db, "SELECT coalesce(sum(sum), 0) FROM rollups WHERE kind = 2 AND key = 0 "
                        "AND metric = 20 AND bucket >= ?", (int(since // 3600 * 3600 * 1000),))[0]
    return micro / 1e6


def test_a_restart_ends_what_the_run_before_left_open_and_budgets_go_on(tmp_path, hook):
    month = clock.utc_month_start(clock.now())
    config = {"idle": IDLE, "cost": {"evaluate_every": "5s"}, "cost.budgets": {"webhook": hook.url},
              "cost.budgets.host": {"daily": 0.0001}}  # crossed at the first charged tick
    first = livedaemon.start(tmp_path, "single-gpu", interval=0.5, config=config)
    try:
        poll(lambda: events(first.db, "gpu_unheld_idle") and events(first.db, "host_idle")
             and events(first.db, "budget_exceeded"), TIMEOUT_S,
             "the first run's idle events and its budget crossing in the store",
             explain=first.log_tail)
    finally:
        assert first.stop() == 0, first.log_tail()
    (last_tick,) = rows(first.db, "SELECT max(ts) FROM ticks")[0]
    left_open = events(first.db, "gpu_unheld_idle") + events(first.db, "host_idle")
    assert [ended for _, ended, _ in left_open] == [None, None]  # open when it stopped
    spent_before = recorded_host_spend(first.db, month)
    assert spent_before > 0.0001
    ticks_before = len(first.ticks())
    first_log = first.log()  # (the second run writes its log in the same folder)
    poll(lambda: hook.bodies, TIMEOUT_S, "the first run's crossing posted")

    # The second run: the same daily budget, and a monthly one half of what the first spent;
    # the host at another price (a refreshed one, or [instance].price_per_hour set since).
    second_start = clock.now()
    second = livedaemon.start(tmp_path, "single-gpu", interval=0.5, config={
        **config, "cost.budgets.host": {"daily": 0.0001, "monthly": spent_before / 2},
        "instance": {"price_per_hour": SECOND_PRICE}})
    try:
        # what the first run left open ended at its last tick, said to be its recording's stop
        ended_with_it = [e for e in events(second.db, "gpu_unheld_idle")
                         + events(second.db, "host_idle") if e[0] < last_tick / 1000]
        assert len(ended_with_it) == 2
        for _, ended, detail in ended_with_it:
            assert ended == last_tick / 1000 and detail["recording_stopped"] is True
            assert "price_per_hour" in detail  # the rest of its detail kept
        # ... and the second run opens its own (a later start)
        poll(lambda: any(s > last_tick / 1000 for s, _, _ in events(second.db, "host_idle")),
             TIMEOUT_S, "the second run's own host_idle event", explain=second.log_tail)
        monthly = poll(lambda: [e for e in events(second.db, "budget_exceeded")
                                if e[2]["period"] == "monthly"], TIMEOUT_S,
                       "the monthly budget crossed", explain=second.log_tail)
        # crossed counting the first run's spend (alone, this run would cross it at half)
        assert monthly[0][2]["spent"] >= spent_before * 0.999
        second.wait_for_ticks(ticks_before + 6)  # ticks enough to cross the daily again
        poll(lambda: len(hook.bodies) >= 2, TIMEOUT_S, "the monthly crossing posted")
        now = second.now()
        # the day's spend counts the first run's too (mlcost-top's "today")
        today = recorded_host_spend(second.db, clock.utc_day_start(now["ts"]))
        assert now["spend_today"] >= min(today, spent_before) * 0.999
        assert now["spend_today"] > now["cost"]["by_day"][clock.utc_day(now["ts"])]
        assert Now.from_dict(now).spend_today == now["spend_today"]
        said = "spend the store recorded before this start: $"
        assert said in second.log() and said not in first_log
        # where each budget stands: the daily one crossed, the month's counting run 1's spend
        standing = {b["period"]: b for b in now["budgets"]}
        assert standing["daily"]["crossed"] is True
        assert standing["daily"]["spent"] == pytest.approx(now["spend_today"])
        assert standing["monthly"]["crossed"] is True
        assert standing["monthly"]["spent"] >= spent_before * 0.999
        assert Now.from_dict(now).host_budget("daily").limit == 0.0001
        scraped = {s.labels["period"]: s.value for s in metric_samples(
            second, "mlcost_budget_spent_dollars")}
        assert scraped["monthly"] >= spent_before * 0.999 and scraped["daily"] > 0
        assert [(e["detail"]["period"]) for e in now["events"]
                if e["kind"] == "budget_exceeded"] == ["daily", "monthly"]
        # the history of the wasted $/h (mlcost-top's chart): the first run's idle GPU wasted at
        # the first run's price, not at this one's
        points = second.call("host_history", "wasted_per_hour", 1800, 1800).points
        during_first = [p.avg for p in points if p.ts < last_tick / 1000 - 2]
        during_second = [p.avg for p in points if p.ts > second_start + 2]
        assert during_first and max(during_first) < SECOND_PRICE / 10
        assert during_second and max(during_second) == pytest.approx(SECOND_PRICE)
    finally:
        assert second.stop() == 0, second.log_tail()
    # the daily crossing stands once for its day, posted once; the monthly posted once
    assert [d["period"] for _, _, d in events(second.db, "budget_exceeded")] == [
        "daily", "monthly"]
    assert [b["detail"]["period"] for b in hook.bodies] == ["daily", "monthly"]
    # the report of the whole range calls the first run's events what they were
    text = subprocess.run(
        [sys.executable, "-m", "daemon", "report", "--db", str(second.db), "--since", "1h"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    assert "open when the recording stopped at" in text
    assert text.count("(ongoing)") <= 2  # the second run's own, at most
    assert "the price changed in this window" in text
    # ... and charges each run's ticks at the price that run charged
    whole = report_json(second.db, "--since", "1h")
    changes = whole["burn"]["price_changes"]
    assert [(c["instance_type"], c["per_hour"] < SECOND_PRICE) for c in changes] == [
        ("g5.xlarge", True), ("g5.xlarge", False)]
    assert changes[1]["per_hour"] == SECOND_PRICE and changes[1]["since"] > last_tick / 1000
    # the report's own pass over the ticks charges what the two runs' ledgers charged and
    # recorded, as the review reads it: nothing for the seconds between the runs
    recorded = recorded_host_spend(second.db, month)
    assert whole["spend"]["total"] == pytest.approx(recorded, rel=0.01)
    assert whole["review"]["spend"]["total"] == pytest.approx(recorded, rel=0.01)
    first_only = report_json(second.db, "--since", "1h", "--until", str(last_tick / 1000))
    assert first_only["burn"]["price_changes"] == []
    assert first_only["spend"]["total"] == pytest.approx(spent_before, rel=0.1)


def report_json(db, *args):
    return json.loads(subprocess.run(
        [sys.executable, "-m", "daemon", "report", "--db", str(db), "--json", *args],
        capture_output=True, text=True, check=True, timeout=60).stdout)
