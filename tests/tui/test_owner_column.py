"""The process panel's job column shows who owns each process (pod, Slurm job, unit) as the
daemon labels it, and sorting by job groups a job's processes together."""

from __future__ import annotations

import pytest

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from tests.tui.fixtures import TS, StubClient, now_document


def _column(table: ProcessPanel, name: str) -> list[str]:
    index = table.get_column_index(name)
    return [str(table.get_cell_at((row, index))).strip() for row in range(table.row_count)]


@pytest.mark.asyncio
async def test_the_job_column_shows_the_pod_the_slurm_job_and_the_unit():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 48)) as pilot:
        now = Now.from_dict(now_document(processes=8, owners=True))
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        table = app.query_one(ProcessPanel)
        jobs = dict(zip(_column(table, "pid"), _column(table, "job"), strict=True))
        # headed as the report heads it: the ledger's job label is another thing
        header = table.ordered_columns[table.get_column_index("job")].label
        assert str(header).strip().startswith("workload"), header
        assert jobs["1000"] == "ml/trainer-0"
        assert jobs["1001"] == "slurm 4242"
        assert jobs["1002"] == "vllm.service"
        assert jobs["1003"] == "-"
        table.sort_by("job")
        table.show(now)
        await pilot.pause()
        grouped = _column(table, "job")
        # each job's rows together, in job order, the unowned last
        assert grouped == sorted(grouped, key=lambda j: "~" if j == "-" else j)
        assert grouped[0] == "ml/trainer-0" and grouped[-1] == "-"
        table.filter_text = "slurm"
        table.show(now)
        await pilot.pause()
        assert set(_column(table, "job")) == {"slurm 4242"}


def test_the_wire_keeps_string_owner_fields_and_reads_an_older_daemon_as_no_owner():
    from daemon.wire import Process

    proc = Process.from_dict({"pid": 1, "owner": {"pod": "trainer-0", "namespace": "ml",
                                                  "odd": 3}, "workload": "ml/trainer-0"})
    assert (proc.owner, proc.workload) == ({"pod": "trainer-0", "namespace": "ml"},
                                           "ml/trainer-0")
    older = Process.from_dict({"pid": 1})
    assert (older.owner, older.workload) == ({}, None)
    assert Process.from_dict({"pid": 1, "owner": "x", "workload": 7}).workload is None
