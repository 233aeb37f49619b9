"""A replayed tick's header says what the live header said then (probe 141 L4): no
recommendation yet reads `saves ? (none yet)`, not a known `$0.00/month`; and "today" counts the
day's spend the store knows before its first tick (a snapshot begun mid-run read `today $0.00`
at its first tick where live read the run's spend so far), saying from when it counts where the
file does not hold the whole day. A real mlcostd records the demo; the replay is of its store
and of a snapshot of it taken from the middle of the run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from simhost import pilot_wait_for, poll

from daemon import clock
from daemon.replay import Replay
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.store.snapshot import write_snapshot
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from tests.tui.test_sizes import screen_text

CONFIG = {"cost": {"evaluate_every": "5s"}}  # the hour spend handed to the store every 5 s
TIMEOUT_S = 120.0


def _spend_through(db: Path) -> float:
    reader = StoreReader(str(db))
    try:
        return queries.spend_through(reader) or 0.0
    finally:
        reader.close()


@pytest.fixture(scope="module")
def recording(mlcostd, tmp_path_factory) -> dict[str, Any]:
    """The demo recorded past a hand-over of its hour spend; what live said at a tick after
    that hand-over (the middle), then past a later hand-over; the stopped store and a
    snapshot of it from the middle on."""
    daemon = mlcostd("demo", config=CONFIG)
    # some dollars spent and handed over (a cent or two is within the ledgers' rounding)
    poll(lambda: (daemon.now().get("spend_today") or 0) > 0.1, TIMEOUT_S, "$0.10 spent",
         every=0.5, explain=daemon.log_tail)
    middle = daemon.now()
    poll(lambda: _spend_through(daemon.db) > middle["ts"] + 2, TIMEOUT_S,
         "the hour spend handed over after the middle", every=0.5, explain=daemon.log_tail)
    assert daemon.stop() == 0, daemon.log_tail()
    last = daemon.ticks()  # (its tick numbers: the store is there)
    assert last
    reader = StoreReader(str(daemon.db))
    try:
        end = reader.query("SELECT max(ts) AS hi FROM ticks")[0]["hi"] / 1000
    finally:
        reader.close()
    snapshot = write_snapshot(daemon.db, tmp_path_factory.mktemp("snap") / "snap.db",
                              middle["ts"], end).path
    return {"db": daemon.db, "snapshot": snapshot, "middle": middle}


async def _first_tick_header(path: Path) -> tuple[list[str], dict[str, Any]]:
    """The top two lines at 80x24 at the replay's first tick, and the document replayed."""
    with Replay(path) as replay:
        first = replay.times()[0]
        document = replay.state_at(first)
        app = MlcostTop([], poll=False, replay=replay)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot_wait_for(pilot, lambda: app.now is not None and app.now.ts == first,
                                 what="the first recorded tick")
            await pilot.pause()
            return screen_text(app)[:2], document


@pytest.mark.asyncio
async def test_the_first_tick_of_a_replay_says_the_savings_are_not_known_yet(recording):
    lines, document = await _first_tick_header(recording["db"])
    assert not document["recommendations"]  # the first tick: the rules had not run
    assert any("saves ? (none yet)" in line for line in lines), lines
    assert not any("$0.00/month" in line for line in lines), lines


@pytest.mark.asyncio
async def test_a_snapshot_from_mid_run_counts_today_from_what_the_store_knows(recording):
    live = recording["middle"]
    lines, document = await _first_tick_header(recording["snapshot"])
    assert live["spend_today"] > 0.05, live["spend_today"]
    # the day's spend before the snapshot's first tick, from the hour row it holds: what live
    # said then, up to the two ledgers' ways of charging a tick
    replayed = document["spend_today"]
    assert replayed == pytest.approx(live["spend_today"], rel=0.1, abs=0.02), (replayed, live)
    # counted from the hour the row begins: the earlier part of the day is not in the file;
    # in the day's first UTC hour that hour is the day's start, and the file knows the whole
    # day (no "since": a CI run just after midnight UTC expected one)
    hour = live["ts"] // 3600 * 3600
    whole_day = hour <= clock.utc_day_start(live["ts"])
    assert document["spend_today_since"] == (None if whole_day else hour)
    shown = f"today {fmt.money(replayed)}" + (
        "" if whole_day else f" since {clock.local_time(hour, date=False, seconds=False)}")
    assert any(shown in line for line in lines), (shown, lines)
    said_since = any(f"today {fmt.money(replayed)} since" in line for line in lines)
    assert said_since != whole_day, lines
    assert time.time() > live["ts"]  # (the recording is in the past)
