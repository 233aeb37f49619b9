"""Turning wire values into short cell texts; "-" for anything not known (yet)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text

from daemon import clock as daemon_clock
from mlcost_tui.thresholds import MUTED_TRACK, PHASE_COLOURS

# The UI reads the one clock (daemon.clock) through this name, so tests can freeze it.
clock: Callable[[], float] = daemon_clock.now

DASH = "-"
SPARK = "▁▂▃▄▅▆▇█"


def money(value: float | None, suffix: str = "") -> str:
    if value is None:
        return DASH
    if abs(value) >= 1000:
        return f"${value:,.0f}{suffix}"
    return f"${value:,.2f}{suffix}"


def pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}%"


def size(value: float | None) -> str:
    if value is None:
        return DASH
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{int(value)}B"


def number(value: float | None, unit: str = "", digits: int = 0) -> str:
    return DASH if value is None else f"{value:.{digits}f}{unit}"


def short_command(command: str, width: int = 60) -> str:
    head, _, rest = command.partition(" ")
    text = (head.rsplit("/", 1)[-1] + (" " + rest if rest else "")) if head else command
    return text if len(text) <= width else text[: width - 1] + "…"


def sparkline(values: Sequence[float], width: int = 12, top: float = 100.0) -> str:
    """The last `width` values as block characters on a 0..top scale."""
    if not values:
        return DASH
    tail = list(values)[-width:]
    out = []
    for v in tail:
        level = 0 if top <= 0 else min(max(v / top, 0.0), 1.0)
        out.append(SPARK[min(int(level * (len(SPARK) - 1) + 0.5), len(SPARK) - 1)])
    return "".join(out)


def phase_shares(phases: Mapping[str, Any]) -> list[tuple[str, float]]:
    shares = []
    for name, value in phases.items():
        share = value.get("share") if isinstance(value, Mapping) else value
        if isinstance(share, int | float) and share > 0:
            shares.append((name, float(share)))
    return sorted(shares, key=lambda kv: -kv[1])


def phase_bar(phases: Mapping[str, Any], width: int = 10) -> Text:
    """A bar of `width` cells split by phase share, each phase in its colour."""
    shares = phase_shares(phases)
    total = sum(s for _, s in shares)
    if not shares or total <= 0:
        return Text(DASH)
    text = Text()
    used = 0
    for i, (name, share) in enumerate(shares):
        cells = width - used if i == len(shares) - 1 else round(width * share / total)
        cells = max(0, min(cells, width - used))
        text.append("█" * cells, style=PHASE_COLOURS.get(name, "white"))
        used += cells
    return text


EIGHTHS = " ▏▎▍▌▋▊▉█"


def load_bar(share: float | None, width: int, style: str) -> Text:
    """A bar `width` cells long filled to `share` (0..1) in eighths, in `style` (the load colour),
    on a dim track: 100% is the full bar, 0% none of it."""
    text = Text(end="")
    if share is None:
        text.append("·" * width, style=MUTED_TRACK)
        return text
    eighths = round(min(max(share, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    text.append("█" * full, style=style)
    if full < width:
        text.append(EIGHTHS[part] if part else "", style=style)
        text.append("·" * (width - full - (1 if part else 0)), style=MUTED_TRACK)
    return text


def plural(count: int, one: str, many: str | None = None) -> str:
    """'1 GPU', '3 GPUs', '1 recommendation', '2 processes'."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def ago(ts: float | None) -> str:
    if ts is None:
        return DASH
    seconds = max(clock() - ts, 0.0)
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def clock_time(ts: float | None) -> str:
    return DASH if ts is None else daemon_clock.local_time(ts, date=False)
