"""The recommendations panel: one line each, biggest savings first."""

from __future__ import annotations

from rich.text import Text

from daemon.wire import Now, Recommendation
from mlcost_tui import format as fmt
from mlcost_tui.keyed_table import KeyedTable

ACTION_LABELS = {"show_patch": "a: show patch", "copy_commands": "a: copy commands",
                 "sigterm": "a: stop process", "resize": "a: resize", "none": "advice"}


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

    def cells(self, r: Recommendation) -> tuple[object, ...]:
        return (Text(fmt.money(r.savings_per_month), style="bold green"), r.rule,
                r.summary[:110], ACTION_LABELS.get(r.action_kind, r.action_kind))
