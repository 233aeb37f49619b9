"""The help screen shows its own footer: the main screen's went on showing `a Apply`, `k Stop`,
`h History` … under it, keys that do nothing while the help is open (probe148 L3)."""

from __future__ import annotations

import pytest
from simhost import pilot_wait_for

from mlcost_tui.app import MlcostTop
from mlcost_tui.footer import KeyFooter
from mlcost_tui.messages import SnapshotArrived
from mlcost_tui.screens.help import HelpScreen
from tests.tui.fixtures import StubClient, snapshot
from tests.tui.test_footer import descriptions, footer_line, laid_out


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_help_screen_footer_shows_only_the_keys_that_work_there(size):
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot_wait_for(pilot, lambda: "Apply" in descriptions(app), what="the main keys")
        await pilot.press("question_mark")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        await pilot.pause()
        assert app.screen.query(KeyFooter), f"the main screen's footer: {footer_line(app)}"
        await laid_out(pilot, app)
        assert descriptions(app) == ["Close"]
        line = footer_line(app)
        assert "esc Close" in line, line
        for key in ("a Apply", "k Stop", "h History", "s Snapshot", "tab Panel", "⏎ Open"):
            assert key not in line, line
        await pilot.press("a")  # nothing: the help stays, no dry run asked
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen) and client.applied == []
        await pilot.press("escape")
        await pilot_wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen),
                             what="the help closed")
        await laid_out(pilot, app)
        assert "a Apply" in footer_line(app)  # the main screen's keys again
