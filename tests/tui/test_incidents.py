"""`s` in mlcost-top takes a snapshot of the last 30 minutes through a real mlcostd and says
where it went; an event that gets an incident snapshot is announced once with its file; a
replayed snapshot shows its trigger in the header."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from simhost import pilot_wait_for

from daemon.client import Client
from daemon.replay import Replay
from daemon.store.snapshot import write_snapshot
from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.incidents import EventSnapshots
from mlcost_tui.messages import HostSnapshot
from mlcost_tui.sources import ReplaySource


@pytest.fixture(scope="module")
def live_daemon(mlcostd):
    daemon = mlcostd("idle-host", interval=0.5)
    daemon.wait_for_ticks(3)
    return daemon


def _recording_notes(app: MlcostTop) -> list[str]:
    """What the app notifies, as it notifies it (App.notify still shows each)."""
    notes: list[str] = []
    shown = app.notify

    def notify(message: str, **kwargs) -> None:
        notes.append(message)
        shown(message, **kwargs)

    app.notify = notify  # type: ignore[method-assign]
    return notes


@pytest.mark.asyncio
async def test_s_takes_a_snapshot_through_the_daemon_and_shows_where(live_daemon):
    app = MlcostTop([Client(f"unix:{live_daemon.socket}")])
    notes = _recording_notes(app)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot_wait_for(pilot, lambda: app.hosts and app.hosts[0].now is not None)
        await pilot.press("s")
        await pilot_wait_for(pilot, lambda: any("snapshot: " in n for n in notes))
        note = next(n for n in notes if "snapshot: " in n)
        path = Path(note.split("snapshot: ", 1)[1].splitlines()[0]).expanduser()
        assert path.parent == live_daemon.folder / "snapshots" and path.exists()
        assert "html beside it" in note and path.with_suffix(".html").exists()
        with Replay(path) as replay:
            assert replay.snapshot is not None and replay.snapshot["trigger"]["kind"] == "manual"
            assert replay.end - replay.start > 0.5
        await pilot.press("q")


def _host(events: list[dict]) -> HostSnapshot:
    now = Now.from_dict({"ts": 1.0, "tick": 1, "host": {"hostname": "h"}, "gpus": [],
                         "processes": [], "events": events, "recommendations": []})
    return HostSnapshot("h", now, None, 0.0, 0.0)


def test_an_event_snapshot_is_announced_once_and_not_the_old_ones():
    seen = EventSnapshots()
    old = {"id": "a", "kind": "host_idle", "target": "host", "snapshot": "/s/old.db"}
    new = {"id": "b", "kind": "gpu_held_idle", "target": "gpu:3", "snapshot": "/s/new.db"}
    assert seen.news([_host([old])]) == []  # there before mlcost-top started: not news
    assert seen.news([_host([old, {**new, "snapshot": None}])]) == []
    assert seen.news([_host([old, new])]) == ["gpu_held_idle gpu:3\nsnapshot: /s/new.db"]
    assert seen.news([_host([old, new])]) == []


def test_a_replayed_snapshot_shows_its_trigger(live_daemon, tmp_path):
    out = tmp_path / "s.db"
    now = time.time()
    write_snapshot(live_daemon.db, out, now - 600, now,
                   trigger={"kind": "gpu_held_idle", "reason": "gpu:0 is held idle"})
    source = ReplaySource(Replay(out))
    try:
        assert "snapshot: gpu:0 is held idle" in (source.status(False) or "")
    finally:
        source.close()
