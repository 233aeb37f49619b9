"""`mlcost-top --demo` once the demo's own daemon has exited (probe 148 L4): `a` and `h` said
"start it with `sudo mlcostd run` ... or try `mlcost-top --demo`" with a raw
`FileNotFoundError: [Errno 2]`, nothing said the demo's daemon had exited, and the line printed
at quit pointed at a demo.db in the folder the demo deletes. Now the demo says its daemon
exited and how to have one again, with no exception text, and points at nothing deleted. A real
embedded daemon (the demo's own code) on the simulated idle host, stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import signal

import pytest
from simhost import pilot_wait_for

from daemon.client import Client
from mlcost_tui.app import MlcostTop
from mlcost_tui.demo import EmbeddedDaemon
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.screens.history import HistoryScreen

EXITED = "the demo's mlcostd exited"
AGAIN = "run `mlcost-top --demo` again for a new one"


@pytest.fixture
def demo(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    daemon = EmbeddedDaemon("idle-host", ec2=False)
    daemon.start()
    try:
        assert daemon.wait_ready(120), daemon.failure()
        yield daemon
    finally:
        daemon.stop()


def toasts(app: MlcostTop) -> list[str]:
    return [str(toast.render()) for screen in app.screen_stack for toast in screen.query("Toast")]


def clean(text: str, demo: EmbeddedDaemon) -> None:
    """Says what happened in the demo's words: no raw exception, no advice for a real host,
    nothing in the folder the demo deletes."""
    for wrong in ("Error", "Errno", "sudo mlcostd run", "or try", str(demo.folder)):
        assert wrong not in text, (wrong, text)


@pytest.mark.asyncio
async def test_the_demo_says_its_daemon_exited_and_how_to_start_a_new_one(demo):
    app = MlcostTop([Client(demo.target)], interval_s=0.5, starting="starting the demo…",
                    start_failure=demo.failure)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot_wait_for(pilot, lambda: app.now is not None and app.starting is None,
                             what="the demo's first figures")
        assert demo.process is not None
        demo.process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(demo.process.wait, 30)

        def status() -> str:
            return str(app.query_one(HeaderPanel).render()).splitlines()[-1]

        await pilot_wait_for(pilot, lambda: "no daemon" in status(),
                             what="the header saying the daemon is gone")
        # (a poll failed while it was still stopping reads as any lost daemon; the next says)
        await pilot_wait_for(pilot, lambda: EXITED in status(), timeout=20.0,
                             what="the header saying the demo's daemon exited")
        assert "retrying" not in status(), status()
        # (nothing restarts it: no countdown to a retry)
        clean(status(), demo)
        for key in ("a", "h"):
            await pilot.press(key)
            await pilot_wait_for(pilot, lambda: any(EXITED in t for t in toasts(app)),
                                 what=f"{key}: the toast saying the demo's daemon exited")
            said = next(t for t in toasts(app) if EXITED in t)
            assert AGAIN in said, said
            clean(said, demo)
            assert not isinstance(app.screen, HistoryScreen)
            app.clear_notifications()
    # the line printed at quit (cli.py prints demo.failure() before the snapshots' note)
    failure = demo.failure()
    assert failure is not None and failure.startswith(EXITED) and AGAIN in failure, failure
    clean(failure, demo)
    assert "everything recorded is in" not in failure, failure
