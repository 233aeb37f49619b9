"""The history screen: the host's wasted $/h and each GPU's utilization over the last hour or
day (w switches), as charts with a y axis in units, clock times and the span the data covers.
The daemon picks the resolution (raw samples for an hour, minute rollups for a day)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static

from daemon.wire import History, one_line
from mlcost_tui import format as fmt
from mlcost_tui.footer import KeyFooter
from mlcost_tui.plot import Plot, covered, covering, history_chart, summary
from mlcost_tui.thresholds import BAD, GOOD

if TYPE_CHECKING:
    from daemon.client import Client

RANGES = ((3600, "1 h"), (86400, "24 h"))
POINTS = 240  # more than a chart has columns at 200 wide


class HistoryScreen(Screen):
    """Series loaded from `client` (/v1/history) when shown, on r and on w."""

    # a, x, k and h act on the main screen's rows, which this screen hides: not from here
    MAIN_ROW_KEYS = False
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("w", "switch_range", "1 h / 24 h", id="history.range"),
        Binding("r", "refresh_history", "Reload", id="history.reload"),
    ]
    DEFAULT_CSS = """
    HistoryScreen VerticalScroll { padding: 0 1; }
    HistoryScreen Label { width: 1fr; }  /* a title longer than the screen wraps, not cut */
    HistoryScreen Plot { height: 6; margin-bottom: 1; }
    HistoryScreen Plot.money { height: 7; }
    """

    def __init__(self, gpus: tuple[int, ...], client: Client | None = None) -> None:
        super().__init__()
        self.gpus = gpus
        self.client = client
        self.range_index = 0

    @property
    def range_s(self) -> int:
        return RANGES[self.range_index][0]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("loading history from mlcostd…", id="history-status")
            yield Label("Wasted $/h (whole host)", id="wasted-label")
            yield Plot(id="wasted", classes="money")
            for index in self.gpus:
                yield Label(f"GPU {index} utilization", id=f"gpu{index}-label")
                yield Plot(id=f"gpu{index}")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.action_refresh_history()

    def action_refresh_history(self) -> None:
        self.load_history()

    def action_switch_range(self) -> None:
        self.range_index = (self.range_index + 1) % len(RANGES)
        self.load_history()

    @work(exclusive=True, group="history", exit_on_error=False,
          description="load utilization and wasted $/h history from mlcostd")
    async def load_history(self) -> None:
        from daemon.client import ClientError

        client = self.client
        if client is None:
            self.done("history needs a daemon (a replay has none)")
            return
        error = None
        range_s = self.range_s
        until = fmt.clock()
        try:
            wasted = await covering(
                lambda since: client.host_history("wasted_per_hour", since, POINTS), range_s,
                until)
            self.show_series("wasted", "Wasted $/h (whole host)", wasted, None, until, False)
        except ClientError as exc:
            error = str(exc)
            self.show_series("wasted", "Wasted $/h (whole host)", None, error, until, False)
        for index in self.gpus:
            label = f"GPU {index} utilization"
            try:
                history = await covering(partial(self.gpu_utilization, client, index),
                                         range_s, until)
                self.show_series(f"gpu{index}", label, history, None, until, True)
            except ClientError as exc:
                error = str(exc)
                self.show_series(f"gpu{index}", label, None, error, until, True)
        self.done(error)

    @staticmethod
    async def gpu_utilization(client: Client, index: int, since_s: float) -> History:
        return await client.gpu_history(index, "utilization", since_s, POINTS)

    def show_series(self, name: str, label: str, history: History | None, error: str | None,
                    until: float, percent: bool) -> None:
        plot = self.query_one(f"#{name}", Plot)
        if history is None:
            plot.show(None, f"unavailable: {error}")
            self.query_one(f"#{name}-label", Label).update(label)
            return
        plot.show(history_chart(history, self.range_s, until, percent=percent,
                                style=GOOD if percent else BAD))
        self.query_one(f"#{name}-label", Label).update(
            f"{label} — {covered(history, self.range_s, until)} — "
            f"{summary(history.values, percent)}")

    def done(self, error: str | None) -> None:
        other = RANGES[(self.range_index + 1) % len(RANGES)][1]
        # Text, not markup: the error quotes the daemon's answer.
        self.query_one("#history-status", Static).update(Text(
            f"history unavailable: {one_line(error)}" if error else
            f"range {RANGES[self.range_index][1]} (w: {other}) · from /v1/history at "
            f"{fmt.clock_time(fmt.clock())} (r reloads)"))
