"""Serving latency in mlcost-top ([[cost.latency]]): the process details screen shows p50/p99
of the histogram configured for the process or its job, beside its SM share and the cost per
request, at 80x24 and at 200x50; text from the daemon is shown as text."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.fixtures import TS, StubClient, now_document


def with_latency(target: str = "chat") -> Now:
    doc = now_document(processes=4)
    doc["processes"][0]["job"] = "chat"
    doc["cost"]["latency"] = [
        {"target": target, "metric": "vllm:e2e_request_latency_seconds", "p50_seconds": 0.0526,
         "p99_seconds": 2.2, "requests": 200.0, "cost_per_request": 0.0000123, "error": None},
        {"target": "other", "metric": "m", "p50_seconds": 9.0, "p99_seconds": 9.0,
         "requests": 1.0, "cost_per_request": None, "error": None}]
    return Now.from_dict(doc)


def test_a_process_has_the_histograms_of_its_job_or_its_process_id():
    now = with_latency()
    (found,) = now.latency_of(now.processes[0])
    assert found.p99_seconds == 2.2 and found.target == "chat"
    assert now.latency_of(now.processes[1]) == ()
    by_key = with_latency(target=now.processes[2].key)
    assert [h.requests for h in by_key.latency_of(by_key.processes[2])] == [200.0]


def test_hostile_latency_text_arrives_as_one_line():
    doc = now_document(processes=1)
    doc["cost"]["latency"] = [{"target": "a\x1b[2Jjob\nx", "metric": "m\x07",
                               "error": "boom\x1b]0;title\x07"}]
    (found,) = Now.from_dict(doc).latency
    assert "\x1b" not in found.target + found.metric + (found.error or "")
    assert "\n" not in found.target


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_enter_on_the_process_shows_p50_p99_beside_its_sm_share_and_cost(size):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        now = with_latency()
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        table = app.query_one(ProcessPanel)
        table.focus()
        row = next(r for r in range(table.row_count)
                   if str(table.get_cell_at((r, 0))).strip() == str(now.processes[0].pid))
        table.move_cursor(row=row)
        await pilot.pause()
        app.action_details()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailsScreen)
        body = str(screen.query_one("#details-body", Static).render())
        assert "Latency p50 52.6 ms   p99 2.20 s   over 200 requests" in body
        assert "beside SM share 0%   $0.0123 per 1k requests" in body
        assert "9.00 s" not in body  # another job's histogram
