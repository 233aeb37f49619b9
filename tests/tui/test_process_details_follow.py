"""A process's details screen follows the tick it is open over: its "$/h now, $ so far", GPU
memory, SM share, recommendations and (in a replay) its phase balance went on showing the tick
the screen was opened at, live and in a replay stepped under it (probe 148, left in note65).
A real mlcostd records the idle host; mlcost-top replays its store and opens the notebook's
details at an early tick, then steps to later ones: the screen reads as one opened there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from simhost import pilot_wait_for, poll
from textual.widgets import Static

from daemon.replay import Replay
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.replaying import step_to, vacuum_into

IDLE_CONFIG = {  # the idle notebook's advice within seconds, evaluated every 5 s
    "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"},
    "cost": {"evaluate_every": "5s"},
}


@pytest.fixture(scope="module")
def recording(mlcostd, tmp_path_factory) -> Path:
    """The idle host recorded until its notebook has advice about it (its recommendations in the
    details change from none to one); a copy of the store."""
    daemon = mlcostd("idle-host", interval=0.5, config=IDLE_CONFIG)
    poll(lambda: any(r["rule"] == "idle_gpu_held" for r in daemon.now().get("recommendations")
                     or []), 180.0, "advice about the idle notebook", every=0.5,
         explain=daemon.log_tail)
    assert daemon.stop() == 0, daemon.log_tail()
    copy = tmp_path_factory.mktemp("follow") / "copy.db"
    vacuum_into(daemon.db, copy)
    return copy


def shown(app: MlcostTop) -> tuple[str, str]:
    """The details screen's heading and body as drawn."""
    return (str(app.screen.query_one("#details-heading", Static).render()),
            str(app.screen.query_one("#details-body", Static).render()))


def notebook(state: dict[str, Any]) -> str | None:
    """The key of the process the idle notebook advice is about, where the tick has it."""
    for rec in state["recommendations"]:
        if rec["rule"] == "idle_gpu_held":
            return f"{rec['action']['pid']}:{rec['action']['start_time']:.3f}"
    return None


@pytest.mark.asyncio
async def test_a_process_details_follow_the_replay_stepped_under_them(recording):
    with Replay(recording) as replay:
        times = replay.times()
        key = next(k for ts in reversed(times) if (k := notebook(replay.state_at(ts))))
        having = [ts for ts in times
                  if any(p["key"] == key for p in replay.state_at(ts)["processes"])]
        early, late = having[2], having[-1]
        assert notebook(replay.state_at(early)) is None  # no advice yet at the early tick
        app = MlcostTop([], poll=False, replay=replay)
        async with app.run_test(size=(120, 40)) as pilot:
            async def goto(ts: float) -> None:
                await step_to(app, pilot, times, ts)

            async def open_details() -> tuple[str, str]:
                panel = app.query_one(ProcessPanel)
                panel.focus()
                panel.move_cursor(row=panel.get_row_index(key))
                await pilot.press("enter")
                await pilot_wait_for(pilot, lambda: isinstance(app.screen, DetailsScreen)
                                     and app.screen.phases is not None
                                     and not app.screen.phases_loading,
                                     what="the process's details with its phase balance")
                return shown(app)

            async def back() -> None:
                await pilot.press("escape")
                await pilot_wait_for(pilot, lambda: not isinstance(app.screen, DetailsScreen),
                                     what="the main screen")

            await goto(late)
            opened_late = await open_details()
            await back()
            await goto(early)
            opened_early = await open_details()
            assert opened_early != opened_late  # its cost so far, its advice moved
            assert "Recommendations for this process" in opened_late[1]
            assert "Recommendations for this process" not in opened_early[1]

            # stepped with the early tick's details open: they read as opened at the late tick
            await goto(late)
            await pilot_wait_for(pilot, lambda: shown(app) == opened_late,
                                 what="the details at the late tick")
            await goto(early)  # and back
            await pilot_wait_for(pilot, lambda: shown(app) == opened_early,
                                 what="the details at the early tick again")
