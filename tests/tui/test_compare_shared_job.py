"""A process's Compare line where its job label is several processes now (probe 154 M1): the
label is by default the script's name, so two `weird.py` runs (one idle, one busy) were one job,
and the busy $4.10/h process's screen showed their figures together ($8.19/h, 50% idle) as
"this job's previous run", "within noise". Now that screen compares the process's own command
line's runs, or, where the store has no earlier one, the job's, saying they are all of its
processes together and which."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import Comparison, Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.fixtures import TS, StubClient, now_document
from tests.tui.test_compare_key import COMPARED

BUSY = "1001:1700000001.000"


def two_of_a_job(third: bool = False) -> HostSnapshot:
    doc = now_document()
    for proc in doc["processes"][:3 if third else 2]:
        proc["job"] = "weird.py"
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS)


class Store(StubClient):
    """A daemon whose store holds earlier runs of `known` targets only (404 for the others)."""

    def __init__(self, known: set[str]) -> None:
        super().__init__()
        self.known, self.asked = known, []

    async def compare_previous(self, target: str):
        from daemon.client import ApiError

        self.asked.append(target)
        if target not in self.known:
            raise ApiError(404, f"the store holds 1 run(s) of {target!r}: nothing to compare")
        return Comparison.from_dict(COMPARED)


async def details_of(client: Store, key: str, snapshot: HostSnapshot) -> tuple[str, list[str]]:
    """The body of `key`'s details screen once its comparison came, and what `c` copied."""
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    copied: list[str] = []
    app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotArrived((snapshot,)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        procs.focus()
        procs.move_cursor(row=procs.get_row_index(key))
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DetailsScreen)
        for _ in range(50):  # the comparison arrives from a worker
            await pilot.pause()
            if screen.comparison is not None or "no earlier run" in screen.comparison_note:
                break
        await pilot.press("c")
        await pilot.pause()
        return str(screen.query_one("#details-body", Static).render()), copied


@pytest.mark.asyncio
async def test_a_job_of_two_processes_compares_this_process_s_own_runs():
    client = Store({BUSY})
    body, copied = await details_of(client, BUSY, two_of_a_job())
    assert client.asked == [BUSY]
    assert ("Compare with this process's previous run (runs of its command line; job weird.py "
            "is 2 processes now: pids 1000, 1001): better (below)") in " ".join(body.split())
    assert copied == [f"mlcostd compare --previous {BUSY}"]


@pytest.mark.asyncio
async def test_without_its_own_earlier_run_the_job_s_is_said_to_be_all_of_them():
    client = Store({"weird.py"})
    body, copied = await details_of(client, BUSY, two_of_a_job(third=True))
    assert client.asked == [BUSY, "weird.py"]
    assert ("Compare with job weird.py's previous run, its 3 processes now together (pids "
            "1000, 1001, 1002), not this process alone (no earlier run of its own command "
            "line): better (below)") in " ".join(body.split()), body
    assert "this job's previous run" not in body
    assert copied == ["mlcostd compare --previous weird.py"]


@pytest.mark.asyncio
async def test_a_job_of_one_process_is_compared_as_before():
    client = Store({"weird.py"})
    doc = now_document()
    doc["processes"][1]["job"] = "weird.py"
    alone = HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS)
    body, copied = await details_of(client, BUSY, alone)
    assert client.asked == ["weird.py"]
    assert "Compare with this job's previous run: better (below)" in body
    assert copied == ["mlcostd compare --previous weird.py"]
