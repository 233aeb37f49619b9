"""mlcostd SIGKILLed between two rounds of spend, again and again, each time started again on
its store (a crash loop, the OOM killer, a host that lost power): probe 115's F4. The daemon
hands its ledger's spend to the store each [cost].evaluate_every; a start read only what was
handed over, so the day's spend went backwards on every crash ($0.806 shown before the kill,
$0.74 read back) and the budgets' alerts came late, while a report of the range said two
totals (its window $1.22 from the ticks, its review $1.00 from the rows).

What every run charged is known without mlcostd's code: the single-gpu host's whole price for
each interval between two of a run's recorded ticks (nothing before a run's first tick)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import livedaemon
import pytest
from simhost import poll

from daemon import clock
from daemon.store import queries
from daemon.store.reader import StoreReader

TIMEOUT_S = 60.0
# One round 2 s after each start (FIRST_EVALUATION_S), then none for 10 minutes: the ticks
# after it are in no spend row when the daemon is killed.
CONFIG = {"cost": {"evaluate_every": "10m"}}
TAIL_TICKS = 6  # ticks recorded after the round before each kill (3 s at 0.5 s)
SAID = "the run before this start stopped without handing over its last"


def tick_times(db) -> list[float]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [ts / 1000 for (ts,) in conn.execute("SELECT ts FROM ticks ORDER BY ts")]
    finally:
        conn.close()


def handed_over(db) -> float | None:
    with StoreReader(str(db)) as reader:
        return queries.spend_through(reader)


def charged(runs: list[list[float]], per_hour: float, day: str | None = None) -> float:
    """What the runs' ledgers charged (on `day`, where given): each run's intervals between
    its ticks, booked by their midpoints, at the host's price."""
    seconds = sum(b - a for ticks in runs for a, b in zip(ticks, ticks[1:], strict=False)
                  if day is None or clock.utc_day((a + b) / 2) == day)
    return per_hour * seconds / 3600


def killed_between_rounds(folder: Path, after: float | None) -> list[float]:
    """Start mlcostd on the folder's store (the run before ended at its tick `after`), let its
    first round hand its spend over, record TAIL_TICKS ticks more, SIGKILL it. Returns its
    ticks' times."""
    db = folder / "mlcost.db"
    started = clock.now()
    daemon = livedaemon.start(folder, "single-gpu", interval=0.5, config=CONFIG)
    try:
        if after is not None:  # the run before was charged up to its last tick, and said so
            poll(lambda: SAID in daemon.log(), TIMEOUT_S, "the start saying what it charged",
                 explain=daemon.log_tail)
        through = poll(lambda: (t := handed_over(db)) is not None and t > started and t,
                       TIMEOUT_S, "this run's first round handed over", explain=daemon.log_tail)
        poll(lambda: len([ts for ts in tick_times(db) if ts > through]) >= TAIL_TICKS,
             TIMEOUT_S, f"{TAIL_TICKS} ticks after the round", explain=daemon.log_tail)
    finally:
        daemon.stop(signal.SIGKILL)
    mine = [ts for ts in tick_times(db) if after is None or ts > after]
    handed = handed_over(db)
    assert handed is not None and handed < mine[-1] - 2  # (killed 3 s after the round)
    return mine


def one_figure(db: Path, total: float) -> None:
    """The report of the store's last hour: its window's spend (from the ticks), its review's
    (from the rows) and the review's days say `total`."""
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--json",
                          "--since", "1h"], capture_output=True, text=True, timeout=120,
                         cwd=livedaemon.ROOT)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["spend"]["total"] == pytest.approx(total, abs=5e-5)
    assert document["review"]["spend"]["total"] == pytest.approx(total, abs=5e-5)
    assert sum(document["review"]["spend"]["by_day"].values()) == pytest.approx(total, abs=5e-5)


@pytest.mark.fault("daemon killed", "mlcostd SIGKILLed 3 times between two rounds of spend, "
                   "each time started again on its store")
def test_a_crash_loop_loses_none_of_the_spend_and_the_report_says_one_figure(tmp_path: Path) -> None:
    db = tmp_path / "mlcost.db"
    runs: list[list[float]] = []
    for _ in range(3):
        runs.append(killed_between_rounds(tmp_path, runs[-1][-1] if runs else None))
    with StoreReader(str(db)) as reader:
        host = reader.meta("host")
    assert isinstance(host, dict)
    per_hour = float(host["price"]["per_hour"])
    assert per_hour > 0

    # a report of the store its last run was killed on, before any start charged that run
    one_figure(db, charged(runs, per_hour))

    last = livedaemon.start(tmp_path, "single-gpu", interval=0.5, config=CONFIG)
    try:
        poll(lambda: SAID in last.log(), TIMEOUT_S, "the start saying what it charged",
             explain=last.log_tail)
        # a killed run leaves its lock file: called a kill (a clean stop that could not hand
        # over is not: test_store_faults)
        [said] = [line for line in last.log().splitlines() if SAID in line]
        assert "(killed, or its host lost power)" in said, said
        now = last.now()
        day = clock.utc_day(now["ts"])
        # /v1/now's day: every killed run's ticks, as their ledgers charged them, and this one's
        before = now["spend_today"] - now["cost"]["by_day"].get(day, 0.0)
        assert before == pytest.approx(charged(runs, per_hour, day), abs=2e-5)
        assert now["spend_today"] >= before
    finally:
        assert last.stop() == 0, last.log_tail()
    runs.append([ts for ts in tick_times(db) if ts > runs[-1][-1]])
    total = charged(runs, per_hour)

    one_figure(db, total)
