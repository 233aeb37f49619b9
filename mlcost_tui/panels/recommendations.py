"""The recommendations panel: one line each, biggest savings first."""

from __future__ import annotations

from rich.text import Text

from daemon.wire import Now, Process, Recommendation, process_key
from mlcost_tui import format as fmt
from mlcost_tui.keyed_table import KeyedTable

ACTION_LABELS = {"show_patch": "a: show patch", "copy_commands": "a: copy commands",
                 "sigterm": "a: stop process", "resize": "a: resize", "none": "advice"}


def is_about(rec: Recommendation, process: Process) -> bool:
    """Whether `rec` is about `process`: its action's pid and start time, else its target, spell
    the process's key (daemon.wire.process_key, matched exactly)."""
    pid, start = rec.action.get("pid"), rec.action.get("start_time")
    if isinstance(pid, int) and isinstance(start, int | float):
        return process_key(pid, start) == process.key
    return rec.target == process.key


class RecommendationTable(KeyedTable):
    COLUMNS = (("savings", "saves/month"), ("rule", "rule"), ("summary", "recommendation"),
               ("action", "action"))
    WIDTHS = {"savings": 11}
    DEFAULT_CSS = "RecommendationTable { height: auto; max-height: 9; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.recommendations: dict[str, Recommendation] = {}
        self.snoozed_here: set[str] = set()  # snoozed here; the daemon drops them from the next poll
        self.border_title = "Recommendations"

    def show(self, now: Now) -> None:
        recs = [r for r in now.recommendations if r.id not in self.snoozed_here]
        recs.sort(key=lambda r: -(r.savings_per_month or 0.0))
        self.recommendations = {r.id: r for r in recs}
        self.sync([(r.id, self.cells(r)) for r in recs])
        self.border_title = f"Recommendations ({len(recs)})" if recs else \
            "Recommendations (none yet: rules run every ~30 s)"

    def selected(self) -> Recommendation | None:
        key = self.selected_key
        return self.recommendations.get(key) if key else None

    def about(self, process: Process) -> tuple[Recommendation, ...]:
        """The recommendations shown that are about `process`."""
        return tuple(r for r in self.recommendations.values() if is_about(r, process))

    def cells(self, r: Recommendation) -> tuple[object, ...]:
        return (Text(fmt.money(r.savings_per_month), style="bold green"), r.rule,
                r.summary[:110], ACTION_LABELS.get(r.action_kind, r.action_kind))
