"""Pilot tests: every key and screen of mlcost-top against a real mlcostd on a simulated host
(the idle-host scenario), plus the action keys against fixed answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from simhost import pilot_wait_for
from textual.widgets import Button, Input, Static

from daemon.client import Client
from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.cli import main
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.fleet import FleetPanel
from mlcost_tui.panels.gpus import GpuPanel
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.confirm import ConfirmScreen
from mlcost_tui.screens.details import DetailsScreen
from mlcost_tui.screens.help import HelpScreen
from mlcost_tui.screens.history import HistoryScreen
from tests.tui.fixtures import TS, StubClient, now_document, snapshot

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def live_daemon(shared_daemon):
    """`mlcostd run --simulate idle-host` once it has a few ticks: the session's shared daemon
    (tests/conftest.py; no actions allowed, so `a` changes nothing)."""
    return f"unix:{shared_daemon.socket}"


def header_text(app: MlcostTop) -> str:
    return str(app.query_one(HeaderPanel).render())


@pytest.mark.asyncio
async def test_live_host_keys_and_screens(live_daemon):
    app = MlcostTop([Client(live_daemon)], interval_s=0.3)
    async with app.run_test(size=(160, 48)) as pilot:
        gpus, procs = app.query_one(GpuPanel), app.query_one(ProcessPanel)
        await pilot_wait_for(pilot, lambda: gpus.row_count == 1 and procs.row_count >= 1)
        header = header_text(app)
        # answering: live, or slow on a loaded machine (tests/tui/test_header_price.py)
        assert "idle-host" in header and ("● live" in header or "● slow daemon" in header)
        key = procs.selected_key
        assert key is not None and key.count(":") == 1
        # sort < > in on-screen column order, and invert
        shown = list(procs.shown_keys)
        assert procs.sort_column.key == "cost"
        await pilot.press("greater_than_sign")
        assert procs.sort_column.key == shown[shown.index("cost") + 1]
        await pilot.press("less_than_sign", "less_than_sign")
        assert procs.sort_column.key == shown[shown.index("cost") - 1]
        await pilot.press(*["less_than_sign"] * shown.index("cost"))
        assert procs.sort_column.key == shown[-1] == "command"  # wraps around
        await pilot.press("I")
        assert procs.inverted and "▼" in procs.border_title
        # tree
        await pilot.press("t")
        assert procs.tree_mode and "tree" in procs.border_title
        # pause: keeps polling, skips the render
        await pilot.press("p")
        assert app.paused and "PAUSED" in header_text(app)
        tick = app.hosts[0].now.tick
        await pilot_wait_for(pilot, lambda: app.hosts[0].now.tick > tick)
        assert "PAUSED" in header_text(app)
        await pilot.press("space")
        assert not app.paused
        # filter
        await pilot.press("slash")
        assert app.focused.id == "filter"
        await pilot.press(*"zzz-no-such")
        await pilot_wait_for(pilot, lambda: procs.row_count == 0)
        await pilot.press("escape")
        await pilot_wait_for(pilot, lambda: procs.row_count >= 1)
        assert app.focused is procs
        await pilot.press("slash", *"notebook", "enter")
        assert procs.filter_text == "notebook" and procs.row_count == 1
        # details (enter), its phases request answered by the daemon, back with escape
        await pilot.press("enter")
        assert isinstance(app.screen, DetailsScreen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.screen.phases is not None or app.screen.phases_error
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailsScreen)
        # history from /v1/history
        await pilot.press("h")
        assert isinstance(app.screen, HistoryScreen)
        await pilot_wait_for(pilot, lambda: "from /v1/history" in str(
            app.screen.query_one("#history-status").render()))
        await pilot.press("escape")
        # help
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        # a / x with no recommendation say so instead of failing
        await pilot.press("a")
        await pilot.press("q")
    assert app.return_code in (0, None)


@pytest.mark.asyncio
async def test_daemon_gone_shows_in_the_header_and_keys_still_work(tmp_path):
    app = MlcostTop([Client(f"unix:{tmp_path}/none.sock")], interval_s=0.2)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_wait_for(pilot, lambda: "no daemon" in header_text(app))
        assert "start it with" in header_text(app)
        await pilot.press("p")
        assert app.paused
        await pilot.press("p", "greater_than_sign", "t")
        assert app.query_one(ProcessPanel).tree_mode


@pytest.mark.asyncio
async def test_apply_dry_run_then_confirm_and_snooze():
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        recs = app.query_one(RecommendationTable)
        recs.focus()
        assert recs.selected_key == "rec-idle"
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ActionScreen) and app.screen.can_do
        # what stopping it means, in the rule's words, before "Do it?" (probe 147: a notebook's
        # says its user's state is lost, and the dialog showed only the dry run)
        body = str(app.screen.query_one("#action-body", Static).render())
        assert "send SIGTERM to pid 1003 after confirmation" in body, body
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.applied == [("rec-idle", True), ("rec-idle", False)]
        # the patch: shown, then copied through the app's clipboard
        await pilot.press("down", "a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ActionScreen) and not app.screen.can_do
        await pilot.press("c")
        await pilot.pause()
        assert "num_workers=8" in app.clipboard
        assert isinstance(app.screen, ActionScreen)  # open: the text can be selected by hand
        await pilot.press("escape")
        # snooze asks first (n keeps it), then hides it
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmScreen) and "rec-loader" in recs.recommendations
        await pilot.press("n")
        await pilot.pause()
        assert client.snoozed == [] and not isinstance(app.screen, ConfirmScreen)
        await pilot.press("x", "y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert client.snoozed == ["rec-loader"] and "rec-loader" not in recs.recommendations
        # k on the idle process runs the same sigterm recommendation
        app.query_one(ProcessPanel).focus()
        procs = app.query_one(ProcessPanel)
        procs.move_cursor(row=procs.get_row_index("1003:1700000003.000"))
        await pilot.press("k")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ActionScreen)
        await pilot.press("escape")


@pytest.mark.asyncio
async def test_readonly_disables_kill_and_doing():
    client = StubClient()
    app = MlcostTop([client], readonly=True, poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        assert app.cannot_here("kill") is not None
        await pilot.press("k")  # says why, does nothing
        await pilot.pause()
        assert client.applied == []
        app.query_one(RecommendationTable).focus()
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ActionScreen) and not app.screen.can_do
        await pilot.press("y")
        await pilot.pause()
        assert client.applied == [("rec-idle", True)]


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["main", "details", "filter", "dialog"])
async def test_ctrl_c_quits_from_every_screen_as_q_does(where):
    """Ctrl-C did not quit: Textual's own notice said `Press [b]ctrl+q[/b] to quit the app`,
    its markup shown as typed (probe 125 F11). An engineer used to top presses it anywhere."""
    client = StubClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        if where == "details":
            await pilot.press("enter")
            assert isinstance(app.screen, DetailsScreen)
        elif where == "filter":
            await pilot.press("slash", "t", "r")
        elif where == "dialog":
            app.query_one(RecommendationTable).focus()
            await pilot.press("x")
            assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0, [n.message for n in app._notifications]
        assert not any("ctrl+q" in n.message for n in app._notifications)
    assert client.snoozed == []


@pytest.mark.asyncio
async def test_ctrl_c_with_text_selected_copies_it_and_does_not_quit():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        await pilot.press("slash", "t", "r")
        app.query_one("#filter", Input).select_all()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.clipboard == "tr" and app.return_code is None


@pytest.mark.asyncio
async def test_readonly_refuses_snooze_which_changes_the_list_for_every_client():
    """--readonly ("never change anything") refused `a`'s `y` but offered `x`, whose snooze
    hides the recommendation for every client of the daemon (probe 125 F12)."""
    from tests.tui.test_modes import help_text

    client = StubClient()
    app = MlcostTop([client], readonly=True, poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        app.query_one(RecommendationTable).focus()
        for keys in (("x",), ("enter", "x")):  # the main screen, a recommendation's details
            await pilot.press(*keys)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen)
            said = [n.message for n in app._notifications]
            assert any(m.startswith("--readonly: mlcost-top does not snooze") for m in said), said
        assert client.snoozed == []
        await pilot.press("escape")
        assert "snooze" not in (await help_text(app, pilot)).lower()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Snooze recommendation" not in titles and "Apply recommendation" in titles


@pytest.mark.asyncio
async def test_rows_are_keyed_and_the_cursor_stays_on_its_row():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(SnapshotArrived((snapshot(processes=6),)))
        await pilot.pause()
        procs = app.query_one(ProcessPanel)
        procs.move_cursor(row=2)
        key = procs.selected_key
        app.post_message(SnapshotArrived((snapshot(processes=3),)))  # rows removed
        await pilot.pause()
        assert procs.row_count == 3 and procs.selected_key == key
        await pilot.press("t")  # workers (ppid 1000) under their parent
        app.post_message(SnapshotArrived((snapshot(processes=6),)))
        await pilot.pause()
        assert procs.row_count == 6 and procs.selected_key == key
        order = procs._order
        assert order[0] == "1000:1700000000.000"
        assert set(order[1:3]) == {"1004:1700000004.000", "1005:1700000005.000"}


@pytest.mark.asyncio
async def test_command_palette_lists_the_same_actions():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)):
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Toggle tree", "Apply recommendation", "History", "Filter processes"} <= titles
        for binding in app.BINDINGS:
            assert binding.id and binding.description


@pytest.mark.asyncio
async def test_fleet_table_one_row_per_daemon(live_daemon, tmp_path):
    app = MlcostTop([Client(live_daemon), Client(f"unix:{tmp_path}/gone.sock")],
                    interval_s=0.3)
    async with app.run_test(size=(160, 40)) as pilot:
        fleet = app.query_one(FleetPanel)
        await pilot_wait_for(pilot, lambda: fleet.row_count == 2 and app.hosts
                             and app.hosts[0].now is not None)
        assert "unreachable" in str(fleet.get_row(f"unix:{tmp_path}/gone.sock")[2])


def test_without_a_daemon_the_command_says_how_to_start_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("daemon.client.default_target", lambda: f"unix:{tmp_path}/none.sock")
    assert main([]) == 1
    assert "mlcost-top --demo" in capsys.readouterr().err


@pytest.mark.parametrize("interval", ["nan", "inf", "-1", "0.05", "3601", "1e400"])
def test_an_interval_that_is_no_polling_rate_is_refused_before_anything_starts(
        interval, tmp_path, monkeypatch, capsys):
    # nan polled in a busy loop (81% CPU) and inf froze the view at its first frames
    monkeypatch.setattr("daemon.client.default_target", lambda: f"unix:{tmp_path}/none.sock")
    assert main(["--interval", interval]) == 2
    assert "--interval" in capsys.readouterr().err
    # with --replay too (it was taken there, and ignored): refused before the file is opened
    assert main(["--replay", str(tmp_path / "none.db"), "--interval", interval]) == 2
    said = capsys.readouterr().err
    assert "--interval" in said and "none.db" not in said


@pytest.mark.parametrize("argv, said", [
    (["--connect", "unix:{d}/a.sock", "--connect", "unix:{d}/a.sock"],
     "--connect unix:{d}/a.sock is given twice"),
    (["--demo", "--connect", "unix:{d}/a.sock"], "use it without --connect"),
    (["--replay", "{d}/r.db", "--demo"], "use it without --demo"),
    (["--replay", "{d}/r.db", "--connect", "unix:{d}/a.sock"], "use it without --demo"),
])
def test_flags_that_cannot_go_together_are_refused_not_ignored(argv, said, tmp_path, capsys):
    """The same daemon twice counted its burn twice in the fleet's totals (one row, two
    hosts' figures); --demo with --connect ran the demo and --replay with --demo the replay,
    the other flag silently dropped. Refused before anything starts (no demo daemon here)."""
    assert main([a.format(d=tmp_path) for a in argv]) == 2
    assert said.format(d=tmp_path) in capsys.readouterr().err


class NamedStub(StubClient):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


@pytest.mark.asyncio
async def test_enter_on_a_fleet_row_opens_that_host_and_escape_returns():
    clients = [NamedStub("unix:/a.sock"), NamedStub("unix:/b.sock")]
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 48)) as pilot:
        hosts = (snapshot(processes=3, target="unix:/a.sock"),
                 snapshot(processes=6, target="unix:/b.sock"))
        app.post_message(SnapshotArrived(hosts))
        await pilot.pause()
        fleet = app.query_one(FleetPanel)
        processes = app.query_one(ProcessPanel)
        assert fleet.row_count == 2 and not processes.display
        assert app.check_action("details", ()) is False  # (not in its footer either)
        await pilot.press("down", "enter")  # the second host
        await pilot.pause()
        assert app.viewing == 1 and app.client is clients[1]
        assert not fleet.display and processes.display and processes.has_focus
        assert processes.row_count == 6 and app.query_one(GpuPanel).row_count == 4
        app.post_message(SnapshotArrived(hosts))  # polls go on: the host's view follows
        await pilot.pause()
        assert processes.row_count == 6
        await pilot.press("x", "y")  # snooze, confirmed, goes to that host's daemon
        await app.workers.wait_for_complete()
        assert clients[1].snoozed and not clients[0].snoozed
        await pilot.press("escape")
        await pilot.pause()
        assert app.viewing is None and fleet.display and fleet.has_focus
        assert not processes.display
        await pilot.press("up", "enter")
        await pilot.pause()
        assert app.viewing == 0 and processes.row_count == 3


@pytest.mark.asyncio
async def test_keyed_table_keeps_rows_order_and_cursor_by_key():
    from mlcost_tui.keyed_table import KeyedTable

    class Table(KeyedTable):
        COLUMNS = (("name", "name"), ("value", "value"))

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        table = Table()
        await app.mount(table)
        table.sync([(f"k{i}", (f"row {i}", str(i))) for i in range(20)])
        table.move_cursor(row=5)
        assert table.selected_key == "k5"
        # reversed, k5 changed, ten rows gone (the bulk path), two new rows
        rows = [(f"k{i}", (f"row {i}", "new" if i == 5 else str(i)))
                for i in reversed(range(10))] + [("n1", ("new 1", "1")), ("n2", ("new 2", "2"))]
        table.sync(rows)
        await pilot.pause()
        assert table.row_count == 12
        assert [str(table.get_row_at(i)[0]) for i in range(12)] == [str(c[0]) for _, c in rows]
        assert table.selected_key == "k5" and table.cursor_row == 4
        assert str(table.get_cell("k5", "value")) == "new"
        table.sync(rows[:2])  # a few rows gone (one at a time)
        assert table.row_count == 2 and table.selected_key in ("k9", "k8")
        # a command line with markup-like text is shown as it is
        table.sync([("m", ("python -c 'x[bold]'", "1"))])
        assert str(table.get_row_at(0)[0]) == "python -c 'x[bold]'"


@pytest.mark.asyncio
async def test_the_open_command_palette_offers_the_process_panel_actions_and_runs_them():
    """The palette covers the main screen while it is open, and the main panels' actions
    (filter, sort, invert, tree) were dropped as if a details screen were over them."""
    from textual.command import CommandPalette

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotArrived((snapshot(processes=6),)))
        await pilot.pause()
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        under = app.screen_stack[-2]
        titles = {c.title for c in app.get_system_commands(under)}
        assert {"Filter processes", "Sort by next column", "Sort by previous column",
                "Invert sort order", "Toggle tree"} <= titles
        await pilot.press(*"toggle tree")
        await pilot_wait_for(pilot, lambda: app.screen.query_one(
            "CommandList").option_count > 0, what="the palette's matches")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.pause()
        assert app.query_one(ProcessPanel).tree_mode
        await pilot.press("ctrl+p", *"filter processes")
        await pilot_wait_for(pilot, lambda: isinstance(app.screen, CommandPalette) and app.screen.query_one(
            "CommandList").option_count > 0, what="the palette's matches")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.pause()
        assert app.query_one("#filter").has_class("shown") and app.query_one("#filter").has_focus
        # over a details screen they are not offered (the panels are hidden behind it)
        await pilot.press("escape")
        await pilot.press("enter")  # the process's details
        await pilot.pause()
        assert not isinstance(app.screen, CommandPalette) and app.screen is not app.screen_stack[0]
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Filter processes" not in titles and "Toggle tree" not in titles


@pytest.mark.asyncio
async def test_readonly_says_so_in_the_apply_dialog_at_80x24_and_y_says_why():
    """With --readonly the dialog showed a greyed `Do it (y)`, its one line about --readonly
    below the fold, and y did nothing without a word."""
    from tests.tui.test_sizes import screen_text

    client = StubClient()
    app = MlcostTop([client], readonly=True, poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        app.query_one(RecommendationTable).focus()
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ActionScreen)
        shown = "\n".join(screen_text(app))
        assert "--readonly" in shown and "Do it (y)" not in shown, shown
        await pilot.press("y")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any("--readonly" in m and "stop" in m for m in said), said
        assert isinstance(app.screen, ActionScreen)  # still open: c and escape work
        assert client.applied == [("rec-idle", True)]


@pytest.mark.asyncio
async def test_the_fleet_table_at_80_columns_says_what_it_is_and_offers_what_works():
    """The fleet's status read `tick 0`; at 80 columns a long daemon column pushed GPUs and
    idle GPUs off the screen; its help did not say that enter opens a host or that escape
    comes back; its footer listed / < > I t, which do nothing there."""
    from tests.tui.test_modes import help_text
    from tests.tui.test_sizes import screen_text

    long = "http://gpu-node-017.training.example.internal:9347"
    clients = [NamedStub(long), NamedStub("unix:/b.sock")]
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        hosts = (snapshot(processes=3, target=long), snapshot(processes=6, target="unix:/b.sock"))
        app.post_message(SnapshotArrived(hosts))
        await pilot.pause()
        await pilot.pause()
        text = screen_text(app)
        assert "tick 0" not in text[2] and "2 daemons, newest tick at" in text[2], text[2]
        fleet = app.query_one(FleetPanel)
        assert {"host", "target", "burn", "gpus", "idle"} <= set(fleet.shown_keys)
        heading = next(line for line in text if "burn $/h" in line)
        assert "GPUs" in heading and "idle GPUs" in heading, heading
        # cut with `…`, keeping its host's start and its port (as wide as the columns that
        # stay at 80 leave it: more than its 12 cells)
        assert any("gpu-node-017.tra…:9347" in line for line in text), text
        footer = text[-1]
        for key in ("/ ", "< ", "> ", "I ", "t "):
            assert f" {key}" not in footer, footer
        assert "Open host" in footer, footer
        said = await help_text(app, pilot)
        assert "enter" in said and "its full view" in said and "escape" in said, said


class RefusingClient(StubClient):
    """A daemon with [api].allow_actions = false: its dry run of a SIGTERM says the real run
    will be refused, and why."""

    REASON = ("this mlcostd does not take actions (SIGTERM to pid 1003); set "
              "[api].allow_actions = true in its config to let the API do it, or do it yourself")

    async def apply(self, rec_id: str, dry_run: bool = True, timeout_s: float = 30.0):
        result = await super().apply(rec_id, dry_run)
        if rec_id == "rec-idle" and dry_run:
            return self.ActionResult(rec_id, "sigterm", True, False,
                                     "would send SIGTERM to pid 1003; but the real run will be "
                                     f"refused (403): {self.REASON}", steps=result.steps,
                                     refused=self.REASON)
        return result


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_the_dialog_does_not_offer_y_when_the_daemon_will_refuse_it(size):
    """The dry run said the daemon does not take actions: the dialog said "Do it? (y / n)",
    and `y` got a 403 only after the user confirmed. Now it says why beside its buttons
    (at 80x24 too), offers no `y`, and `y` says why and sends nothing."""
    client = RefusingClient()
    app = MlcostTop([client], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size, notifications=True) as pilot:
        app.post_message(SnapshotArrived((snapshot(),)))
        await pilot.pause()
        app.query_one(RecommendationTable).focus()
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ActionScreen) and not screen.can_do
        note = screen.query_one("#refused-note", Static)
        assert note.region.bottom <= size[1] and note.region.height > 0  # on screen
        assert "[api].allow_actions = true" in str(note.render())
        assert "Do it? (y / n)" not in str(screen.query_one("#action-body", Static).render())
        button = screen.query_one("#do", Button)
        assert button.disabled and "refused" in str(button.label)
        await pilot.press("y")
        await pilot.pause()
        assert client.applied == [("rec-idle", True)]  # no real run asked for
        assert any("allow_actions" in n.message for n in app._notifications)
        assert isinstance(app.screen, ActionScreen)


def _fleet_host(target: str, hostname: str, alerts: bool) -> HostSnapshot:
    doc = now_document(processes=3)
    doc["host"]["hostname"] = hostname
    if not alerts:
        doc["events"] = []
    return HostSnapshot(target, Now.from_dict(doc), None, 0.01, TS)


@pytest.mark.asyncio
async def test_the_fleet_table_gives_the_daemon_its_width_and_the_header_says_which_host():
    """At 120 columns the daemon column was cut to 12 cells (`127.0…:19347`: only the ports
    told the rows apart) to keep the less important columns; the header read `price -` (a
    fleet has no one price) and `idle alerts 2 (GPU 2 idle …)`, the first host's GPU, of no
    host said."""
    from tests.tui.test_sizes import screen_text

    targets = ["http://127.0.0.1:19347", "http://127.0.0.1:19348"]
    app = MlcostTop([NamedStub(t) for t in targets], poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotArrived((_fleet_host(targets[0], "gpu-a", True),
                                          _fleet_host(targets[1], "gpu-b", True))))
        await pilot.pause()
        await pilot.pause()
        text = screen_text(app)
        for target in targets:
            assert any(target in line for line in text), text
        fleet = app.query_one(FleetPanel)
        # what ranks above the whole name stays: waste, savings, idle alerts
        assert {"wasted", "saves", "alerts"} <= set(fleet.shown_keys), fleet.shown_keys
        assert "price -" not in text[0], text[0]
        assert "idle alerts 2 on 2 hosts" in text[1], text[1]

        app.post_message(SnapshotArrived((_fleet_host(targets[0], "gpu-a", False),
                                          _fleet_host(targets[1], "gpu-b", True))))
        await pilot.pause()
        await pilot.pause()
        line = screen_text(app)[1]
        assert "idle alerts 1 on gpu-b (GPU 2 idle" in line, line

    app = MlcostTop([NamedStub(t) for t in targets], poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 30)) as pilot:  # room for less: cut, never the burn
        long = ["http://gpu-node-017.training.example.internal:9347", targets[1]]
        app.post_message(SnapshotArrived((_fleet_host(long[0], "gpu-a", True),
                                          _fleet_host(long[1], "gpu-b", False))))
        await pilot.pause()
        await pilot.pause()
        fleet = app.query_one(FleetPanel)
        assert {"burn", "gpus", "idle", "wasted", "saves"} <= set(fleet.shown_keys)
        assert sum(c.width or 0 for c in fleet.columns_shown) + 2 * len(fleet.columns_shown) \
            <= app.size.width


@pytest.mark.asyncio
async def test_the_filters_prompt_is_whole_at_80_columns():
    """Probe 148 L5: at 80x24 the prompt read "…text in the command, user or PID (enter keeps
    it, escape" and stopped there."""
    from tests.tui.test_new_user_screens import shown
    from tests.tui.test_sizes import screen_text

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot)
        await pilot.press("slash")
        await pilot.pause()
        box = app.query_one("#filter", Input)
        assert box.has_focus and box.value == ""
        assert any(str(box.placeholder) in line for line in screen_text(app)), screen_text(app)
        assert "escape clears" in str(box.placeholder)
