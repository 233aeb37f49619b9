"""mlcost-top: a thin Textual App. It owns the keys, the actions and the layout; panels live in
mlcost_tui/panels, screens in mlcost_tui/screens, the data sources in mlcost_tui/sources.py and the
command line in mlcost_tui/cli.py. Replay's controls (replay_control.py), the fleet's navigation
(fleet_control.py) and the actions on a daemon (action_control.py) live beside it; the App binds
their keys and calls them.

A worker polls the source (never overlapping: the next poll is scheduled when the last finished)
and hands one frozen snapshot to the UI in a SnapshotArrived message; the UI applies it inside
batch_update(). Paused or behind a modal, polling goes on and rendering is skipped. A replay posts
the same message, so live and replayed states are rendered by the same code.

What stays loaded is what the main screen needs: the other screens (details, a GPU, history,
help, the dialogs) are imported when their key is pressed, not at start (mlcost-top runs for
hours, and a module once imported stays; tests/tui/test_main_screen_imports.py checks).
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events, on, work
from textual.actions import SkipAction
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.notifications import Notification, Notify, SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Input

from daemon.wire import Now, Process, Recommendation, lines
from mlcost_tui import incidents, toasts
from mlcost_tui.action_control import SNAPSHOT_TOAST_S, SNOOZE_HOURS, UNDO_S, ActionControl
from mlcost_tui.fleet_control import FleetControl
from mlcost_tui.footer import KeyFooter
from mlcost_tui.layout import BOX_COLUMNS, HEADER_ROWS, SCROLLBAR_COLUMNS, Layout, layout_for
from mlcost_tui.messages import ActionFinished, HostSnapshot, SnapshotArrived
from mlcost_tui.panels.fleet import FleetPanel
from mlcost_tui.panels.gpus import GpuPanel, grouped_gpu_lines
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.panels.recommendations import RecommendationTable, is_about
from mlcost_tui.replay_control import ReplayControl
from mlcost_tui.sources import (
    POLL_INTERVAL_S,
    LiveSource,
    ReplaySource,
    fleet_header,
    one_per_daemon,
)

if TYPE_CHECKING:
    from textual.timer import Timer

    from daemon.client import Client
    from daemon.replay import Replay

__all__ = ["SNAPSHOT_TOAST_S", "MlcostTop"]


class FilterInput(Input):
    BINDINGS = [Binding("escape", "close", "Close filter", id="filter.close")]

    def action_close(self) -> None:
        self.app.close_filter(clear=True)  # type: ignore[attr-defined]


class MainScreen(Screen):
    """The App's own screen (the panels): tells the App when it is shown again."""

    def on_screen_resume(self) -> None:
        self.app.main_screen_resumed()  # type: ignore[attr-defined]


class MlcostTop(App):
    """The app: connects to one daemon (or several: the fleet table) and shows it live."""

    TITLE = "mlcost-top"
    CSS = """
    Screen { layout: vertical; }
    GpuPanel, ProcessPanel, RecommendationTable, FleetPanel { border: round $primary-darken-2; }
    GpuPanel:focus-within, ProcessPanel:focus-within, RecommendationTable:focus-within,
    FleetPanel:focus-within { border: round $accent; }
    GpuPanel.compact, ProcessPanel.compact, RecommendationTable.compact {
        border: none; border-top: round $primary-darken-2; }
    GpuPanel.compact:focus-within, ProcessPanel.compact:focus-within,
    RecommendationTable.compact:focus-within { border: none; border-top: round $accent; }
    /* Toasts at the top right, over the header and the GPU panel: never over the process
       rows or the recommendations a key acts on (at 80x24 they covered seven process rows). */
    ToastRack { dock: top; align: right top; margin-bottom: 0; margin-top: 3; }
    /* A screen pushed over it starts with what it is about (a recommendation's rule and
       advice, a chart's title): there they go to the bottom right, above the key line. */
    DetailsScreen ToastRack, HistoryScreen ToastRack, GpuScreen ToastRack {
        dock: bottom; align: right bottom; margin-top: 0; margin-bottom: 1; }
    Toast { padding: 0 1; max-width: 80%; }
    /* The daemon did not answer: the panels show its last answer, dimmed (the header's status
       line says as of when). At full colour dead processes and the burn read as current.
       (dim, not opacity: opacity left the red, green and yellow cells, ANSI colours, as bright) */
    GpuPanel.stale, ProcessPanel.stale, RecommendationTable.stale { text-style: dim; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    .hidden { display: none; }
    """
    # The footer shows q ? a k h s here, and each panel's tab and enter (footer.PANEL_KEYS):
    # what fits 80 columns whole. The rest (show=False) are in `?` help and the palette.
    BINDINGS = [
        Binding("q", "quit", "Quit", id="app.quit"),
        # Ctrl-C quits as `q` does (top, htop and nvitop do), from any screen or dialog:
        # Textual's own ctrl+c only said "Press [b]ctrl+q[/b]", its markup shown raw by our
        # toasts. With text selected it copies it, as Textual's does (action_ctrl_c).
        Binding("ctrl+c", "ctrl_c", "Quit", id="app.quit_ctrl_c", show=False, priority=True),
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("slash", "filter", "Filter", id="app.filter", show=False),
        Binding("less_than_sign", "sort(-1)", "Sort ◀", id="app.sort_previous", show=False),
        Binding("greater_than_sign", "sort(1)", "Sort ▶", id="app.sort_next", show=False),
        Binding("I", "invert", "Invert", id="app.invert", show=False),
        Binding("t", "tree", "Tree", id="app.tree", show=False),
        Binding("p,space", "pause", "Pause", id="app.pause", show=False),
        Binding("space,p", "play", "Play/pause", id="replay.play"),
        Binding("enter", "details", "Details", id="app.details", show=False),
        Binding("a", "apply_recommendation", "Apply", id="app.apply"),
        Binding("x", "snooze_recommendation", "Snooze", id="app.snooze", show=False),
        # (the snooze's toast says "u: undo" while it can)
        Binding("u", "undo_snooze", "Undo snooze", id="app.undo_snooze", show=False),
        Binding("k", "kill", "Stop", id="app.kill"),
        Binding("h", "history", "History", id="app.history"),
        Binding("s", "snapshot", "Snapshot", id="app.snapshot"),
        Binding("tab", "focus_next", "Next panel", id="app.next_panel", show=False),
        Binding("escape", "back_to_fleet", "Fleet", id="app.back_to_fleet"),
        Binding("left_square_bracket", "replay_step(-1)", "◀ tick", id="replay.back",
                group=Binding.Group("tick")),
        Binding("right_square_bracket", "replay_step(1)", "tick ▶", id="replay.forward",
                group=Binding.Group("tick")),
        Binding("left_curly_bracket,shift+left_square_bracket", "replay_minute(-1)",
                "◀ minute", id="replay.back_minute", group=Binding.Group("minute")),
        Binding("right_curly_bracket,shift+right_square_bracket", "replay_minute(1)",
                "minute ▶", id="replay.forward_minute", group=Binding.Group("minute")),
        # In a replay the keys that need a daemon are these, out of the footer: pressed, they
        # say why (check_action turns one of each pair off: live the first, a replay these).
        *(Binding(key, f"replay_refuses('{action}')", f"{said} (needs a daemon)", show=False,
                  id=f"replay.{action}")
          for key, action, said in (("a", "apply_recommendation", "Apply"),
                                    ("x", "snooze_recommendation", "Snooze"),
                                    ("u", "undo_snooze", "Undo snooze"), ("k", "kill", "Stop"),
                                    ("h", "history", "History"), ("s", "snapshot", "Snapshot"))),
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
        ("undo_snooze", "Bring back a snoozed recommendation",
         f"the last snoozed, within {UNDO_S:g} s; after, one from the snoozed list (u)"),
        ("kill", "Stop idle process", "SIGTERM via mlcostd, after confirmation (k)"),
        ("history", "History", "utilization and wasted $/h over 1 h and 24 h (h)"),
        ("snapshot", "Snapshot", "the last 30 min as a snapshot file and HTML report (s)"),
        ("back_to_fleet", "Back to the fleet", "leave this host's view (escape)"),
        ("play", "Replay: play / pause", "play the recording from this tick (space)"),
        ("replay_step(-1)", "Replay: back one tick", "([)"),
        ("replay_step(1)", "Replay: forward one tick", "(])"),
        ("replay_minute(-1)", "Replay: back one minute", "({)"),
        ("replay_minute(1)", "Replay: forward one minute", "(})"),
    )
    # What needs a daemon to answer (not in replay), and what needs one host's view.
    NEEDS_DAEMON = ("apply_recommendation", "snooze_recommendation", "kill", "history",
                    "snapshot", "undo_snooze")
    NEEDS_HOST = ("filter", "sort", "invert", "tree", "details", "apply_recommendation",
                  "snooze_recommendation", "undo_snooze", "kill", "history", "snapshot")
    # Keys of the main screen's panels: on a details, GPU, history or help screen they sorted
    # and filtered the panels behind it, unseen (the footer listed them there too).
    MAIN_PANELS = ("filter", "sort", "invert", "tree")
    # Keys that act on the main screen's highlighted row (a recommendation, a process) or open
    # the history: not from a screen that says they would act unseen behind it
    # (`MAIN_ROW_KEYS = False`: the history and GPU screens).
    ROW_ACTIONS = ("apply_recommendation", "snooze_recommendation", "kill", "history")

    def __init__(self, clients: Sequence[Client], *, readonly: bool = False,
                 interval_s: float = POLL_INTERVAL_S, poll: bool = True,
                 starting: str | None = None, replay: Replay | None = None,
                 prometheus: Screen | None = None,
                 first: HostSnapshot | None = None,
                 start_failure: Callable[[], str | None] | None = None) -> None:
        super().__init__()
        # Why what `starting` waits for gave up (the demo's daemon exited), or None: shown
        # instead of `starting`, so a failed start is not a screen that waits forever.
        self.start_failure = start_failure
        # --prometheus: the fleet table from Prometheus (screens/prometheus_fleet.py), shown
        # first; enter there opens one daemon here through watch_daemon, escape goes back.
        self.prometheus = prometheus
        self.first = first  # /v1/now fetched before the App started: the first frame shows it
        self.first_data_at: float | None = None  # perf_counter when real figures were first set
        self.live = LiveSource(clients, interval_s)
        self.replay = ReplaySource(replay) if replay is not None else None
        self.replay_control = ReplayControl(self, self.replay, self._redraw) \
            if self.replay is not None else None
        self.fleet_control = FleetControl(self)
        self.actions = ActionControl(self)
        # Whose full view is shown: 0 with one daemon (or a replay), the chosen row's host in a
        # fleet after enter, None while the fleet table is shown.
        self.viewing: int | None = None if len(self.clients) > 1 else 0
        self.readonly = readonly
        self.polling = poll
        self.starting = starting  # shown until the first answer (e.g. "starting the demo…")
        self.paused = False
        self.hosts: tuple[HostSnapshot, ...] = ()
        self.next_poll_at: float | None = None
        self._poll_timer: Timer | None = None
        self.render_seconds = 0.0  # how long the last render took (the bench reads it)
        self.event_snapshots = incidents.EventSnapshots()
        self.resolved_notices = incidents.ResolvedNotices()
        self.screen_layout: Layout | None = None
        self._said_lost = False  # a lost daemon said on a screen over the panels, once
        self._render_skipped = False  # a snapshot arrived under a screen: drawn when it closes
        # --demo: why its daemon exited, once it has (start_failure); nothing restarts it, so
        # the keys that need it say this, and the header counts down to no retry
        self.demo_gone: str | None = None
        # the toast on the screen (one at a time: on_notify), as Textual's Notification
        self._shown_toast: Notification | None = None
        # the last toast raised while the help was open, or on the screen when it opened (for
        # the time it had left): shown when it closes
        self._held_toast: Notification | None = None

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """A toast (`toast`), never read as markup (whatever the caller asks)."""
        self.toast(message, title=title, severity=severity, timeout=timeout)

    def toast(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
              timeout: float | None = None) -> Notification:
        """App.notify's toast, returned (Textual's public Notification and Notify, as App.notify
        makes and posts them) so that its caller can take it back, and it alone (`withdraw`).
        Never read as markup: notifications quote command lines, daemon errors and host names,
        where `[bold]` or `[link=...]` is text. Control bytes are shown as `\\x1b`
        (daemon.wire.lines)."""
        note = Notification(lines(str(message)), lines(title), severity,
                            self.NOTIFICATION_TIMEOUT if timeout is None else timeout)
        self.post_message(Notify(note))
        return note

    def withdraw(self, note: Notification) -> None:
        """Take back the toast `note` (from `toast`) and no other: the one toast shown if it is
        it (`a`'s "asking mlcostd…" once the daemon answered: clearing them all took a toast
        that had replaced it, an incident's notice, with it), the one the help holds if it is
        it, and one not shown yet (its Notify still queued) is dropped when it comes."""
        if self._held_toast is not None and self._held_toast.identity == note.identity:
            self._held_toast = None
        elif self._shown_toast is not None and self._shown_toast.identity == note.identity:
            self._shown_toast = None
            self.clear_notifications()  # it alone: one toast at a time (on_notify)
        else:
            note.timeout = 0  # gone already, or still to come: on_notify drops it expired

    def on_notify(self, event: Notify) -> None:
        """One toast at a time: a new one replaces those shown (stacked, a snapshot's path and
        an incident's notice reached down over the process rows and a dialog's question).
        Runs before the App's own handler shows the new one.

        Over a screen that holds toasts (`HOLDS_TOASTS`: the help) the last one waits and is
        shown when it closes: on the help a toast covered its key list (what a, x, k and h
        do) for as long as it lasted."""
        note = event.notification
        top = self.screen_stack[-1] if self.screen_stack else None
        if note.has_expired or getattr(top, "HOLDS_TOASTS", False):
            if not note.has_expired:
                self._held_toast = note
            # not shown, nor in place of the one shown (expired: taken back before it was
            # shown, `withdraw`)
            event.prevent_default()
            return
        self._shown_toast = note
        self.clear_notifications()
        # Textual's rack removes a replaced toast but not the holder it sits in: each one left
        # an empty line above the next toast, and after a burst of keys (`s`, `>` `>` `>`) the
        # toasts had drifted down over the process rows and the key line.
        for screen in self.screen_stack:
            screen.query("ToastHolder").remove()
        main = self.screen_stack[0] if self.screen_stack else None
        panels = self.query(ProcessPanel)
        if main is None or self.viewing is None or not panels or not panels.first().region:
            return  # no host's panels (the fleet table), or not laid out yet
        processes = panels.first()
        # over the GPU panel (or the header's right side), never down over the processes
        # (cut to fit only where it is shown over them: a details screen has the room)
        message, margin = toasts.fit(note.message, note.title, self.size.width,
                                     processes.region.y, HEADER_ROWS)
        if self.screen is main:
            note.message = message
        for rack in main.query("ToastRack"):  # (none where notifications are off: tests)
            rack.styles.margin = (margin, 0, 0, 0)

    @property
    def clients(self) -> list[Client]:
        return self.live.clients

    @property
    def replay_index(self) -> int:
        """The replayed tick shown (0 when live)."""
        return self.replay.index if self.replay is not None else 0

    @property
    def playing(self) -> bool:
        """A replay plays (space)."""
        return self.replay_control is not None and self.replay_control.playing

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

    def get_default_screen(self) -> Screen:
        return MainScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield HeaderPanel(id="header")
        if self.fleet:
            yield FleetPanel(id="fleet")
        hidden = "hidden" if self.viewing is None else ""
        yield GpuPanel(id="gpus", classes=hidden)
        yield ProcessPanel(id="processes", classes=hidden)
        yield RecommendationTable(id="recommendations", classes=hidden)
        # whole at 80 columns (probe 148 L5: "…user or PID (enter keeps it, escape" was cut)
        yield FilterInput(placeholder="filter: command, user, PID or job (enter keeps, "
                                      "escape clears)", id="filter")
        yield KeyFooter()

    def on_mount(self) -> None:
        header = self.query_one(HeaderPanel)
        header.show(None)
        if self.starting:
            header.update(Text(self.starting))
        table = self.query_one("#fleet" if self.fleet else "#processes", DataTable)
        table.focus()
        if self.prometheus is not None:
            self.install_screen(self.prometheus, "prometheus")
            self.push_screen("prometheus")
        self.apply_layout()
        if self.replay is not None:
            self.query_one(RecommendationTable).replaying = True
            header.update(Text(f"mlcost-top: opening the replay of {self.replay.path}…"))
            assert self.replay_control is not None
            self.replay_control.goto(0)
        elif self.first is not None and self.first.now is not None:
            # handed over, not kept: the next poll replaces it (a whole /v1/now held twice)
            first, self.first = self.first, None
            self.live.last_now[0] = first.now
            self.on_snapshot_arrived(SnapshotArrived((first,)))  # before the first paint
            if self.polling:
                self._poll_timer = self.set_timer(self.live.interval_s, self.poll,
                                                  name="next poll")
        elif self.polling:
            self.poll()
        # What is alive after the first paint (modules, widgets, styles: most of the heap)
        # lives as long as the app: frozen, the collector's full passes skip it. Measured with
        # 500 processes (bench/tui_refresh.py): full passes cost 10 ms a refresh on average
        # (~100 ms each), 1 ms frozen.
        self.call_after_refresh(gc.freeze)
        # A refresh of 500 processes allocates tens of thousands of short-lived objects
        # (segments, styles, strips) that reference counting frees; Python's default (a young
        # collection every 700 allocations) ran 10-15 of them a refresh and, every ~15
        # refreshes, a full pass of 8-16 ms, the refresh's worst case. Every 10,000 (a full
        # pass every ~120 refreshes): bench/tui_refresh.py's max 46 -> 34 ms, median -0.7 ms;
        # RSS +1.7 MB at 500 processes.
        gc.set_threshold(10_000, *gc.get_threshold()[1:])

    def on_resize(self, event: events.Resize) -> None:
        if not self.query(HeaderPanel):
            return  # before compose, or while closing
        # Runs before App's own handler has recorded the new size: lay out for event.size.
        if self.apply_layout(event.size) and self.hosts and not self.paused:
            self.render_hosts()

    def apply_layout(self, size: tuple[int, int] | None = None) -> bool:
        """Lay the main screen out for the terminal's size and the host's GPU count (see
        mlcost_tui.layout); True when it changed (the panels must be drawn again)."""
        width, height = size or self.size
        now = self.now
        layout = layout_for(width, height, len(now.gpus) if now is not None else 0,
                            len(now.processes) if now is not None else 0,
                            len(now.recommendations) if now is not None else 0,
                            grouped_gpu_lines(now.gpus) if now is not None else None)
        if layout == self.screen_layout:
            return False
        self.screen_layout = layout
        gpus, processes = self.query_one(GpuPanel), self.query_one(ProcessPanel)
        recommendations = self.query_one(RecommendationTable)
        gpus.group_idle = layout.group_idle_gpus
        gpus.styles.max_height = layout.gpu_rows + layout.chrome_rows
        recommendations.styles.max_height = layout.recommendation_rows + layout.chrome_rows
        recommendations.max_lines = layout.recommendation_lines
        for panel in (gpus, processes, recommendations):
            panel.set_class(layout.compact, "compact")
            panel.fit(layout.table_width)
        for fleet in self.query(FleetPanel):  # always boxed
            fleet.fit(width - BOX_COLUMNS - SCROLLBAR_COLUMNS)
        return True

    # -- polling -----------------------------------------------------------------------------

    @work(exclusive=True, group="poll", exit_on_error=False,
          description="poll each mlcostd for /v1/now")
    async def poll(self) -> None:
        try:
            self.post_message(SnapshotArrived(await self.live.fetch_all()))
        finally:
            delay = self.live.retry_delay(starting=bool(self.starting))
            self.next_poll_at = time.monotonic() + delay
            if self.polling and self.is_running:
                self._poll_timer = self.set_timer(delay, self.poll, name="next poll")

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        if not self.query(HeaderPanel):
            return  # a poll that finished while the app closes: no panels to draw on
        self.hosts = message.hosts
        if self.start_failure is not None and not self.starting and \
                any(h.error is not None for h in self.hosts):
            self._demo_exited()  # (only while a poll fails: the live path is not slowed)
        for note in self.event_snapshots.news(self.hosts):
            self.notify(note, title="incident snapshot", timeout=SNAPSHOT_TOAST_S)
        for note in self.resolved_notices.news(self.hosts):
            self.notify(note, title="recommendation gone", timeout=SNAPSHOT_TOAST_S)
        if any(h.error is None and h.now is not None and h.now.ts is not None
               for h in self.hosts):
            self.starting = None  # the first tick's figures: no longer starting
        shown = self.shown_host
        if shown is not None and shown.now is not None and shown.error is None:
            self.query_one(GpuPanel).remember(shown.now)
            for screen in self.screen_stack[1:]:  # a process's details: has it exited?
                saw_tick = getattr(screen, "saw_tick", None)
                if saw_tick is not None:
                    saw_tick(shown.now)
            if self.screen_layout is not None:
                self.apply_layout()  # the GPU count known now (or changed): group idle ones?
        error = shown.error if shown is not None else None
        lost = error is not None
        if error is not None and self.covered and not self._said_lost:
            # the screen over the panels has no status line: what it shows stopped updating
            self.notify(error[:200] + "; this screen shows the last data received",
                        title="the daemon stopped answering", severity="warning")
        self._said_lost = lost and (self._said_lost or self.covered)
        if self.paused:
            return  # keep polling, skip the render
        if self.covered:
            # keep polling, skip the render; but around a dialog the main screen shows, and its
            # status line froze at "● live" and its tick: the header goes on (one line's work)
            if self.screen_stack[0].is_current:
                self.show_header(self.retry_s())
            # drawn when the main screen is shown again (main_screen_resumed): a paused replay
            # stepped behind a details screen has no next poll, and its panels kept the old
            # tick's figures under the new tick's header (probe 148 M2)
            self._render_skipped = True
            return
        self.render_hosts()

    def main_screen_resumed(self) -> None:
        """The main screen is shown again (a screen over it closed): the snapshot whose render
        was skipped meanwhile, drawn now (nothing when none was)."""
        if self._render_skipped and not self.paused and not self.covered and self.hosts:
            self.render_hosts()

    def _demo_exited(self) -> None:
        """--demo, a poll failed: if the demo's daemon exited, say so in place of the client's
        "start it with `sudo mlcostd run` ... or try `mlcost-top --demo`" and its raw
        exception (inside the demo). Polling goes on (its redraws keep the header's "as of,
        N s ago" current: stopped, it froze at "2s ago"); no countdown is shown (retry_s):
        nothing restarts this daemon."""
        assert self.start_failure is not None
        gone = self.demo_gone or self.start_failure()
        if gone is None:
            return  # a resize's reboot, or not known yet
        self.demo_gone = gone
        self.hosts = tuple(dataclasses.replace(h, error=gone) if h.error is not None else h
                           for h in self.hosts)

    @property
    def covered(self) -> bool:
        """Another screen is over the main one (details, history, a dialog, the palette): the
        main screen is not drawn until it is back. --prometheus's fleet table is not a cover:
        the host's panels under it stay current, for escape to show them at once."""
        return self._covers(self.screen)

    def _covers(self, screen: Screen) -> bool:
        return screen is not self.screen_stack[0] and screen is not self.prometheus

    @property
    def panels_covered(self) -> bool:
        """A screen other than the command palette is over the main one: the panels' keys
        (filter, sort, invert, tree) would change them unseen. The palette runs its command
        once it has closed, on the screen under it, so over the main screen it offers them."""
        screen = self.screen
        if isinstance(screen, CommandPalette) and len(self.screen_stack) > 1:
            screen = self.screen_stack[-2]
        return self._covers(screen)

    def _redraw(self) -> None:
        if self.hosts:
            self.render_hosts()

    def render_hosts(self) -> None:
        """Apply the latest snapshot to every panel in one batch."""
        started = time.perf_counter()
        self._render_skipped = False
        with self.batch_update():
            self.show_header(self.retry_s())
            if self.viewing is None:
                self.query_one(FleetPanel).show(self.hosts)
            else:
                snap = self.shown_host
                if snap is not None and snap.now is not None:
                    for panel in (self.query_one(GpuPanel), self.query_one(ProcessPanel),
                                  self.query_one(RecommendationTable)):
                        panel.set_class(snap.stale, "stale")  # (nothing when unchanged)
                        panel.show(snap.now)
                    if self.first_data_at is None and snap.now.gpus:
                        self.first_data_at = time.perf_counter()
        self.render_seconds = time.perf_counter() - started

    def retry_s(self) -> float | None:
        """Seconds to the next try while a daemon does not answer (None while all do, and
        once the demo's daemon exited: no retry brings it back)."""
        if self.demo_gone is not None:
            return None
        if self.next_poll_at is not None and any(self.live.failures):
            return max(self.next_poll_at - time.monotonic(), 0.0)
        return None

    def show_header(self, retry: float | None) -> None:
        """The header for the latest snapshot: the fleet's totals, the host shown, or what
        the start is waiting for."""
        header = self.query_one(HeaderPanel)
        if self.viewing is None:
            # (the hosts the totals are over: those that answered; none: all as last seen)
            daemons = one_per_daemon(self.hosts)  # one daemon at two targets: once
            answered = any(h.error is None for h in daemons)
            alerting = tuple(h.now.hostname or h.target for h in daemons
                             if h.now is not None and (h.error is None or not answered)
                             and h.now.idle_alerts)
            totals, kept = fleet_header(self.hosts)
            header.show(totals, self.paused, retry, fleet=len(daemons), alert_hosts=alerting,
                        kept_spend=(len(kept), min((h.answered_at for h in kept
                                                    if h.answered_at is not None),
                                                   default=None)) if kept else None)
            return
        snap = self.shown_host
        if self.starting and (snap is None or snap.now is None or snap.now.ts is None):
            failed = self.start_failure() if self.start_failure is not None else None
            header.update(Text(lines(f"mlcost-top: {failed} (q quits)") if failed
                               else self.starting))
        else:
            header.show(snap, self.paused, retry,
                        self.replay.status(self.playing) if self.replay else None)

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
        return self.query_one(ProcessPanel).selected() if self.viewing is not None else None

    def selected_recommendation(self) -> Recommendation | None:
        return self.query_one(RecommendationTable).selected() if self.viewing is not None \
            else None

    def recommendations_for(self, process: Process) -> tuple[Recommendation, ...]:
        return self.query_one(RecommendationTable).about(process)

    def current_recommendation(self) -> Recommendation | None:
        """What `a` and `x` act on: the recommendation a details screen shows, else the row
        highlighted in the recommendations panel, whichever panel has the focus (its action
        column says what `a` does to it)."""
        screen = self.screen
        from mlcost_tui.screens.details import DetailsScreen

        if isinstance(screen, DetailsScreen):
            if screen.recommendation is not None:
                return screen.recommendation
            return screen.related[0] if screen.related else None
        return self.selected_recommendation()

    def kill_target(self) -> tuple[Process | None, tuple[Recommendation, ...]]:
        """What `k` acts on, with the recommendations about it: on a details screen the process
        it shows (a recommendation's screen: the process it is about), else the process row
        highlighted on the main screen. From a details screen `k` had stopped, or refused by
        its pid, the process under the main screen's cursor, hidden behind it."""
        target = getattr(self.screen, "kill_target", None)
        if target is not None:  # a details screen (a method of its own: no import here)
            process, related = target()
            if process is None and self.now is not None and related:
                process = next((p for p in self.now.processes
                                if any(is_about(r, p) for r in related)), None)
            return process, related
        process = self.selected_process()
        return process, self.recommendations_for(process) if process is not None else ()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("replay_step", "replay_minute", "play"):
            return True if self.replay is not None else False
        if action == "replay_refuses":  # (the replay's own binding of each of those keys)
            return self.replay is not None
        if self.replay is not None and action in self.NEEDS_DAEMON:
            # A replay's footer: its own keys ([ ] { } space) at 80 columns, not those that
            # need a daemon (`?` lists none of them; pressed, replay_refuses says why).
            return False
        if action == "pause" and self.replay is not None:
            return False  # space plays a replay (replay.play)
        if action == "back_to_fleet":
            if self.prometheus is not None:
                return bool(self.clients) and self.screen is not self.prometheus
            return True if self.fleet and self.viewing is not None else False
        if self.on_prometheus_table and action in (*self.NEEDS_HOST, "pause"):
            return False  # the Prometheus fleet table shows no host's panels (nor help over it)
        if action in self.MAIN_PANELS and self.panels_covered:
            return False  # a screen over the panels: they would change unseen behind it
        if action in self.ROW_ACTIONS and not getattr(self.screen, "MAIN_ROW_KEYS", True):
            return False  # a history or GPU screen: they would act on rows it does not show
        offers = getattr(self.screen, "offers", None)
        if offers is not None and action in self.ROW_ACTIONS and not offers(action):
            return False  # a details screen: only what acts on what it shows
        if self.viewing is None and action in self.NEEDS_HOST:
            return False  # the fleet table: no host's panels for them (nor in its footer)
        # A key that cannot act here (a replay, --readonly) still runs, to say why.
        return True

    def action_ctrl_c(self) -> None:
        """Ctrl-C: copies the text selected (on the screen, in the filter) as Textual's own
        ctrl+c does, else quits as `q` does, the demo's daemon with it (cli.py)."""
        focused = self.focused
        if self.screen.get_selected_text() or \
                (isinstance(focused, Input) and focused.selected_text):
            raise SkipAction()  # the screen's or the filter's ctrl+c copies it
        self.exit()

    def action_replay_refuses(self, action: str) -> None:
        """A key that needs a daemon, pressed in a replay: say why it does nothing."""
        self._refuse(action)

    def cannot_here(self, action: str) -> str | None:
        """Why `action` cannot run in this mode (None: it can)."""
        if self.demo_gone is not None and action in self.NEEDS_DAEMON:
            return f"{self.demo_gone} (q quits)"
        if self.replay is not None and action in self.NEEDS_DAEMON:
            return ("a replay shows what was recorded; applying, snoozing, stopping, the "
                    "history and snapshots need the live daemon: run mlcost-top on the host")
        if self.readonly and action == "kill":
            return "--readonly: mlcost-top does not stop processes"
        if self.readonly and action in ("snooze_recommendation", "undo_snooze"):
            # a snooze changes the daemon's list for every client: not a read-only viewer's
            return ("--readonly: mlcost-top does not snooze recommendations (a snooze hides "
                    "one for every client of this mlcostd); start it without --readonly to")
        return None

    def _refuse(self, action: str) -> bool:
        """Say why `action` cannot run here; True when it cannot."""
        why = self.cannot_here(action)
        if why is not None:
            self.notify(why, severity="warning", timeout=5)
        return why is not None

    # -- keys --------------------------------------------------------------------------------

    def action_help(self) -> None:
        from mlcost_tui.screens.help import ABOUT, HelpScreen

        about = ABOUT
        if self.on_prometheus_table:  # its figures are Prometheus's, not a daemon's API's
            from mlcost_tui.screens.prometheus_fleet import PrometheusFleetScreen, help_about

            if isinstance(self.prometheus, PrometheusFleetScreen):
                about = help_about(self.prometheus.source.job)
        # The toast on the screen waits too, with the time it has left: the help's screen has
        # a toast rack of its own, on top, and it showed the toast over the keys' descriptions.
        shown, self._shown_toast = self._shown_toast, None
        if shown is not None and not shown.has_expired:
            self._held_toast = dataclasses.replace(shown, timeout=shown.time_left,
                                                   raised_at=time.time())
        self.clear_notifications()
        self.push_screen(HelpScreen(self.help_sections(), self.mode_name, about),
                         self._help_closed)

    def _help_closed(self, _: None) -> None:
        self.call_later(self._show_held_toast)  # (once the help is off the screen stack)

    def _show_held_toast(self) -> None:
        """The toast held while the help was open (App.notify), now that it is closed."""
        held, self._held_toast = self._held_toast, None
        if held is not None:  # (the same identity: `withdraw` still takes it back)
            self.post_message(Notify(dataclasses.replace(held, raised_at=time.time())))

    @property
    def on_prometheus_table(self) -> bool:
        """--prometheus's fleet table is shown, or a screen over it (help): no host's panels
        are there for the host keys to act on."""
        return self.prometheus is not None and self.prometheus in self.screen_stack

    @property
    def mode_name(self) -> str:
        if self.replay is not None:
            return f"replay of {self.replay.path.name} (nothing is changed on any host)"
        if self.on_prometheus_table:
            return "fleet table, from Prometheus"
        if self.viewing is None:
            return "fleet table"
        return "live" + (", read-only" if self.readonly else "")

    def help_sections(self) -> list[tuple[str, list[tuple[str, str]]]]:
        """The keys that work here and now (check_action), then the other screens' keys."""
        titles = {action: title for action, title, _ in self.PALETTE}
        here = []
        for b in self.BINDINGS:
            if not isinstance(b, Binding):
                continue
            name, _, args = b.action.partition("(")
            if self.check_action(name, ()) is not True or name in ("details", "replay_refuses") \
                    or self.cannot_here(name) is not None:
                continue
            keys = ", ".join(self.get_key_display(Binding(k, b.action))
                             for k in b.key.split(","))
            here.append((keys, titles.get(b.action, b.description)))
        here.append(("ctrl+p", "the command palette: the same actions by name"))
        host = self.viewing is not None and not self.on_prometheus_table
        if host:
            here.append(("enter", "on a GPU: its processes and history; on a process or a "
                                  "recommendation: its details"))
            here.append(("click a header", "sort the processes by that column (again: invert)"))
        elif self.on_prometheus_table:
            here.append(("enter", "on a host: its live view (its mlcostd serves the API on "
                                  "TCP: --listen and a token)"))
            here.append(("escape", "in a host's view: back to this table"))
        else:  # the fleet table of several --connect daemons
            here.append(("enter", "on a host: its full view, through its own daemon"))
            here.append(("escape", "in a host's view: back to this table"))
        sections = [("Keys", here)]
        if host:
            details = [("escape, q", "back to the main screen"),
                       ("w", "on a process: its whole command line (a long one shows its "
                             "first 3 lines), again: back to them")]
            if self.replay is None:
                details += [("a", "apply the recommendation (dry run first)"),
                            *(() if self.readonly else
                              (("x", f"snooze it for {SNOOZE_HOURS:g} h"),)),
                            ("k", "stop its process, where the daemon recommends stopping it "
                                  "(after a confirmation)"),
                            ("c", "on a process: copy `mlcostd compare --previous` (the "
                                  "comparison itself is on the screen, under its Compare "
                                  "line)")]
                sections.append(("Details screen (enter)", details))
                sections.append(("History screen (h)", [
                    ("w", "switch between the last hour and the last 24 h"),
                    ("r", "reload")]))
                sections.append(("Apply dialog (a)", [
                    ("y", "nothing with --readonly: the dialog shows the dry run only"
                          if self.readonly else "do it (stop the process, resize the instance)"),
                    ("c", "copy the patch or the commands"), ("n, escape", "cancel")]))
            else:
                sections.append(("Details screen (enter)", details))
        return sections

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
            table.set_title(table.title())

    def action_sort(self, step: int) -> None:
        table = self.query_one(ProcessPanel)
        table.step_sort(step)
        self._rerender_processes()
        self.notify(f"sorted by {table.sort_column.label}", timeout=1.5)

    @on(DataTable.HeaderSelected)
    def _header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a process column's header sorts by it; again, the other way."""
        if isinstance(event.data_table, ProcessPanel):
            event.stop()
            event.data_table.sort_by(str(event.column_key.value))
            self._rerender_processes()

    def action_invert(self) -> None:
        table = self.query_one(ProcessPanel)
        table.inverted = not table.inverted
        self._rerender_processes()

    def action_tree(self) -> None:
        table = self.query_one(ProcessPanel)
        table.tree_mode = not table.tree_mode
        table.fit(table.width)  # the PID column makes room for the branches
        self._rerender_processes()

    def action_play(self) -> None:
        if self.replay_control is not None:
            self.replay_control.toggle_play()

    def action_pause(self) -> None:
        if self.replay_control is not None:
            self.replay_control.toggle_play()
            return
        self.paused = not self.paused
        if self.paused:
            self.show_header(None)
        else:
            self.render_hosts()

    # -- the fleet (fleet_control.py) and replay (replay_control.py) ---------------------------

    def open_host(self, index: int) -> None:
        """Show host `index` of the fleet with every panel, through its own daemon."""
        self.fleet_control.open_host(index)

    def watch_daemon(self, client: Client) -> None:
        """--prometheus: show this daemon's full view (the one before it is closed)."""
        self.fleet_control.watch_daemon(client)

    def action_back_to_fleet(self) -> None:
        self.fleet_control.back_to_fleet()

    def action_replay_step(self, step: int) -> None:
        if self.replay_control is not None:
            self.replay_control.step(step)

    def action_replay_minute(self, step: int) -> None:
        if self.replay_control is not None:
            self.replay_control.minute(step)

    def action_details(self) -> None:
        if self.viewing is None:
            return
        from mlcost_tui.screens.details import DetailsScreen, job_pids

        focused = self.focused
        if isinstance(focused, GpuPanel):
            from mlcost_tui.screens.gpu import GpuScreen

            gpus = focused.selected_gpus()
            if gpus and self.now is not None:
                self.push_screen(GpuScreen(gpus, self.now.processes, self.client))
            return
        if isinstance(focused, RecommendationTable):
            rec = self.selected_recommendation()
            if rec is not None:
                self.push_screen(DetailsScreen(recommendation=rec))
            return
        process = self.selected_process()
        if process is not None:
            self.push_screen(DetailsScreen(
                process=process, client=self.client, related=self.recommendations_for(process),
                recorded_phases=self.replay.phases if self.replay is not None else None,
                latency=self.now.latency_of(process) if self.now is not None else (),
                tick=self.now.ts if self.now is not None else None,
                shared_by=job_pids(process, self.now)))

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, FleetPanel):
            event.stop()
            names = [c.name for c in self.clients]
            key = event.row_key.value
            if key in names:
                self.open_host(names.index(key))
            return
        if isinstance(event.data_table, ProcessPanel | RecommendationTable | GpuPanel):
            event.stop()
            self.action_details()

    # -- actions on the daemon (action_control.py) -------------------------------------------

    def action_apply_recommendation(self) -> None:
        if not self._refuse("apply_recommendation"):
            self.actions.apply(self.current_recommendation())

    def action_kill(self) -> None:
        if self._refuse("kill"):
            return
        self.actions.kill(*self.kill_target())

    def action_snooze_recommendation(self) -> None:
        if not self._refuse("snooze_recommendation"):
            self.actions.snooze(self.current_recommendation())

    def action_undo_snooze(self) -> None:
        if not self._refuse("undo_snooze") and self.client is not None:
            self.actions.undo_snooze()

    def action_history(self) -> None:
        if self._refuse("history") or self.viewing is None or self.client is None:
            return
        from mlcost_tui.screens.history import HistoryScreen

        gpus = tuple(g.index for g in self.now.gpus) if self.now else ()
        self.push_screen(HistoryScreen(gpus, self.client))

    def action_snapshot(self) -> None:
        if not self._refuse("snapshot") and self.client is not None:
            self.actions.snapshot()

    def on_action_finished(self, message: ActionFinished) -> None:
        self.actions.finished(message)

    # -- the command palette -----------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for action, title, help_text in self.PALETTE:
            name, _, arg = action.partition("(")
            if self.check_action(name, ()) is not True or self.cannot_here(name) is not None:
                continue
            yield SystemCommand(title, help_text, partial(self.run_action, action))

    async def on_unmount(self) -> None:
        await self.live.close()
        if self.replay is not None:
            self.replay.close()

