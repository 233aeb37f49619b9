"""The recommendations panel: one line each, biggest combined savings first.

"saves/month" is each recommendation's share after the ones before it in the daemon's order
(stop an idle host, release idle GPUs, shrink, the jobs, spot, commitments: the daemon combines
them so that together they never claim more than the host's bill), and `#n` its place in that
order, which is not the panel's: the biggest figure comes first, where the person looking for
the money is looking, and `a` acts on it until another row is picked, so a `$10,283 #3` row's
figure counts what `#1` and `#2`, below it, leave (probe 154 L5: "after the ones before it" read
as the rows above it). "alone" is its figure on its own. "evidence" says when advice is still
preliminary (rightsizing, spot and commitments need hours to days of observation) and when the
thresholds were shortened (a simulated host).
"""

from __future__ import annotations

from rich.text import Text

from daemon.clock import duration
from daemon.wire import Now, Process, Recommendation, process_key
from mlcost_tui import format as fmt
from mlcost_tui.footer import PANEL_KEYS
from mlcost_tui.keyed_table import Column, KeyedTable
from mlcost_tui.thresholds import GOOD, MUTED, WARN

ACTION_LABELS = {"show_patch": "a: show patch", "copy_commands": "a: copy commands",
                 "sigterm": "a: stop process", "resize": "a: resize", "none": "advice"}
# A resize on a host with no EC2 instance id (not on EC2): mlcostd can only show the commands.
RESIZE_COMMANDS_ONLY = "a: commands only"


# A stop or a resize whose recommendation is going (its condition false at the last
# evaluation): the daemon refuses it (409, "no longer holds"), so it is not offered.
HELD_ACTION = "not now: going"
ACTS_ON_THE_HOST = ("sigterm", "resize")


def action_label(rec: Recommendation, on_ec2: bool) -> str:
    """What `a` does to `rec`, said before it is pressed."""
    if rec.status == "holding" and rec.action_kind in ACTS_ON_THE_HOST:
        return HELD_ACTION
    if rec.action_kind == "resize" and not on_ec2:
        return RESIZE_COMMANDS_ONLY
    return ACTION_LABELS.get(rec.action_kind, rec.action_kind)


def on_ec2(now: Now) -> bool:
    """Whether the daemon knows this host's EC2 instance id (what a resize acts on)."""
    return bool(now.instance.get("id")) and now.instance.get("provider") in (None, "aws")


def is_about(rec: Recommendation, process: Process) -> bool:
    """Whether `rec` is about `process`: its action's pid and start time, else its target, spell
    the process's key (daemon.wire.process_key, matched exactly)."""
    pid, start = rec.action.get("pid"), rec.action.get("start_time")
    if isinstance(pid, int) and isinstance(start, int | float):
        return process_key(pid, start) == process.key
    return rec.target == process.key


def hours(seconds: float | None) -> str:
    """12 min, 1.5 h, 30 h, 7 d: how much evidence, in the unit a person counts it in."""
    if seconds is None:
        return fmt.DASH
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} d"
    h = seconds / 3600
    return f"{h:.1f} h" if h < 10 else f"{h:.0f} h"


def going(rec: Recommendation) -> str:
    """'(going at 14:05) ' for a recommendation whose condition no longer holds and that is
    kept through the daemon's hold ([cost].recommendation_hold) until then; '' otherwise."""
    if rec.status != "holding":
        return ""
    return f"(going at {fmt.clock_time(rec.resolves_at)}) " if rec.resolves_at else "(going) "


def evidence_text(rec: Recommendation) -> Text:
    """'preliminary 0.2/30 h', 'confident', '· shortened': the confidence next to the figure."""
    text = Text()
    if rec.preliminary:
        text.append(f"preliminary {hours(rec.evidence_seconds)}/"
                    f"{hours(rec.evidence_needed_seconds)}", style=WARN)
    elif rec.confidence == "high":
        text.append("confident", style=GOOD)
    if rec.thresholds_shortened:
        text.append(" · " if text.plain else "")
        text.append("shortened", style=MUTED)
    return text


def savings_figures(rec: Recommendation) -> Text:
    """What it saves, said the same way wherever it is shown: the combined figure, its place
    in the order and its figure on its own."""
    text = Text()
    text.append(f"{fmt.money(rec.shown_savings_per_month)}/month", style="bold green")
    if rec.combined_savings_per_month is not None:
        text.append(f" combined (#{rec.savings_order or '?'} in the order; "
                    f"{fmt.money(rec.savings_per_month)}/month on its own)", style=MUTED)
    return text


def savings_text(rec: Recommendation) -> Text:
    """The savings line of a details or action screen: combined, alone, order, confidence."""
    text = savings_figures(rec)
    if rec.preliminary:
        text.append(f"\npreliminary, confidence {rec.confidence or 'low'}: "
                    f"{hours(rec.evidence_seconds)} observed of the "
                    f"{hours(rec.evidence_needed_seconds)} this advice needs", style="bold " + WARN)
    elif rec.confidence:
        text.append(f"\nconfidence {rec.confidence}: {hours(rec.evidence_seconds)} observed",
                    style=GOOD)
    if rec.thresholds_shortened:
        names = ", ".join(
            f"{name} {hours(v.get('value'))} (default {hours(v.get('default'))})"
            for name, v in rec.shortened_thresholds.items() if isinstance(v, dict))
        text.append(f"\nthresholds shortened for this host: {names or 'yes'}", style=WARN)
    return text


def savings_cell(rec: Recommendation) -> Text:
    """The saves/month cell: the combined figure and its place in the daemon's order (`$10,283
    #3`: what it saves after #1 and #2, wherever they are listed), or the figure alone where the
    daemon sent no combined one (an older daemon: its figure on its own)."""
    text = Text(fmt.money(rec.shown_savings_per_month), style="bold green")
    if rec.combined_savings_per_month is not None and rec.savings_order:
        text.append(f" #{rec.savings_order}", style=MUTED)
    return text


class RecommendationTable(KeyedTable):
    BINDINGS = PANEL_KEYS  # tab and enter, in the footer (mlcost_tui/footer.py)
    COLUMNS = (Column("savings", "saves/month", 11), Column("alone", "alone", 9, priority=5),
               Column("evidence", "evidence", 20, priority=4),
               Column("rule", "rule", 22, priority=3),
               Column("summary", "recommendation", 40, flex=True),
               Column("action", "action", 16))
    DEFAULT_CSS = ("RecommendationTable { height: auto; max-height: 9; "
                   "scrollbar-size-vertical: 1; }")

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.recommendations: dict[str, Recommendation] = {}
        self.replaying = False  # a replay: no rules run, it shows what was recorded
        self.on_ec2 = False  # a resize can be done here (else its commands are shown)
        self.max_lines = 1  # lines a recommendation's text may take (the layout's spare rows)
        self.snoozed_here: set[str] = set()  # snoozed here; the daemon drops them from the next poll
        # The row the user left highlighted when the focus moved on: `a` and `x` act on it
        # from any panel, so it stays highlighted while it is listed (not reset to the top)
        self.picked: str | None = None
        self.set_title("Recommendations")

    def on_blur(self) -> None:
        self.picked = self.selected_key

    def show(self, now: Now) -> None:
        recs = [r for r in now.recommendations if r.id not in self.snoozed_here]
        recs.sort(key=lambda r: (-(r.shown_savings_per_month or 0.0),
                                 -(r.savings_per_month or 0.0)))
        self.recommendations = {r.id: r for r in recs}
        self.on_ec2 = on_ec2(now)
        width = self.summary_width
        self.set_row_height(min(max((len(fmt.wrap(r.summary, width)) for r in recs), default=1),
                                self.max_lines))
        shown = self.shown_keys
        row_before = self.cursor_row
        self.sync([(r.id, tuple(cells[k] for k in shown))
                   for r, cells in ((r, self.cells(r)) for r in recs)])
        if self.picked not in self.recommendations:
            self.picked = None
        if (not self.has_focus and self.picked is None and self.row_count
                and self.cursor_row != 0):
            # Never browsed, or the row left highlighted is gone: the biggest saving stays in
            # view (on a short screen one row shows). A row the user left highlighted stays
            # so: `a` and `x` act on it from any panel (probe 148: reset to the top here each
            # poll, `a` from another panel opened the top row's resize, not the notebook's
            # SIGTERM the user had highlighted).
            self.move_cursor(row=0, animate=False)
            self.scroll_to(y=0, animate=False)
        elif not self.has_focus and self.picked is not None and self.cursor_row != row_before:
            self.move_cursor(row=self.cursor_row, animate=False)  # (moved: kept in view)
        title = f"Recommendations ({len(recs)})" if recs else \
            "Recommendations (none at this recorded tick)" if self.replaying else \
            f"Recommendations (none yet: the rules look every {_every(now)})"
        if recs and now.potential_savings_per_month is not None:
            title += (f" · together {fmt.money(now.potential_savings_per_month, '/month')} of "
                      f"the {fmt.money(now.bill_per_month, '/month')} bill")
        self.set_title(title)

    @property
    def evidence_width(self) -> int | None:
        """The evidence column's width (None while it is not shown)."""
        return next((c.width for c in self.columns_shown if c.key == "evidence"), None)

    @property
    def summary_width(self) -> int:
        """The recommendation text's column width (its text is wrapped or cut to it)."""
        widths = {c.key: c.width for c in self.columns_shown}
        return widths.get("summary") or 40

    def selected(self) -> Recommendation | None:
        key = self.selected_key
        return self.recommendations.get(key) if key else None

    def about(self, process: Process) -> tuple[Recommendation, ...]:
        """The recommendations shown that are about `process`."""
        return tuple(r for r in self.recommendations.values() if is_about(r, process))

    def text_of(self, r: Recommendation) -> str:
        """Its summary where it fits the rows it has, else its headline (the advice in a few
        words): at 80 columns the summary's first 40 characters name its subject only."""
        if r.headline and len(fmt.wrap(going(r) + r.summary,
                                       self.summary_width)) > self.row_height:
            return r.headline
        return r.summary

    def cells(self, r: Recommendation) -> dict[str, object]:
        alone = (fmt.money(r.savings_per_month)
                 if r.combined_savings_per_month is not None else "")
        evidence = evidence_text(r)
        width = self.evidence_width
        if width and evidence.cell_len > width:
            # cut where the column ends, with `…` ('preliminary 15 min/3' read as a figure)
            evidence.truncate(width, overflow="ellipsis")
        return {"savings": savings_cell(r),
                "alone": Text(alone, style=MUTED), "evidence": evidence, "rule": r.rule,
                "summary": "\n".join(fmt.wrap(going(r) + self.text_of(r), self.summary_width,
                                                self.row_height)),
                "action": action_label(r, self.on_ec2)}


def _every(now: Now) -> str:
    """How often the daemon's rules run, as its host says ([cost].evaluate_every)."""
    every = now.evaluate_every_s
    return "~30 s" if every is None or not every > 0 else duration(every)
