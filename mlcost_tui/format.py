"""Turning wire values into short cell texts; "-" for anything not known (yet)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text

from daemon import clock as daemon_clock
from daemon.wire import ELLIPSIS, crop, program_words, short_command  # noqa: F401 (the TUI's)
from daemon.wire import money as wire_money
from mlcost_tui.thresholds import MUTED_TRACK, PHASE_COLOURS

# The UI reads the one clock (daemon.clock) through this name, so tests can freeze it.
clock: Callable[[], float] = daemon_clock.now

DASH = "-"
SPARK = "▁▂▃▄▅▆▇█"


def money(value: float | None, suffix: str = "") -> str:
    """Dollars as the screens show them (daemon.wire.money): whole dollars from $1,000."""
    return DASH if value is None else wire_money(value, whole_from=1000) + suffix


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


def cut(text: str, width: int) -> str:
    """`text` in at most `width` cells, cut at a word boundary with an ellipsis (mid-word only
    when the first word alone is longer than half the width)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = text[: width - 1]
    space = head.rstrip().rfind(" ")
    if space >= width // 2:
        head = head[:space]
    return head.rstrip(" ,;:-—(") + ELLIPSIS


def wrap(text: str, width: int, lines: int | None = None) -> list[str]:
    """`text` wrapped at words into lines of `width`; with `lines`, at most that many, the last
    cut with an ellipsis when text is left over."""
    wrapped = textwrap.wrap(text, max(width, 1), break_on_hyphens=False) or [""]
    if lines is None or len(wrapped) <= lines:
        return wrapped
    # The rest is longer than one line (it wrapped): cut() ends it at a word with an ellipsis.
    return [*wrapped[: lines - 1], cut(" ".join(wrapped[lines - 1:]), width)]


def gpu_list(indices: Sequence[int], width: int | None = None) -> str:
    """'0-3', '0,2,5', '0-3,6': GPU indices, runs as ranges; in `width`, when the list is
    longer, the first and how many more ('0+4'), never a list cut mid-way ('0,1,')."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    text = ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)
    if width is not None and len(text) > width and indices:
        text = f"{min(indices)}+{len(indices) - 1}"
    return text


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
