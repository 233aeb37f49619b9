"""Turning wire values into short cell texts; "-" for anything not known (yet)."""

from __future__ import annotations

import textwrap
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


ELLIPSIS = "…"


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


def program_words(command: str) -> list[str]:
    """The words of a command line that tell processes apart: the program's own name (no
    folder), and for an interpreter running a module or a script, that module's last part
    (`python -m pkg.workloads.data_starved` -> `python -m …data_starved`) or the script's
    file name."""
    words = command.split()
    if not words:
        return []
    words[0] = words[0].rsplit("/", 1)[-1]
    if words[0].startswith("python") and len(words) > 1:
        if words[1] == "-m" and len(words) > 2 and "." in words[2]:
            words[2] = ELLIPSIS + words[2].rsplit(".", 1)[-1]
        elif words[1].endswith(".py"):
            words[1] = words[1].rsplit("/", 1)[-1]
    return words


def crop(text: str, width: int) -> str:
    """`text` in `width` cells, cut where the width ends with an ellipsis (a command's
    arguments are tokens, paths and flags: part of one tells more than none of it)."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS[:width]


def short_command(command: str, width: int = 60) -> str:
    """A command line in `width` cells, what tells it apart first: the program and its module
    or script (see program_words), then its arguments, cut with an ellipsis. When even that
    does not fit, the interpreter goes (`…data_starved --gpu 1`)."""
    words = program_words(command)
    if not words:
        return crop(command, width)
    text = " ".join(words)
    # In a narrow column the interpreter goes (it is on every row; the module or script is
    # what differs): when it and its module would take over half the width.
    if len(text) > width and words[0].startswith("python"):
        skip = 2 if len(words) > 2 and words[1] == "-m" else \
            1 if len(words) > 1 and words[1].endswith(".py") else 0
        if skip and len(" ".join(words[: skip + 1])) > width // 2:
            text = " ".join(words[skip:])
    return crop(text, width)


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
