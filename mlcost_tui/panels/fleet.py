"""The fleet table: one row per connected daemon (several --connect targets); idle GPUs are those
each daemon says are idle (Gpu.busy)."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from mlcost_tui import format as fmt
from mlcost_tui.keyed_table import KeyedTable
from mlcost_tui.messages import HostSnapshot
from mlcost_tui.thresholds import BAD, GOOD

# The order of both fleet tables (this one and --prometheus's), said in their titles: a down
# host on top of a table read as "costliest first" looked like the costliest.
FLEET_ORDER = "down hosts first, then costliest first"


def fleet_order(snap: HostSnapshot) -> tuple[bool, float]:
    """The sort key: unreachable hosts first, then the biggest burn."""
    now = snap.now
    return (now is not None, -((now.burn_per_hour or 0.0) if now is not None else 0.0))


class FleetPanel(KeyedTable):
    COLUMNS = (("host", "host"), ("target", "daemon"), ("status", "status"),
               ("burn", "burn $/h"), ("wasted", "wasted $/h"), ("today", "today"),
               ("gpus", "GPUs"), ("idle", "idle GPUs"), ("alerts", "idle alerts"),
               ("recs", "recommendations"), ("saves", "saves/month"))
    WIDTHS = {"burn": 9, "wasted": 10, "today": 10, "saves": 11}
    DEFAULT_CSS = "FleetPanel { height: 1fr; }"

    def show(self, hosts: tuple[HostSnapshot, ...]) -> None:
        rows: list[tuple[str, tuple[Any, ...]]] = []
        for snap in sorted(hosts, key=fleet_order):
            now = snap.now
            if now is None:
                rows.append((snap.target, (fmt.DASH, snap.target,
                                           Text("unreachable", style=BAD)) + (fmt.DASH,) * 8))
                continue
            idle = sum(1 for g in now.gpus if g.busy is False)  # the daemon's verdict
            # the combined figure the host's own header shows: the standalone figures overlap
            # (stopping an idle process and shrinking the instance both count its GPU)
            saves = now.potential_savings_per_month
            if saves is None:  # an older daemon: its recommendations' shown figures
                saves = sum(r.shown_savings_per_month or 0.0 for r in now.recommendations)
            rows.append((snap.target, (
                now.hostname or "?", snap.target, Text("live", style=GOOD),
                fmt.money(now.burn_per_hour), fmt.money(now.wasted_per_hour),
                fmt.money(now.spend_today), str(len(now.gpus)),
                Text(str(idle), style=BAD if idle else ""),
                Text(str(len(now.idle_alerts)), style=BAD if now.idle_alerts else ""),
                str(len(now.recommendations)), fmt.money(saves if now.recommendations else None),
            )))
        self.sync(rows)
        self.set_title(f"Fleet: {len(hosts)} daemons · {FLEET_ORDER}")
