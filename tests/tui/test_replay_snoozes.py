"""A replay shows at each recorded tick what the live view showed then: a recommendation
snoozed at that tick is not listed (live hid it; `u` listed it), one snoozed later, or whose
snooze was undone, is. A real mlcostd records an idle GPU's advice, which is snoozed and the
snooze undone through its API (mlcost-top's `x` and `u`); mlcost-top replays the store."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from simhost import pilot_wait_for, poll

from daemon.replay import Replay
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.recommendations import RecommendationTable

IDLE_CONFIG = {  # advice about the idle notebook within seconds, evaluated every 5 s
    "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"},
    "cost": {"evaluate_every": "5s"},
}
RULE = "idle_gpu_held"
ADVICE_TIMEOUT_S = 180.0
TICKS_S = 2.0  # ticks recorded in each part (0.5 s apart)


@pytest.fixture(scope="module")
def recording(mlcostd, tmp_path_factory) -> dict[str, Any]:
    """The advice listed, then snoozed, then its snooze undone; a copy of the store, and
    when each was done."""
    daemon = mlcostd("idle-host", interval=0.5, config=IDLE_CONFIG)
    rec = poll(lambda: next((r for r in daemon.now().get("recommendations") or []
                             if r["rule"] == RULE), None),
               ADVICE_TIMEOUT_S, f"a {RULE} recommendation", every=0.5,
               explain=daemon.log_tail)

    def ticks_after(ts: float) -> None:
        poll(lambda: (daemon.now().get("ts") or 0.0) > ts + TICKS_S, 30.0,
             f"ticks recorded past {ts}", every=0.2, explain=daemon.log_tail)

    ticks_after(time.time())
    snoozed = time.time()
    daemon.call("snooze", rec["id"], 24)
    assert rec["id"] not in {r["id"] for r in daemon.now().get("recommendations") or []}
    ticks_after(time.time())
    undone = time.time()
    daemon.call("unsnooze", rec["id"])
    ticks_after(time.time())
    assert daemon.stop() == 0, daemon.log_tail()
    copy = tmp_path_factory.mktemp("snoozes") / "copy.db"
    source = sqlite3.connect(daemon.db)
    source.execute("VACUUM INTO ?", (str(copy),))
    source.close()
    return {"db": copy, "id": rec["id"], "snoozed": snoozed, "undone": undone}


def parts(replay: Replay, recording: dict[str, Any]) -> tuple[float, float, float]:
    """A recorded tick before the snooze (the advice standing), one while snoozed, one after
    the undo."""
    times = replay.times()
    before = max(t for t in times if t < recording["snoozed"])
    during = next(t for t in times if recording["snoozed"] + 0.5 < t < recording["undone"])
    after = next(t for t in times if t > recording["undone"] + 0.5)
    return before, during, after


def test_a_replay_hides_a_recommendation_at_the_ticks_it_was_snoozed(recording):
    with Replay(recording["db"]) as replay:
        before, during, after = parts(replay, recording)

        def listed(ts: float) -> list[dict[str, Any]]:
            return [r for r in replay.state_at(ts)["recommendations"]
                    if r["id"] == recording["id"]]

        assert [r["snoozed_until"] for r in listed(before)] == [None]
        assert listed(during) == []
        assert [r["snoozed_until"] for r in listed(after)] == [None]


@pytest.mark.asyncio
async def test_mlcost_top_replays_the_list_live_showed_at_each_tick(recording):
    with Replay(recording["db"]) as replay:
        app = MlcostTop([], poll=False, replay=replay)
        before, during, after = parts(replay, recording)
        async with app.run_test(size=(80, 24)) as pilot:
            table = app.query_one(RecommendationTable)
            assert app.replay_control is not None
            times = app.replay_control.source.times
            for ts, shown in ((before, True), (during, False), (after, True)):
                app.replay_control.goto(times.index(ts))
                await pilot_wait_for(
                    pilot, lambda ts=ts: app.now is not None and app.now.ts == ts,
                    what=f"the recorded tick at {ts}")
                await pilot.pause()
                assert (recording["id"] in table.recommendations) is shown, (ts, shown)
