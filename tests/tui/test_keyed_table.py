"""KeyedTable on DataTable's public API: whatever sequence of syncs (cells changed, rows added,
removed one by one or mostly stale, reordered), the table shows exactly the rows asked for, in
order, and the cursor stays on its row; and a screen updated in place shows what a fresh one does."""

from __future__ import annotations

import random
from functools import partial

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from mlcost_tui.app import MlcostTop
from mlcost_tui.keyed_table import KeyedTable
from mlcost_tui.messages import SnapshotArrived
from mlcost_tui.panels.gpus import GpuPanel
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from tests.tui.fixtures import StubClient, changed_snapshot

SYNCS_PER_SEED = 25


class Table(KeyedTable):
    COLUMNS = (("name", "name"), ("value", "value"), ("note", "note"))


class TableApp(App[None]):
    """The table alone: a sync is checked without laying out mlcost-top's whole screen after
    each one (the table is mlcost_tui's own widget; the panels' use of it is the test below)."""

    def compose(self) -> ComposeResult:
        yield Table()


def shown(table: KeyedTable) -> list[tuple[str, ...]]:
    """Each row as the table would draw it: plain text and style of every cell."""
    def cell(value: object) -> str:
        return value.markup if isinstance(value, Text) else str(value)

    return [tuple(cell(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


def random_rows(rng: random.Random, keys: list[str]) -> list[tuple[str, tuple[object, ...]]]:
    """A random subset of `keys` in a random order, with cells that often stay the same."""
    chosen = [k for k in keys if rng.random() < 0.7]
    rng.shuffle(chosen)
    return [(k, (f"row {k}" if rng.random() < 0.9 else f"renamed {k}",
                 str(rng.randint(0, 3)), Text(rng.choice(["ok", "slow"]), style="bold")))
            for k in chosen]


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(4))
async def test_any_sequence_of_syncs_shows_exactly_the_rows_in_order(seed):
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(30)]
    app = TableApp()
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(Table)
        for _ in range(SYNCS_PER_SEED):
            rows = random_rows(rng, keys)
            if rng.random() < 0.15:
                rows = rows[: rng.randint(0, 3)]  # most rows stale: the clear() path
            selected = table.selected_key
            with app.batch_update():
                table.sync(rows)
            await pilot.pause()
            expected = [tuple(c.markup if isinstance(c, Text) else str(c) for c in cells)
                        for _, cells in rows]
            assert shown(table) == expected
            assert [table.coordinate_to_cell_key((i, 0))[0].value
                    for i in range(table.row_count)] == [k for k, _ in rows]
            if selected is not None and selected in dict(rows):
                assert table.selected_key == selected  # the cursor followed its row
            if table.row_count:
                table.move_cursor(row=rng.randrange(table.row_count))


@pytest.mark.asyncio
async def test_a_screen_updated_in_place_shows_what_a_fresh_screen_shows():
    async def tables_after(steps: list[int]) -> dict[str, list[tuple[str, ...]]]:
        app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
        async with app.run_test(size=(160, 48)) as pilot:
            for step in steps:
                app.post_message(SnapshotArrived((changed_snapshot(step),)))
                await pilot.pause()
            gpus = [row[:3] + row[4:] for row in shown(app.query_one(GpuPanel))]  # sparkline
            return {"gpus": gpus, "processes": shown(app.query_one(ProcessPanel)),
                    "recommendations": shown(app.query_one(RecommendationTable))}

    updated = await tables_after([0, 1, 2])  # values changed, rows added, then removed
    fresh = await tables_after([2])
    assert updated == fresh
    assert len(updated["processes"]) == 5 and len(updated["recommendations"]) == 1


class Recording(Table):
    """A table in a border (where its title shows) that notes which of its content's lines
    were drawn (y, from its top: 0 is the header)."""

    DEFAULT_CSS = "Recording { border: round white; height: auto; }"

    def __init__(self) -> None:
        super().__init__()
        self.drawn: list[int] = []

    def render_line(self, y: int):  # type: ignore[no-untyped-def]
        self.drawn.append(y)
        return super().render_line(y)


def painted(table: KeyedTable) -> list[str]:
    """The table's lines as drawn now (the text of each line of its content)."""
    return [table.render_line(y).text for y in range(table.size.height)]


@pytest.mark.asyncio
async def test_a_sync_draws_only_the_rows_it_changed_and_what_it_draws_is_current():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        table = Recording()
        await app.mount(table)
        rows = [(f"k{i}", (f"row {i}", str(i), Text("ok", style="bold"))) for i in range(8)]
        table.sync(rows)
        await pilot.pause()
        table.drawn.clear()
        table.sync(list(rows))  # the same rows: nothing to draw
        await pilot.pause()
        assert table.drawn == []
        rows[3] = ("k3", ("row 3", "Z", rows[3][1][2]))  # as wide: columns do not grow
        table.sync(rows)
        await pilot.pause()
        assert set(table.drawn) == {4}  # the header is line 0: k3 is line 4, drawn alone
        assert table.render_line(4).text.split()[:3] == ["row", "3", "Z"]
        table.drawn.clear()
        table.set_title("same")
        await pilot.pause()
        table.drawn.clear()
        table.set_title("same")
        table.set_title("other")  # the border line only: no row drawn again
        await pilot.pause()
        assert table.drawn == []
        assert "other" in app.export_screenshot() and table.border_title == "other"


@pytest.mark.asyncio
async def test_a_changed_row_in_a_scrolled_table_is_drawn_where_it_shows_and_only_there():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        table = Recording()
        table.styles.height = 12  # 10 rows under the header, inside the border
        await app.mount(table)
        rows = [(f"k{i}", (f"row {i}", str(i), Text("ok", style="bold"))) for i in range(60)]
        table.sync(rows)
        await pilot.pause()
        table.scroll_to(y=30, animate=False)
        await pilot.pause()
        top = table.scroll_offset.y
        assert top > 0
        table.drawn.clear()
        mid = top + 2  # as wide as before: columns do not grow
        rows[mid] = (f"k{mid}", (f"new {mid}", "Z", rows[mid][1][2]))
        rows[0] = ("k0", ("new 0", "Z", rows[0][1][2]))  # scrolled off: nothing to draw
        table.sync(rows)
        await pilot.pause()
        assert set(table.drawn) == {3}  # the header is line 0: the third row on screen
        assert table.render_line(3).text.split()[:3] == ["new", str(mid), "Z"]


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(2))
async def test_a_table_synced_many_times_draws_what_a_fresh_table_draws(seed):
    """Drawn cells are kept by the cell they show: after any sequence of syncs (cells changed,
    rows moved, added, removed), every line drawn is what a table given the last rows at once
    draws."""
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(30)]
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 80)) as pilot:
        table, fresh = Table(), Table()
        await app.mount(table)
        rows: list[tuple[str, tuple[object, ...]]] = []
        for _ in range(SYNCS_PER_SEED):
            rows = random_rows(rng, keys)
            table.sync(rows)
            await pilot.pause()
            painted(table)  # drawn (and kept) at each step
        await app.mount(fresh)
        fresh.sync(rows)
        table.move_cursor(row=0)
        await pilot.pause()
        assert table.size == fresh.size
        assert painted(table) == painted(fresh)


class Short(Table):
    DEFAULT_CSS = "Short { height: 10; }"


class ShortApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Short()


@pytest.mark.asyncio
async def test_rows_off_screen_are_built_when_they_show_or_are_read_and_show_what_is_current():
    """Cells given as functions are built for the rows on screen (and new rows) only; a row
    off screen is built when it is scrolled to or read, and then shows what a table given
    every row's cells at once shows."""
    built: list[str] = []

    def build(key: str, cells: tuple[object, ...]) -> tuple[object, ...]:
        built.append(key)
        return cells

    def lazy(rows: list[tuple[str, tuple[object, ...]]]) -> list[tuple[str, object]]:
        return [(key, partial(build, key, cells)) for key, cells in rows]

    rng = random.Random(7)
    keys = [f"k{i}" for i in range(200)]
    app = ShortApp()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(Short)
        rows = [(key, (f"row {key}", "0", "a")) for key in keys]
        table.sync(lazy(rows))  # type: ignore[arg-type]
        await pilot.pause()
        for step in range(1, 4):
            rows = [(key, (f"row {key}", str(step), "a")) for key in keys]
            rng.shuffle(rows)
            built.clear()
            table.sync(lazy(rows))  # type: ignore[arg-type]
            await pilot.pause()
            # A 10-line table shows 9 rows: those at the sync, and those where the cursor,
            # following its row, scrolled the table to (±1 each); not 200.
            assert 0 < len(built) <= 2 * 13
        table.scroll_end(animate=False)
        await pilot.pause()
        fresh = Short()
        await app.mount(fresh)
        fresh.sync(rows)
        await pilot.pause()
        fresh.scroll_end(animate=False)
        await pilot.pause()
        assert table.scroll_offset == fresh.scroll_offset and table.scroll_offset.y > 0
        assert painted(table) == painted(fresh)
        assert shown(table) == [cells for _, cells in rows]  # every row reads as it is now


@pytest.mark.asyncio
async def test_home_and_end_go_to_the_first_and_the_last_row():
    """As in htop and nvitop (probe 148: DataTable's Home and End scroll sideways, and moved
    nothing in a table fit to the terminal's width)."""
    app = TableApp()
    async with app.run_test(size=(80, 12)) as pilot:
        table = app.query_one(Table)
        table.sync([(f"k{i}", (f"row {i}", str(i), "")) for i in range(40)])
        table.focus()
        await pilot.pause()
        await pilot.press("end")
        await pilot.pause()
        assert table.selected_key == "k39"
        assert table.scroll_y <= 39 < table.scroll_y + table.region.height  # in view
        await pilot.press("home")
        await pilot.pause()
        assert table.selected_key == "k0" and table.scroll_y == 0
