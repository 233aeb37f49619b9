"""mlcost-top: a thin Textual App. Panels live in mlcost_tui/panels, screens in mlcost_tui/screens.

A worker polls /v1/now (never overlapping: the next poll is scheduled when the last finished) and
hands one frozen snapshot to the UI in a SnapshotArrived message; the UI applies it inside
batch_update(). Paused or behind a modal, polling goes on and rendering is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input

from daemon.wire import Now, Process, Recommendation, parse_process_key
from mlcost_tui import format as fmt
from mlcost_tui.keyed_table import KeyedTable
from mlcost_tui.messages import ActionFinished, HostSnapshot, SnapshotArrived
from mlcost_tui.panels.fleet import FleetPanel
from mlcost_tui.panels.gpus import GpuPanel
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.panels.processes import SORTS, ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from mlcost_tui.screens.details import DetailsScreen
from mlcost_tui.screens.help import HelpScreen
from mlcost_tui.screens.history import WINDOWS, HistoryScreen

if TYPE_CHECKING:  # the client pulls in aiohttp: imported when first used, after the first frame
    from daemon.client import Client
    from daemon.replay import Replay

POLL_INTERVAL_S = 1.0
RETRY_MAX_S = 10.0
SNOOZE_HOURS = 24.0


class FilterInput(Input):
    BINDINGS = [Binding("escape", "close", "Close filter", id="filter.close")]

    def action_close(self) -> None:
        self.app.close_filter(clear=True)  # type: ignore[attr-defined]


class MlcostTop(App):
    """The app: connects to one daemon (or several: the fleet table) and shows it live."""

    TITLE = "mlcost-top"
    CSS = """
    Screen { layout: vertical; }
    GpuPanel, ProcessPanel, RecommendationTable, FleetPanel { border: round $primary-darken-2; }
    GpuPanel:focus-within, ProcessPanel:focus-within, RecommendationTable:focus-within,
    FleetPanel:focus-within { border: round $accent; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    .hidden { display: none; }
    """
    BINDINGS = [
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("slash", "filter", "Filter", id="app.filter"),
        Binding("less_than_sign", "sort(-1)", "Sort ◀", id="app.sort_previous"),
        Binding("greater_than_sign", "sort(1)", "Sort ▶", id="app.sort_next"),
        Binding("I", "invert", "Invert", id="app.invert"),
        Binding("t", "tree", "Tree", id="app.tree"),
        Binding("p,space", "pause", "Pause", id="app.pause"),
        Binding("enter", "details", "Details", id="app.details", show=False),
        Binding("a", "apply_recommendation", "Apply", id="app.apply"),
        Binding("x", "snooze_recommendation", "Snooze", id="app.snooze"),
        Binding("k", "kill", "Stop idle", id="app.kill"),
        Binding("h", "history", "History", id="app.history"),
        Binding("tab", "focus_next", "Next panel", id="app.next_panel", show=False),
        Binding("escape", "back_to_fleet", "Fleet", id="app.back_to_fleet"),
        Binding("left_square_bracket", "replay_step(-1)", "◀ tick", id="replay.back"),
        Binding("right_square_bracket", "replay_step(1)", "tick ▶", id="replay.forward"),
        Binding("left_curly_bracket,shift+left_square_bracket", "replay_minute(-1)",
                "◀ minute", id="replay.back_minute"),
        Binding("right_curly_bracket,shift+right_square_bracket", "replay_minute(1)",
                "minute ▶", id="replay.forward_minute"),
    ]
    # (action, title, help) for the command palette: the same actions as the keys.
    PALETTE = (
        ("help", "Help", "every key and what it does"),
        ("filter", "Filter processes", "show only processes matching a text (/)"),
        ("sort(1)", "Sort by next column", "change the process sort column (>)"),
        ("sort(-1)", "Sort by previous column", "change the process sort column (<)"),
        ("invert", "Invert sort order", "biggest first or smallest first (I)"),
        ("tree", "Toggle tree", "show workers under their parent process (t)"),
        ("pause", "Pause / resume", "keep polling, stop redrawing (p, space)"),
        ("details", "Details", "the selected process or recommendation (enter)"),
        ("apply_recommendation", "Apply recommendation",
         "dry run, then do it after confirmation (a)"),
        ("snooze_recommendation", "Snooze recommendation", f"hide it for {SNOOZE_HOURS:g} h (x)"),
        ("kill", "Stop idle process", "SIGTERM via mlcostd, after confirmation (k)"),
        ("history", "History", "utilization and wasted $/h over 1 h and 24 h (h)"),
        ("back_to_fleet", "Back to the fleet", "leave this host's view (escape)"),
        ("replay_step(-1)", "Replay: back one tick", "([)"),
        ("replay_step(1)", "Replay: forward one tick", "(])"),
        ("replay_minute(-1)", "Replay: back one minute", "({)"),
        ("replay_minute(1)", "Replay: forward one minute", "(})"),
    )
    # What needs a daemon to answer (not in replay), and what needs one host's view.
    NEEDS_DAEMON = ("apply_recommendation", "snooze_recommendation", "kill", "history")
    NEEDS_HOST = ("filter", "sort", "invert", "tree", "details", "apply_recommendation",
                  "snooze_recommendation", "kill", "history")

    def __init__(self, clients: Sequence[Client], *, readonly: bool = False,
                 interval_s: float = POLL_INTERVAL_S, poll: bool = True,
                 starting: str | None = None, replay: Replay | None = None) -> None:
        super().__init__()
        self.clients = list(clients)
        self.replay = replay
        self.replay_times: list[float] = replay.times() if replay is not None else []
        self.replay_index = 0
        self.playing = False
        self.last_replay_now: Now | None = None  # shown again if a later tick cannot be read
        self._play_timer: Timer | None = None
        # Whose full view is shown: 0 with one daemon (or a replay), the chosen row's host in a
        # fleet after enter, None while the fleet table is shown.
        self.viewing: int | None = None if len(self.clients) > 1 else 0
        self.readonly = readonly
        self.interval_s = interval_s
        self.polling = poll
        self.starting = starting  # shown until the first answer (e.g. "starting the demo…")
        self.paused = False
        self.hosts: tuple[HostSnapshot, ...] = ()
        self.failures = [0] * len(self.clients)
        self.last_now: list[Now | None] = [None] * len(self.clients)
        self.next_poll_at: float | None = None
        self._poll_timer: Timer | None = None
        self.render_seconds = 0.0  # how long the last render took (the bench reads it)

    @property
    def fleet(self) -> bool:
        return len(self.clients) > 1

    # -- layout ------------------------------------------------------------------------------

    @property
    def client(self) -> Client | None:
        """The daemon of the host whose view is shown (None in replay or on the fleet table)."""
        if self.viewing is None or self.viewing >= len(self.clients):
            return None
        return self.clients[self.viewing]

    def compose(self) -> ComposeResult:
        yield HeaderPanel(id="header")
        if self.fleet:
            yield FleetPanel(id="fleet")
        hidden = "hidden" if self.viewing is None else ""
        yield GpuPanel(id="gpus", classes=hidden)
        yield ProcessPanel(id="processes", classes=hidden)
        yield RecommendationTable(id="recommendations", classes=hidden)
        yield FilterInput(placeholder="filter processes: text in the command, user or PID "
                                      "(enter keeps it, escape clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        header = self.query_one(HeaderPanel)
        header.show(None)
        if self.starting:
            header.update(self.starting)
        table = self.query_one("#fleet" if self.fleet else "#processes", DataTable)
        table.focus()
        if self.replay is not None:
            header.update(f"mlcost-top: opening the replay of {self.replay.path}…")
            self.replay_goto(0)
        elif self.polling:
            self.poll()

    # -- polling -----------------------------------------------------------------------------

    async def _fetch(self, index: int, client: Client) -> HostSnapshot:
        from daemon.client import ClientError

        started = time.monotonic()
        try:
            now = await client.now()
        except ClientError as exc:
            self.failures[index] += 1
            return HostSnapshot(client.name, self.last_now[index], str(exc),
                                time.monotonic() - started, fmt.clock(), self.failures[index])
        self.failures[index] = 0
        self.last_now[index] = now
        return HostSnapshot(client.name, now, None, time.monotonic() - started, fmt.clock())

    def retry_delay(self) -> float:
        worst = max(self.failures, default=0)
        if worst == 0:
            return self.interval_s
        if self.starting and all(n is None for n in self.last_now):
            return 0.5  # the embedded daemon is starting: look again soon
        return min(self.interval_s * 2 ** (worst - 1), RETRY_MAX_S)

    @work(exclusive=True, group="poll", exit_on_error=False,
          description="poll each mlcostd for /v1/now")
    async def poll(self) -> None:
        try:
            hosts = await asyncio.gather(*(self._fetch(i, c) for i, c in enumerate(self.clients)))
            self.post_message(SnapshotArrived(tuple(hosts)))
        finally:
            delay = self.retry_delay()
            self.next_poll_at = time.monotonic() + delay
            if self.polling and self.is_running:
                self._poll_timer = self.set_timer(delay, self.poll, name="next poll")

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        self.hosts = message.hosts
        if self.hosts and any(h.error is None for h in self.hosts):
            self.starting = None
        shown = self.shown_host
        if shown is not None and shown.now is not None and shown.error is None:
            self.query_one(GpuPanel).remember(shown.now)
        if self.paused or isinstance(self.screen, ModalScreen | DetailsScreen | HistoryScreen):
            return  # keep polling, skip the render
        self.render_hosts()

    def render_hosts(self) -> None:
        """Apply the latest snapshot to every panel in one batch."""
        started = time.perf_counter()
        retry = None
        if self.next_poll_at is not None and any(self.failures):
            retry = max(self.next_poll_at - time.monotonic(), 0.0)
        with self.batch_update():
            header = self.query_one(HeaderPanel)
            if self.viewing is None:
                header.show(_fleet_header(self.hosts), self.paused, retry)
                self.query_one(FleetPanel).show(self.hosts)
            else:
                snap = self.shown_host
                if self.starting and (snap is None or snap.now is None):
                    header.update(self.starting)
                else:
                    header.show(snap, self.paused, retry, self.replay_status())
                if snap is not None and snap.now is not None:
                    self.query_one(GpuPanel).show(snap.now)
                    self.query_one(ProcessPanel).show(snap.now)
                    self.query_one(RecommendationTable).show(snap.now)
        self.render_seconds = time.perf_counter() - started

    @property
    def shown_host(self) -> HostSnapshot | None:
        """The snapshot of the host whose full view is shown (None on the fleet table)."""
        if self.viewing is None or self.viewing >= len(self.hosts):
            return None
        return self.hosts[self.viewing]

    @property
    def now(self) -> Now | None:
        shown = self.shown_host
        return shown.now if shown is not None else None

    # -- what is selected --------------------------------------------------------------------

    def selected_process(self) -> Process | None:
        if self.viewing is None:
            return None
        table = self.query_one(ProcessPanel)
        key = table.selected_key
        return table.processes.get(key) if key else None

    def selected_recommendation(self) -> Recommendation | None:
        if self.viewing is None:
            return None
        table = self.query_one(RecommendationTable)
        key = table.selected_key
        return table.recommendations.get(key) if key else None

    def recommendations_for(self, process: Process) -> tuple[Recommendation, ...]:
        recs = self.query_one(RecommendationTable).recommendations.values()
        return tuple(r for r in recs if _is_about(r, process))

    def current_recommendation(self) -> Recommendation | None:
        screen = self.screen
        if isinstance(screen, DetailsScreen):
            if screen.recommendation is not None:
                return screen.recommendation
            return screen.related[0] if screen.related else None
        if self.viewing is not None and self.query_one(ProcessPanel).has_focus:
            process = self.selected_process()
            related = self.recommendations_for(process) if process else ()
            if related:
                return related[0]
        return self.selected_recommendation()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "kill" and self.readonly:
            return None  # shown greyed out: --readonly
        if action in ("replay_step", "replay_minute"):
            return True if self.replay is not None else False
        if action == "back_to_fleet":
            return True if self.fleet and self.viewing is not None else False
        if self.replay is not None and action in self.NEEDS_DAEMON:
            return None  # shown greyed out: a replay has no daemon to act through
        if self.viewing is None and action in self.NEEDS_HOST:
            return None
        return True

    # -- keys --------------------------------------------------------------------------------

    def action_help(self) -> None:
        lines = []
        for bindings in (self.BINDINGS, DetailsScreen.BINDINGS, ActionScreen.BINDINGS,
                         HistoryScreen.BINDINGS):
            for b in bindings:
                if isinstance(b, Binding):
                    keys = ", ".join(self.get_key_display(Binding(k, b.action))
                                     for k in b.key.split(","))
                    lines.append((keys, b.description, b.id or ""))
        self.push_screen(HelpScreen(lines))

    def action_filter(self) -> None:
        box = self.query_one("#filter", FilterInput)
        box.add_class("shown")
        box.focus()

    def close_filter(self, clear: bool) -> None:
        box = self.query_one("#filter", FilterInput)
        if clear:
            box.value = ""
            self._set_filter("")
        box.remove_class("shown")
        self.query_one(ProcessPanel).focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self._set_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self.close_filter(clear=False)

    def _set_filter(self, text: str) -> None:
        self.query_one(ProcessPanel).filter_text = text.strip()
        self._rerender_processes()

    def _rerender_processes(self) -> None:
        table = self.query_one(ProcessPanel)
        if self.now is not None:
            table.show(self.now)
        else:
            table.border_title = table.title()

    def action_sort(self, step: int) -> None:
        table = self.query_one(ProcessPanel)
        table.sort_index = (table.sort_index + step) % len(SORTS)
        self._rerender_processes()
        self.notify(f"sorted by {table.sort_column.label}", timeout=1.5)

    def action_invert(self) -> None:
        table = self.query_one(ProcessPanel)
        table.inverted = not table.inverted
        self._rerender_processes()

    def action_tree(self) -> None:
        table = self.query_one(ProcessPanel)
        table.tree_mode = not table.tree_mode
        self._rerender_processes()

    def action_pause(self) -> None:
        if self.replay is not None:
            self.toggle_play()
            return
        self.paused = not self.paused
        if self.paused:
            self.query_one(HeaderPanel).show(
                _fleet_header(self.hosts) if self.viewing is None else self.shown_host, True)
        else:
            self.render_hosts()

    # -- the fleet: one host's full view -------------------------------------------------------

    def open_host(self, index: int) -> None:
        """Show host `index` of the fleet with every panel, through its own daemon."""
        if not self.fleet or not 0 <= index < len(self.clients):
            return
        if self.viewing != index:
            panels: tuple[KeyedTable, ...] = (self.query_one(GpuPanel),
                                              self.query_one(ProcessPanel),
                                              self.query_one(RecommendationTable))
            for panel in panels:
                panel.clear_rows()
            self.query_one(GpuPanel).recent.clear()
        self.viewing = index
        self.query_one(FleetPanel).add_class("hidden")
        for panel in ("#gpus", "#processes", "#recommendations"):
            self.query_one(panel).remove_class("hidden")
        self.query_one(ProcessPanel).focus()
        self.refresh_bindings()
        if self.hosts:
            self.render_hosts()

    def action_back_to_fleet(self) -> None:
        if not self.fleet or self.viewing is None:
            return
        self.viewing = None
        self.close_filter(clear=True)
        for panel in ("#gpus", "#processes", "#recommendations"):
            self.query_one(panel).add_class("hidden")
        fleet = self.query_one(FleetPanel)
        fleet.remove_class("hidden")
        fleet.focus()
        self.refresh_bindings()
        if self.hosts:
            self.render_hosts()

    # -- replay --------------------------------------------------------------------------------

    def replay_status(self) -> str | None:
        """The header's replay line (None when live)."""
        if self.replay is None or not self.replay_times:
            return None
        from daemon.replay import clock

        at = self.replay_times[self.replay_index]
        state = "▶ playing" if self.playing else "⏸ paused"
        return (f"⏵ replay {self.replay.path.name}  {clock(at)}  tick {self.replay_index + 1}/"
                f"{len(self.replay_times)}  {state}  ([ ] tick, {{ }} minute, space play)")

    def replay_goto(self, index: int) -> None:
        if not self.replay_times:
            return
        self.replay_index = min(max(index, 0), len(self.replay_times) - 1)
        self.load_replay(self.replay_times[self.replay_index])

    def action_replay_step(self, step: int) -> None:
        self.replay_goto(self.replay_index + step)

    def action_replay_minute(self, step: int) -> None:
        if not self.replay_times:
            return
        import bisect

        target = self.replay_times[self.replay_index] + 60.0 * step
        index = bisect.bisect_left(self.replay_times, target) if step > 0 else \
            bisect.bisect_right(self.replay_times, target) - 1
        self.replay_goto(index)

    def toggle_play(self) -> None:
        self.playing = not self.playing
        if self._play_timer is not None:
            self._play_timer.stop()
            self._play_timer = None
        if self.playing and self.replay is not None:
            if self.replay_index >= len(self.replay_times) - 1:
                self.replay_index = -1  # at the end: play from the start
            period = min(max(self.replay.interval_s, 0.1), 1.0)
            self._play_timer = self.set_interval(period, self._play_step, name="replay play")
            self._play_step()
        elif self.hosts:
            self.render_hosts()

    def _play_step(self) -> None:
        if self.replay_index >= len(self.replay_times) - 1:
            self.toggle_play()  # the end of the recording
            return
        self.replay_goto(self.replay_index + 1)

    @work(thread=True, exclusive=True, group="replay", exit_on_error=False,
          description="read one recorded tick from the replay store")
    def load_replay(self, ts: float) -> None:
        assert self.replay is not None
        started = time.monotonic()
        target = f"replay:{self.replay.path.name}"
        try:
            now = Now.from_dict(self.replay.state_at(ts))
        except Exception as exc:  # a damaged store must not take the UI down
            self.post_message(SnapshotArrived((HostSnapshot(
                target, self.last_replay_now, f"cannot read {self.replay.path} at "
                f"{ts:.3f}: {exc}", time.monotonic() - started, fmt.clock(), 1),)))
            return
        self.last_replay_now = now
        self.post_message(SnapshotArrived((HostSnapshot(
            target, now, None, time.monotonic() - started, fmt.clock()),)))


    def action_details(self) -> None:
        if self.viewing is None:
            return
        focused = self.focused
        if isinstance(focused, RecommendationTable):
            rec = self.selected_recommendation()
            if rec is not None:
                self.push_screen(DetailsScreen(recommendation=rec))
            return
        process = self.selected_process()
        if process is not None:
            screen = DetailsScreen(process=process, related=self.recommendations_for(process))
            self.push_screen(screen)
            self.load_phases(screen)

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, FleetPanel):
            event.stop()
            names = [c.name for c in self.clients]
            key = event.row_key.value
            if key in names:
                self.open_host(names.index(key))
            return
        if isinstance(event.data_table, ProcessPanel | RecommendationTable):
            event.stop()
            self.action_details()

    def action_apply_recommendation(self) -> None:
        rec = self.current_recommendation()
        if rec is None:
            self.notify("no recommendation selected: tab to the recommendations panel",
                        severity="warning")
            return
        self.start_action(rec, dry_run=True)

    def action_kill(self) -> None:
        if self.readonly:
            self.notify("--readonly: mlcost-top does not stop processes", severity="warning")
            return
        process = self.selected_process()
        if process is None:
            self.notify("select a process first", severity="warning")
            return
        for rec in self.recommendations_for(process):
            if rec.action_kind == "sigterm":
                self.start_action(rec, dry_run=True)
                return
        self.notify(f"mlcostd stops only processes it recommends stopping (GPUs held idle); "
                    f"pid {process.pid} is not one", severity="warning")

    def action_snooze_recommendation(self) -> None:
        rec = self.current_recommendation()
        if rec is None:
            self.notify("no recommendation selected: tab to the recommendations panel",
                        severity="warning")
            return
        self.run_snooze(rec)

    def action_history(self) -> None:
        if self.viewing is None or self.client is None:
            return
        gpus = tuple(g.index for g in self.now.gpus) if self.now else ()
        self.push_screen(HistoryScreen(gpus))

    # -- workers for one-off requests -----------------------------------------------------------

    @work(exclusive=True, group="action", exit_on_error=False,
          description="dry-run or apply a recommendation through mlcostd")
    async def start_action(self, rec: Recommendation, dry_run: bool) -> None:
        from daemon.client import ClientError

        try:
            assert self.client is not None
            result = await self.client.apply(rec.id, dry_run)
        except ClientError as exc:
            self.post_message(ActionFinished(rec.id, None, str(exc), dry_run))
            return
        self.post_message(ActionFinished(rec.id, result, None, dry_run))
        if dry_run:
            def after(choice: str | None) -> None:
                if choice == "do":
                    self.start_action(rec, dry_run=False)
                elif choice == "copy":
                    screen = ActionScreen(rec, result)
                    self.copy_to_clipboard(screen.copy_text)
                    self.notify("copied to the clipboard")

            self.push_screen(ActionScreen(rec, result, readonly=self.readonly), after)

    def on_action_finished(self, message: ActionFinished) -> None:
        if message.error is not None:
            self.notify(f"{'dry run' if message.dry_run else 'action'} failed: {message.error}",
                        severity="error", timeout=8)
        elif not message.dry_run and message.result is not None:
            self.notify(message.result.message, title="done", timeout=6)

    @work(exclusive=True, group="snooze", exit_on_error=False,
          description="snooze a recommendation through mlcostd")
    async def run_snooze(self, rec: Recommendation) -> None:
        from daemon.client import ClientError

        try:
            assert self.client is not None
            until = await self.client.snooze(rec.id, SNOOZE_HOURS)
        except ClientError as exc:
            self.notify(f"snooze failed: {exc}", severity="error", timeout=8)
            return
        table = self.query_one(RecommendationTable)
        table.snoozed_here.add(rec.id)
        if self.now is not None:
            table.show(self.now)
        if isinstance(self.screen, DetailsScreen) and self.screen.recommendation is not None:
            self.pop_screen()
        self.notify(f"snoozed until {time.strftime('%a %H:%M', time.localtime(until))}: "
                    f"{rec.summary[:60]}")

    @work(exclusive=True, group="phases", exit_on_error=False,
          description="load a process's phase balance from mlcostd")
    async def load_phases(self, screen: DetailsScreen) -> None:
        from daemon.client import ClientError

        if screen.process is None:
            return
        if self.client is None:
            screen.set_phases(None, "phases: a replay shows each process's recent balance in "
                                    "the process table (the phase balance column)")
            return
        try:
            phases = await self.client.phases(screen.process.key)
        except ClientError as exc:
            screen.set_phases(None, f"phases: {exc}")
            return
        screen.set_phases(phases, None)

    @work(exclusive=True, group="history", exit_on_error=False,
          description="load utilization and wasted $/h history from mlcostd")
    async def load_history(self, screen: HistoryScreen) -> None:
        from daemon.client import ClientError

        client = self.client
        if client is None:
            screen.done("history needs a daemon")
            return
        error = None
        for since, label in WINDOWS:
            try:
                wasted = await client.host_history("wasted_per_hour", since, 120)
                screen.show_series("wasted", since, f"Wasted $/h, {label}", wasted, None, True)
            except ClientError as exc:
                error = str(exc)
                screen.show_series("wasted", since, f"Wasted $/h, {label}", None, error, True)
            for index in screen.gpus:
                try:
                    history = await client.gpu_history(index, "utilization", since, 120)
                    screen.show_series(f"gpu{index}", since, f"GPU {index} utilization, {label}",
                                       history, None)
                except ClientError as exc:
                    error = str(exc)
                    screen.show_series(f"gpu{index}", since, f"GPU {index} utilization, {label}",
                                       None, error)
        screen.done(error)

    # -- the command palette -----------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for action, title, help_text in self.PALETTE:
            name, _, arg = action.partition("(")
            if self.check_action(name, ()) is not True:
                continue
            yield SystemCommand(title, help_text, partial(self.run_action, action))

    async def on_unmount(self) -> None:
        for client in self.clients:
            await client.close()
        if self.replay is not None:
            self.replay.close()


def _is_about(rec: Recommendation, process: Process) -> bool:
    pid = rec.action.get("pid")
    if isinstance(pid, int):
        start = rec.action.get("start_time")
        return pid == process.pid and (not isinstance(start, int | float)
                                       or abs(start - process.start_time) < 0.01)
    try:
        pid_t, start_t = parse_process_key(rec.target)
    except ValueError:
        return False
    return pid_t == process.pid and abs(start_t - process.start_time) < 0.01


def _fleet_header(hosts: tuple[HostSnapshot, ...]) -> HostSnapshot | None:
    """The fleet header: totals over the daemons that answered, as one synthetic snapshot."""
    live = [h for h in hosts if h.now is not None and h.error is None]
    if not hosts:
        return None
    if not live:
        return hosts[0]

    def total(values: Iterable[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    nows = [h.now for h in live if h.now is not None]
    fleet = Now(ts=max((n.ts or 0.0) for n in nows), tick=0,
                hostname=f"fleet of {len(hosts)} ({len(live)} answering)", instance={},
                simulated=None, nvml_status="ok", gpus=tuple(g for n in nows for g in n.gpus),
                processes=tuple(p for n in nows for p in n.processes),
                burn_per_hour=total(n.burn_per_hour for n in nows),
                wasted_per_hour=total(n.wasted_per_hour for n in nows),
                spend_today=total(n.spend_today for n in nows),
                events=tuple(e for n in nows for e in n.events),
                recommendations=tuple(r for n in nows for r in n.recommendations))
    slowest = max(h.latency_s for h in live)
    return HostSnapshot("fleet", fleet, None, slowest, live[0].received_at)


# -- the command -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from daemon.client import default_target

    parser = argparse.ArgumentParser(
        prog="mlcost-top",
        description="Live GPU cost monitor: burn per GPU and process, idle money, phases and "
                    "recommendations, from mlcostd's API.",
        epilog="examples:\n  mlcost-top --demo                      a simulated 8-GPU host\n"
               "  mlcost-top                             this host's mlcostd\n"
               "  mlcost-top --connect http://gpu1:9347 --connect http://gpu2:9347 "
               "--token-file ~/.mlcost-token   a fleet table\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connect", action="append", metavar="TARGET", default=[],
                        help="unix:PATH or http://HOST:PORT of an mlcostd (repeat for a fleet "
                             f"table; default {default_target()})")
    parser.add_argument("--token-file", metavar="FILE",
                        help="bearer token for http:// targets (the daemon's [api].token_file)")
    parser.add_argument("--demo", action="store_true",
                        help="start an embedded mlcostd on the simulated demo host; it and its "
                             "workloads stop when you quit")
    parser.add_argument("--scenario", default="demo", help=argparse.SUPPRESS)
    parser.add_argument("--readonly", action="store_true",
                        help="never change anything: no SIGTERM, no resize (dry runs and copy "
                             "still work)")
    parser.add_argument("--interval", type=float, default=POLL_INTERVAL_S, metavar="SECONDS",
                        help="seconds between polls (default 1)")
    parser.add_argument("--replay", metavar="FILE",
                        help="replay a recorded mlcostd store (the daemon's database or a copy: "
                             "sqlite3 mlcost.db \"VACUUM INTO 'copy.db'\"); [ ] step a tick, "
                             "{ } a minute, space plays")
    return parser


def main(argv: list[str] | None = None) -> int:
    from daemon.client import Client, ClientError, default_target, read_token_file

    args = build_parser().parse_args(argv)
    if args.replay:
        from daemon.replay import Replay, ReplayError

        try:
            replay = Replay(args.replay)
        except ReplayError as exc:
            print(f"mlcost-top: {exc}", file=sys.stderr)
            return 2
        MlcostTop([], poll=False, replay=replay).run()
        return 0
    if args.interval < 0.1:
        print(f"mlcost-top: --interval {args.interval} is below 0.1 s", file=sys.stderr)
        return 2
    token = None
    if args.token_file:
        try:
            token = read_token_file(args.token_file)
        except ClientError as exc:
            print(f"mlcost-top: {exc}", file=sys.stderr)
            return 2
    demo = None
    targets = list(args.connect)
    if args.demo:
        from mlcost_tui.demo import EmbeddedDaemon

        demo = EmbeddedDaemon(args.scenario)
        demo.start()
        targets = [demo.target]
    elif not targets:
        targets = [default_target()]
        path = Path(targets[0][len("unix:"):])
        if not path.exists():
            print(f"mlcost-top: no mlcostd at {targets[0]}: start it with `sudo mlcostd run` "
                  "(or `mlcostd run --simulate demo`), connect elsewhere with --connect, or try "
                  "`mlcost-top --demo`", file=sys.stderr)
            return 1
    try:
        clients = [Client(t, token=token) for t in targets]
    except ClientError as exc:
        print(f"mlcost-top: {exc}", file=sys.stderr)
        if demo:
            demo.stop()
        return 2
    app = MlcostTop(clients, readonly=args.readonly, interval_s=args.interval,
                    starting="mlcost-top: starting the simulated demo host (mlcostd --simulate "
                             f"{args.scenario})…" if demo else None)
    if demo is not None:
        def hang_up(signum: int, frame: object) -> None:
            demo.stop()  # the terminal went away: take the embedded daemon down with us
            os._exit(128 + signum)

        for signum in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(signum, hang_up)
    try:
        app.run()
    finally:
        if demo is not None:
            failure = demo.failure()
            demo.stop()
            if failure:
                print(f"mlcost-top: {failure}", file=sys.stderr)
    return 0


__all__ = ["MlcostTop", "main"]


def __getattr__(name: str) -> Any:
    if name == "DaemonUnavailable":  # kept importable from here without importing aiohttp early
        from daemon.client import DaemonUnavailable

        return DaemonUnavailable
    raise AttributeError(name)

if __name__ == "__main__":
    sys.exit(main())
