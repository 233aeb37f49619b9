"""A paused replay stepped while a recommendation's details screen is open (probe 148 M2): the
screen kept the recommendation it was opened with, and after escape the main screen's
recommendations kept the old tick's figures under the new tick's header until the next step (the
main screen is not drawn while a screen covers it, and nothing drew it when it was shown again).
Now the details follow the tick (or say the recommendation is not in it) and the main screen is
drawn with the tick shown as it comes back. A real mlcostd records the idle host; mlcost-top
replays its store."""

from __future__ import annotations

import json
from typing import Any

import pytest
from simhost import pilot_wait_for, poll
from textual.widgets import Static

from daemon.replay import Replay
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.replaying import step_to, vacuum_into

IDLE_CONFIG = {  # advice about the idle notebook within seconds, evaluated every 5 s
    "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"},
    "cost": {"evaluate_every": "5s"},
}
RULE = "idle_gpu_held"
ADVICE_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def recording(mlcostd, tmp_path_factory) -> dict[str, Any]:
    """The idle host recorded from before its advice until the advice's figures changed (its
    evidence grows each evaluation); a copy of the store."""
    daemon = mlcostd("idle-host", interval=0.5, config=IDLE_CONFIG)

    def advice() -> dict[str, Any] | None:
        return next((r for r in daemon.now().get("recommendations") or []
                     if r["rule"] == RULE), None)

    first = poll(advice, ADVICE_TIMEOUT_S, f"a {RULE} recommendation", every=0.5,
                 explain=daemon.log_tail)
    folder = tmp_path_factory.mktemp("follow")
    copy = folder / "copy.db"

    def recorded_twice() -> bool:
        """The store (a copy of it) holds the advice with two different figures."""
        copy.unlink(missing_ok=True)
        vacuum_into(daemon.db, copy)
        with Replay(copy) as replay:
            return len({json.dumps(figures(r), sort_keys=True, default=str)
                        for r in recorded(replay, first["id"]).values()}) >= 2

    poll(recorded_twice, 90.0, "the advice recorded with two different figures", every=1.0,
         explain=daemon.log_tail)
    assert daemon.stop() == 0, daemon.log_tail()
    copy.unlink()
    vacuum_into(daemon.db, copy)
    return {"db": copy, "id": first["id"]}


def recorded(replay: Replay, rec_id: str) -> dict[float, dict[str, Any]]:
    """The advice at each recorded tick that has it."""
    found = {}
    for ts in replay.times():
        rec = next((r for r in replay.state_at(ts)["recommendations"] if r["id"] == rec_id),
                   None)
        if rec is not None:
            found[ts] = rec
    return found


def figures(rec: dict[str, Any]) -> tuple[Any, ...]:
    """What its details screen shows that moves between evaluations."""
    return rec["summary"], rec["evidence"], rec.get("savings_per_month")


def details_text(app: MlcostTop) -> str:
    return str(app.screen.query_one("#details-body", Static).render())


def shown_recommendations(app: MlcostTop) -> tuple[str, dict[str, Any]]:
    """The main screen's recommendations panel: its title and the recommendations it shows."""
    table = app.query_one(RecommendationTable)
    return str(table.border_title), dict(table.recommendations)


@pytest.mark.asyncio
async def test_stepping_under_a_recommendations_details_moves_it_and_the_main_screen(recording):
    rec_id = recording["id"]
    with Replay(recording["db"]) as replay:
        times = replay.times()
        recs = recorded(replay, rec_id)
        having = sorted(recs)
        without = max(ts for ts in times if ts < having[0])  # before the advice
        early = having[0]
        late = max(ts for ts in having if figures(recs[ts]) != figures(recs[early]))
        app = MlcostTop([], poll=False, replay=replay)
        async with app.run_test(size=(80, 24)) as pilot:
            async def goto(ts: float) -> None:
                await step_to(app, pilot, times, ts)

            async def open_details() -> str:
                table = app.query_one(RecommendationTable)
                table.focus()
                table.move_cursor(row=table.get_row_index(rec_id))
                await pilot.press("enter")
                await pilot_wait_for(pilot, lambda: isinstance(app.screen, DetailsScreen),
                                     what="the recommendation's details")
                return details_text(app)

            async def back() -> None:
                await pilot.press("escape")
                await pilot_wait_for(pilot, lambda: not isinstance(app.screen, DetailsScreen),
                                     what="the main screen")
                await pilot.pause()

            # each tick as the main screen shows it, and its details opened there
            await goto(times[0])
            main_first = shown_recommendations(app)
            await goto(early)
            main_early = shown_recommendations(app)
            details_early = await open_details()
            await back()
            await goto(late)
            details_late = await open_details()
            assert details_early != details_late  # the figures moved between the two ticks
            assert main_first != main_early

            # stepped with the late tick's details open: they follow the tick
            await goto(early)
            assert details_text(app) == details_early
            await goto(without)
            shown = details_text(app)
            assert f"Not recommended at {fmt.clock_time(without)}" in shown, shown
            await goto(times[0])  # further back: said at the tick shown
            shown = details_text(app)
            assert f"Not recommended at {fmt.clock_time(times[0])}" in shown, shown
            # and the main screen, shown again, has the tick its header says
            await back()
            assert app.now is not None and app.now.ts == times[0]
            assert shown_recommendations(app) == main_first
