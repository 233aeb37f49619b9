"""A details screen's wrapped items keep their indent: the continuation of "  a: stop process:
sends SIGTERM …" started at column 1 at 80 columns, where it read as a new item (probe148 L2).
Each continuation line now starts two columns right of its item's indent."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.content import Content
from textual.geometry import Offset
from textual.selection import Selection
from textual.widgets import Static

from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import SnapshotArrived
from mlcost_tui.screens.details import DetailsScreen
from mlcost_tui.screens.hanging import HangingStatic, HangingText, hang_lines
from tests.tui.fixtures import StubClient, snapshot
from tests.tui.test_sizes import screen_text

ITEM = "a: stop process: sends SIGTERM"  # the sigterm recommendation's action line


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def test_continuation_lines_hang_under_their_item():
    text = Text("Kind training\n  steady GPU use of its own and no port it serves: a job "
                "(training unless its runtime, frames, name or job waits say inference)\n"
                "    " + "x" * 130 + "\nshort\n")
    lines = [line.plain for line in hang_lines(Content.from_rich_text(text), 80)]
    assert lines[0] == "Kind training"
    assert lines[1].startswith("  steady GPU") and len(lines[1]) <= 80
    assert indent(lines[2]) == 4 and lines[2].endswith("say inference)"), lines
    assert indent(lines[3]) == 4 and indent(lines[4]) == 6, lines  # a word longer than a line
    assert lines[-2:] == ["short", ""]
    assert all(len(line) <= 80 for line in lines), lines
    assert "".join(lines).replace(" ", "") == text.plain.replace(" ", "").replace("\n", "")
    assert str(HangingText(text)) == text.plain  # what a Static's Text gave its tests


async def open_recommendation(app: MlcostTop, pilot) -> DetailsScreen:
    app.post_message(SnapshotArrived((snapshot(),)))
    await pilot.pause()
    app.query_one("#recommendations").focus()
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(app.screen, DetailsScreen)
    return app.screen


@pytest.mark.asyncio
async def test_a_wrapped_item_on_the_details_screen_keeps_its_indent_at_80x24():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_recommendation(app, pilot)
        lines = screen_text(app)
        at = next(i for i, line in enumerate(lines) if ITEM in line)
        item, following = lines[at], lines[at + 1:at + 3]
        assert "daemon must allow" not in item  # it wraps at 80 columns
        # its continuation lines are under it, right of its indent, never at column 1
        assert [indent(line) for line in following] == [indent(item) + 2] * 2, lines
        assert following[1].strip() == "actions)", lines
        body = screen.query_one("#details-body", Static)
        assert all(len(line.rstrip()) <= body.region.right for line in lines)
        # selecting it with the mouse copies it as it is, one line, without the indents shown
        assert isinstance(body, HangingStatic) and body.region.y <= at
        whole = next(line for line in str(body.render()).splitlines() if ITEM in line)
        y = at - body.region.y
        selected = body.get_selection(Selection(Offset(0, y), Offset(body.region.width, y + 2)))
        assert selected is not None and selected[0] == whole, (selected, whole)
        left = indent(item) - body.region.x  # the item's indent in the body
        words = body.get_selection(Selection(Offset(left + 3, y), Offset(left + 2 + 3, y + 1)))
        assert words is not None and words[0] == "stop process: sends SIGTERM to the process " \
            "through mlcostd, after a dry run", words  # "a: " and " and" not selected


@pytest.mark.asyncio
async def test_an_item_that_fits_is_one_line_at_200x50():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 50)) as pilot:
        await open_recommendation(app, pilot)
        lines = screen_text(app)
        item = next(line for line in lines if ITEM in line)
        assert item.rstrip().endswith("the daemon must allow actions)"), lines
