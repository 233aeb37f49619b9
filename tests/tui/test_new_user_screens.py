"""The screens a new user acts on (issue 25), at 80x24, 120x36 and 200x50: the command column
tells the demo's five workloads apart, three recommendations are reachable with the cursor and
`a`/`x` act on the row highlighted in the recommendation list whichever panel has the focus, `x`
asks first, the apply dialog's buttons are on screen, recommendation text is cut at a word with an
ellipsis, the replay's tick is on its status line, the user column is back by 120 columns, and at
200x50 the rows the processes leave go to the recommendations' text."""

from __future__ import annotations

import re

import pytest
from simhost import pilot_wait_for

from daemon.wire import ActionResult, Now
from mlcost_tui import action_control
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.gpus import GpuPanel
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.confirm import ConfirmScreen
from tests.tui.fixtures import TS, StubClient, now_document
from tests.tui.test_sizes import screen_text

SIZES = [(80, 24), (120, 36), (200, 50)]
IDS = [f"{w}x{h}" for w, h in SIZES]
WORKLOADS = ("healthy_train", "data_starved", "checkpoint_heavy", "idle_notebook",
             "inference_server")
LONG = ("4 of 8 GPUs working, peak 30.0 GiB per GPU: g6e.12xlarge (4 x L40S, 48 GiB) at "
        "$10.49/h instead of p4d.24xlarge at $32.77/h; L40S is a different GPU from A100: check "
        "the job's speed on it")


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setattr(fmt, "clock", lambda: TS)


def demo_host() -> HostSnapshot:
    """The demo as it looks a minute in: its five workloads (command lines as the simulator
    starts them) and five recommendations, the biggest a resize with a long text."""
    doc = now_document(processes=5, gpus=8)
    for i, proc in enumerate(doc["processes"]):
        proc["command"] = (f"/usr/bin/python3 -m daemon.sim.workloads.{WORKLOADS[i]} --gpu {i} "
                           "--workers 0 --read-mbps 8")
    first = doc["recommendations"][0]
    extra = [dict(first, id=f"rec-{n}", rule=f"rule_{n}", summary=f"advice number {n} " * 4,
                  savings_per_month=500.0 - n, combined_savings_per_month=500.0 - n,
                  action={"kind": "copy_commands", "commands": ["true"]}) for n in range(2)]
    resize = dict(first, id="rec-resize", rule="over_provisioned", summary=LONG,
                  savings_per_month=13274.0, combined_savings_per_month=13274.0,
                  action={"kind": "resize", "provider": "aws", "region": "us-east-1",
                          "from": "p4d.24xlarge", "to": "g6e.12xlarge"})
    doc["recommendations"] = [resize, *doc["recommendations"], *extra]
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS)


async def shown(pilot) -> MlcostTop:
    pilot.app.post_message(SnapshotArrived((demo_host(),)))
    await pilot.pause()
    await pilot.pause()
    return pilot.app


def command_cells(app: MlcostTop) -> list[str]:
    procs = app.query_one(ProcessPanel)
    return [str(procs.get_cell_at((row, procs.shown_keys.index("command"))))
            for row in range(procs.row_count)]


def what_a_new_user_sees(app: MlcostTop, size: tuple[int, int]) -> None:
    """The main screen's checks (read only): the command column tells the five workloads
    apart; the resize's text is cut at a word with an ellipsis (whole and wrapped at 200x50,
    where the processes leave rows to the recommendations); the user column from 100 columns."""
    cells = command_cells(app)
    assert len(set(cells)) == 5, cells
    text = "\n".join(screen_text(app))
    for name in WORKLOADS:
        assert name in text, (name, cells)

    recs = app.query_one(RecommendationTable)
    cell = str(recs.get_cell("rec-resize", "summary"))
    width = {c.key: c.width for c in recs.columns_shown}["summary"]
    assert all(len(line) <= width for line in cell.splitlines()), (width, cell)
    flat = cell.replace("\n", " ")
    if flat != LONG:
        assert flat.endswith("…")
        kept = flat[:-1].rstrip()
        assert LONG.startswith(kept) and LONG[len(kept)] in " ,;:", flat

    procs = app.query_one(ProcessPanel)
    if size[0] >= 100:
        assert "user" in procs.shown_keys, size
    if size == (200, 50):
        assert recs.row_height >= 2  # the rows the five processes leave
        # the whole resize text, wrapped at words over the recommendation's lines
        assert "\n" in cell and flat == LONG
        for line in cell.splitlines():
            assert line in text, line
        blank = procs.region.height - 3 - procs.row_count  # box and header, then the rows
        cut = [r for r in recs.recommendations.values()
               if "…" in str(recs.get_cell(r.id, "summary"))]
        assert blank <= 1 or not cut, f"{blank} blank process rows while {len(cut)} are cut"


async def the_apply_dialog_fits_with_its_buttons(pilot, size: tuple[int, int]) -> None:
    app = pilot.app
    rec = app.now.recommendations[0]
    steps = tuple(f"aws ec2 step-{i} --region us-east-1 --instance-ids i-0123456789abcdef0"
                  for i in range(12))
    app.push_screen(ActionScreen(rec, ActionResult(rec.id, "resize", True, False,
                                                   "would stop i-0123 " * 10, steps=steps)))
    await pilot.pause()
    await pilot.pause()
    buttons = list(app.screen.query("Button"))
    assert {b.id for b in buttons} == {"do", "copy", "cancel"}
    for button in buttons:
        assert 0 <= button.region.y and button.region.bottom <= size[1], button.region


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_the_main_screen_a_new_user_sees_and_the_apply_dialog_fit(size):
    """One app per size for what were five tests with an app each: the command column, the
    text cut at words, the user column, the rows left to the recommendations at 200x50
    (what_a_new_user_sees), then the apply dialog with its buttons on screen."""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        await shown(pilot)
        what_a_new_user_sees(app, size)
        await the_apply_dialog_fits_with_its_buttons(pilot, size)


@pytest.mark.asyncio
async def test_the_user_column_is_shown_at_100_columns():
    """At 120 columns and more: test_the_main_screen_a_new_user_sees_and_the_apply_dialog_fit."""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(100, 36)) as pilot:
        await shown(pilot)
        assert "user" in app.query_one(ProcessPanel).shown_keys


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_three_recommendations_reachable_and_a_acts_on_the_highlighted_row(size):
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        await shown(pilot)
        recs = app.query_one(RecommendationTable)
        # title and column header, then three rows; at 80x24 one: this host's eight GPU lines
        # all differ (two idle GPUs hold different memory) and take the other two (README
        # "Every terminal size": every GPU first), the cursor still reaches all three
        assert recs.region.height - 2 >= (1 if size == (80, 24) else 3)
        recs.focus()
        await pilot.pause()
        seen = []
        for _ in range(3):
            seen.append(recs.selected_key)
            row = recs.cursor_row
            # the highlighted row is on screen (the panel scrolled to it)
            assert recs.scroll_y <= row < recs.scroll_y + recs.region.height - 2
            await pilot.press("down")
        assert len(set(seen)) == 3
        await pilot.press("up")
        highlighted = recs.selected_key
        # the process panel takes the focus: `a` still acts on the highlighted recommendation
        app.query_one(ProcessPanel).focus()
        await pilot.pause()
        assert recs.selected_key == highlighted
        # ... and after the next polls (probe 148: each poll put the cursor back on the top
        # row while the panel had no focus, and `a` opened the top row's resize), in view
        await shown(pilot)
        await shown(pilot)
        assert recs.selected_key == highlighted and recs.cursor_row > 0
        row = recs.cursor_row
        assert recs.scroll_y <= row < recs.scroll_y + recs.region.height - 2
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.applied == [(highlighted, True)]
        assert isinstance(app.screen, ActionScreen)
        assert app.screen.recommendation.id == highlighted


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_x_asks_before_snoozing_the_highlighted_recommendation(size, monkeypatch):
    # `u` undoes within UNDO_S (15 s) of the snooze: a loaded machine took longer than that
    # between the snooze and the check, and the window had closed; the window is not the test.
    monkeypatch.setattr(action_control, "UNDO_S", 3600.0)
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        await shown(pilot)
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and client.snoozed == []
        assert "over_provisioned" in app.screen.question
        for button in app.screen.query("Button"):
            assert button.region.bottom <= size[1], button  # its buttons are on screen
        await pilot.press("escape")
        await pilot.pause()
        assert client.snoozed == []
        await pilot.press("x", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.snoozed == ["rec-resize"]
        recs = app.query_one(RecommendationTable)
        assert "rec-resize" not in recs.recommendations
        assert app.check_action("undo_snooze", ()) is True  # `u` is offered (footer, toast)
        await pilot.press("u")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.unsnoozed == ["rec-resize"] and "rec-resize" in recs.recommendations
        assert not app.actions.can_undo  # one undo (`u` then lists what is snoozed)


def test_cut_keeps_whole_words():
    assert fmt.cut("peak 30.0 GiB per GPU: g6e.12xlarge", 20) == "peak 30.0 GiB per…"
    assert fmt.cut("short", 20) == "short"
    assert fmt.short_command("/usr/bin/python3 -m daemon.sim.workloads.data_starved --gpu 1",
                             24) == "…data_starved --gpu 1"


def replay_status_line(app: MlcostTop) -> str:
    return screen_text(app)[2]


@pytest.mark.asyncio
@pytest.mark.parametrize("width", [80, 120])
async def test_the_replay_shows_its_tick_at_80_and_120_columns(width):
    from pathlib import Path

    from tests.tui.test_modes import RecordedStore

    class IncidentSnapshot(RecordedStore):
        """A snapshot as the demo names it, taken by an incident trigger."""

        path = Path("/home/u/.local/state/mlcost/demo/20261202-142017-held_idle_gpu.db")
        snapshot = {"trigger": {"reason": "GPU 3 held idle by pid 23058 for 1 min"}}

    app = MlcostTop([], poll=False, replay=IncidentSnapshot())  # type: ignore[arg-type]
    async with app.run_test(size=(width, 30)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        line = replay_status_line(app)
        assert re.search(r"tick \d+/\d+", line), line



@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_snapshot_toast_covers_no_process_or_recommendation_row(size):
    from mlcost_tui.app import SNAPSHOT_TOAST_S

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        await shown(pilot)
        from mlcost_tui.incidents import describe

        folder = "/home/someone/.local/state/mlcost/demo/20261202-142017-manual"
        app.notify(describe({"path": folder + ".db", "html": folder + ".html", "ticks": 120,
                             "bytes": 1_200_000}), title="snapshot", timeout=SNAPSHOT_TOAST_S)
        await pilot.pause()
        await pilot.pause()
        toasts = list(app.screen.query("Toast"))
        assert toasts
        covered = [panel for panel in (app.query_one(ProcessPanel),
                                       app.query_one(RecommendationTable))
                   for toast in toasts if toast.region.overlaps(panel.region)]
        assert not covered, [t.region for t in toasts]
        # a second and a third toast (an incident's notice, a copy) replace it: stacked, they
        # reached down over the process rows and a dialog's question
        app.notify("an incident snapshot of gpu_held_idle gpu:3 was written to " + folder)
        app.notify("copied: mlcostd compare --previous ml/train-7b")
        await pilot_wait_for(pilot, lambda: [str(t.render()) for t in app.screen.query(
            "Toast")] == ["copied: mlcostd compare --previous ml/train-7b"],
                             what="one toast, the newest")
        toasts = list(app.screen.query("Toast"))
        covered = [panel for panel in (app.query_one(ProcessPanel),
                                       app.query_one(RecommendationTable))
                   for toast in toasts if toast.region.overlaps(panel.region)]
        assert not covered, [t.region for t in toasts]
    assert SNAPSHOT_TOAST_S <= 10


def multi_gpu_host() -> HostSnapshot:
    """A 4-GPU job (GPUs 0-3, 70 GiB and 85% SM on each) beside an idle GPU whose process's
    last sampled phase was compute."""
    doc = now_document(processes=2, gpus=5)
    gib = 1 << 30
    doc["processes"][0]["gpus"] = [{"index": i, "memory_bytes": 70 * gib, "sm_share": 85.0}
                                   for i in range(4)]
    doc["processes"][0].update(gpu_memory_bytes=280 * gib, sm_share=340.0, phase="compute")
    doc["processes"][1]["gpus"] = [{"index": 4, "memory_bytes": 8 * gib, "sm_share": 0.0}]
    doc["processes"][1].update(phase="compute")
    for gpu in doc["gpus"]:
        gpu["busy"] = gpu["index"] != 4
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_multi_gpu_process_reads_per_gpu_and_its_gpus_as_a_range(size):
    from mlcost_tui.screens.gpu import GpuScreen

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((multi_gpu_host(),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        gpus_cell = str(procs.get_cell("1000:1700000000.000", "gpus"))
        assert gpus_cell == "0-3"  # not "0,1," cut mid-list
        # the phase column agrees with the GPU panel: GPU 4 is IDLE, so its process is idle
        assert str(procs.get_cell("1001:1700000001.000", "phase")) == "idle"
        assert str(procs.get_cell("1000:1700000000.000", "phase")) == "compute"
        # GPU 0's page: the job's memory and SM share on GPU 0, not its sums over four GPUs
        panel = app.query_one(GpuPanel)
        panel.focus()
        panel.move_cursor(row=0)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, GpuScreen)
        body = str(app.screen.query_one("#gpu-body").render())
        assert "70.0G" in body and "SM  85%" in body, body
        assert "280.0G  SM" not in body and "340%" not in body
        assert "on 4 GPUs: 0-3" in body


def test_gpu_lists_never_stop_mid_list():
    assert fmt.gpu_list((0, 1, 2, 3)) == "0-3"
    assert fmt.gpu_list((0, 1)) == "0,1"
    assert fmt.gpu_list((0, 2, 5, 7), 4) == "0+3"


def test_both_fleet_tables_say_their_order_and_put_down_hosts_first():
    from mlcost_tui.panels.fleet import FLEET_ORDER, fleet_order

    up = HostSnapshot("unix:/a.sock", demo_host().now, None, 0.01, TS)
    down = HostSnapshot("unix:/b.sock", None, "no mlcostd", 0.01, TS)
    assert sorted([up, down], key=fleet_order) == [down, up]
    assert "down hosts first" in FLEET_ORDER and "costliest first" in FLEET_ORDER


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_toast_on_a_details_screen_leaves_its_first_lines_in_view(size):
    """On a details screen a toast at the top right covered its first lines: the rule, what it
    is about and its advice. There it shows at the bottom, above the key line."""
    from mlcost_tui.screens.details import DetailsScreen

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        await shown(pilot)
        rec = app.query_one(RecommendationTable).selected()
        assert rec is not None
        await app.push_screen(DetailsScreen(recommendation=rec))
        await pilot.pause()
        app.notify("copied: mlcostd compare --previous ml/train-7b")
        await pilot_wait_for(pilot, lambda: bool(list(app.screen.query("Toast"))),
                             what="the toast on the details screen")
        await pilot.pause()
        for toast in app.screen.query("Toast"):  # (it was on the 5th line, over the advice)
            assert toast.region.y >= size[1] // 2, toast.region  # the lower half
            assert toast.region.bottom <= size[1] - 1  # above the key line


@pytest.mark.asyncio
async def test_the_snooze_toast_gives_the_time_whole_and_apart_from_the_cut_text():
    """'snoozed until 2026-12-06 08:25: daemon…' read like a time cut short."""
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await shown(pilot)
        await pilot.press("x", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        notes = [n for n in app._notifications if n.title == "snoozed"]
        assert len(notes) == 1, [n.message for n in app._notifications]
        summary, when = notes[0].message.splitlines()
        assert summary.endswith("…") and re.fullmatch(
            r"back in the list at \d{4}-\d\d-\d\d \d\d:\d\d · u: undo", when), when


def test_identical_idle_gpus_opened_together_are_spoken_of_as_several():
    """The grouped idle GPUs' page said '0 processes on them' and 'nothing holds memory on
    this GPU'."""
    from mlcost_tui.screens.gpu import gpu_text

    gpus = demo_host().now.gpus  # type: ignore[union-attr]
    together = gpu_text(gpus[5:8], ()).plain
    assert "No process on them: nothing holds memory on these GPUs" in together, together
    assert "this GPU" not in together and "0 processes" not in together
    alone = gpu_text(gpus[5:6], ()).plain
    assert "No process on it: nothing holds memory on this GPU" in alone, alone


@pytest.mark.asyncio
async def test_at_80_columns_the_gpu_screen_breaks_lines_between_fields_and_details_start_with_the_process():
    """At 80 columns a GPU's page broke its figures' line inside a field (`power 400 W` then
    ` 77°C` alone) and its process's command under the pid; a process's details opened with
    the SM chart above the `Process NNNN` heading, mid-screen (probe 125 F6)."""
    from textual.widgets import Static

    from mlcost_tui.screens.details import DetailsScreen
    from mlcost_tui.screens.gpu import GpuScreen

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot)
        app.query_one(GpuPanel).focus()
        await pilot.press("enter")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, GpuScreen), what="GPU 0")
        await pilot.pause()
        body = app.screen.query_one("#gpu-body", Static)
        lines = str(body.render()).split("\n")
        assert body.size.height == len(lines), (body.size, lines)  # none wrapped by the screen
        assert all(len(line) <= body.size.width for line in lines), lines
        figures = next(line for line in lines if "utilization" in line)
        assert "°C" in "".join(lines[lines.index(figures):lines.index(figures) + 2]), lines
        await pilot.press("escape")
        app.query_one(ProcessPanel).focus()
        await pilot.press("enter")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, DetailsScreen),
                             what="the process's details")
        await pilot.pause()
        heading = app.screen.query_one("#details-heading", Static)
        chart = app.screen.query_one("#sm-label")
        assert str(heading.render()).startswith("Process ")
        assert heading.region.y < chart.region.y, (heading.region, chart.region)
