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
    return list(app.screen.query_one(KeyFooter).query(FooterKey))


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


# The keys the footer shows on the main screen (the rest are in `?` help): tab and enter are
# the panels' (footer.PANEL_KEYS), the others the App's.
MAIN_KEYS = ("tab Panel", "⏎ Open", "q Quit", "? Help", "a Apply", "k Stop", "h History",
             "s Snapshot")


def footer_line(app: MlcostTop) -> str:
    from tests.tui.test_sizes import screen_text

    return screen_text(app)[-1]


async def laid_out(pilot, app: MlcostTop) -> None:
    """Wait until each key of the footer has its place on the screen (on a loaded machine a
    screen just pushed may not have laid its footer out yet)."""
    await pilot_wait_for(pilot, lambda: key_widgets(app) and all(
        key.region.width > 0 for key in key_widgets(app)), what="the footer laid out")


def assert_whole(app: MlcostTop) -> None:
    """Every key of the footer lies inside the screen: none cut at its edge."""
    width = app.size.width
    for key in key_widgets(app):
        assert key.region.width > 0 and key.region.right <= width, \
            (key.key_display, key.description, key.region, footer_line(app))


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_footer_shows_the_main_keys_whole(size):
    """At 120 columns the footer ended `k Stop idle  h ▏^p palette` (History cut to `h`), at
    80 `p P▏`, and tab, enter and s were never in it. Now its keys fit 80 columns whole, tab,
    enter and s among them; the other keys are in `?` help."""
    from tests.tui.test_modes import help_text

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot_wait_for(pilot, lambda: "Quit" in descriptions(app), what="the footer's keys")
        await pilot.pause()
        line = footer_line(app)
        for shown in MAIN_KEYS:
            assert shown in line, line
        assert "▏" not in line, line  # nothing cut at its edge
        await laid_out(pilot, app)
        assert_whole(app)
        said = await help_text(app, pilot)
        for key in ("/", "<, >" if "<, >" in said else "<", "I", "t", "p, space", "x", "ctrl+p"):
            assert f"\n  {key} " in said, (key, said)


@pytest.mark.asyncio
async def test_the_footer_keys_fit_80_columns_on_the_other_screens():
    """A process's details, a fleet host's view (with escape back to the fleet) and a
    replay: each footer's keys whole at 80 columns."""
    from mlcost_tui.screens.details import DetailsScreen
    from tests.tui.test_app import NamedStub
    from tests.tui.test_modes import RecordedStore

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        snap = snapshot()
        app.post_message(SnapshotArrived((snap,)))
        await pilot.pause()
        assert snap.now is not None
        await app.push_screen(DetailsScreen(snap.now.processes[0]))
        await pilot_wait_for(pilot, lambda: "Compare runs" in descriptions(app),
                             what="the details screen's footer")
        await laid_out(pilot, app)
        assert_whole(app)

    clients = [NamedStub("unix:/a.sock"), NamedStub("unix:/b.sock")]
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((snapshot(target="unix:/a.sock"),
                                          snapshot(target="unix:/b.sock"))))
        await pilot.pause()
        await pilot.press("enter")
        await pilot_wait_for(pilot, lambda: "Fleet" in descriptions(app),
                             what="a fleet host's footer")
        await pilot.pause()
        await laid_out(pilot, app)
        assert_whole(app)
        assert "esc Fleet" in footer_line(app)

    app = MlcostTop([], poll=False, replay=RecordedStore())  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_wait_for(pilot, lambda: "Quit" in descriptions(app), what="the footer")
        await pilot.pause()
        await laid_out(pilot, app)
        assert_whole(app)
        line = footer_line(app)
        assert "tick" in line and "minute" in line and "Play/pause" in line, line
        assert "a Apply" not in line  # needs a daemon: pressed, it says why


@pytest.mark.asyncio
async def test_the_history_and_gpu_screens_offer_no_keys_of_the_rows_they_hide():
    """The history screen's footer offered `a Apply`, `k Stop` and `h History`: they acted on
    the main screen's highlighted recommendation and process, which it hides (k asked to stop
    a process the user could not see; h opened a history over the history). From the history
    and GPU screens those keys are neither shown nor run."""
    from mlcost_tui.screens.action import ActionScreen
    from mlcost_tui.screens.gpu import GpuScreen
    from mlcost_tui.screens.history import HistoryScreen

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        snap = snapshot()
        app.post_message(SnapshotArrived((snap,)))
        await pilot.pause()
        assert snap.now is not None
        for screen in (HistoryScreen((0,), app.client), GpuScreen(snap.now.gpus, snap.now.processes)):
            await app.push_screen(screen)
            await pilot_wait_for(pilot, lambda: "Back" in descriptions(app),
                                 what="the screen's footer")
            shown = descriptions(app)
            assert not {"Apply", "Stop", "History", "Snooze"} & set(shown), shown
            await pilot.press("k", "a", "h")
            await pilot.pause()
            assert app.screen is screen and not isinstance(app.screen, ActionScreen)
            await pilot.press("escape")
            await pilot.pause()
