"""Bar charts a person can read, drawn with block characters: a y axis with units (utilization on
a fixed 0-100% scale, dollars from $0), a time axis with clock times, and the span the data
really covers ("last 6 min of 1 h"). A GPU at a constant 100% fills its chart; one at 0% leaves
it empty.

Hand-drawn rather than a plotting widget: a history point is an average over a bucket, which a
bar shows exactly, and the chart is one Text that tests can read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

from daemon.clock import local_time
from daemon.wire import History, money
from mlcost_tui import format as fmt
from mlcost_tui.thresholds import MUTED, MUTED_TRACK

BLOCKS = " ▁▂▃▄▅▆▇█"


def percent_label(value: float) -> str:
    return f"{value:.0f}%"


def money_label(value: float) -> str:
    """An axis's dollars (daemon.wire.money): whole dollars from $100."""
    return money(value, whole_from=100)


def nice_top(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above `value` (a round axis)."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** (len(str(int(value))) - 1) if value >= 1 else 0.01
    while scale * 10 < value:
        scale *= 10
    while scale > value:
        scale /= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale


def span_label(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3570:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h".replace(".0 h", " h")


def covered(history: History, range_s: float, until: float) -> str:
    """'last 6 min of 1 h' (or 'all of 1 h' when the data fills the range)."""
    if not history.points:
        return f"no data in the last {span_label(range_s)}"
    seconds = min(until - history.points[0].ts, range_s)
    if seconds >= range_s * 0.95:
        return f"the last {span_label(range_s)}"
    return f"last {span_label(seconds)} of {span_label(range_s)}"


@dataclass(frozen=True)
class Chart:
    """One series to draw: points (ts, value), the time range, the y scale and its unit."""

    points: Sequence[tuple[float, float]]
    since: float
    until: float
    top: float | None  # the y axis's top (None: a round number above the largest value)
    label: Callable[[float], str]
    style: str = "green"


def draw(chart: Chart, width: int, height: int) -> Text:
    """The chart as `height` rows of bars plus a time axis, `width` cells wide."""
    values = [v for _, v in chart.points]
    top = chart.top if chart.top is not None else nice_top(max(values, default=0.0))
    labels = [chart.label(top), chart.label(top / 2), chart.label(0.0)]
    gutter = max(len(s) for s in labels) + 1
    columns = max(width - gutter - 1, 4)
    span = max(chart.until - chart.since, 1e-9)
    buckets: list[list[float]] = [[] for _ in range(columns)]
    for ts, value in chart.points:
        i = int((ts - chart.since) / span * columns)
        buckets[min(max(i, 0), columns - 1)].append(value)
    levels: list[float | None] = [sum(b) / len(b) / top if b and top > 0 else None
                                  for b in buckets]
    if len(chart.points) < columns:  # fewer points than columns: each holds until the next
        for i in range(1, columns):
            if levels[i] is None:
                levels[i] = levels[i - 1]
    text = Text(no_wrap=True, overflow="crop")
    for row in range(height):
        row_from_top = height - 1 - row  # 0 is the bottom row
        if row == 0:
            axis = labels[0]
        elif row == height // 2 and height >= 3:
            axis = labels[1]
        else:
            axis = ""
        text.append(f"{axis:>{gutter - 1}} ┤" if axis else " " * gutter + "│", style=MUTED)
        for level in levels:
            if level is None:
                text.append(" ")
                continue
            eighths = round(min(max(level, 0.0), 1.0) * height * 8) - row_from_top * 8
            text.append(BLOCKS[min(max(eighths, 0), 8)], style=chart.style)
        text.append("\n")
    text.append(f"{labels[2]:>{gutter - 1}} └" + "─" * columns + "\n", style=MUTED)
    text.append_text(time_axis(chart.since, chart.until, gutter + 1, columns))
    return text


def time_axis(since: float, until: float, indent: int, columns: int) -> Text:
    """Clock times under the chart: the start, the middle and the end."""
    with_seconds = until - since < 3600

    def stamp(ts: float) -> str:
        return local_time(ts, date=False, seconds=with_seconds)

    left, middle, right = stamp(since), stamp((since + until) / 2), stamp(until)
    line = [" "] * columns
    for position, label in ((0, left), ((columns - len(middle)) // 2, middle),
                            (columns - len(right), right)):
        for i, ch in enumerate(label):
            if 0 <= position + i < columns:
                line[position + i] = ch
    return Text(" " * indent + "".join(line), style=MUTED, no_wrap=True)


class Plot(Widget):
    """A chart that redraws at its own width (a resize redraws it)."""

    DEFAULT_CSS = "Plot { height: 6; }"

    def __init__(self, chart: Chart | None = None, *, id: str | None = None,
                 classes: str | None = None, empty: str = "loading…") -> None:
        super().__init__(id=id, classes=classes)
        self.chart = chart
        self.empty = empty

    def show(self, chart: Chart | None, empty: str = "no data yet") -> None:
        self.chart, self.empty = chart, empty
        self.refresh()

    def render(self) -> Text:
        if self.chart is None or not self.chart.points:
            return Text(self.empty, style=MUTED_TRACK if self.chart is None else MUTED)
        return draw(self.chart, self.size.width, max(self.size.height - 2, 1))


def history_chart(history: History, range_s: float, until: float, *, percent: bool,
                  style: str = "green") -> Chart:
    """A chart of a /v1/history answer over the span its points cover (up to `range_s`)."""
    points = [(p.ts, p.avg) for p in history.points]
    since = max(points[0][0] if points else until - range_s, until - range_s)
    return Chart(points, since, until, 100.0 if percent else None,
                 percent_label if percent else money_label, style)


async def covering(fetch: Callable[[float], Awaitable[History]], range_s: float,
                   until: float) -> History:
    """`fetch(since_s)` over `range_s`; when the data covers much less (a young daemon), asked
    again over the span it covers, so the chart gets all its columns' worth of points."""
    history = await fetch(range_s)
    if history.points:
        span = until - history.points[0].ts
        if span < range_s / 4:
            return await fetch(max(span * 1.1, 60.0))
    return history


def summary(values: Sequence[float], percent: bool) -> str:
    if not values:
        return "no data yet"
    shown: Callable[[float], str] = (lambda v: f"{v:.0f}%") if percent else \
        (lambda v: fmt.money(v, "/h"))
    return (f"now {shown(values[-1])}, mean {shown(sum(values) / len(values))}, "
            f"max {shown(max(values))}")
