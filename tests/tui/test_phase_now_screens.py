"""mlcost-top shows the phase a process is in now (/v1/now's `phase_now`): a process back at
work after stacks that said `data_wait` reads `compute` in the process table and on its GPU's
screen, and its details say so above the balance of its last 30 minutes, which stays (probe 125
F16)."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.fixtures import TS, StubClient, now_document

BACK_AT_WORK = "1001:1700000001.000"  # pid 1001: its stacks said data_wait


def back_at_work() -> HostSnapshot:
    doc = now_document()
    proc = next(p for p in doc["processes"] if p["key"] == BACK_AT_WORK)
    assert proc["phase"] == "data_wait"
    proc.update(phase_now="compute", sm_share=95.0)
    proc["gpus"][0]["sm_share"] = 95.0
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_a_process_back_at_work_reads_compute_and_its_details_say_why(size):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((back_at_work(),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        row = procs.get_row_index(BACK_AT_WORK)
        cells = [str(c) for c in procs.get_row_at(row)]
        assert "compute" in cells and "data_wait" not in cells, cells
        procs.focus()
        procs.move_cursor(row=row)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        body = str(app.screen.query_one("#details-body", Static).render())
        assert "now: compute (SM share 95%)" in body, body
        assert "mostly data_wait, was sampled before it went back to work" in body, body


@pytest.mark.asyncio
async def test_a_quiet_process_reads_its_quiet_phase_and_its_details_do_not_say_back_at_work():
    """Its GPU quiet, its stacks say it is saving a checkpoint while its balance is mostly
    data_wait: the details say what its stacks say now, not that it went back to work."""
    doc = now_document()
    proc = next(p for p in doc["processes"] if p["key"] == BACK_AT_WORK)
    proc.update(phase_now="checkpoint", sm_share=0.0)
    proc["gpus"][0]["sm_share"] = 0.0
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 50)) as pilot:
        app.post_message(SnapshotArrived((
            HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        row = procs.get_row_index(BACK_AT_WORK)
        assert "checkpoint" in [str(c) for c in procs.get_row_at(row)]
        procs.focus()
        procs.move_cursor(row=row)
        await pilot.press("enter")
        await pilot.pause()
        body = str(app.screen.query_one("#details-body", Static).render())
        assert "now: checkpoint (SM share 0%): its GPU is quiet" in body, body
        assert "went back to work" not in body, body
