"""The process details screen offers "compare with this job's previous run": a line with the
command, and `c` copies it (mlcostd compare reads the store, which the TUI reaches only through
the API; the command says when the store holds no earlier run)."""

from __future__ import annotations

import shlex

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.screens.details import DetailsScreen, compare_command
from tests.tui.fixtures import TS, StubClient, now_document


def _now(workload: str | None) -> Now:
    doc = now_document(processes=2)
    doc["processes"][0]["workload"] = workload
    return Now.from_dict(doc)


@pytest.mark.parametrize("workload", ["ml/train-7b", None, "a job; rm -rf ~"])
def test_the_command_names_the_job_or_the_process(workload):
    proc = _now(workload).processes[0]
    command = compare_command(proc)
    argv = shlex.split(command)
    assert argv[:3] == ["mlcostd", "compare", "--previous"]
    assert argv[3] == (workload or proc.key) and len(argv) == 4


@pytest.mark.asyncio
async def test_c_on_a_process_copies_the_compare_command():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    copied: list[str] = []
    app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        now = _now("ml/train-7b")
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        screen = DetailsScreen(now.processes[0])
        await app.push_screen(screen)
        await pilot.pause()
        body = str(screen.query_one("#details-body", Static).render())
        assert "mlcostd compare --previous ml/train-7b" in body
        await pilot.press("c")
        await pilot.pause()
        assert copied == ["mlcostd compare --previous ml/train-7b"]
