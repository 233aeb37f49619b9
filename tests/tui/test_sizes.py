"""mlcost-top at the terminal sizes people use (80x24, 100x30, 120x36, 200x50): what matters is
on screen without scrolling — the burn, every GPU (identical idle ones on one line when short),
five processes with their phase and $/h, the top recommendation with its action, the status line
— with data that changes between frames, and again after a live resize."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest
from rich.console import Console

from daemon.wire import Now
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from tests.tui.fixtures import TS, StubClient, now_document

SIZES = [(80, 24), (100, 30), (120, 36), (200, 50)]
IDLE = (5, 6, 7)  # three identical idle GPUs (nothing on them)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setattr(fmt, "clock", lambda: TS)


def demo_like(step: int) -> HostSnapshot:
    """An 8-GPU host with seven processes and two recommendations; values move every step."""
    doc = now_document(processes=7, gpus=8)
    doc["tick"], doc["ts"] = 42 + step, TS + step
    for gpu in doc["gpus"]:
        if gpu["index"] in IDLE:
            gpu.update(utilization=0.0, busy=False, memory_used_bytes=0)
        else:
            gpu["utilization"] = (gpu["utilization"] + 3 * step) % 101
            gpu["busy"] = gpu["index"] != 2
    for proc in doc["processes"]:
        proc["cpu_percent"] += 7.0 * step
        proc["burn_per_hour"] += 0.1 * step
    doc["burn"]["total_per_hour"] += step
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS + step)


def screen_text(app: MlcostTop) -> list[str]:
    """The screen as plain text lines, as a terminal of the app's size shows it."""
    width, height = app.size
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None,
                      force_terminal=False, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.file.getvalue().splitlines()[:height]  # type: ignore[attr-defined]


async def three_frames(pilot) -> None:
    for step in range(3):
        pilot.app.post_message(SnapshotArrived((demo_like(step),)))
        await pilot.pause()


def header_row(lines: list[str], first: str) -> str:
    return next(line for line in lines if line.strip("│ ").split()[:1] == [first])


def assert_what_matters_is_shown(lines: list[str], width: int, height: int) -> None:
    text = "\n".join(lines)
    assert len(lines) == height and all(len(line) <= width for line in lines)
    assert re.search(r"burn \$\d\d\.\d\d/h", text), "the burn"
    assert "● live" in text, "the status line"
    gpu_header = header_row(lines, "GPU")
    for column in ("util", "memory", "$/h", "state"):
        assert column in gpu_header, f"GPU column {column}"
    if height < 28:
        assert re.search(r"^ 5-7 .* IDLE ×3", text, re.M), "identical idle GPUs on one line"
        gpu_lines = [f"^ {i} " for i in range(5)]
    else:
        gpu_lines = [f"^│ {i} " for i in range(8)]
    for pattern in gpu_lines:
        assert re.search(pattern, text, re.M), f"GPU line {pattern}"
    proc_header = header_row(lines, "PID")
    for column in ("PID", "$/h", "phase", "command"):
        assert column in proc_header, f"process column {column}"
    pids = set(re.findall(r"^│? (100[0-6]) ", text, re.M))
    assert len(pids) >= 5, f"five processes, saw {sorted(pids)}"
    assert re.search(r"\$[0-9.]+ +(compute|data_wait|checkpoint|idle) ", text), "phases"
    rec_header = header_row(lines, "saves/month")
    assert "recommendation" in rec_header and "action" in rec_header
    assert re.search(r"\$1,898 .*pid 1003 .*a: stop process", text), "the top recommendation"


async def paused_then_no_daemon(pilot) -> None:
    """`p` pauses (the status line says so), `p` again plays; then a poll finds no daemon."""
    app = pilot.app
    await pilot.press("p")
    await pilot.pause()
    assert any("⏸ PAUSED" in line for line in screen_text(app)[:3])
    await pilot.press("p")
    gone = HostSnapshot("unix:/test.sock", demo_like(3).now, "no mlcostd at unix:/test.sock: "
                        "start it with `sudo mlcostd run`", 0.01, TS + 3, attempt=2)
    app.post_message(SnapshotArrived((gone,)))
    await pilot.pause()
    status = screen_text(app)[2]
    assert status.lstrip().startswith("✕ no daemon")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_what_matters_fits_at_every_size_and_the_status_line_says_paused_and_no_daemon(
        size):
    """A fresh app at each size: what matters is on screen; the widest shows the process
    columns the others leave out (test_a_live_resize... compares the sizes' columns); the
    status line says paused, then that no daemon answers. (One app per size: the status line
    was a test of its own at 80x24 and 200x50, and the columns one of four more apps.)"""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        await three_frames(pilot)
        lines = screen_text(app)
        assert_what_matters_is_shown(lines, *size)
        if size == (200, 50):
            columns = header_row(lines, "PID").split()
            assert "balance" in columns and "RSS" in columns, columns
        await paused_then_no_daemon(pilot)


@pytest.mark.asyncio
async def test_a_live_resize_lays_the_screen_out_again_and_wider_terminals_show_more_columns():
    """One app resized through the four sizes: what matters is shown again at each, before and
    after new data, and the process table has more columns the wider the terminal (these
    columns were compared across four fresh apps, one per size, in a test of their own)."""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    columns = {}
    async with app.run_test(size=(200, 50)) as pilot:
        await three_frames(pilot)
        for step, size in enumerate([(80, 24), (120, 36), (100, 30), (200, 50)]):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert_what_matters_is_shown(screen_text(app), *size)  # no new data needed
            pilot.app.post_message(SnapshotArrived((demo_like(5 + step),)))
            await pilot.pause()
            lines = screen_text(app)
            assert_what_matters_is_shown(lines, *size)
            columns[size] = header_row(lines, "PID").split()
    counts = [len(columns[size]) for size in SIZES]
    assert counts == sorted(counts) and counts[0] < counts[-1], columns
    assert "balance" in columns[(200, 50)] and "RSS" in columns[(200, 50)]


@pytest.mark.asyncio
async def test_the_top_recommendation_stays_in_view_when_a_bigger_one_arrives():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        await three_frames(pilot)
        snap = demo_like(4)
        assert snap.now is not None

        bigger = dataclasses.replace(snap.now.recommendations[0], id="rec-big",
                                     summary="shrink to a smaller instance",
                                     savings_per_month=9999.0, combined_savings_per_month=9999.0)
        now = dataclasses.replace(snap.now, recommendations=(bigger, *snap.now.recommendations))
        app.post_message(SnapshotArrived((dataclasses.replace(snap, now=now),)))
        await pilot.pause()
        assert re.search(r"\$9,999 .*shrink to a smaller", "\n".join(screen_text(app)))


@pytest.mark.asyncio
async def test_a_tall_terminal_gives_rows_the_processes_do_not_need_to_recommendations():
    """At 200x50 with five processes, eight recommendations are all on screen (the usual
    five-row limit gave the unused process rows to no one)."""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 50)) as pilot:
        snap = demo_like(0)
        assert snap.now is not None
        first = snap.now.recommendations[0]
        many = tuple(dataclasses.replace(first, id=f"rec-{n}", summary=f"advice number {n}",
                                         savings_per_month=900.0 - n,
                                         combined_savings_per_month=900.0 - n)
                     for n in range(8))
        now = dataclasses.replace(snap.now, processes=snap.now.processes[:5],
                                  recommendations=many)
        app.post_message(SnapshotArrived((dataclasses.replace(snap, now=now),)))
        await pilot.pause()
        text = "\n".join(screen_text(app))
        assert all(f"advice number {n}" in text for n in range(8)), text
        assert len(set(re.findall(r"^│ (100[0-4]) ", text, re.M))) == 5  # processes keep theirs


class HistoryClient(StubClient):
    """Answers the history screen's two series: the host's waste, and GPU 0's utilization."""

    async def host_history(self, metric: str, since_s: float = 3600, points: int = 300):
        from daemon.wire import History, Point

        return History(metric, "host", since_s,
                       tuple(Point(TS - 300 + 5 * i, 24.0 + i / 100, 20.0, 24.66)
                             for i in range(60)))

    async def gpu_history(self, index: int, metric: str = "utilization",
                          since_s: float = 3600, points: int = 300):
        from daemon.wire import History, Point

        return History(metric, f"gpu:{index}", since_s,
                        tuple(Point(TS - 300 + 5 * i, 13.0, 13.0, 16.0) for i in range(60)))


@pytest.mark.asyncio
async def test_history_titles_wrap_at_80_columns_instead_of_being_cut():
    """At 80 columns the waste chart's title ("... now $24.62/h, mean $22.98/h, m") lost its
    maximum off the right edge; it wraps onto a second line."""
    from textual.widgets import Label

    from mlcost_tui.screens.history import HistoryScreen

    app = MlcostTop([HistoryClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(HistoryScreen((0,), HistoryClient()))  # type: ignore[arg-type]
        await app.workers.wait_for_complete()
        await pilot.pause()
        label = app.screen.query_one("#wasted-label", Label)
        title = str(label.render())
        assert title.endswith("max $24.59/h") and len(title) > label.size.width
        assert label.size.width <= 78 and label.size.height == 2  # all of it, on two lines


def held_idle(step: int, memory_gib: dict[int, float], recommendations: int = 2) -> HostSnapshot:
    """demo_like with idle GPUs that hold memory (a process left on them): each such GPU
    differs from its idle neighbours and needs a line of its own; `recommendations` of them
    (the fixture's two, then copies)."""
    snap = demo_like(step)
    assert snap.now is not None
    gpus = tuple(dataclasses.replace(g, memory_used_bytes=int(memory_gib[g.index] * (1 << 30)))
                 if g.index in memory_gib else g for g in snap.now.gpus)
    recs = list(snap.now.recommendations)
    while len(recs) < recommendations:
        recs.append(dataclasses.replace(recs[-1], id=f"rec-{len(recs)}",
                                        summary=f"advice number {len(recs)}"))
    return dataclasses.replace(snap, now=dataclasses.replace(snap.now, gpus=gpus,
                                                             recommendations=tuple(recs)))


@pytest.mark.asyncio
@pytest.mark.parametrize("held, lines, recs", [
    ({5: 4.0}, ["0", "1", "2", "3", "4", "5", "6,7"], 2),  # the probe's: one GPU held idle
    ({5: 4.0, 6: 2.0}, [str(i) for i in range(8)], 3),  # eight lines, three recommendations
], ids=["seven-lines", "eight-lines"])
async def test_at_80x24_every_gpu_line_is_on_screen_when_idle_gpus_differ(held, lines, recs):
    """README: 80x24 shows every GPU. The GPU panel had six lines at 24 rows whatever it
    needed: an idle GPU holding memory (a line of its own beside identical idle ones) pushed
    the last line behind a scrollbar (probe 125 F1). The rows come from the recommendations'
    three; the processes keep five, and the top recommendation stays."""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        for step in range(2):
            app.post_message(SnapshotArrived((held_idle(step, held, recs),)))
            await pilot.pause()
        text = "\n".join(screen_text(app))
        for label in lines:
            assert re.search(rf"^ {re.escape(label)} +\d+% ", text, re.M), (label, text)
        pids = set(re.findall(r"^ (100[0-6]) ", text, re.M))
        assert len(pids) >= 5, (sorted(pids), text)
        assert re.search(r"\$1,898 .*pid 1003 .*a: stop process", text), text
        assert re.search(r"burn \$\d\d\.\d\d/h", text) and "● live" in text
