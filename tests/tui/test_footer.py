"""The key footer is built again only when the keys it shows change: moving the focus between
panels (the App's keys either way) keeps its key widgets; opening the filter (its escape key
shows) and closing it build it again, with the keys of the moment."""

from __future__ import annotations

import pytest
from simhost import pilot_wait_for
from textual.widgets._footer import FooterKey

from mlcost_tui.app import MlcostTop
from mlcost_tui.footer import KeyFooter
from mlcost_tui.messages import SnapshotArrived
from tests.tui.fixtures import StubClient, snapshot


def key_widgets(app: MlcostTop) -> list[FooterKey]:
    return list(app.query_one(KeyFooter).query(FooterKey))


def descriptions(app: MlcostTop) -> list[str]:
    return [key.description for key in key_widgets(app)]


@pytest.mark.asyncio
async def test_the_footer_is_built_again_only_when_its_keys_change():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot_wait_for(pilot, lambda: "Quit" in descriptions(app), what="the footer's keys")
        built = key_widgets(app)
        assert "Close filter" not in descriptions(app)

        focused = app.focused
        await pilot.press("tab", "tab")
        await pilot.pause()
        assert app.focused is not focused  # the focus moved: Textual asked for a rebuild
        assert key_widgets(app) == built  # the same widgets: nothing was built again

        await pilot.press("slash")
        await pilot_wait_for(pilot, lambda: "Close filter" in descriptions(app),
                             what="the filter's escape key in the footer")
        await pilot.press("escape")
        await pilot_wait_for(pilot, lambda: "Close filter" not in descriptions(app),
                             what="the footer without the filter's key")
        assert descriptions(app) == [key.description for key in built]
        assert all(key not in built for key in key_widgets(app))  # built again
