"""Where a toast goes on the main screen: at the top right, over the GPU panel, never over the
process rows, the recommendations or the key line (README "mlcost-top").

Textual docks the toast rack to the top (the App's CSS) and lays each toast out at its own
height. Under the header there are as many rows as the GPU panel has: eight at 80x24 with the
demo's eight GPUs, three with one GPU, where the snapshot's toast (five lines) covered the
first process rows. So the toast moves up over the header's right side when it needs the rows,
and a toast taller than everything above the processes is cut, with `…`.
"""

from __future__ import annotations

from textual.content import Content

from mlcost_tui.format import ELLIPSIS

TOAST_WIDTH = 60  # Textual's Toast: width 60
TOAST_MAX_SHARE = 0.8  # the App's CSS: max-width 80% (of the screen)
TOAST_CHROME = 3  # the App's CSS: padding 0 1; Textual's: the severity's left border
TOAST_MARGIN = 1  # Textual's Toast: margin-top 1, a blank line above it


def text_width(screen_width: int) -> int:
    """The cells of text in one line of a toast on a screen `screen_width` wide."""
    return max(min(TOAST_WIDTH, int(screen_width * TOAST_MAX_SHARE)) - TOAST_CHROME, 1)


def fit(message: str, title: str, screen_width: int, free_above: int,
        under_header: int) -> tuple[str, int]:
    """(the message as the toast shows it, the rack's top margin) for a toast that must end
    above row `free_above` (the process panel's first row): the margin is `under_header` (the
    toast starts on the line under the header) when it fits there, less when it does not (it
    covers the right of the header instead), and a message too long even then is cut to the
    lines there are, its last line ending in `…`."""
    title_rows = 1 if title else 0
    lines = [line.plain for line in Content(message).wrap(text_width(screen_width))]
    room = max(free_above - TOAST_MARGIN - title_rows, 1)
    if len(lines) > room:
        width = text_width(screen_width)
        last = lines[room - 1]
        lines = lines[:room - 1] + [(last if len(last) < width else last[:width - 1])
                                    + ELLIPSIS]
        message = "\n".join(lines)
    height = TOAST_MARGIN + title_rows + len(lines)
    return message, max(min(under_header, free_above - height), 0)
