"""History charts a person can read: a GPU at a constant 100% fills its chart and one at 0% leaves
it empty, the y axis is 0-100% for utilization and starts at $0 for dollars, the time axis shows
clock times, and the label says what span the data covers."""

from __future__ import annotations

import pytest
from simhost import pilot_wait_for

from daemon.clock import local_time
from daemon.wire import History, Point
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import SnapshotArrived
from mlcost_tui.plot import Chart, Plot, covered, draw, money_label, nice_top, percent_label
from tests.tui.fixtures import TS, StubClient, snapshot

WIDTH, HEIGHT = 60, 5


def bars(text: str) -> list[str]:
    """The chart's bar area: each row right of the y axis."""
    rows = text.splitlines()[:HEIGHT]
    return [row.split("┤", 1)[-1].split("│", 1)[-1] for row in rows]


def constant(value: float, seconds: float = 360, step: float = 3) -> list[tuple[float, float]]:
    return [(TS - seconds + i * step, value) for i in range(int(seconds / step))]


def test_a_gpu_at_100_percent_fills_its_chart_and_one_at_0_leaves_it_empty():
    full = draw(Chart(constant(100.0), TS - 360, TS, 100.0, percent_label), WIDTH, HEIGHT).plain
    empty = draw(Chart(constant(0.0), TS - 360, TS, 100.0, percent_label), WIDTH, HEIGHT).plain
    assert all(set(row) == {"█"} for row in bars(full))
    assert all(set(row) == {" "} for row in bars(empty))
    half = draw(Chart(constant(50.0), TS - 360, TS, 100.0, percent_label), WIDTH, 4).plain
    assert [set(row) for row in bars(half)[:4]] == [{" "}, {" "}, {"█"}, {"█"}]


def test_the_axes_have_units_and_clock_times():
    text = draw(Chart(constant(30.0), TS - 360, TS, 100.0, percent_label), WIDTH, HEIGHT).plain
    lines = text.splitlines()
    assert lines[0].lstrip().startswith("100% ┤") and "50% ┤" in text
    assert lines[HEIGHT].lstrip().startswith("0% └")  # the axis line is zero
    times = lines[HEIGHT + 1]
    assert local_time(TS - 360, date=False) in times and local_time(TS, date=False) in times
    money = draw(Chart(constant(4.1), TS - 3600, TS, None, money_label), WIDTH, HEIGHT).plain
    assert money.splitlines()[0].startswith("$5.00 ┤")
    assert money.splitlines()[HEIGHT].startswith("$0.00 └")  # dollars start at zero
    assert local_time(TS, date=False, seconds=False) in money.splitlines()[-1]


def test_round_axis_tops():
    assert [nice_top(v) for v in (0.0, 0.3, 4.1, 20.7, 32.77, 100.0)] == \
        [1.0, 0.5, 5.0, 25.0, 50.0, 100.0]


def test_the_label_says_which_span_the_data_covers():
    def history(seconds: float) -> History:
        return History("utilization", "gpu:0", 3600,
                       tuple(Point(ts, 50, 50, 50) for ts, _ in constant(50.0, seconds, 10)))

    assert covered(history(360), 3600, TS) == "last 6 min of 1 h"
    assert covered(history(3600), 3600, TS) == "the last 1 h"
    assert covered(history(4 * 3600), 86400, TS) == "last 4 h of 24 h"
    assert covered(History("utilization", "gpu:0", 3600, ()), 3600, TS) == \
        "no data in the last 1 h"


class HistoryClient(StubClient):
    """Fixed series: GPU 0 at 100% and GPU 2 at 0% for the last 6 minutes, waste $4.10/h."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, float]] = []

    async def gpu_history(self, gpu, metric="utilization", since_s=3600, points=300):
        self.asked.append((f"gpu{gpu}", since_s))
        value = {0: 100.0, 2: 0.0}.get(gpu, 50.0)
        return History(metric, f"gpu:{gpu}", since_s,
                       tuple(Point(ts, value, value, value) for ts, _ in constant(value)))

    async def host_history(self, metric="wasted_per_hour", since_s=3600, points=300):
        self.asked.append(("host", since_s))
        return History(metric, "host", since_s,
                       tuple(Point(ts, 4.1, 4.1, 4.1) for ts, _ in constant(4.1)))


def plotted(app: MlcostTop, plot: str) -> bool:
    """The screen shows `plot` drawn from data (not 'loading…' or absent)."""
    found = app.screen.query(plot)
    return bool(found) and "loading" not in found.first(Plot).render().plain


@pytest.mark.asyncio
async def test_the_history_screen_plots_each_gpu_and_switches_to_24_hours(monkeypatch):
    monkeypatch.setattr(fmt, "clock", lambda: TS)
    client = HistoryClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(100, 40)) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        await pilot.press("h")
        # the history screen's worker may not have started when the key press returns (a
        # loaded machine): wait for the charts themselves, not for the workers running now
        await pilot_wait_for(pilot, lambda: plotted(app, "#gpu0") and plotted(app, "#wasted"),
                             120, "the history charts")
        screen = app.screen
        full = screen.query_one("#gpu0", Plot).render().plain
        empty = screen.query_one("#gpu2", Plot).render().plain
        assert "100% ┤" + "█" * 10 in full and "█" not in empty
        label = str(screen.query_one("#gpu0-label").render())
        assert "last 6 min of 1 h" in label and "now 100%" in label
        assert "$0.00 └" in screen.query_one("#wasted", Plot).render().plain
        await pilot.press("w")
        await pilot_wait_for(pilot, lambda: "of 24 h" in str(
            screen.query_one("#gpu0-label").render()), 120, "the 24 h charts")
        assert ("gpu0", 86400) in client.asked
        assert "last 6 min of 24 h" in str(screen.query_one("#gpu0-label").render())


@pytest.mark.asyncio
async def test_enter_on_a_gpu_shows_its_processes_and_history(monkeypatch):
    from mlcost_tui.panels.gpus import GpuPanel
    from mlcost_tui.screens.gpu import GpuScreen

    monkeypatch.setattr(fmt, "clock", lambda: TS)
    app = MlcostTop([HistoryClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotArrived((snapshot(processes=6),)))
        await pilot.pause()
        app.query_one(GpuPanel).focus()
        await pilot.press("enter")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, GpuScreen)
                             and plotted(app, "#utilization"), 120, "the GPU's page")
        assert isinstance(app.screen, GpuScreen)
        body = str(app.screen.query_one("#gpu-body").render())
        assert "GPU 0" in body and "1 process on it" in body and "1000" in body
        assert "1001" not in body  # on GPU 1
        assert "100% ┤" + "█" * 10 in app.screen.query_one("#utilization", Plot).render().plain
        await pilot.press("escape")
        assert not isinstance(app.screen, GpuScreen)
