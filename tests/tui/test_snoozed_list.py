"""`u` says what it did or why it cannot, and a snooze can be undone after the 15 s its toast
offers: `u` then lists the snoozed recommendations (GET /v1/recommendations/snoozed) and brings
the one picked back (probe 125 F17: `u` after 15 s said nothing, and nothing in mlcost-top could
end a snooze)."""

from __future__ import annotations

import dataclasses

import pytest

from mlcost_tui import action_control
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.confirm import ConfirmScreen
from mlcost_tui.screens.snoozed import SnoozedScreen
from tests.tui.fixtures import StubClient
from tests.tui.test_new_user_screens import shown
from tests.tui.test_sizes import screen_text

SIZES = [(80, 24), (200, 50)]


def toast(app: MlcostTop) -> str:
    return " ".join(n.message for n in app._notifications)


@pytest.mark.asyncio
async def test_u_with_nothing_snoozed_says_so():
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await shown(pilot)
        await pilot.press("u")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "no recommendation is snoozed" in toast(app), toast(app)
        assert not isinstance(app.screen, SnoozedScreen)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_u_after_its_undo_ran_out_lists_the_snoozed_and_brings_one_back(size):
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        await shown(pilot)
        recs = app.query_one(RecommendationTable)
        headline = "shrink to g6e.12xlarge at $10.49/h"
        recs.recommendations["rec-resize"] = dataclasses.replace(
            recs.recommendations["rec-resize"], headline=headline)
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        # the toast names the advice (its headline), not the summary's first words
        assert headline in toast(app), toast(app)
        assert client.snoozed == ["rec-resize"] and "rec-resize" not in recs.recommendations
        rec, at = app.actions.last_snooze
        app.actions.last_snooze = (rec, at - action_control.UNDO_S)  # its 15 s are over
        assert not app.actions.can_undo
        await pilot.press("u")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, SnoozedScreen), toast(app)
        text = "\n".join(screen_text(app))
        assert "Snoozed recommendations (1)" in text and "until" in text, text
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.unsnoozed == ["rec-resize"]
        assert not isinstance(app.screen, SnoozedScreen)
        assert "back in the list" in toast(app), toast(app)
        assert "rec-resize" in recs.recommendations


@pytest.mark.asyncio
async def test_u_read_only_says_why_not():
    client = StubClient()
    app = MlcostTop([client], poll=False, readonly=True)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await shown(pilot)
        await pilot.press("u")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "--readonly" in toast(app), toast(app)
        assert client.unsnoozed == []
