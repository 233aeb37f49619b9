"""How the main screen is laid out at a terminal size: which panels get how many rows, whether
identical idle GPUs share one line, and how wide each panel's table is (the panels then show the
columns that fit, most important first: see keyed_table.fit_columns).

One function of the terminal size and the data's shape, so every size is decided in one place
and a test can ask what 80x24 gets without drawing it.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER_ROWS = 3  # host and price; burn and waste; the status line
FOOTER_ROWS = 1
MIN_PROCESS_ROWS = 5
# Below this height each panel has a title line only (no box): three rows back for the data.
COMPACT_BELOW_ROWS = 28
SCROLLBAR_COLUMNS = 1  # the panels' vertical scrollbar (CSS scrollbar-size-vertical: 1)
BOX_COLUMNS = 2  # a panel's box: one line either side
MAX_RECOMMENDATION_LINES = 4  # a recommendation's text over at most this many lines


@dataclass(frozen=True)
class Layout:
    width: int
    height: int
    compact: bool  # title line instead of a box around each panel
    table_width: int  # cells available to one panel's columns
    gpu_rows: int  # GPU lines that fit (the panel scrolls past them)
    group_idle_gpus: bool  # identical idle GPUs share one line
    recommendation_rows: int
    # Lines one recommendation may take (its text wrapped at words) when the processes leave
    # rows over: 1 on a short screen.
    recommendation_lines: int = 1

    @property
    def chrome_rows(self) -> int:
        """Rows a panel spends around its data: the title (or box) and the column header."""
        return 2 if self.compact else 3


def layout_for(width: int, height: int, gpu_count: int, process_count: int = 0,
               recommendation_count: int = 0, grouped_gpu_lines: int | None = None) -> Layout:
    """The layout of the main screen at `width` x `height` for a host with `gpu_count` GPUs,
    which take `grouped_gpu_lines` lines when identical idle GPUs share one (None: as many as
    GPUs).

    Every GPU line is on screen where the processes can keep five rows and the
    recommendations one: the GPU panel takes the rows it needs from the recommendations' three
    (at 80x24 eight GPUs that all differ leave one recommendation row; the cursor moves through
    the rest). It had six lines at 24 rows whatever it needed, and a GPU held idle beside
    identical idle ones (its own line) pushed the last line behind a scrollbar.

    In a tall terminal, rows that neither the GPUs nor the processes need go to recommendations
    past the usual five, as many as there are (the processes panel keeps its rows first)."""
    compact = height < COMPACT_BELOW_ROWS
    chrome = 2 if compact else 3
    body = max(height - HEADER_ROWS - FOOTER_ROWS, 0)
    if height < COMPACT_BELOW_ROWS:
        # Three: moving through the list is never blind (at 80x24 the processes keep five).
        recommendation_rows = 3 if height >= 24 else 1
    elif height < 40:
        recommendation_rows = 3
    else:
        recommendation_rows = 5
    left_for_gpus = body - (MIN_PROCESS_ROWS + chrome) - (recommendation_rows + chrome) - chrome
    group_idle = compact or gpu_count > left_for_gpus
    needed = grouped_gpu_lines if group_idle and grouped_gpu_lines is not None else gpu_count
    # what the GPUs may take: all but five process rows and one recommendation row
    room = body - 3 * chrome - MIN_PROCESS_ROWS - 1
    gpu_rows = max(left_for_gpus, min(needed, room), 1)
    recommendation_rows = max(min(recommendation_rows, room + 1 - gpu_rows), 1)
    lines = 1
    if not compact and recommendation_count:
        used = (min(gpu_count, gpu_rows) + chrome) + (max(process_count, MIN_PROCESS_ROWS)
                                                      + chrome) + (recommendation_rows + chrome)
        spare = max(body - used, 0)
        more = min(spare, max(recommendation_count - recommendation_rows, 0))
        recommendation_rows += more
        spare -= more
        # Rows still over: each recommendation's text may wrap onto more lines.
        lines = min(MAX_RECOMMENDATION_LINES,
                    max((recommendation_rows + spare) // recommendation_count, 1))
        if lines > 1:
            recommendation_rows = min(recommendation_rows + spare, recommendation_count * lines)
    table_width = width - (0 if compact else BOX_COLUMNS) - SCROLLBAR_COLUMNS
    return Layout(width=width, height=height, compact=compact, table_width=max(table_width, 20),
                  gpu_rows=gpu_rows, group_idle_gpus=group_idle,
                  recommendation_rows=recommendation_rows, recommendation_lines=lines)
