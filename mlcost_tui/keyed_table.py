"""A DataTable kept in step with a keyed list of rows, on DataTable's public API only: changed
cells are written with `update_cell`, new rows with `add_row`, gone rows with `remove_row` (or one
`clear()` when most rows are stale), the order with `sort()` only when it changed, and the cursor
stays on its row (by key). Callers sync inside `App.batch_update()`, so a refresh repaints once.

One refresh costs what changed, not what is shown: panels build each cell from its inputs only
when those inputs changed (`cells_for`), `sync` writes only the cells that are not the same, and
repaints only the visible rows it changed (none when nothing did). Painting a row draws only the
cells that changed: DataTable keys its drawn cells by a counter that every `update_cell` bumps, so
one changed cell made it draw every visible cell again; here a drawn cell is keyed by the cell
object itself (cells are immutable: a changed value is a new object), its width and its styles
(`_render_cell`, the one DataTable internal this overrides).
bench/tui_refresh.py measures it (target: one snapshot of 500 processes from message to idle,
layout and paint included, in <= 30 ms); bench/tui_idle.py the idle cost beside nvitop.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._segment_tools import line_crop
from textual.binding import Binding
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.renderables.styled import Styled
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets._data_table import _EMPTY_TEXT as _EMPTY
from textual.widgets._data_table import default_cell_formatter
from textual.widgets.data_table import ColumnKey, RowKey

if TYPE_CHECKING:
    from typing_extensions import Self

Formatter = Callable[[Any], Any]

# DataTable draws each column with one cell of padding either side.
CELL_PADDING = 1


@dataclass(frozen=True)
class Column:
    """One column of a panel: `width` cells of content; `priority` 0 is always shown and higher
    numbers are dropped first when the terminal is narrow (as htop and nvitop do); a `flex`
    column (the command, the recommendation's text) takes the width the others leave."""

    key: str
    label: str
    width: int | None = None
    priority: int = 0
    flex: bool = False


def as_column(column: Column | tuple[str, str]) -> Column:
    return column if isinstance(column, Column) else Column(column[0], column[1])


def fit_columns(columns: Sequence[Column], width: int) -> tuple[Column, ...]:
    """The columns that fit in `width` cells, in their declared (on-screen) order: the most
    important first, then each lower priority (in declared order within one) until one does
    not fit; flex columns get what is left. Nothing after that one: a narrow column of little
    importance squeezed into the cells left over (the process state, 3 cells, at 100 columns)
    came and went as the terminal widened, ahead of the columns it ranks below."""
    def cost(c: Column) -> int:
        return (c.width or len(c.label)) + 2 * CELL_PADDING

    chosen: set[str] = set()
    used = 0
    for column in sorted(columns, key=lambda c: c.priority):
        if column.priority != 0 and used + cost(column) > width:
            break
        chosen.add(column.key)
        used += cost(column)
    shown = [c for c in columns if c.key in chosen]
    flex = [c for c in shown if c.flex]
    if flex:
        spare = max(width - used, 0)
        share, extra = divmod(spare, len(flex))
        grown = {c.key: Column(c.key, c.label, (c.width or len(c.label)) + share +
                               (extra if i == 0 else 0), c.priority, c.flex)
                 for i, c in enumerate(flex)}
        shown = [grown.get(c.key, c) for c in shown]
    return tuple(shown)


# Drawn cells kept per table: what the table shows, a few times over (this frame's cells, the
# ones they replaced, their cursor and hover variants; a cell's drawing is reused whatever row it
# moves to), at least DRAWN_CELLS_MIN. A fixed 4096 kept drawings of values long gone: the demo's
# GPU panel (88 cells on screen) drew ~9 new ones a second and held them for 8 minutes, part of
# mlcost-top's RSS growing 2 MB a minute (bench/tui_idle.py measures the first minute only).
DRAWN_SCREENS = 3
DRAWN_CELLS_MIN = 256

# Drawn lines kept per table: DRAWN_SCREENS screenfuls of the table's height, at least
# DRAWN_LINES_MIN (a line is kept by its row, its place on screen and its cells, so a line is
# drawn again from the cache only as the last frame showed it, or its cursor or hover variant).
# A fixed 1024 held the lines of frames long gone: each sorted refresh of 500 processes moves
# every row on screen, and each line keeps a Strip with the crops and styles Textual derived
# from it.
DRAWN_LINES_MIN = 64

# More gone rows than this share of the table: one clear() and re-add beats remove_row, which
# re-indexes every row on each call.
CLEAR_WHEN_STALE = 0.5


# Text cells kept for the strings they show, shared by every table: two screenfuls of a wide
# terminal's cells (a string on screen now and at the last poll gives the same Text, so its
# drawing is reused). At 8192 the demo filled it in ~1.6 h with values long gone, ~3.5 MB
# (tracemalloc: ~430 bytes a Text).
PLAIN_CELLS = 2048


@lru_cache(PLAIN_CELLS)
def _plain(value: str) -> Text:
    return Text(value, end="")


def _one_line(console: Console, cell: Any, width: int, padding: int, pre_style: Style,
              post_style: Style) -> list[list[Segment]] | None:
    """A one-line cell drawn as Rich draws it (Styled(Padding(cell)) in `width`), without Rich's
    wrapping machinery, which is most of a cell's cost: for a Text that fits on one line, left
    justified, with no tab or newline; None for anything else (Rich draws it)."""
    if not isinstance(cell, Text) or cell.justify not in (None, "default", "left"):
        return None
    plain = cell.plain
    inner = width - 2 * padding
    length = cell.cell_len
    if inner < 0 or length > inner or "\n" in plain or "\t" in plain:
        return None
    blank = Style.null()  # Padding's own style, as Rich gives it
    # Text.render applies the Text's own style only beneath spans (Rich's console path makes
    # it a span first)
    body = list(cell.render(console, end="")) if cell.spans else \
        [Segment(plain, console.get_style(cell.style) if cell.style else None)]
    line = [Segment(" " * padding, blank), *body,
            Segment(" " * (inner - length + padding), blank)]
    return [[Segment(text, None if control else _styled(pre_style, style, post_style), control)
             for text, style, control in line if text]]


# Styles a drawn cell's segment was given, kept by the identity of what made it (a cell's own
# style, the table's style beneath and the cursor's above), at most STYLE_SUMS of them.
STYLE_SUMS = 4096
_style_sums: dict[tuple[int, int, int], tuple[Style | None, Style, Style, Style]] = {}


def _styled(pre_style: Style, style: Style | None, post_style: Style) -> Style:
    """(pre_style + style) + post_style, as Segment.apply_style adds them. Rich caches its
    additions by equal styles, and comparing two styles is a Python call: a new cell's three
    segments cost ~20 of them. Kept here by the objects themselves (held, so an id is never
    reused while kept); a style with a link is never kept (Rich copies those each time)."""
    key = (id(pre_style), id(style), id(post_style))
    kept = _style_sums.get(key)
    if kept is not None:
        return kept[3]
    combined = pre_style + style if pre_style else style
    combined = combined + post_style if combined else post_style
    if not combined.link:
        if len(_style_sums) >= STYLE_SUMS:
            _style_sums.clear()
        _style_sums[key] = (style, pre_style, post_style, combined)
    return combined


# Row meta styles kept: one a row index up to this (a style's additions are cached by the
# style objects they join, so the same row's meta must be the same object, frame after frame).
ROW_METAS = 1024


@lru_cache(ROW_METAS)
def _row_meta(row_index: int, out_of_bounds: bool) -> Style:
    """What a click or hover on row `row_index` reads (DataTable's meta): one object per row,
    reused by every frame. Style.from_meta makes a style unlike any other (it carries a new
    link id), so a new one per line made every style addition with it a miss in Rich's cache
    of additions: each line's ~30 segments each built a new Style."""
    if out_of_bounds:
        return Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
    return Style.from_meta({"row": row_index, "column": 0})


def _with_meta(segments: list[Segment], meta: Style) -> list[Segment]:
    """`segments` with neighbours of the same style joined and `meta` added to every style
    (Segment.simplify, then Segment.apply_style(post_style=meta), in one pass: a style is
    joined with the meta once a line, not once a segment)."""
    out: list[Segment] = []
    joined: dict[Style | None, Style] = {}
    text = ""
    style: Style | None = None
    started = False
    for segment_text, segment_style, control in segments:
        if control:  # none in a table's cells; kept as they are, as apply_style does
            if started:
                out.append(Segment(text, _joined(joined, style, meta)))
                started = False
            out.append(Segment(segment_text, None, control))
            continue
        if started and (segment_style is style or segment_style == style):
            text += segment_text
            continue
        if started:
            out.append(Segment(text, _joined(joined, style, meta)))
        text, style, started = segment_text, segment_style, True
    if started:
        out.append(Segment(text, _joined(joined, style, meta)))
    return out


def _joined(joined: dict[Style | None, Style], style: Style | None, meta: Style) -> Style:
    combined = joined.get(style)
    if combined is None:
        combined = joined[style] = style + meta if style else meta
    return combined


def as_cell(value: Any) -> Any:
    """A str cell as plain Text: DataTable would parse it as markup on every measure and paint
    (slow, and a command line with '[' in it would be mangled)."""
    return _plain(value) if isinstance(value, str) else value


def own_cell(value: Any) -> Text:
    """A first-column cell that is this row's own object: `sort` finds a row's position by the
    identity of its first cell (DataTable.sort hands the key function cells, not row keys)."""
    if isinstance(value, Text):
        return value.copy()
    return Text(value if isinstance(value, str) else str(value), end="")


@dataclass(frozen=True)
class _Frame:
    """What drawing a line reads besides its row, read once per render_lines: each is a
    reactive or a property over reactives, and ~15 reads a line were ~1,300 a refresh of the
    process panel."""

    own_path: bool  # one-line rows under a row cursor, no fixed rows or columns, no labels
    fixed_rows: int
    scroll: tuple[int, int]
    header_rows: int  # lines above the rows (0 without a header)
    width: int
    cursor_row: int
    hover_row: int
    show_cursor: bool
    show_hover: bool
    state: tuple[bool, bool, bool, bool, Any]  # _cursor_state()


class KeyedTable(DataTable):
    """Columns are (key, label) pairs; `sync` takes [(row_key, cells)] in display order."""

    # Home and End go to the first and the last row, as in htop and nvitop (DataTable's scroll
    # sideways: these tables are fit to the terminal's width, never wider)
    BINDINGS = [Binding("home", "scroll_top", "First row", show=False),
                Binding("end", "scroll_bottom", "Last row", show=False)]
    COLUMNS: Sequence[Column | tuple[str, str]] = ()
    # Columns whose content grows after the first rows (cells are written in place, which does
    # not widen a column): a fixed width.
    WIDTHS: dict[str, int] = {}
    _deferred: tuple[bool, bool] | None = None  # (layout, recompose) asked for during a sync
    row_height = 1  # lines per row (set_row_height changes it)
    _title_only = False  # set_title is setting the border title: repaint its line only
    _line_style: Style | None = None  # the widget's style, while render_lines runs
    # the columns in on-screen order and their drawn widths, while render_lines runs
    _line_columns: tuple[list[Any], tuple[int, ...]] | None = None
    # what else every line reads, while render_lines runs (reactives, costly to read per line)
    _line_frame: _Frame | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._cells: dict[str, tuple[Any, ...]] = {}  # row key -> the cells last synced
        self._first: dict[str, Text] = {}  # row key -> its first cell as put in the table
        # row key -> what builds its cells: a row off screen at the last sync, whose new cells
        # are built and written only when it shows (render_lines) or is read (the getters)
        self._pending: dict[str, Callable[[], Sequence[Any]]] = {}
        self._order: list[str] = []  # row keys in display order
        self._column_keys: list[ColumnKey] = []
        self.columns_shown: tuple[Column, ...] = ()
        self._reselect: str | None = None
        # row key -> (inputs, cells): the last cells built and what they were built from
        self._built: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
        # (id of the cell, its width and styles) -> (the cell, its lines drawn without position)
        self._drawn: LRUCache[tuple[Any, ...], tuple[Any, list[list[Segment]]]] = \
            LRUCache(DRAWN_CELLS_MIN)
        # (row, its place, widths, cursor, hover, focus...) -> (its cells, the line drawn)
        self._lines: LRUCache[tuple[Any, ...], tuple[tuple[Any, ...], Strip]] = \
            LRUCache(DRAWN_LINES_MIN)
        self._changed: set[str] = set()  # rows whose cells a sync wrote
        self._title: str | None = None  # the border title last set (set_title)
        self._moved = False  # a sync added, removed, reordered rows or moved the cursor

    @classmethod
    def all_columns(cls) -> tuple[Column, ...]:
        return tuple(Column(c.key, c.label, c.width or cls.WIDTHS.get(c.key), c.priority,
                            c.flex) for c in map(as_column, cls.COLUMNS))

    def on_mount(self) -> None:
        if not self.columns_shown:
            self.show_columns(self.all_columns())

    def fit(self, width: int) -> bool:
        """Show the columns that fit in `width` cells; True when that changed the columns (the
        rows are gone then: sync them again)."""
        return self.show_columns(fit_columns(self.all_columns(), width))

    def show_columns(self, columns: Sequence[Column]) -> bool:
        """Show exactly `columns` (a change removes every row: the caller syncs again)."""
        columns = tuple(columns)
        if columns == self.columns_shown:
            return False
        self._reselect = self.selected_key or self._reselect  # the cursor's row, after the sync
        self.clear_rows()
        self.clear(columns=True)
        self.columns_shown = columns
        # Labels as Text: a str label is parsed as Rich markup, which loads Rich's table of
        # emoji names (~0.85 MB of RSS kept for the app's life) for labels that have none.
        self._column_keys = [self.add_column(Text(c.label), key=c.key, width=c.width)
                             for c in columns]
        return True

    def set_row_height(self, lines: int) -> bool:
        """Rows of `lines` lines from now on (a change removes every row: sync again)."""
        if lines == self.row_height:
            return False
        self._reselect = self.selected_key or self._reselect
        self.clear_rows()
        self.row_height = lines
        return True

    @property
    def shown_keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.columns_shown)

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

    def set_title(self, title: str) -> None:
        """The border title. The same title again repaints nothing, a new one the top border
        line only (setting Widget.border_title repaints the whole table, every row drawn
        again: a title that says the host's CPU changes every poll)."""
        if title == self._title:
            return
        self._title = title
        self._title_only = True
        try:
            self.border_title = title
        finally:
            self._title_only = False

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> Self:
        """Widget.refresh; during a sync, one refresh for the whole sync (DataTable asks for one
        per cell written, and each costs what a repaint of the whole table costs to plan)."""
        if self._title_only and not regions and not layout and not recompose:
            x, y = self.content_offset  # the border line, in the content's coordinates
            return super().refresh(Region(-x, -y, self.outer_size.width, 1))
        if self._deferred is not None:
            self._deferred = (self._deferred[0] or layout, self._deferred[1] or recompose)
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def sync(self, rows: Sequence[tuple[str, Sequence[Any] | Callable[[], Sequence[Any]]]]
             ) -> None:
        """Make the table show `rows` (row key, cells), in this order; repaint what changed.
        Cells given as a function (no arguments) are built only for the rows on screen (and
        new rows): the others when they come into view or are read."""
        self._deferred = (False, False)
        self._changed.clear()
        self._moved = False
        try:
            self._sync(rows)
        except BaseException:
            self._moved = True
            raise
        finally:
            layout, recompose = self._deferred
            self._deferred = None
            if layout or recompose or self._moved:
                self.refresh(layout=layout, recompose=recompose)
            else:  # cells written in place: their rows, where they are on screen (else nothing)
                self._refresh_rows(self._changed)
            self._changed.clear()

    def _refresh_rows(self, keys: set[str]) -> None:
        """Repaint rows `keys` where they are on screen. DataTable.refresh_row finds a row's
        place by adding the heights of every row above it, from a list of rows it builds again
        after each update_cell, and the width by reading every column's: here every row is
        `row_height` lines (add_row is always given it; set_row_height clears the rows)."""
        if not keys:
            return
        top = self.header_height if self.show_header else 0
        width = max(self.size.width, self.virtual_size.width)
        window = self.window_region
        scroll = self.scroll_offset
        for key in keys:
            region = Region(0, top + self.get_row_index(key) * self.row_height, width,
                            self.row_height)
            if window.overlaps(region):
                self.refresh(region.translate(-scroll))

    def _sync(self, rows: Sequence[tuple[str, Sequence[Any] | Callable[[], Sequence[Any]]]]
              ) -> None:
        selected = self._reselect or self.selected_key
        self._reselect = None
        order = [key for key, _ in rows]
        wanted = set(order)
        gone = [key for key in self._cells if key not in wanted]
        self._moved = bool(gone) or len(order) != len(self._order)
        if gone and len(gone) > CLEAR_WHEN_STALE * len(self._cells):
            built = {key: self._built[key] for key in order if key in self._built}
            self.clear_rows()
            self._built = built  # the cells of the rows that stay are still good
        else:
            for key in gone:
                self.remove_row(key)
                self._forget(key)
        # What the table shows now: the rows kept in their order, then each added row.
        current = [key for key in self._order if key in wanted]
        window = self._window()
        for index, (key, cells) in enumerate(rows):
            before = self._cells.get(key)
            if callable(cells):
                if before is not None and index not in window:
                    self._pending[key] = cells  # built and written once it is on screen
                    continue
                cells = cells()
            self._pending.pop(key, None)
            if before is None:
                cells = tuple(cells)
                first = own_cell(cells[0])
                self.add_row(first, *map(as_cell, cells[1:]), key=key, height=self.row_height)
                self._first[key] = first
                self._cells[key] = cells
                current.append(key)
            else:
                self._write(key, tuple(cells), before)
        if current != order:
            self._sort_as(order)
            self._moved = True
        self._order = order
        if selected is not None and selected in wanted:
            index = self.get_row_index(selected)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False, scroll=False)
                self._moved = True

    def _write(self, key: str, cells: tuple[Any, ...], before: tuple[Any, ...]) -> None:
        """Write the cells of row `key` that differ from `before` (what it shows now)."""
        if before != cells:
            columns = self._column_keys
            if cells[0] is not before[0] and cells[0] != before[0]:
                first = self._first[key] = own_cell(cells[0])
                self.update_cell(key, columns[0], first)
                self._changed.add(key)
            for column, old, new in zip(columns[1:], before[1:], cells[1:], strict=True):
                if old is not new and old != new:
                    self.update_cell(key, column, as_cell(new))
                    self._changed.add(key)
        self._cells[key] = cells

    def _window(self) -> range:
        """The indices of the rows on screen now, one more either side."""
        top = self.scroll_offset.y // self.row_height
        return range(max(top - 1, 0), top + self.size.height // self.row_height + 2)

    def _fill(self, keys: Sequence[str]) -> None:
        """Build and write the pending rows among `keys` (no repaint asked: see render_lines
        and the getters, which call this)."""
        deferred, self._deferred = self._deferred, (False, False)
        try:
            for key in keys:
                build = self._pending.pop(key, None)
                if build is not None:
                    self._write(key, tuple(build()), self._cells[key])
        finally:
            self._deferred = deferred
            self._changed.clear()

    def render_lines(self, crop: Region) -> list[Strip]:
        """DataTable.render_lines, the pending rows now on screen written first, and the
        widget's style (computed from the CSS of every ancestor), the columns and their widths
        (each read through reactives) read once, not per line."""
        if self._pending:
            window = self._window()
            self._fill([key for key in self._order[window.start:window.stop]
                        if key in self._pending])
        shown = DRAWN_SCREENS * len(self._column_keys) * (self.size.height + 2)
        if max(shown, DRAWN_CELLS_MIN) != self._drawn.maxsize:
            # a new cache: Textual's LRUCache, once full, keeps its length whatever maxsize says
            self._drawn = LRUCache(max(shown, DRAWN_CELLS_MIN))
        lines = max(DRAWN_SCREENS * (self.size.height + 2), DRAWN_LINES_MIN)
        if lines != self._lines.maxsize:
            self._lines = LRUCache(lines)
        self._line_style = self.rich_style
        columns = self.ordered_columns
        self._line_columns = (columns, tuple(column.get_render_width(self)
                                             for column in columns))
        # DataTable.render_lines reads it too, before its lines: read first, for the frame
        self._pseudo_class_state = self.get_pseudo_class_state()
        self._line_frame = self._read_frame()
        try:
            return super().render_lines(crop)
        finally:
            self._line_style = None
            self._line_columns = None
            self._line_frame = None

    def _read_frame(self) -> _Frame:
        scroll = self.scroll_offset
        return _Frame(
            own_path=not (self.fixed_columns or self.fixed_rows or self.cursor_type != "row"
                          or (self._labelled_row_exists and self.show_row_labels)),
            fixed_rows=self.fixed_rows, scroll=(scroll.x, scroll.y),
            header_rows=self.header_height if self.show_header else 0, width=self.size.width,
            cursor_row=self.cursor_coordinate.row, hover_row=self.hover_coordinate.row,
            show_cursor=self.show_cursor, show_hover=self._show_hover_cursor,
            state=self._cursor_state())

    def render_line(self, y: int) -> Strip:
        """DataTable.render_line (the header stays on top, the rows scroll), with the style
        render_lines read."""
        frame = self._line_frame
        if frame is None or frame.fixed_rows or self._line_style is None:
            return super().render_line(y)
        scroll_x, scroll_y = frame.scroll
        if y >= frame.header_rows:
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + frame.width, self._line_style)

    # What the table holds, read through DataTable's getters, is what a sync asked for: the
    # rows still pending are written first.
    def get_row(self, row_key: RowKey | str) -> list[Any]:
        self._fill(list(self._pending))
        return super().get_row(row_key)

    def get_row_at(self, row_index: int) -> list[Any]:
        self._fill(list(self._pending))
        return super().get_row_at(row_index)

    def get_cell(self, row_key: RowKey | str, column_key: ColumnKey | str) -> Any:
        self._fill(list(self._pending))
        return super().get_cell(row_key, column_key)

    def get_cell_at(self, coordinate: Coordinate) -> Any:
        self._fill(list(self._pending))
        return super().get_cell_at(coordinate)

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> list[list[Segment]]:
        """DataTable._render_cell, with drawn cells kept by what they show (see the module's
        doc); the row and column (the mouse's meta) are added to each segment afterwards, so a
        cell that moves to another row is not drawn again. Row labels, fixed rows or columns
        and auto-height rows (none in mlcost-top) take DataTable's own path."""
        drawn = self._draw_cell(row_index, column_index, base_style, width, cursor, hover)
        if drawn is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor,
                                        hover)
        meta = Style.from_meta({"row": row_index, "column": column_index})
        return [[Segment(text, style + meta if style is not None else meta, control)
                 for text, style, control in line] for line in drawn]

    def _draw_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                   cursor: bool, hover: bool) -> list[list[Segment]] | None:
        """A cell's lines without the mouse's meta, kept by what the cell shows; None where
        DataTable's own path must draw it (row labels, fixed rows or columns, auto-height)."""
        header = row_index == -1
        column_key = self._column_locations.get_key(column_index)
        row_key = None if header else self._row_locations.get_key(row_index)
        row = self.rows.get(row_key) if row_key is not None else None
        plain_row = header or (row is not None and not (row.auto_height and row.height == 0))
        if column_index == -1 or column_key is None or not plain_row or self.fixed_rows \
                or self.fixed_columns:
            return None
        if row_key is None or row is None:  # the header
            cell: Any = self.columns[column_key].label
            height = self.header_height
        else:
            height = row.height
            datum = self._data[row_key].get(column_key)
            cell = _EMPTY if datum is None else default_cell_formatter(
                datum, wrap=height != 1, height=height) or _EMPTY
        return self._draw(cell, width, height, base_style, header, cursor, hover,
                          self._cursor_state())

    def _cursor_state(self) -> tuple[bool, bool, bool, bool, Any]:
        """What besides its cell, place and width decides how a cell is drawn (read once per
        line: these are reactives, costly to read per cell)."""
        return (self.show_cursor, self._show_hover_cursor,
                self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css", self._pseudo_class_state)

    def _draw(self, cell: Any, width: int, height: int, base_style: Style, header: bool,
              cursor: bool, hover: bool, state: tuple[bool, bool, bool, bool, Any]
              ) -> list[list[Segment]]:
        """`cell` drawn in `width` x `height` (no meta), kept by the cell object itself."""
        key = (id(cell), width, height, base_style, header, cursor, hover, state)
        drawn = self._drawn.get(key)
        if drawn is None or drawn[0] is not cell:
            show_cursor, show_hover, css_fg, css_bg, _ = state
            component_style, post_style = self._get_styles_to_render_cell(
                header, False, False, hover, cursor, show_cursor, show_hover, css_fg, css_bg)
            pre_style = base_style + component_style
            lines = _one_line(self.app.console, cell, width, self.cell_padding, pre_style,
                              post_style) if height == 1 else None
            if lines is None:
                options = self.app.console_options.update_dimensions(width, height)
                if height == 1:
                    options = options.update(no_wrap=True)
                lines = self.app.console.render_lines(
                    Styled(Padding(cell, (0, self.cell_padding)), pre_style=pre_style,
                           post_style=post_style), options)
            drawn = (cell, lines)
            self._drawn.set(key, drawn)
        return drawn[1]

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """DataTable._render_line for one-line rows under a row cursor (every KeyedTable), kept
        by what the line shows: DataTable keys its drawn lines by a counter that every
        `update_cell` bumps, so one changed cell drew every visible line again, and drawing
        one computed the header's style from the CSS. Here a line is drawn again only when
        one of its cells is a new object, it moved, or the cursor, hover, widths or focus
        changed. Anything else (fixed rows or columns, row labels, taller rows) takes
        DataTable's own path."""
        frame = self._line_frame or self._read_frame()
        if not frame.own_path:
            return super()._render_line(y, x1, x2, base_style)
        width = frame.width
        try:
            row_key, line_no = self._get_offsets(y)
        except LookupError:
            return Strip.blank(width, base_style)
        if self._line_columns is not None:
            columns, widths = self._line_columns
        else:
            columns = self.ordered_columns
            widths = tuple(column.get_render_width(self) for column in columns)
        header = row_key is self._header_row_key
        if header:
            row_index = -1
            cells: tuple[Any, ...] = tuple(column.label for column in columns)
        else:
            row = self.rows.get(row_key)
            index = self._row_locations.get(row_key)
            if row is None or row.height != 1 or index is None:
                return super()._render_line(y, x1, x2, base_style)
            row_index = index
            data = self._data[row_key]
            cells = tuple(data.get(column.key) for column in columns)
        on_cursor = row_index == frame.cursor_row
        on_hover = row_index == frame.hover_row
        key = (row_key, line_no, row_index, widths, x1, x2, width, base_style, on_cursor,
               on_hover, frame.state)
        cached = self._lines.get(key)
        if cached is not None and len(cached[0]) == len(cells) and \
                all(map(operator.is_, cached[0], cells)):
            return cached[1]
        row_style = self._get_row_style(row_index, base_style)  # the header's, or the base
        segments: list[Segment] = []
        if header:  # a click on a column's header sorts by it: each cell says its column
            for column_index, column_width in enumerate(widths):
                segments.extend(self._render_cell(row_index, column_index, row_style,
                                                  column_width, on_cursor, on_hover)[line_no])
        else:
            # A row's cells all say (row, column 0), as DataTable says of the space right of
            # the last column: under a row cursor a click or hover means the row, and
            # neighbouring cells drawn alike become one segment (half the segments every
            # later step of the paint goes through).
            state = frame.state
            draw = self._draw
            for datum, column_width in zip(cells, widths, strict=True):
                cell = datum if isinstance(datum, Text) else _EMPTY if datum is None else \
                    default_cell_formatter(datum, wrap=False, height=1) or _EMPTY
                segments.extend(draw(cell, column_width, 1, row_style, False, on_cursor,
                                     on_hover, state)[0])
            segments = _with_meta(segments, _row_meta(row_index, False))
        extend_style, _ = self._get_styles_to_render_cell(
            header, False, False, on_hover, on_cursor, frame.show_cursor, frame.show_hover,
            False, False)
        extend_style = row_style + extend_style + _row_meta(row_index, True)
        drawn_width = sum(widths)
        segments.append(Segment(" " * max(0, width - drawn_width), extend_style))
        if x1 == 0 and x2 >= width >= drawn_width:
            # Every cell is drawn in its column's width: the line is `width` cells as it is
            # (no crop to measure it segment by segment, no second Strip to pad it).
            strip = Strip(segments, width)
        else:
            strip = Strip(line_crop(segments, x1, x2, width)).adjust_cell_length(width,
                                                                               base_style)
        self._lines.set(key, (cells, strip))
        return strip

    def _sort_as(self, order: list[str]) -> None:
        position = {id(self._first[key]): i for i, key in enumerate(order)}
        self.sort(self._column_keys[0], key=lambda first: position[id(first)])

    def _forget(self, key: str) -> None:
        self._pending.pop(key, None)
        del self._cells[key]
        del self._first[key]
        self._built.pop(key, None)

    def clear_rows(self) -> None:
        """Remove every row (the cursor goes to the top)."""
        self._moved = True
        self.clear()
        self._cells.clear()
        self._pending.clear()
        self._first.clear()
        self._built.clear()
        self._order = []
