"""The keys a, x and k on a details screen act on what that screen shows, against a real mlcostd
on the demo host: `k` on a recommendation's details had stopped (or refused by its pid) the
process under the main screen's cursor, hidden behind the screen (probe 125 F2), and the footer
offered `k Stop` where nothing on the screen could be stopped."""

from __future__ import annotations

import pytest
from simhost import pilot_wait_for

from daemon.client import Client
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable, is_about
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.details import DetailsScreen
from tests.livedaemon import DEMO_CONFIG
from tests.tui.test_footer import descriptions


@pytest.fixture
def demo_daemon(mlcostd):
    """The demo host with its waits cut short: the idle notebook is recommended for stopping
    within ~30 s (no actions allowed: a dry run is all `k` can ask)."""
    return mlcostd("demo", interval=0.5, config=DEMO_CONFIG)


@pytest.mark.asyncio
async def test_keys_on_a_details_screen_act_on_its_own_process_not_the_row_behind_it(
        demo_daemon):
    daemon = demo_daemon
    app = MlcostTop([Client(f"unix:{daemon.socket}")], interval_s=0.5)
    async with app.run_test(size=(160, 48)) as pilot:
        def idle_rec():
            now = app.now
            return next((r for r in now.recommendations if r.action_kind == "sigterm"), None) \
                if now is not None else None

        await pilot_wait_for(pilot, lambda: idle_rec() is not None,
                             what="the demo's idle notebook recommended stopping")
        rec = idle_rec()
        assert rec is not None and app.now is not None
        [notebook] = [p for p in app.now.processes if is_about(rec, p)]
        other = next(p for p in app.now.processes
                     if p.key != notebook.key and not any(
                         r.action_kind == "sigterm" for r in app.recommendations_for(p)))
        procs, recs = app.query_one(ProcessPanel), app.query_one(RecommendationTable)
        await pilot.pause()

        # the cursor on a process that nothing recommends stopping; the notebook's
        # recommendation opened from its panel: `k` asks to stop the notebook
        procs.move_cursor(row=procs.get_row_index(other.key))
        recs.focus()
        recs.move_cursor(row=recs.get_row_index(rec.id))
        await pilot.press("enter")
        assert isinstance(app.screen, DetailsScreen) and app.screen.recommendation == rec
        await pilot_wait_for(pilot, lambda: "Back" in descriptions(app), what="its footer")
        assert "Stop" in descriptions(app)
        await pilot.press("k")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, ActionScreen),
                             timeout=60, what="the stop dialog of the recommendation's process")
        assert app.screen.recommendation.id == rec.id
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]

        # the cursor on the notebook, the details of another process over it (as when the
        # process shown exits and the cursor moves on): no `k`, `a` or `x` in its footer, and
        # pressed they stop nothing behind it
        procs.focus()
        procs.move_cursor(row=procs.get_row_index(notebook.key))
        await pilot.pause()
        assert app.selected_process() is not None and app.selected_process().key == notebook.key
        screen = DetailsScreen(process=other, client=app.client,
                               related=app.recommendations_for(other))
        await app.push_screen(screen)
        await pilot_wait_for(pilot, lambda: "Back" in descriptions(app), what="its footer")
        assert "Stop" not in descriptions(app), descriptions(app)
        if not screen.related:
            assert not {"Apply", "Snooze"} & set(descriptions(app)), descriptions(app)
        await pilot.press("k")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen is screen, app.screen
