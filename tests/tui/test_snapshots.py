"""Snapshot tests: the main screen and the details screens at the four terminal sizes people use
(80x24, 100x30, 120x36, 200x50), with fixed data fed through the SnapshotArrived message, a
frozen clock and a fixed host line; and the main screen after data that changes between frames,
so what is rendered is the tables' in-place update path. tests/tui/test_sizes.py asserts on the
same screens' text what must never be cut."""

from __future__ import annotations

import time

import pytest

from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import SnapshotArrived
from tests.tui.fixtures import TS, StubClient, changed_snapshot, snapshot

SIZES = [(80, 24), (100, 30), (120, 36), (200, 50)]


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the charts' time axes show local clock times
    time.tzset()
    monkeypatch.setattr(fmt, "clock", lambda: TS)
    monkeypatch.setattr(fmt, "clock_time", lambda ts: "12:00:00" if ts is not None else "-")
    yield
    monkeypatch.undo()
    time.tzset()  # back to the machine's zone for the tests after these


def make_app() -> MlcostTop:
    return MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]


async def feed(pilot) -> None:
    for _ in range(3):  # three polls: the sparkline has history
        pilot.app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=size, run_before=feed)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_process_details_screen(snap_compare, size):
    async def open_details(pilot):
        await feed(pilot)
        await pilot.press("enter")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=size, run_before=open_details)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_recommendation_details_screen(snap_compare, size):
    async def open_details(pilot):
        await feed(pilot)
        pilot.app.query_one("#recommendations").focus()
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=size, run_before=open_details)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen_after_changed_data(snap_compare, size):
    async def three_different_polls(pilot):
        for step in range(3):  # values change; rows are added, then removed
            pilot.app.post_message(SnapshotArrived((changed_snapshot(step),)))
            await pilot.pause()

    assert snap_compare(make_app(), terminal_size=size, run_before=three_different_polls)
