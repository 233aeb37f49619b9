"""`?` over a toast: the help's screen has a toast rack of its own, on top, and Textual showed
the toasts already up there, over the keys' descriptions (at 80x24 those of a, x, k and h). The
toast shown waits while the help is open and comes back, for the time it had left, when it
closes (as one raised while it is open does: MlcostTop.on_notify).

The daemon is a real HTTP server on a real unix socket speaking mlcostd's API (test_hung_apply):
its apply hangs, so `a`'s "asking mlcostd…" toast stays up as long as the test needs."""

from __future__ import annotations

import pytest
from simhost import pilot_wait_for

from daemon.client import Client
from mlcost_tui import action_control
from mlcost_tui.app import MlcostTop
from mlcost_tui.screens.help import HelpScreen
from tests.tui.test_hung_apply import HungApply, main_screen


def toasts_on(screen) -> list[str]:
    """The text of the toasts the screen shows (its own toast rack's)."""
    return [str(toast.render()) for toast in screen.query("Toast")]


@pytest.mark.asyncio
async def test_the_help_opens_over_no_toast_and_the_toast_comes_back_after(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(action_control, "DRY_RUN_WAIT_S", 120.0)
    with HungApply(tmp_path / "mlcostd.sock") as daemon:
        app = MlcostTop([Client(f"unix:{tmp_path / 'mlcostd.sock'}")], interval_s=0.5)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await main_screen(app, pilot)
            main = app.screen
            await pilot.press("a")
            await pilot_wait_for(pilot, lambda: daemon.asked, what="the dry run asked")
            await pilot_wait_for(pilot, lambda: any("asking mlcostd" in t
                                                    for t in toasts_on(main)),
                                 what="the asking toast on the main screen")
            await pilot.press("question_mark")
            await pilot_wait_for(pilot, lambda: isinstance(app.screen, HelpScreen),
                                 what="the help")
            for _ in range(3):  # (Textual shows notifications on a new screen call_later)
                await pilot.pause()
            assert toasts_on(app.screen) == [], toasts_on(app.screen)
            await pilot.press("escape")
            await pilot_wait_for(pilot, lambda: app.screen is main, what="the help closed")
            await pilot_wait_for(pilot, lambda: any("asking mlcostd" in t
                                                    for t in toasts_on(main)),
                                 what="the asking toast back once the help closed")
            daemon.release.set()  # answered: the dialog, and the asking toast gone
            await pilot_wait_for(pilot, lambda: not any("asking mlcostd" in t for s in
                                                        app.screen_stack for t in toasts_on(s)),
                                 what="the asking toast taken back")
