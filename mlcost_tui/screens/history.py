"""The history screen: utilization per GPU and the host's wasted $/h over 1 h and 24 h."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Label, Sparkline, Static

from daemon.wire import History
from mlcost_tui import format as fmt

if TYPE_CHECKING:
    from daemon.client import Client

WINDOWS = ((3600, "last hour"), (86400, "last 24 h"))


class HistoryScreen(Screen):
    """Series loaded from `client` (/v1/history) when shown and on r."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("r", "refresh_history", "Reload", id="history.reload"),
    ]
    DEFAULT_CSS = """
    HistoryScreen VerticalScroll { padding: 0 1; }
    HistoryScreen Sparkline { height: 3; margin-bottom: 1; }
    HistoryScreen Label { margin-top: 0; }
    """

    def __init__(self, gpus: tuple[int, ...], client: Client | None = None) -> None:
        super().__init__()
        self.gpus = gpus
        self.client = client

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("loading history from mlcostd…", id="history-status")
            for since, label in WINDOWS:
                yield Label(f"Wasted $/h, {label}", id=f"wasted-{since}-label")
                yield Sparkline([], id=f"wasted-{since}")
                for index in self.gpus:
                    yield Label(f"GPU {index} utilization, {label}", id=f"gpu{index}-{since}-label")
                    yield Sparkline([], id=f"gpu{index}-{since}")
        yield Footer()

    def on_mount(self) -> None:
        self.action_refresh_history()

    def action_refresh_history(self) -> None:
        self.load_history()

    @work(exclusive=True, group="history", exit_on_error=False,
          description="load utilization and wasted $/h history from mlcostd")
    async def load_history(self) -> None:
        from daemon.client import ClientError

        client = self.client
        if client is None:
            self.done("history needs a daemon")
            return
        error = None
        for since, label in WINDOWS:
            try:
                wasted = await client.host_history("wasted_per_hour", since, 120)
                self.show_series("wasted", since, f"Wasted $/h, {label}", wasted, None, True)
            except ClientError as exc:
                error = str(exc)
                self.show_series("wasted", since, f"Wasted $/h, {label}", None, error, True)
            for index in self.gpus:
                try:
                    history = await client.gpu_history(index, "utilization", since, 120)
                    self.show_series(f"gpu{index}", since, f"GPU {index} utilization, {label}",
                                     history, None)
                except ClientError as exc:
                    error = str(exc)
                    self.show_series(f"gpu{index}", since, f"GPU {index} utilization, {label}",
                                     None, error)
        self.done(error)

    def show_series(self, name: str, since: int, label: str, history: History | None,
                    error: str | None, money: bool = False) -> None:
        widget_id = f"{name}-{since}"
        values = history.values if history else []
        self.query_one(f"#{widget_id}", Sparkline).data = values or [0.0]
        if error:
            summary = f"unavailable: {error}"
        elif not values:
            summary = "no data yet"
        elif money:
            summary = (f"now {fmt.money(values[-1], '/h')}, mean "
                       f"{fmt.money(sum(values) / len(values), '/h')}, max "
                       f"{fmt.money(max(values), '/h')}")
        else:
            summary = (f"now {values[-1]:.0f}%, mean {sum(values) / len(values):.0f}%, "
                       f"max {max(values):.0f}%")
        self.query_one(f"#{widget_id}-label", Label).update(f"{label} — {summary}")

    def done(self, error: str | None) -> None:
        self.query_one("#history-status", Static).update(
            f"history unavailable: {error}" if error else
            f"from /v1/history at {fmt.clock_time(fmt.clock())} (r reloads)")
