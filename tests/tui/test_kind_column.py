"""The workload kind in the TUI: a narrow `kind` column on a wide screen (200 columns) and not
at 80, and the process details screen saying the kind, how sure, why, and that a server is
never offered SIGTERM."""

from __future__ import annotations

import pytest

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.fixtures import TS, StubClient, now_document

KINDS = ["online_inference", "training", "notebook", "other"]


def with_kinds() -> Now:
    doc = now_document(processes=4)
    for i, proc in enumerate(doc["processes"]):
        proc.update(kind=KINDS[i], kind_confidence=0.85,
                    kind_evidence=["listens on TCP port 8000", "serving frames in a thread "
                                   "(serve_forever)"] if i == 0 else ["'train' on its command line"],
                    serves=i == 0)
    return Now.from_dict(doc)


@pytest.mark.asyncio
@pytest.mark.parametrize("size, visible", [((200, 50), True), ((80, 24), False)])
async def test_the_kind_column_fits_at_200_columns_and_not_at_80(size, visible):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", with_kinds(), None,
                                                       0.01, TS),)))
        await pilot.pause()
        table = app.query_one(ProcessPanel)
        assert ("kind" in table.shown_keys) is visible
        if visible:
            index = table.get_column_index("kind")
            cells = {str(table.get_cell_at((row, 0))).strip():
                     str(table.get_cell_at((row, index))).strip()
                     for row in range(table.row_count)}
            assert cells["1000"] == "serve" and cells["1001"] == "train"


@pytest.mark.asyncio
async def test_the_details_screen_says_the_kind_and_why():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        now = with_kinds()
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        server = next(p for p in now.processes if p.pid == 1000)
        screen = DetailsScreen(server)
        text = screen._process_text(server).plain
        assert "Kind online_inference (85% sure)" in text
        assert "serves: never offered SIGTERM" in text
        assert "listens on TCP port 8000" in text
