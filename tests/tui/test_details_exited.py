"""A process's details screen once its process has exited: it said `state S`, `GPU memory
8.0G`, `$/h now` and `W now` as if it still ran, and `k` there answered that mlcostd does not
stop it rather than that it is gone (probe 125 F15)."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.fixtures import TS, StubClient, now_document, snapshot

GONE_KEY = "1003:1700000003.000"


def without_1003(ts: float) -> HostSnapshot:
    """The next tick: pid 1003 (idle, its SIGTERM recommended) has exited, its advice gone."""
    doc = now_document()
    doc["ts"], doc["tick"] = ts, 47
    doc["processes"] = [p for p in doc["processes"] if p["pid"] != 1003]
    doc["recommendations"] = [r for r in doc["recommendations"] if r["id"] != "rec-idle"]
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, ts)


def body(app: MlcostTop) -> str:
    """Its heading (pid, state, command) and the figures under it."""
    return "\n".join(str(app.screen.query_one(f"#details-{part}", Static).render())
                     for part in ("heading", "body"))


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_details_of_an_exited_process_say_so_and_k_says_it_has_exited(size):
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        procs.focus()
        procs.move_cursor(row=procs.get_row_index(GONE_KEY))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        shown = body(app)
        assert "/h now" in shown and "EXITED" not in shown, shown
        app.post_message(SnapshotArrived((without_1003(TS + 5),)))
        await pilot.pause()
        shown = body(app)
        assert "EXITED" in shown and "Exited: not in mlcostd's view at" in shown, shown
        assert "state S" not in shown, shown
        assert "/h now" not in shown and "when last seen, nothing now" in shown, shown
        await pilot.press("k")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert not isinstance(app.screen, ActionScreen) and client.applied == []
        said = [n.message for n in app._notifications]
        assert any("pid 1003 has exited" in m for m in said), said
        assert isinstance(app.screen, DetailsScreen)
        # (a replay stepping back to a tick where it runs) it is shown as running again
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        assert "EXITED" not in body(app) and "/h now" in body(app)
