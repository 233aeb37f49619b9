"""A process's details with a very long command line (probe 154 L2): 200 long options filled
the first ~100 lines at 80x24 and its cost lines came 4+ screens down. The heading shows the
command's first lines, cut with `…`, and `w` shows all of it (and again, back)."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.screens.details import DetailsScreen
from tests.tui.fixtures import TS, StubClient, now_document
from tests.tui.test_sizes import screen_text

LONG = ("/usr/bin/python3 /x/weird.py データ学習_训练_🚀🔥 "
        + " ".join(f"--very-long-option-{i:03d}=value" for i in range(1, 201)))


def long_snapshot() -> HostSnapshot:
    doc = now_document()
    doc["processes"][0]["command"] = LONG
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_cost_lines_are_on_the_first_screen_and_w_shows_the_whole_command(size):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((long_snapshot(),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        procs.focus()
        procs.move_cursor(row=procs.get_row_index("1000:1700000000.000"))
        await pilot.press("enter")
        await pilot.pause()
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        lines = screen_text(app)
        text = "\n".join(lines)
        assert any(line.strip().startswith("Cost $4.10/h now") for line in lines), text
        assert any(line.strip().startswith("Compare with this job") for line in lines), text
        assert "--very-long-option-200=value" not in text  # cut…
        heading = str(app.screen.query_one("#details-heading", Static).render())
        assert "…  (w: the whole command, " in heading, heading
        assert f"{len(LONG):,} characters)" in heading
        assert "weird.py データ学習_训练_🚀🔥 --very-long-option-001" in heading  # …its start kept
        await pilot.press("w")
        await pilot.pause()
        heading = str(app.screen.query_one("#details-heading", Static).render())
        assert LONG in heading and "(w: the whole command" not in heading
        await pilot.press("w")
        await pilot.pause()
        assert "--very-long-option-200" not in str(
            app.screen.query_one("#details-heading", Static).render())


@pytest.mark.asyncio
async def test_a_short_command_is_shown_whole():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        doc = now_document()
        now = Now.from_dict(doc)
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        screen = DetailsScreen(now.processes[0])
        await app.push_screen(screen)
        await pilot.pause()
        heading = str(screen.query_one("#details-heading", Static).render())
        assert "/usr/bin/python3 train_0.py --epochs 10" in heading and "…" not in heading
