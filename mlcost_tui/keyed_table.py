"""A DataTable kept in step with a keyed list of rows: only changed cells are written, rows are
added and removed by key, the order is re-applied only when it changed, the cursor stays on its row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist


class _Keyed(Text):
    """A cell text that knows its row's key (so the table can be put in any order)."""

    row_key: str = ""

    @classmethod
    def of(cls, cell: Any, row_key: str) -> _Keyed:
        keyed = cls()
        keyed.append_text(cell if isinstance(cell, Text) else Text(str(cell)))
        keyed.row_key = row_key
        return keyed


class KeyedTable(DataTable):
    """Columns are (key, label) pairs; `sync` takes [(row_key, cells)] in display order."""

    COLUMNS: Sequence[tuple[str, str]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._cells: dict[str, tuple[Any, ...]] = {}
        self._order: list[str] = []

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except Exception:
            return None
        return row_key.value

    def sync(self, rows: Sequence[tuple[str, Sequence[Any]]]) -> None:
        selected = self.selected_key
        wanted = {key for key, _ in rows}
        for key in [k for k in self._cells if k not in wanted]:
            try:
                self.remove_row(key)
            except RowDoesNotExist:
                pass
            del self._cells[key]
        columns = [key for key, _ in self.COLUMNS]
        added = False
        for key, cells in rows:
            cells = tuple(cells)
            before = self._cells.get(key)
            if before is None:
                self.add_row(_Keyed.of(cells[0], key), *cells[1:], key=key)
                added = True
            elif before != cells:
                for i, (column, old, new) in enumerate(zip(columns, before, cells, strict=True)):
                    if old != new:
                        self.update_cell(key, column, _Keyed.of(new, key) if i == 0 else new)
            self._cells[key] = cells
        order = [key for key, _ in rows]
        if order != self._order or added:
            rank = {key: i for i, key in enumerate(order)}
            # sort() hands the key function cells, not row keys: the first cell carries its key.
            self._sort_by_rank(rank)
            self._order = order
        if selected is not None and selected in wanted:
            index = self.get_row_index(selected)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False, scroll=False)

    def _sort_by_rank(self, rank: dict[str, int]) -> None:
        first = self.COLUMNS[0][0]
        self.sort(first, key=lambda cell: rank.get(getattr(cell, "row_key", ""), len(rank)))

    def clear_rows(self) -> None:
        self.clear()
        self._cells.clear()
        self._order = []
