"""The first frame shows real figures: mlcost-top fetches /v1/now from a running mlcostd before
its App starts (plain HTTP over the unix socket, no aiohttp), and renders it on mount; a daemon
that does not answer costs at most the short deadline and the App starts as before."""

from __future__ import annotations

import asyncio
import socket

import pytest

from daemon.client import Client
from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.gpus import GpuPanel
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.prefetch import first_snapshot
from mlcost_tui.sources import STARTING_RETRY_S, LiveSource
from tests.tui.fixtures import ScriptedDaemon


@pytest.fixture(scope="module")
def running(shared_daemon):
    return f"unix:{shared_daemon.socket}"  # the session's shared daemon, a few ticks in


def test_the_first_snapshot_comes_from_the_running_daemon(running):
    snap = first_snapshot(running)
    assert snap is not None and snap.error is None and snap.now is not None
    assert snap.now.ts is not None and len(snap.now.gpus) == 1


def test_no_daemon_is_no_first_snapshot(tmp_path):
    assert first_snapshot(f"unix:{tmp_path / 'none.sock'}") is None
    assert first_snapshot("http://127.0.0.1:9") is None


def test_a_daemon_that_never_answers_costs_only_the_deadline(tmp_path):
    # A listener that accepts and then says nothing: without the deadline this call would
    # block for good (how long the deadline is, is bench/tui_refresh.py's business).
    path = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(str(path))
        silent.listen(1)
        assert first_snapshot(f"unix:{path}", timeout_s=0.2) is None


@pytest.mark.asyncio
async def test_the_first_frame_has_the_prefetched_figures(running):
    first = first_snapshot(running)
    app = MlcostTop([Client(running)], first=first, interval_s=30)
    async with app.run_test(size=(120, 36)):
        # no pause, no poll: on_mount rendered it
        assert app.query_one(GpuPanel).row_count == 1
        header = str(app.query_one(HeaderPanel).render())
        # answering: live, or slow on a loaded machine (tests/tui/test_header_price.py)
        assert "burn $" in header and ("● live" in header or "● slow daemon" in header)
        assert "connecting" not in header
        assert app.first_data_at is not None


def test_a_daemon_that_answers_without_a_tick_yet_is_polled_again_soon():
    for answer, delay in (({"ts": None, "tick": 0}, STARTING_RETRY_S),
                          ({"ts": 1.7e9, "tick": 1}, 1.0)):
        source = LiveSource([ScriptedDaemon("d", Now.from_dict(answer))],  # type: ignore[list-item]
                            interval_s=1.0)
        asyncio.run(source.fetch_all())
        assert source.retry_delay(starting=True) == delay
