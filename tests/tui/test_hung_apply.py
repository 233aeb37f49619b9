"""`a` against a daemon that takes the request and does not answer (hung, SIGSTOPped): mlcost-top
says at once that it asks, says when the daemon did not answer in time, and never opens the
dry run's dialog late over another screen (probe 125 F18: nothing on `a`, then the dialog
popped up 10 s later over the help).

The daemon is a real HTTP server on a real unix socket speaking mlcostd's API: /v1/now answers
the fixture document; an apply waits until the test lets it go (as SIGCONT does)."""

from __future__ import annotations

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from simhost import pilot_wait_for

from daemon.client import Client
from mlcost_tui import action_control
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from tests.tui.fixtures import now_document


class HungApply:
    """mlcostd's API on `path`, whose apply hangs until `release` is set."""

    def __init__(self, path: Path) -> None:
        self.release = threading.Event()
        self.asked: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._answer(now_document() if self.path.startswith("/v1/now") else {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                rec_id = self.path.split("/")[3]
                outer.asked.append(rec_id)
                outer.release.wait(120)  # hung until let go
                self._answer({"id": rec_id, "kind": "show_patch", "dry_run": body["dry_run"],
                              "done": False, "message": "a patch", "patch": "+prefetch"})

            def _answer(self, document: dict) -> None:
                raw = json.dumps(document).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:  # the client gave up on it
                    pass

            def log_message(self, *args: object) -> None:
                pass

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        self.server = Server(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HungApply:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def said(app: MlcostTop) -> list[str]:
    """The toast shown, and the one the help holds back."""
    held = [app._held_toast.message] if app._held_toast is not None else []
    return [n.message for n in app._notifications] + held


async def main_screen(app: MlcostTop, pilot) -> None:
    recs = app.query_one(RecommendationTable)
    await pilot_wait_for(pilot, lambda: recs.row_count >= 1, what="the daemon's recommendations")
    recs.focus()
    await pilot.pause()


@pytest.mark.asyncio
async def test_a_says_it_asks_and_an_answer_after_the_user_moved_on_opens_no_dialog(
        tmp_path, monkeypatch):
    monkeypatch.setattr(action_control, "DRY_RUN_WAIT_S", 120.0)  # answered, late
    with HungApply(tmp_path / "mlcostd.sock") as daemon:
        app = MlcostTop([Client(f"unix:{tmp_path / 'mlcostd.sock'}")], interval_s=0.5)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await main_screen(app, pilot)
            main = app.screen
            await pilot.press("a")
            await pilot_wait_for(pilot, lambda: daemon.asked, what="the dry run asked")
            # while no answer comes (the daemon holds it): it says it asks
            await pilot_wait_for(pilot, lambda: any("asking mlcostd for the dry run" in m
                                                    for m in said(app)),
                                 what="a toast saying it asks the daemon")
            await pilot.press("question_mark")
            await pilot.pause()
            help_screen = app.screen
            assert help_screen is not main
            daemon.release.set()  # the daemon answers now (SIGCONT)
            await pilot_wait_for(pilot, lambda: any("came back after you left" in m for m in said(app)),
                                 what="the late answer said")
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.screen is help_screen  # no dialog over the help
            assert not any(isinstance(s, ActionScreen) for s in app.screen_stack)


@pytest.mark.asyncio
async def test_a_says_when_the_daemon_does_not_answer_and_nothing_opens_later(
        tmp_path, monkeypatch):
    monkeypatch.setattr(action_control, "DRY_RUN_WAIT_S", 1.0)
    with HungApply(tmp_path / "mlcostd.sock") as daemon:
        app = MlcostTop([Client(f"unix:{tmp_path / 'mlcostd.sock'}")], interval_s=0.5)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await main_screen(app, pilot)
            main = app.screen
            await pilot.press("a")
            await pilot_wait_for(pilot, lambda: any("did not answer within 1 s" in m
                                                    for m in said(app)),
                                 what="a toast saying the daemon did not answer")
            message = next(m for m in said(app) if "did not answer" in m)
            assert "nothing was done" in message and "press a again" in message, message
            daemon.release.set()  # it answers after all, too late
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.screen is main
            assert not any(isinstance(s, ActionScreen) for s in app.screen_stack)


@pytest.mark.asyncio
async def test_the_answer_takes_back_its_asking_toast_and_no_other(tmp_path, monkeypatch):
    """The "asking mlcostd…" toast goes when the daemon answers; a toast that replaced it
    meanwhile (an incident's notice) stays for its time (clear_notifications took it too)."""
    monkeypatch.setattr(action_control, "DRY_RUN_WAIT_S", 120.0)
    with HungApply(tmp_path / "mlcostd.sock") as daemon:
        app = MlcostTop([Client(f"unix:{tmp_path / 'mlcostd.sock'}")], interval_s=0.5)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await main_screen(app, pilot)
            await pilot.press("a")
            await pilot_wait_for(pilot, lambda: daemon.asked, what="the dry run asked")
            await pilot_wait_for(pilot, lambda: any("asking mlcostd" in m for m in said(app)),
                                 what="the asking toast")
            app.notify("an incident snapshot was written to /s/new.db", timeout=120)
            await pilot_wait_for(pilot, lambda: any("incident" in m for m in said(app)),
                                 what="the incident's toast")
            daemon.release.set()
            await pilot_wait_for(pilot, lambda: isinstance(app.screen, ActionScreen),
                                 what="the dry run's dialog")
            await pilot.pause()
            assert any("incident snapshot" in m for m in said(app)), said(app)
            assert not any("asking mlcostd" in m for m in said(app)), said(app)


@pytest.mark.asyncio
async def test_the_answer_takes_back_its_asking_toast_alone_over_the_help(tmp_path, monkeypatch):
    """Asked, then the help opened (it holds the asking toast), then answered: the held
    asking toast is dropped, not shown when the help closes; the late answer is said."""
    monkeypatch.setattr(action_control, "DRY_RUN_WAIT_S", 120.0)
    with HungApply(tmp_path / "mlcostd.sock") as daemon:
        app = MlcostTop([Client(f"unix:{tmp_path / 'mlcostd.sock'}")], interval_s=0.5)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            await main_screen(app, pilot)
            await pilot.press("a")
            await pilot_wait_for(pilot, lambda: any("asking mlcostd" in m for m in said(app)),
                                 what="the asking toast")
            await pilot.press("question_mark")
            await pilot.pause()
            daemon.release.set()
            await pilot_wait_for(pilot, lambda: any("came back after you left" in m
                                                    for m in said(app)),
                                 what="the late answer said")
            await app.workers.wait_for_complete()
            await pilot.press("escape")
            await pilot_wait_for(pilot, lambda: any("came back after you left" in n.message
                                                    for n in app._notifications),
                                 what="the held toast shown once the help closed")
            assert not any("asking mlcostd" in m for m in said(app)), said(app)
