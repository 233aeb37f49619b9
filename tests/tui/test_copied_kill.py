"""The kill command mlcost-top copies (`a` on a SIGTERM recommendation, then `c`) is pasted into
a shell later, when the pid may be another process's: it signals only the process mlcost saw
(its start time, `ps -o lstart=`), and otherwise says so and signals nothing.

The daemon is a real HTTP server on a real unix socket speaking mlcostd's API: /v1/now lists a
SIGTERM recommendation for a process of the test's own, and the dry run is daemon.api.actions'
(the steps the daemon gives to copy). The copied line runs in a real bash."""

from __future__ import annotations

import json
import signal
import socketserver
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import psutil
import pytest
from simhost import pilot_wait_for

from daemon.api import actions
from daemon.client import Client
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from tests.tui.fixtures import now_document


class SigtermDaemon:
    """mlcostd's API on `path`, recommending a SIGTERM to `pid` (started at `start`)."""

    def __init__(self, path: Path, pid: int, start: float) -> None:
        document = now_document()
        [rec] = [r for r in document["recommendations"] if r["action"]["kind"] == "sigterm"]
        rec["action"] = dict(rec["action"], pid=pid, start_time=start)
        document["recommendations"] = [rec]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._answer(document if self.path.startswith("/v1/now") else {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                assert body["dry_run"] is True  # (the test never confirms)
                self._answer(actions.apply(rec, True).as_dict())

            def _answer(self, answer: dict) -> None:
                raw = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        self.server = Server(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SigtermDaemon:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def pasted(line: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30)


@pytest.mark.asyncio
async def test_the_copied_kill_signals_the_process_mlcost_saw_and_nothing_once_it_is_gone(
        tmp_path):
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        start = psutil.Process(idle.pid).create_time()
        with SigtermDaemon(tmp_path / "mlcostd.sock", idle.pid, start):
            app = MlcostTop([Client(f"unix:{tmp_path / 'mlcostd.sock'}")], interval_s=0.5)
            async with app.run_test(size=(80, 24)) as pilot:
                recs = app.query_one(RecommendationTable)
                await pilot_wait_for(pilot, lambda: recs.row_count == 1,
                                     what="the SIGTERM recommendation")
                recs.focus()
                await pilot.press("a")
                await pilot_wait_for(pilot, lambda: isinstance(app.screen, ActionScreen),
                                     what="the dry run's dialog")
                await pilot.press("c")
                await pilot_wait_for(pilot, lambda: bool(app.clipboard), what="the copy")
                [line] = app.clipboard.splitlines()
        assert "ps -o lstart=" in line and f"kill -TERM {idle.pid}" in line, line
        # the process mlcost saw: signalled
        ran = pasted(line)
        assert ran.returncode == 0 and ran.stdout == "", ran
        assert idle.wait(timeout=30) == -signal.SIGTERM
        # pasted again once it is gone (its pid free, or another process's): nothing is
        # signalled, and it says so
        again = pasted(line)
        assert again.returncode == 0, again
        assert f"pid {idle.pid} is not the process mlcost saw" in again.stdout, again
    finally:
        if idle.poll() is None:
            idle.kill()
            idle.wait()
