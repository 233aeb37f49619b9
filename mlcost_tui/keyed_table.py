"""A DataTable kept in step with a keyed list of rows: only changed cells are written, rows are
added and removed by key, the order is re-applied only when it changed, the cursor stays on its row.

One refresh costs what changed, not what is shown: changed cells are written straight into the
table's data with one repaint for the whole sync (DataTable.update_cell repaints per cell, which
was most of a refresh with 500 processes), and panels build each cell from its inputs only when
those inputs changed (`cells_for`). This reaches into DataTable's row bookkeeping (`_data`,
`_row_locations`, as in Textual 8.2): tests/tui/test_keyed_table.py pins that behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from rich.text import Text
from textual._two_way_dict import TwoWayDict  # DataTable's row order (pinned Textual)
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

Formatter = Callable[[Any], Any]


@lru_cache(8192)
def _plain(value: str) -> Text:
    return Text(value, end="")


def as_cell(value: Any) -> Any:
    """A str cell as plain Text: DataTable would parse it as markup on every measure and paint
    (slow, and a command line with '[' in it would be mangled)."""
    return _plain(value) if isinstance(value, str) else value


class KeyedTable(DataTable):
    """Columns are (key, label) pairs; `sync` takes [(row_key, cells)] in display order."""

    COLUMNS: Sequence[tuple[str, str]] = ()
    # Columns whose content grows after the first rows (cells are written in place, which does
    # not widen a column): a fixed width.
    WIDTHS: dict[str, int] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._cells: dict[str, tuple[Any, ...]] = {}
        self._order: list[str] = []
        self._row_keys: dict[str, RowKey] = {}
        self._column_keys: list[ColumnKey] = []
        # row key -> (inputs, cells): the last cells built and what they were built from
        self._built: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}

    def on_mount(self) -> None:
        self._column_keys = [self.add_column(label, key=key, width=self.WIDTHS.get(key))
                             for key, label in self.COLUMNS]

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except Exception:
            return None
        return row_key.value

    def cells_for(self, key: str, inputs: tuple[Any, ...],
                  formatters: Sequence[Formatter]) -> tuple[Any, ...]:
        """The row's cells, one per formatter applied to its input; a cell whose input equals
        last time's is the very same object (no new Text, and `sync` sees it unchanged)."""
        built = self._built.get(key)
        if built is not None:
            old_inputs, old_cells = built
            if old_inputs == inputs:
                return old_cells
            cells = tuple(cell if new == old else format_cell(new)
                          for format_cell, new, old, cell
                          in zip(formatters, inputs, old_inputs, old_cells, strict=True))
        else:
            cells = tuple(format_cell(value) for format_cell, value in zip(formatters, inputs,
                                                                           strict=True))
        self._built[key] = (inputs, cells)
        return cells

    def sync(self, rows: Sequence[tuple[str, Sequence[Any]]]) -> None:
        selected = self.selected_key
        order = [key for key, _ in rows]
        wanted = set(order)
        gone = [k for k in self._cells if k not in wanted]
        if gone:
            self._remove(gone)
        added = False
        changed = False
        data = self._data
        for key, cells in rows:
            cells = tuple(cells)
            before = self._cells.get(key)
            if before is None:
                self._row_keys[key] = self.add_row(*map(as_cell, cells), key=key)
                added = True
            elif before != cells:
                row = data[self._row_keys[key]]
                for column, old, new in zip(self._column_keys, before, cells, strict=True):
                    if old is not new and old != new:
                        row[column] = as_cell(new)
                changed = True
            self._cells[key] = cells
        if order != self._order or added or gone:
            self._set_order(order)
            changed = True
        if changed:
            self._update_count += 1  # the row render caches are keyed by it
            self.refresh()
        if selected is not None and selected in wanted:
            index = self.get_row_index(selected)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False, scroll=False)

    def _remove(self, keys: Sequence[str]) -> None:
        if len(keys) < 4:  # remove_row re-indexes every row per call
            for key in keys:
                self.remove_row(self._row_keys[key])
                self._forget(key)
            return
        for key in keys:
            row_key = self._row_keys[key]
            del self.rows[row_key]
            del self._data[row_key]
            self._forget(key)
        self._updated_cells = {c for c in self._updated_cells if c.row_key in self._data}
        self._set_order([k for k in self._order if k in self._cells])
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate  # clamp it to the rows left
        self.refresh(layout=True)

    def _forget(self, key: str) -> None:
        del self._cells[key]
        del self._row_keys[key]
        self._built.pop(key, None)

    def _set_order(self, order: list[str]) -> None:
        keys = self._row_keys
        self._row_locations = TwoWayDict({keys[key]: i for i, key in enumerate(order)})
        self._order = order

    def clear_rows(self) -> None:
        self.clear()
        self._cells.clear()
        self._row_keys.clear()
        self._built.clear()
        self._order = []
