"""The fleet table: one row per connected daemon (several --connect targets); idle GPUs are those
each daemon says are idle (Gpu.busy)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.binding import Binding

from mlcost_tui import format as fmt
from mlcost_tui.keyed_table import CELL_PADDING, Column, KeyedTable, as_column, fit_columns
from mlcost_tui.messages import HostSnapshot
from mlcost_tui.sources import same_daemon
from mlcost_tui.thresholds import BAD, GOOD, WARN

# The order of both fleet tables (this one and --prometheus's), said in their titles: a down
# host on top of a table read as "costliest first" looked like the costliest.
FLEET_ORDER = "down hosts first, then costliest first"


def short_target(target: str, width: int) -> str:
    """A daemon's target in `width` cells, keeping what tells targets apart: a socket's file
    name (`…/gpu1.sock`: the folders are alike), a URL's host and port (`gpu1.exa…:9347`)."""
    if len(target) <= width:
        return target
    if target.startswith("unix:"):
        return fmt.ELLIPSIS + target[len(target) - width + 1:]
    target = target.split("://", 1)[-1]  # http(s)://: the scheme says nothing here
    if len(target) <= width:
        return target
    host, colon, port = target.rpartition(":")
    tail = colon + port if host and port.isdigit() and len(port) < width // 2 else ""
    return target[:width - 1 - len(tail)] + fmt.ELLIPSIS + tail


def fitted_row(table: KeyedTable, cells: Sequence[Any], cut: Sequence[str],
               targets: Sequence[str] = ()) -> tuple[Any, ...]:
    """`cells` (one per column of `table.COLUMNS`) as the table shows them: the shown columns
    only, the texts of the `cut` columns cut to their width with `…` (a table cell is cropped
    at its edge with no sign that it goes on), the `targets` columns as short_target cuts."""
    named = dict(zip((as_column(c).key for c in table.COLUMNS), cells, strict=True))
    widths = {c.key: c.width for c in table.columns_shown}
    for key in (*cut, *targets):
        width = widths.get(key)
        if width and isinstance(named[key], str):
            named[key] = (short_target if key in targets else fmt.cut)(named[key], width)
    return tuple(named[key] for key in table.shown_keys)


def fleet_order(snap: HostSnapshot) -> tuple[bool, float]:
    """The sort key: hosts down (unreachable, or not answering now) first, then the biggest
    burn."""
    now = snap.now
    return (snap.error is None, -((now.burn_per_hour or 0.0) if now is not None else 0.0))


def dimmed(cell: str | Text) -> Text:
    """A figure shown from an earlier answer."""
    text = cell.copy() if isinstance(cell, Text) else Text(cell)
    text.stylize("dim")
    return text


def status_of(snap: HostSnapshot) -> Text:
    """`live`; or, for a daemon that did not answer this time but did before, how old its
    row's (dimmed) figures are: `as of 14:02`, as the one host's header says it."""
    if snap.error is None:
        return Text("live", style=GOOD)
    return Text(f"as of {fmt.clock_time(snap.answered_at)[:5]}", style="bold " + WARN)


class FleetPanel(KeyedTable):
    # The host and its daemon share what the figures leave (cut with `…`): a long daemon
    # target took its whole length and pushed GPUs and idle GPUs off an 80-column screen.
    # At 80 the burn, GPUs and idle GPUs stay, then waste and savings as the width allows.
    COLUMNS = (Column("host", "host", 10, flex=True), Column("target", "daemon", 12, flex=True),
               Column("status", "status", 11), Column("burn", "burn $/h", 9),
               Column("wasted", "wasted $/h", 10, priority=1),
               Column("today", "today", 10, priority=3), Column("gpus", "GPUs", 4),
               Column("idle", "idle GPUs", 9), Column("alerts", "idle alerts", 11, priority=2),
               Column("recs", "recommendations", 15, priority=4),
               Column("saves", "saves/month", 11, priority=1))
    DEFAULT_CSS = "FleetPanel { height: 1fr; }"
    BINDINGS = [Binding("enter", "select_cursor", "Open host", id="fleet.open")]
    # Columns the daemon's whole name goes before: at 120 columns it was cut to 12 cells
    # (`127.0…:19347`, the port the only difference left) to keep today's spend and the
    # recommendations' count; the columns of priority up to this one stay before it.
    TARGET_BEFORE_PRIORITY = 3
    TARGET_MAX = 48  # a longer target is cut (with `…`) even on a wide screen

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target_need = 0  # cells the longest daemon target needs whole (short_target)
        self.fitted_width: int | None = None  # the width of the last fit, to fit again

    def fit(self, width: int) -> bool:
        self.fitted_width = width
        return self.show_columns(self.columns_for(width))

    def columns_for(self, width: int) -> tuple[Column, ...]:
        """The columns that fit, the daemon column as wide as its longest target (up to
        TARGET_MAX) as far as the columns of priority below TARGET_BEFORE_PRIORITY leave room:
        it takes the place of the less important ones, which come back as the terminal
        widens; what it cannot have it shows cut with `…` (short_target)."""
        columns = self.all_columns()
        narrow = fit_columns(columns, width)
        base = next(c.width or 0 for c in columns if c.key == "target")
        before = [c for c in columns if c.key in {n.key for n in narrow}
                  and c.priority < self.TARGET_BEFORE_PRIORITY]
        taken = sum((c.width or len(c.label)) + 2 * CELL_PADDING for c in before)
        target = min(self.target_need, self.TARGET_MAX, width - taken + base)
        if target <= base:
            return narrow
        return fit_columns([dataclasses.replace(c, width=target) if c.key == "target" else c
                            for c in columns], width)

    def show(self, hosts: tuple[HostSnapshot, ...]) -> None:
        rows: list[tuple[str, tuple[Any, ...]]] = []
        need = max((len(short_target(h.target, 10_000)) for h in hosts), default=0)
        if need != self.target_need:
            self.target_need = need
            if self.fitted_width is not None:
                self.fit(self.fitted_width)  # (rows are gone if the columns changed: synced below)

        def row(*cells: Any) -> tuple[Any, ...]:
            return fitted_row(self, cells, ("host",), targets=("target",))

        same = same_daemon(hosts)
        for snap in sorted(hosts, key=fleet_order):
            now = snap.now
            if snap.target in same and now is not None:
                # one daemon reached at two targets: its figures once, on the other's row (the
                # totals above count it once too); the title says which target is which
                rows.append((snap.target, row(now.hostname or "?", snap.target,
                                              Text("same daemon", style=WARN),
                                              *(fmt.DASH,) * 8)))
                continue
            if now is None:
                rows.append((snap.target, row(fmt.DASH, snap.target,
                                              Text("unreachable", style=BAD), *(fmt.DASH,) * 8)))
                continue
            idle = sum(1 for g in now.gpus if g.busy is False)  # the daemon's verdict
            # the combined figure the host's own header shows: the standalone figures overlap
            # (stopping an idle process and shrinking the instance both count its GPU)
            saves = now.potential_savings_per_month
            if saves is None:  # an older daemon: its recommendations' shown figures
                saves = sum(r.shown_savings_per_month or 0.0 for r in now.recommendations)
            cells: tuple[str | Text, ...] = (
                now.hostname or "?", snap.target, status_of(snap),
                fmt.money(now.burn_per_hour), fmt.money(now.wasted_per_hour),
                fmt.money(now.spend_today), str(len(now.gpus)),
                Text(str(idle), style=BAD if idle else ""),
                Text(str(len(now.idle_alerts)), style=BAD if now.idle_alerts else ""),
                str(len(now.recommendations)), fmt.money(saves if now.recommendations else None))
            if snap.stale:  # figures from an earlier answer: dimmed, as one host's panels are
                cells = (*cells[:3], *(dimmed(c) for c in cells[3:]))
            rows.append((snap.target, row(*cells)))
        self.sync(rows)
        daemons = len(hosts) - len(same)
        twins = "; ".join(f"{short_target(t, 40)} is {short_target(c, 40)}"
                          for t, c in same.items())
        self.set_title(f"Fleet: {fmt.plural(daemons, 'daemon')}"
                       + (f" at {len(hosts)} targets ({twins}: counted once)" if same else "")
                       + f" · {FLEET_ORDER}")
