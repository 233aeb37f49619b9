"""A daemon that goes away, against a real mlcostd: the panels keep its last answer, dimmed, the
status line says as of when, and a local daemon is asked again every 2 s at most, so one that
is started again shows within a couple of seconds (probe 125 F3: the dead processes and the burn
stayed at full colour with nothing saying they were old, and the retries climbed to 10 s)."""

from __future__ import annotations

import asyncio
import re

import pytest
from simhost import pilot_wait_for

from daemon.client import Client
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.gpus import GpuPanel
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.sources import LOCAL_RETRY_MAX_S
from tests import livedaemon


@pytest.fixture
def daemon(mlcostd):
    return mlcostd("idle-host", interval=0.5)


def header_lines(app: MlcostTop) -> list[str]:
    return str(app.query_one(HeaderPanel).render()).splitlines()


@pytest.mark.asyncio
async def test_a_stopped_daemon_dims_the_panels_says_as_of_when_and_is_retried_soon(daemon):
    app = MlcostTop([Client(f"unix:{daemon.socket}")], interval_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        panels = (app.query_one(GpuPanel), app.query_one(ProcessPanel),
                  app.query_one(RecommendationTable))
        await pilot_wait_for(pilot, lambda: panels[1].row_count >= 1 and app.hosts
                             and app.hosts[0].error is None, what="the daemon's processes")
        assert not any(p.has_class("stale") for p in panels)
        assert not any(p.styles.text_style.dim for p in panels)
        answered = app.hosts[0].received_at

        await asyncio.to_thread(daemon.stop)
        await pilot_wait_for(pilot, lambda: "no daemon" in header_lines(app)[-1],
                             what="the header saying the daemon is gone")
        status = header_lines(app)[-1]
        # (at 80 columns: before the error text, which the edge cuts)
        assert re.search(r"as of \d\d:\d\d:\d\d, \d+s ago", status), status
        assert app.hosts[0].answered_at is not None and app.hosts[0].answered_at >= answered
        assert panels[1].row_count >= 1  # the last answer is still shown, dimmed
        assert all(p.has_class("stale") for p in panels)
        assert all(p.styles.text_style.dim for p in panels)  # every colour, the ANSI ones too

        # after many failures in a row, the next try is still at most 2 s away
        await pilot_wait_for(pilot, lambda: app.hosts[0].attempt >= 6,
                             what="six failed polls in a row")
        await pilot_wait_for(pilot, lambda: "retrying in" in header_lines(app)[-1],
                             what="the retry in the status line")
        shown = re.search(r"retrying in (\d+)s", header_lines(app)[-1])
        assert shown is not None and int(shown.group(1)) <= LOCAL_RETRY_MAX_S, \
            header_lines(app)[-1]

        # started again on the same socket: live again, at full colour
        again = await asyncio.to_thread(livedaemon.start, daemon.folder, "idle-host",
                                        interval=0.5)
        try:
            await pilot_wait_for(pilot, lambda: app.hosts[0].error is None,
                                 what="the restarted daemon's answer")
            await pilot.pause()
            assert not any(p.has_class("stale") for p in panels)
            assert "as of" not in header_lines(app)[-1]
        finally:
            await asyncio.to_thread(again.stop)
