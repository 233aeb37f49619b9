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


AUDIT = {
    "runtime": "pytorch_eager", "runtime_evidence": ["maps torch", "no serving runtime mapped"],
    "quantization": [], "quantization_evidence": [],
    "batching": {"sm_share_at_load": 12.0, "sm_share_mean": 8.1, "sm_readings": 150,
                 "requests_per_kernel": None,
                 "requests_per_kernel_note": "not visible from outside the process"},
    "advice": [{"name": "dynamic_batching", "text": "batch requests on the server",
                "evidence": ["SM share at load 12.0%"], "saving_share": 0.5,
                "saving_method": "50% of its burn", "uncertainty": "medium: from SM share",
                "saving_per_month": 1495.2}],
}


def with_audit(source: str = "observed") -> Now:
    doc = now_document(processes=4)
    server = doc["processes"][0]
    server.update(kind="online_inference", kind_confidence=0.85, serves=True,
                  kind_evidence=["listens on TCP port 8000"], kind_source=source,
                  inference=AUDIT)
    doc["processes"][1].update(kind="training", kind_confidence=0.6, kind_source="observed",
                               kind_evidence=["'train' on its command line"], inference=None)
    return Now.from_dict(doc)


def details_text(screen: DetailsScreen) -> str:
    return str(screen.query_one("#details-body").render())


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_details_screen_shows_the_kind_source_and_the_inference_audit(size):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        now = with_audit()
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        server = next(p for p in now.processes if p.pid == 1000)
        await app.push_screen(DetailsScreen(server))
        await pilot.pause()
        text = details_text(app.screen)  # type: ignore[arg-type]
        assert "Kind online_inference (85% sure)" in text
        assert "source observed (classified from what the process shows)" in text
        assert "Inference audit" in text and "runtime       pytorch_eager" in text
        assert "quantization  none seen" in text
        assert "SM share at load 12.0% (mean 8.1%, 150 readings)" in text
        assert "$1,495/month  dynamic_batching: batch requests on the server" in text
        assert "how sure: medium: from SM share" in text
        trainer = next(p for p in now.processes if p.pid == 1001)
        await app.push_screen(DetailsScreen(trainer))
        await pilot.pause()
        text = details_text(app.screen)  # type: ignore[arg-type]
        assert "Kind training (60% sure)" in text and "Inference audit" not in text


def test_a_config_override_and_a_replayed_kind_say_where_the_kind_came_from():
    configured = next(p for p in with_audit("config").processes if p.pid == 1000)
    text = DetailsScreen(configured)._process_text(configured).plain
    assert "source config override ([kinds.jobs] sets it for this job)" in text
    replayed = DetailsScreen(configured, recorded_phases=lambda key: None)
    assert "source history (the kind recorded at this tick), config override" in (
        replayed._process_text(configured).plain)


def test_advice_whose_saving_is_not_estimated_yet_says_so_not_zero_dollars():
    audit = dict(AUDIT, advice=[dict(AUDIT["advice"][0], saving_share=0.0,
                                     saving_per_month=0.0,
                                     saving_method="not estimated: fewer than 10 readings")])
    doc = now_document(processes=1)
    doc["processes"][0].update(kind="online_inference", kind_source="observed",
                               inference=audit)
    [proc] = Now.from_dict(doc).processes
    text = DetailsScreen(proc)._process_text(proc).plain
    assert "saving not estimated  dynamic_batching" in text and "$0.00/month" not in text
