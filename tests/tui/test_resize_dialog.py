"""The resize dialog (`a` on a `shrink to …` recommendation): it did not name the running work
the stop takes down, a serving inference server among it, and it did the resize on one `y` on
evidence it itself called "preliminary, confidence low" (probe 125 F14)."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.confirm import ConfirmScreen
from tests.tui.fixtures import TS, StubClient, now_document

RESIZE = {"id": "rec-resize", "rule": "over_provisioned", "target": "host",
          "summary": "shrink to g6e.12xlarge at $10.49/h: 4 of 8 GPUs do the work",
          "savings_per_month": 16264.0, "combined_savings_per_month": 16264.0,
          "savings_order": 1, "method": "($32.77 - $10.49)/h x 730 h/month", "evidence": {},
          "action": {"kind": "resize", "provider": "aws", "from": "p4d.24xlarge",
                     "to": "g6e.12xlarge", "instance_id": "i-0123456789abcdef0"},
          "evidence_seconds": 60.0, "evidence_needed_seconds": 30 * 3600.0}


def host(processes: int, preliminary: bool) -> HostSnapshot:
    """A host with `processes` processes, the last one an inference server that serves (so
    it is at the end of the list the daemon sends), and a resize recommendation first."""
    doc = now_document(processes=processes)
    server = doc["processes"][-1]
    server.update(kind="inference", serves=True,
                  command="/usr/bin/python3 -m vllm.entrypoints.openai.api_server --port 8000")
    rec = dict(RESIZE, preliminary=preliminary, confidence="low" if preliminary else "high")
    if not preliminary:
        rec["evidence_seconds"] = 31 * 3600.0
    doc["recommendations"] = [rec, *doc["recommendations"]]
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS)


class ResizingClient(StubClient):
    def __init__(self) -> None:
        super().__init__()
        self.accepted: list[bool] = []

    async def apply(self, rec_id: str, dry_run: bool = True, accept_preliminary: bool = False,
                    timeout_s: float = 30.0):
        if rec_id != "rec-resize":
            return await super().apply(rec_id, dry_run)
        self.applied.append((rec_id, dry_run))
        self.accepted.append(accept_preliminary)
        return self.ActionResult(rec_id, "resize", dry_run, not dry_run,
                                 "would ask AWS Systems Manager to run AWS-ResizeInstance on "
                                 "i-0123456789abcdef0: stop it, change it, start it" if dry_run
                                 else "resizing i-0123456789abcdef0 to g6e.12xlarge",
                                 steps=("aws ssm start-automation-execution …",))


async def open_dialog(app: MlcostTop, pilot, snap: HostSnapshot) -> ActionScreen:
    app.post_message(SnapshotArrived((snap,)))
    await pilot.pause()
    recs = app.query_one(RecommendationTable)
    recs.focus()
    recs.move_cursor(row=recs.get_row_index("rec-resize"))
    await pilot.press("a")
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert isinstance(app.screen, ActionScreen)
    return app.screen


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_resize_dialog_names_what_it_stops_the_server_first_within_the_screen(size):
    app = MlcostTop([ResizingClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        dialog = await open_dialog(app, pilot, host(30, preliminary=False))
        running = dialog.query_one("#running", Static)
        said = str(running.render())
        assert "Stops every process on this host: 30 processes, 1 serving" in said, said
        lines = said.splitlines()
        # the server is named even though the daemon lists it last, with its kind and `serves`
        assert "pid 1029" in lines[1] and "inference" in lines[1] and "serves" in lines[1]
        assert "api_server --port 8000" in lines[1]
        shown = 3 if size[1] < 30 else 10  # a few lines at 80x24, more in a tall terminal
        assert len(lines) == 1 + shown + 1 and lines[-1].strip() == f"and {30 - shown} more"
        assert all(len(line) <= running.region.width for line in lines), lines
        # on screen, whole, with the buttons under it
        assert running.region.bottom <= size[1] and running.region.height == len(lines)
        assert dialog.query_one("#do").region.bottom <= size[1]


@pytest.mark.asyncio
async def test_a_resize_on_preliminary_evidence_asks_a_second_time_and_says_so():
    client = ResizingClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        dialog = await open_dialog(app, pilot, host(6, preliminary=True))
        assert dialog.can_do and dialog.preliminary
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen), app.screen
        question = app.screen.question
        assert "preliminary, confidence low: 1 min observed of the 30 h" in question, question
        assert "serving ones too (pid 1005" in question, question
        await pilot.press("n")  # not yet: back at the dialog, nothing done
        await pilot.pause()
        assert app.screen is dialog and client.applied == [("rec-resize", True)]
        await pilot.press("y", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.applied == [("rec-resize", True), ("rec-resize", False)]
        assert client.accepted == [False, True]  # the daemon is told it was confirmed twice
        # with the evidence in, one `y` does it, as before
        client.applied.clear()
        client.accepted.clear()
        await open_dialog(app, pilot, host(6, preliminary=False))
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.applied == [("rec-resize", True), ("rec-resize", False)]
        assert client.accepted == [False, False]
