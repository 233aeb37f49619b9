"""Where toasts appear on the main screen: at the top right over the GPU panel, one at a time,
never over the process rows, the recommendations or the key line (README "mlcost-top") — also
after bursts of keys that each say something (a tester's `s` then `>` three times 0.1 s apart put
the snapshot's toast over the processes, and after more bursts a toast covered the key line)."""

from __future__ import annotations

import asyncio

import pytest
from simhost import pilot_wait_for

from mlcost_tui import format as fmt
from mlcost_tui.app import SNAPSHOT_TOAST_S, MlcostTop
from mlcost_tui.incidents import describe
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from tests.tui.fixtures import TS, StubClient
from tests.tui.test_new_user_screens import shown

SIZES = [(80, 24), (200, 50)]
IDS = [f"{w}x{h}" for w, h in SIZES]
FOLDER = "/home/someone/.local/state/mlcost/demo/mlcost-vm-20261205T084459Z-manual"


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setattr(fmt, "clock", lambda: TS)


def snapshot_said() -> str:
    return describe({"path": FOLDER + ".db", "html": FOLDER + ".html", "ticks": 120,
                     "bytes": 1_200_000})


def toasts_in_place(app: MlcostTop) -> None:
    """One toast, starting on the first line under the header, over none of the panels a key
    acts on nor the key line."""
    toasts = list(app.screen.query("Toast"))
    assert len(toasts) == 1, [str(t.render()) for t in toasts]
    toast = toasts[0].region
    header = app.query_one(HeaderPanel).region
    assert toast.y == header.bottom + 1, toast  # (the toast's own margin: one line)
    for panel in (app.query_one(ProcessPanel), app.query_one(RecommendationTable)):
        assert not toast.overlaps(panel.region), (toast, panel.region)
    assert toast.bottom <= app.size.height - 1, toast  # above the key line


async def burst(pilot, keys: list[str], gap_s: float) -> None:
    for key in keys:
        await pilot.press(key)
        await asyncio.sleep(gap_s)
        await pilot.pause()


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_toasts_stay_under_the_header_after_bursts_of_keys(size):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        await shown(pilot)
        app.notify("taking a snapshot of the last 30 minutes…", timeout=3)
        await pilot.pause()
        await burst(pilot, [">"] * 3, 0.1)
        app.notify(snapshot_said(), title="snapshot", timeout=SNAPSHOT_TOAST_S)
        await pilot_wait_for(pilot, lambda: [t._notification.title for t in app.screen.query(
            "Toast")] == ["snapshot"], what="the snapshot's toast alone")
        await pilot.pause()
        toasts_in_place(app)
        # more: six sorts 0.05 s apart, two snapshots and a sort
        await burst(pilot, [">"] * 6, 0.05)
        for _ in range(2):
            app.notify("taking a snapshot of the last 30 minutes…", timeout=3)
            await asyncio.sleep(0.05)
            await pilot.pause()
        await burst(pilot, [">"], 0.05)
        app.notify(snapshot_said(), title="snapshot", timeout=SNAPSHOT_TOAST_S)
        await pilot_wait_for(pilot, lambda: [t._notification.title for t in app.screen.query(
            "Toast")] == ["snapshot"], what="the snapshot's toast alone")
        await pilot.pause()
        toasts_in_place(app)


def one_gpu_host():
    from daemon.wire import Now
    from mlcost_tui.messages import HostSnapshot
    from tests.tui.fixtures import now_document

    return HostSnapshot("unix:/test.sock", Now.from_dict(now_document(processes=3, gpus=1)),
                        None, 0.01, TS)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_over_a_short_gpu_panel_a_toast_covers_the_header_not_the_processes(size):
    """One GPU: three rows under the header, where the snapshot's five-line toast reached down
    over the process panel's title and first rows. It goes up over the header's right side;
    one longer than everything above the processes is cut with `…`."""
    from mlcost_tui.messages import SnapshotArrived

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        app.post_message(SnapshotArrived((one_gpu_host(),)))
        await pilot.pause()
        await pilot.pause()
        processes = app.query_one(ProcessPanel).region
        for message in (snapshot_said(), "dry run failed: " + "the daemon said no. " * 40):
            app.notify(message, title="snapshot", timeout=SNAPSHOT_TOAST_S)
            await pilot_wait_for(pilot, lambda m=message: [
                t._notification.message[:20] for t in app.screen.query("Toast")] == [m[:20]],
                what="the new toast alone")
            await pilot.pause()
            toast = app.screen.query_one("Toast").region
            assert toast.bottom <= processes.y, (toast, processes)
            assert toast.y >= 1  # its title on screen
        assert str(app.screen.query_one("Toast").render()).endswith("…")


def test_a_toast_that_fits_under_the_header_starts_there():
    from mlcost_tui import toasts

    said = snapshot_said()
    assert toasts.fit(said, "snapshot", 80, free_above=11, under_header=3) == (said, 3)
    # three rows under the header: up by as many rows as it needs more
    message, margin = toasts.fit(said, "snapshot", 80, free_above=6, under_header=3)
    assert message == said and margin == 0
    message, margin = toasts.fit("x " * 400, "", 80, free_above=6, under_header=3)
    assert margin == 0 and len(message.splitlines()) == 5 and message.endswith("…")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_toast_raised_over_the_help_waits_until_it_closes(size):
    """A recommendation that went while `?` was open put its toast over the help's key list
    (`a ▌ recommendation gone`, `x ▌ resolved: …`), hiding what a, x, k and h do (probe 125
    F4). It is shown once the help closes, where toasts go on the main screen."""
    from mlcost_tui.screens.help import HelpScreen

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        await shown(pilot)
        await pilot.press("question_mark")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        said = "resolved: idle_gpu_held no longer applies (its process exited)"
        app.notify(said, title="recommendation gone", timeout=SNAPSHOT_TOAST_S)
        await pilot.pause()
        await pilot.pause()
        assert not list(app.screen.query("Toast")), "a toast over the help"
        await pilot.press("escape")
        await pilot_wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen)
                             and list(app.screen.query("Toast")), timeout=30, what="the held toast")
        assert [t._notification.message for t in app.screen.query("Toast")] == [said]
        toasts_in_place(app)
