"""The apply dialog's text scrolls at 80x24 and its buttons stay on screen: the text grew to
its whole length inside a box cut at the screen's height, so it never scrolled, and the end of
a long dry run and "Do it? (y / n)" could not be read; PageDown, Down and the mouse wheel did
nothing (probe148 M1)."""

from __future__ import annotations

import pytest
from textual import events
from textual.containers import VerticalScroll
from textual.geometry import Offset
from textual.selection import Selection
from textual.widgets import Button, Static

from mlcost_tui.app import MlcostTop
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.hanging import HangingText
from tests.tui.test_resize_dialog import ResizingClient, host, open_dialog
from tests.tui.test_sizes import screen_text

LAST = "Do it? (y / n)"  # the body's last line (the daemon allows the resize)
COMMAND = ("aws ssm start-automation-execution --region us-east-1 --document-name "
           "AWS-ResizeInstance --parameters InstanceId=i-0123456789abcdef0,InstanceType=g6e.12xlarge")


class LongDryRun(ResizingClient):
    """The resize's dry run with a long message and steps: longer than 80x24 has room for."""

    async def apply(self, rec_id: str, dry_run: bool = True, accept_preliminary: bool = False,
                    timeout_s: float = 30.0):
        result = await super().apply(rec_id, dry_run, accept_preliminary, timeout_s)
        return self.ActionResult(rec_id, "resize", dry_run, not dry_run,
                                 result.message + ". " + "the rest of the dry run " * 30,
                                 steps=(COMMAND, *(f"step {i} " + "x" * 50 for i in range(8))))


def on_screen(app: MlcostTop, dialog: ActionScreen) -> None:
    """The buttons lie whole inside the screen."""
    for button in dialog.query(Button):
        assert 0 <= button.region.y and button.region.bottom <= app.size.height, \
            (button.id, button.region)


def last_line_shown(app: MlcostTop) -> bool:
    return any(LAST in line for line in screen_text(app))


async def opened(pilot, app: MlcostTop) -> tuple[ActionScreen, VerticalScroll]:
    dialog = await open_dialog(app, pilot, host(30, preliminary=False))
    assert dialog.can_do
    scroll = dialog.query_one(VerticalScroll)
    body = dialog.query_one("#action-body", Static)
    assert str(body.render()).rstrip().endswith(LAST)
    return dialog, scroll


@pytest.mark.asyncio
@pytest.mark.parametrize("keys", [("end",), ("pagedown",) * 6, ("down",) * 40])
async def test_keys_scroll_the_dialogs_text_to_its_end_at_80x24(keys):
    app = MlcostTop([LongDryRun()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        dialog, scroll = await opened(pilot, app)
        # the text has more lines than room: it scrolls, inside the screen, above the buttons
        assert scroll.max_scroll_y > 0, (scroll.region, scroll.virtual_size)
        assert scroll.region.bottom <= dialog.query_one("#do").region.y
        on_screen(app, dialog)
        assert not last_line_shown(app)
        await pilot.press(*keys)
        await pilot.pause()
        assert scroll.scroll_y == scroll.max_scroll_y
        assert last_line_shown(app), "\n".join(screen_text(app))
        on_screen(app, dialog)
        # y still does it after scrolling
        await pilot.press("y")
        await app.workers.wait_for_complete()
        assert app.screen is not dialog


@pytest.mark.asyncio
async def test_the_text_scrolls_with_the_focus_on_a_button_and_with_the_wheel():
    app = MlcostTop([LongDryRun()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        dialog, scroll = await opened(pilot, app)
        dialog.query_one("#cancel", Button).focus()
        await pilot.press("pagedown", "end")
        await pilot.pause()
        assert app.focused is dialog.query_one("#cancel")
        assert scroll.scroll_y == scroll.max_scroll_y > 0
        assert last_line_shown(app)
        await pilot.press("home")
        await pilot.pause()
        assert scroll.scroll_y == 0 and not last_line_shown(app)

        body = dialog.query_one("#action-body", Static)
        for _ in range(40):  # the wheel over the text, as a terminal sends it
            body.post_message(events.MouseScrollDown(body, 1, 1, 0, 1, 0, False, False, False))
        await pilot.pause()
        assert scroll.scroll_y == scroll.max_scroll_y
        assert last_line_shown(app)
        on_screen(app, dialog)


@pytest.mark.asyncio
async def test_a_short_dry_run_keeps_a_small_dialog_at_200x50():
    """The text takes the room it needs, no more: a short dialog is not stretched."""
    app = MlcostTop([ResizingClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 50)) as pilot:
        dialog, scroll = await opened(pilot, app)
        assert scroll.max_scroll_y == 0 and last_line_shown(app)
        assert dialog.query_one(VerticalScroll).parent.region.height < 40
        on_screen(app, dialog)


@pytest.mark.asyncio
async def test_a_wrapped_command_hangs_under_its_dollar_and_is_selected_whole():
    """At 80x24 a long command's continuation started at column 1, under the text (probe148
    L2, the dialog's part): it is indented under its `$`; selected by hand it is one line."""
    app = MlcostTop([LongDryRun()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        dialog, scroll = await opened(pilot, app)
        body = dialog.query_one("#action-body", Static)
        visual = body.visual
        assert isinstance(visual, HangingText)
        shown = visual.wrapped(body.content_region.width).plain.splitlines()
        at = next(i for i, line in enumerate(shown) if "$ aws ssm" in line)
        assert shown[at].startswith("  $ aws ssm") and "g6e.12xlarge" not in shown[at]
        end = next(i for i in range(at, len(shown)) if shown[i].endswith("g6e.12xlarge"))
        assert end > at and all(line.startswith("    ") and line[4] != " "
                                for line in shown[at + 1:end + 1]), shown
        selected = body.get_selection(Selection(Offset(0, at), Offset(len(shown[end]), end)))
        assert selected is not None and selected[0] == f"  $ {COMMAND}", selected
