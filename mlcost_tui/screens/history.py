"""The history screen: utilization per GPU and the host's wasted $/h over 1 h and 24 h."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Label, Sparkline, Static

from daemon.wire import History
from mlcost_tui import format as fmt

WINDOWS = ((3600, "last hour"), (86400, "last 24 h"))


class HistoryScreen(Screen):
    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="history.back"),
        Binding("r", "refresh_history", "Reload", id="history.reload"),
    ]
    DEFAULT_CSS = """
    HistoryScreen VerticalScroll { padding: 0 1; }
    HistoryScreen Sparkline { height: 3; margin-bottom: 1; }
    HistoryScreen Label { margin-top: 0; }
    """

    def __init__(self, gpus: tuple[int, ...]) -> None:
        super().__init__()
        self.gpus = gpus

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
        self.app.load_history(self)  # type: ignore[attr-defined]

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
