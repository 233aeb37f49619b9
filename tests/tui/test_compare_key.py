"""The process details screen offers "compare with this job's previous run": the comparison
itself (GET /v1/compare through the client: each figure's before, after, change and verdict),
or why there is none, and `c` copies the command."""

from __future__ import annotations

import shlex

import pytest
from textual.widgets import Static

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.screens.details import DetailsScreen, compare_command
from tests.tui.fixtures import TS, StubClient, now_document


def _now(job: str | None, workload: str | None = "ml/trainer-0") -> Now:
    """A process with a job label (the ledger's, what /v1/compare takes) and an owner label
    (`workload`: its pod, shown in the table) that differ, as on a Kubernetes host."""
    doc = now_document(processes=2)
    doc["processes"][0]["job"] = job
    doc["processes"][0]["workload"] = workload
    return Now.from_dict(doc)


@pytest.mark.parametrize("job", ["ml/train-7b", None, "a job; rm -rf ~"])
@pytest.mark.parametrize("workload", ["ml/trainer-0", None])
def test_the_command_names_the_job_or_the_process(job, workload):
    """--previous takes the process's job label, else its PID:START; never its owner (a pod
    name is no job the store keeps runs of: the demo's data_starved process has owner none and
    job daemon.sim.workloads.data_starved, and c copied its PID:START)."""
    proc = _now(job, workload).processes[0]
    command = compare_command(proc)
    argv = shlex.split(command)
    assert argv[:3] == ["mlcostd", "compare", "--previous"]
    assert argv[3] == (job or proc.key) and len(argv) == 4


def _app_copying() -> tuple[MlcostTop, list[str]]:
    """An app on a stub client, and what it copies to the clipboard."""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    copied: list[str] = []
    app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
    return app, copied


@pytest.mark.asyncio
async def test_c_on_a_process_copies_the_compare_command():
    app, copied = _app_copying()
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


COMPARED = {  # what GET /v1/compare answers (daemon.analysis.compare's document, cut down)
    "version": 1, "verdict": "better",
    "a": {"label": "previous run, 09:00:00 to 09:20:00"},
    "b": {"label": "latest run, 10:00:00 to 10:20:00"},
    "figures": [
        {"name": "utilization", "label": "GPU utilization", "unit": "%", "a": 20.0, "b": 77.0,
         "verdict": "better", "a_text": "20%", "b_text": "77%", "change_text": "+57.0 pt"},
        {"name": "phase.data_wait", "label": "data_wait share\x1b[2J", "unit": "share",
         "a": 0.78, "b": 0.0, "verdict": "better", "a_text": "78%", "b_text": "0%",
         "change_text": "-77.6 pt"},
        {"name": "cost_per_hour", "label": "cost per hour", "unit": "$/h", "a": 1.0, "b": 1.0,
         "verdict": "within noise", "a_text": "$1.01/h", "b_text": "$1.01/h",
         "change_text": "+$0"}],
    "recommendations": [{"rule": "dataloader_starvation", "status": "gone"},
                        {"rule": "over_provisioned", "status": "same"}],
}


class ComparingClient(StubClient):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    async def compare_previous(self, target: str):
        from daemon.wire import Comparison

        self.asked.append(target)
        return Comparison.from_dict(COMPARED)


async def _details_body(client: StubClient, size: tuple[int, int]) -> str:
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        now = _now("ml/train-7b")
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        screen = DetailsScreen(now.processes[0], client=client)  # type: ignore[arg-type]
        await app.push_screen(screen)
        for _ in range(50):  # the comparison arrives from a worker
            await pilot.pause()
            if screen.comparison is not None or "no earlier run" in screen.comparison_note:
                break
        return str(screen.query_one("#details-body", Static).render())


@pytest.mark.asyncio
async def test_details_show_the_comparison_with_the_previous_run():
    client = ComparingClient()
    body = await _details_body(client, (120, 40))
    assert client.asked == ["ml/train-7b"]
    assert "with this job's previous run: better (below)" in body
    lines = body.splitlines()
    util = next(line for line in lines if "GPU utilization" in line)
    assert util.split() == ["GPU", "utilization", "20%", "77%", "+57.0", "pt", "better"]
    assert next(line for line in lines if "cost per hour" in line).endswith("within noise")
    assert "recommendation gone dataloader_starvation" in body
    assert "over_provisioned" not in body  # the same before and after: not news
    assert "verdict: better" in body and "\x1b" not in body
    assert "mlcostd compare --previous ml/train-7b" in body  # c still copies it


@pytest.mark.asyncio
async def test_details_say_when_there_is_no_earlier_run():
    body = await _details_body(StubClient(), (80, 24))
    assert "with this job's previous run: no earlier run of it in the store yet" in body
    assert "Compared with the previous run" not in body


def test_a_figure_left_out_of_the_verdict_is_marked_on_the_details_screen():
    """Energy per hour is judged but not counted: shown 'worse*' (muted, not red) with why."""
    from daemon.wire import Comparison
    from mlcost_tui.screens.details import comparison_lines

    figure = {"label": "kWh per hour", "a_text": "0.117", "b_text": "0.293",
              "change_text": "+0.176", "verdict": "worse"}
    result = Comparison.from_dict({
        "a": {"label": "before"}, "b": {"label": "after"}, "verdict": "better",
        "figures": [dict(figure, in_overall=False),
                    dict(figure, label="GPU utilization", verdict="better")]})
    text = comparison_lines(result)
    rows = text.plain.splitlines()
    assert next(r for r in rows if "kWh per hour" in r).endswith("worse*")
    assert next(r for r in rows if "GPU utilization" in r).endswith("better")
    assert any("not in the verdict" in r for r in rows)
    worse = text.plain.index("worse*")
    assert not any(span.style == "bold red" for span in text.spans
                   if span.start <= worse < span.end)


def test_the_details_screen_says_when_the_two_runs_were_charged_different_prices():
    """A price cut between the runs: the screen says the cost figures hold it (and are left
    out of the verdict) rather than showing 'better' with no why."""
    from daemon.wire import Comparison
    from mlcost_tui.screens.details import comparison_lines

    note = ("the price moved between the two sides: $1.0060/GPU-h before, $0.5030/GPU-h "
            "after (-50%), on the same GPUs: the cost figures ...")
    result = Comparison.from_dict({
        "a": {"label": "before"}, "b": {"label": "after"}, "verdict": "within noise",
        "price_note": note + "\x1b[2J",
        "figures": [{"label": "cost per hour", "a_text": "$1.01/h", "b_text": "$0.50/h",
                     "change_text": "-$0.503", "verdict": "better", "in_overall": False}]})
    rows = comparison_lines(result).plain.splitlines()
    assert next(r for r in rows if "cost per hour" in r).endswith("better*")
    (said,) = [r for r in rows if r.startswith("  price: ")]
    assert said.startswith("  price: " + note) and "\x1b" not in said
    plain = comparison_lines(Comparison.from_dict({"a": {}, "b": {}, "figures": []})).plain
    assert "price:" not in plain


@pytest.mark.asyncio
async def test_on_the_details_screen_the_main_panels_keys_are_off():
    """`/` and `<` on a process's details opened a filter and moved the sort of the panels
    behind it, unseen (the footer listed them there too); after escape the main screen had a
    filter box open and its sort on another column."""
    from mlcost_tui.panels.processes import ProcessPanel

    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        now = _now("ml/train-7b")
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        sorted_by = procs.sort_column.key
        await app.push_screen(DetailsScreen(now.processes[0], client=client))  # type: ignore[arg-type]
        await pilot.pause()
        assert app.check_action("filter", ()) is False and app.check_action("sort", (1,)) is False
        await pilot.press("slash", "less_than_sign", "t", "I")
        await pilot.press("escape")
        await pilot.pause()
        assert procs.sort_column.key == sorted_by and not procs.inverted
        assert not app.query_one("#filter").has_class("shown")
        assert app.check_action("filter", ()) is True  # back on the main screen


@pytest.mark.asyncio
async def test_a_details_screen_says_when_the_daemon_stops_answering():
    """With mlcostd stopped, a process's details kept showing its state and cost with no sign
    that they had stopped updating (the status line is on the main screen, under it)."""
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        now = _now("ml/train-7b")
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        await app.push_screen(DetailsScreen(now.processes[0], client=client))  # type: ignore[arg-type]
        gone = HostSnapshot("unix:/test.sock", now, "mlcostd at unix:/test.sock is not running",
                            0.01, TS + 1, attempt=1)
        for _ in range(2):  # said once, however many polls fail
            app.post_message(SnapshotArrived((gone,)))
            await pilot.pause()
        toasts = [str(t.render()) for t in app.screen.query("Toast")]
        assert len(toasts) == 1 and "the daemon stopped answering" in toasts[0]
        assert "this screen shows the last data received" in toasts[0]


@pytest.mark.asyncio
async def test_a_recommendations_details_do_not_offer_compare():
    """Compare is a process's: a recommendation's details showed "c Compare runs" in the
    footer and, pressed, said to open a process instead."""
    from simhost import pilot_wait_for

    from tests.tui.test_footer import descriptions

    app, copied = _app_copying()
    async with app.run_test(size=(120, 40)) as pilot:
        now = _now("ml/train-7b")
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        await app.push_screen(DetailsScreen(recommendation=now.recommendations[0]))
        await pilot_wait_for(pilot, lambda: "Back" in descriptions(app),
                             what="the recommendation details' footer")
        assert "Compare runs" not in descriptions(app)
        await app.push_screen(DetailsScreen(now.processes[0]))
        await pilot_wait_for(pilot, lambda: "Compare runs" in descriptions(app),
                             what="a process's details' footer")
        app.pop_screen()
        await pilot_wait_for(pilot, lambda: "Back" in descriptions(app)
                             and "Compare runs" not in descriptions(app),
                             what="the recommendation details' footer again")
        await pilot.press("c")
        await pilot.pause()
        assert copied == []
