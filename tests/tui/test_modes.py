"""Each mode says what works in it: the help lists only the keys that act here (no binding ids,
each screen's keys once, ctrl+p), and in a replay the keys that need a daemon say why they
do nothing instead of doing nothing silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import SnapshotArrived
from mlcost_tui.screens.help import HelpScreen
from tests.tui.fixtures import TS, StubClient, now_document, snapshot


class RecordedStore:
    """A stand-in for daemon.replay.Replay: three recorded ticks of the fixture's host."""

    path = Path("/recordings/gpu-box-1.db")
    interval_s = 1.0
    snapshot = None  # a recorded store, not a snapshot: no trigger

    def times(self) -> list[float]:
        return [TS, TS + 1, TS + 2]

    def state_at(self, ts: float) -> dict:
        doc = now_document()
        doc["ts"], doc["tick"] = ts, int(ts - TS)
        return doc

    def close(self) -> None:
        pass


async def help_text(app: MlcostTop, pilot) -> str:
    await pilot.press("question_mark")
    await pilot.pause()
    assert isinstance(app.screen, HelpScreen)
    text = app.screen.text().plain
    await pilot.press("escape")
    return text


@pytest.mark.asyncio
async def test_live_help_lists_the_live_keys_once_without_ids():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        text = await help_text(app, pilot)
    assert "Mode: live" in text
    for line in ("Stop idle process", "Apply recommendation", "History", "ctrl+p",
                 "click a header"):
        assert line in text
    assert "app." not in text and "details.back" not in text  # no binding ids
    assert "Replay" not in text and "tick" not in text  # another mode's keys
    assert text.count("back to the main screen") == 1
    # keys that work but were not listed: bring back a snoozed recommendation (u works at any
    # time since probe 125 F17), compare a process's runs on its details
    assert "Bring back a snoozed recommendation" in text
    assert "copy `mlcostd compare --previous`" in text


@pytest.mark.asyncio
async def test_replay_help_has_replay_keys_and_no_actions():
    app = MlcostTop([], poll=False, replay=RecordedStore())  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = await help_text(app, pilot)
    assert "Mode: replay of gpu-box-1.db" in text
    assert "Replay: forward one tick" in text and "Replay: back one minute" in text
    for action in ("Apply recommendation", "Snooze", "Stop idle", "History"):
        assert action not in text


@pytest.mark.asyncio
@pytest.mark.parametrize("key", ["a", "x", "k", "h"])
async def test_replay_keys_that_need_a_daemon_say_why(key, monkeypatch):
    app = MlcostTop([], poll=False, replay=RecordedStore())  # type: ignore[arg-type]
    said: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        monkeypatch.setattr(app, "notify", lambda message, **kw: said.append(message))
        await pilot.press(key)
        await pilot.pause()
    assert said and "replay" in said[0] and "live daemon" in said[0]


@pytest.mark.asyncio
async def test_copy_says_what_it_did_and_how_to_copy_by_hand(monkeypatch):
    from mlcost_tui.panels.recommendations import RecommendationTable
    from mlcost_tui.screens.action import ActionScreen, copy_note

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    copied: list[str] = []
    said: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
        table = app.query_one(RecommendationTable)
        table.focus()
        table.move_cursor(row=1)  # the patch
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ActionScreen)
        monkeypatch.setattr(app.screen, "notify", lambda message, **kw: said.append(message))
        await pilot.press("c")
        await pilot.pause()
        assert copied == ["+DataLoader(ds, num_workers=8)"]
        assert isinstance(app.screen, ActionScreen)  # still open: the text can be selected
    assert said and "OSC 52" in said[0] and "select the text" in said[0]
    assert "copied to the clipboard" not in said[0]
    assert "set-clipboard on" in copy_note({"TMUX": "/tmp/tmux-0/default,1,0"})


@pytest.mark.asyncio
async def test_space_plays_a_replay_and_the_footer_says_play():
    app = MlcostTop([], poll=False, replay=RecordedStore())  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        keys = {b.binding.id for b in app.active_bindings.values() if b.enabled}
        assert "replay.play" in keys and "app.pause" not in keys
        await pilot.press("space")
        assert app.playing and not app.paused
        await pilot.press("space")
        assert not app.playing
