"""The details screen: a process (phase balance, top stacks with file:line, its burn, and its
job's latest run compared with the previous one, through GET /v1/compare) or a recommendation
(evidence, savings method, what its action will do)."""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static

from daemon.clock import latency_text, local_time
from daemon.wire import (
    COMPUTE,
    LOW_CONFIDENCE,
    Comparison,
    Latency,
    Now,
    Phases,
    Process,
    Recommendation,
    cells,
    cost_per_1k_text,
    crop,
    phase_label,
)
from mlcost_tui import format as fmt
from mlcost_tui.footer import KeyFooter
from mlcost_tui.panels.header import target_label
from mlcost_tui.panels.recommendations import (
    ACTION_LABELS,
    is_about,
    savings_figures,
    savings_text,
)
from mlcost_tui.plot import Plot, covered, covering, history_chart, summary
from mlcost_tui.screens.energy_section import energy_section
from mlcost_tui.screens.hanging import HangingStatic, HangingText
from mlcost_tui.screens.kind_section import kind_section
from mlcost_tui.thresholds import MUTED, PHASE_COLOURS, WARN

if TYPE_CHECKING:
    from daemon.client import Client

ACTION_TEXT = {
    "show_patch": "shows the patch (a: view and copy it)",
    "copy_commands": "copies the commands to your clipboard (a: view them first)",
    "sigterm": "sends SIGTERM to the process through mlcostd, after a dry run and your "
               "confirmation (disabled with --readonly; the daemon must allow actions)",
    "resize": "stops the instance, changes its type and starts it (boto3), after AWS's dry run "
              "and your confirmation (only when the daemon's config allows actions)",
    "none": "nothing: advice only",
}


def phase_lines(phases: Mapping[str, Any]) -> Text:
    text = Text()
    shares = fmt.phase_shares(phases)
    if not shares:
        text.append("  no phase balance yet (stacks are sampled while the GPU is quiet)\n",
                    style=MUTED)
        return text
    text.append("  ")
    text.append_text(fmt.phase_bar(phases, 50))
    text.append("\n")
    for name, share in shares:
        value = phases.get(name)
        seconds = value.get("seconds") if isinstance(value, Mapping) else None
        confidence = value.get("confidence") if isinstance(value, Mapping) else None
        text.append(f"  {phase_label(name, confidence):<16}", style=PHASE_COLOURS.get(name, ""))
        text.append(f"{share:>6.0%}  {fmt.number(seconds, ' s', 0):>8}")
        text.append("  (low confidence, no stacks)\n" if confidence == LOW_CONFIDENCE else "\n",
                    style=MUTED)
    text.append("\nTop stacks\n", style="bold")
    any_stack = False
    for name, _ in shares:
        value = phases.get(name)
        stacks = value.get("top_stacks") if isinstance(value, Mapping) else None
        for stack in (stacks or [])[:3]:
            any_stack = True
            where = f"{stack.get('file')}:{stack.get('line')}" if stack.get("file") else "?"
            text.append(f"  [{name}] ", style=PHASE_COLOURS.get(name, ""))
            text.append(f"{where} in {stack.get('function') or '?'}", style="bold")
            samples = stack.get("samples")
            count = fmt.plural(samples, "sample") if isinstance(samples, int) else "? samples"
            text.append(f"  ({count})\n", style=MUTED)
            if stack.get("reason"):
                text.append(f"      why: {stack['reason']}\n")
            for frame in (stack.get("frames") or [])[:6]:
                text.append(f"      {frame}\n", style=MUTED)
    if not any_stack:
        text.append("  no stacks recorded\n", style=MUTED)
    return text


HISTORY_RANGE_S = 3600

# Evidence keys that hold a moment (seconds since the epoch): shown as a local time.
TIME_KEYS = frozenset({"start", "end", "ts", "started_at", "ended_at", "first_seen",
                       "last_seen", "snoozed_until", "since", "until"})


def evidence_lines(evidence: Mapping[str, Any], indent: int = 2) -> Text:
    text = Text()
    for key, value in evidence.items():
        if key == "top_stacks" and isinstance(value, list):
            text.append(" " * indent + "top stacks:\n")
            for stack in value[:5]:
                if isinstance(stack, Mapping):
                    where = f"{stack.get('file')}:{stack.get('line')}"
                    text.append(" " * (indent + 2) + f"{where} {stack.get('function') or ''}\n",
                                style="bold")
                else:
                    text.append(" " * (indent + 2) + f"{stack}\n")
            continue
        if isinstance(value, Mapping):
            text.append(" " * indent + f"{key}:\n")
            text.append_text(evidence_lines(value, indent + 2))
            continue
        if isinstance(value, int | float) and key in TIME_KEYS and value > 1e9:
            shown = local_time(value)
        elif isinstance(value, float):
            shown = f"{value:.3g}"
        elif isinstance(value, list | tuple):
            shown = json.dumps(value, default=str)[:200]
        else:
            shown = str(value)
        text.append(" " * indent + f"{key}: ", style=MUTED)
        text.append(shown + "\n")
    return text


def compare_target(process: Process) -> str:
    """What --previous names for this process: its job label (the ledger's, as /v1/compare
    takes it), else its PID:START (runs of its command line). Not its owner (`workload`, a
    pod or unit for display): the store keeps runs by job."""
    return process.job or process.key


def compare_command(process: Process, target: str | None = None) -> str:
    """The command that compares this job's latest run with its previous one in the store (a
    process without a job label: runs of the same command line); `target`: what the screen
    compares (compare_target, or the process's PID:START where its job is shared)."""
    return f"mlcostd compare --previous {shlex.quote(target or compare_target(process))}"


def job_pids(process: Process, now: Now | None) -> tuple[int, ...]:
    """The pids of the processes in `now` that share `process`'s job label, itself included
    (by default the label is the script or module: two `train.py --config a|b` are one job);
    () without a label."""
    if process.job is None or now is None:
        return ()
    return tuple(sorted({q.pid for q in now.processes if q.job == process.job} | {process.pid}))


VERDICT_STYLES = {"better": "bold green", "worse": "bold red", "mixed": "bold yellow"}


def comparison_lines(result: Comparison) -> Text:
    """The comparison with the previous run: the two runs, each figure's before, after,
    change and verdict, the recommendations that moved, and the overall verdict."""
    text = Text()
    text.append(f"  before: {result.before}\n  after:  {result.after}\n", style=MUTED)
    text.append(f"  {'figure':<20} {'before':>9} {'after':>9} {'change':>10}  verdict\n",
                style=MUTED)
    for fig in result.figures:
        text.append(f"  {fig.label[:20]:<20} {fig.before:>9} {fig.after:>9} {fig.change:>10}  ")
        if fig.counted:
            text.append(fig.verdict + "\n", style=VERDICT_STYLES.get(fig.verdict, MUTED))
        else:
            text.append(fig.verdict + "*\n", style=MUTED)
    if not all(fig.counted for fig in result.figures):
        text.append("  * not in the verdict: a busier GPU draws more per hour, may hold more "
                    "memory\n", style=MUTED)
    if result.price_note:
        text.append(f"  price: {result.price_note}\n", style=MUTED)
    for rec in result.recommendations:
        text.append(f"  recommendation {rec}\n")
    text.append("  verdict: ")
    text.append(result.verdict + "\n", style=VERDICT_STYLES.get(result.verdict, "bold"))
    return text


# Lines of the screen a process's command line takes at most until `w` shows all of it: a job
# with 200 arguments filled ~100 lines at 80x24 and pushed its cost 4 screens down (probe 154 L2).
COMMAND_LINES = 3


def command_cells(screen_width: int) -> int:
    """How many cells of a command line the heading shows at this screen width: COMMAND_LINES
    lines of the text's width (the screen's, less its padding and scroll bar)."""
    return COMMAND_LINES * max(screen_width - 3, 20)


def process_heading(p: Process, gone: float | None = None,
                    last_seen: float | None = None, cells_shown: int | None = None) -> Text:
    """`Process 1234  started …  user …` and its command line: the top of its details.
    `gone`: the first tick it was no longer in (it exited), `last_seen` the last it was in.
    `cells_shown`: a longer command line is cut there with `…`, and `w` shows all of it
    (None: all of it)."""
    text = Text()
    text.append(f"Process {p.pid}", style="bold")
    if gone is not None:
        text.append("  EXITED", style="bold red")
    text.append(f"  started {local_time(p.start_time)}  user {p.user}  parent {p.ppid}"
                + (f"  state {p.state}" if gone is None else "") + "\n", style=MUTED)
    if cells_shown is not None and cells(p.command) > cells_shown:
        text.append(crop(p.command, cells_shown))
        text.append(f"  (w: the whole command, {len(p.command):,} characters)", style=MUTED)
    else:
        text.append(p.command)
    if gone is not None:  # the figures below are its last ones: nothing of it runs now
        text.append("\n")
        if gone < p.start_time:  # a replay stepped back before it started
            text.append(f"Not running at {local_time(gone)}: it starts at "
                        f"{local_time(p.start_time)}", style="bold red")
        else:
            text.append(f"Exited: not in mlcostd's view at {local_time(gone, date=False)}",
                        style="bold red")
            if last_seen is not None:
                text.append(f" (last seen {local_time(last_seen, date=False)})",
                            style="bold red")
        text.append("; its GPU memory, $/h and watts below are as it was last seen, and k "
                    "has nothing to stop", style=MUTED)
    return text


class DetailsScreen(Screen):
    """Details of one process or one recommendation; escape goes back. A process's phase
    balance is loaded from `client` when there is one (a replay has none)."""

    BINDINGS = [
        Binding("escape,q", "app.pop_screen", "Back", id="details.back"),
        Binding("a", "app.apply_recommendation", "Apply", id="details.apply"),
        Binding("x", "app.snooze_recommendation", "Snooze", id="details.snooze"),
        Binding("c", "compare_previous", "Compare runs", id="details.compare"),
        Binding("w", "whole_command", "Whole command", id="details.whole_command", show=False),
    ]
    DEFAULT_CSS = """
    DetailsScreen VerticalScroll { padding: 0 1; }
    DetailsScreen Label { width: 1fr; }  /* a title longer than the screen wraps, not cut */
    DetailsScreen Plot { height: 7; }
    #details-heading { margin-bottom: 1; }
    """

    def __init__(self, process: Process | None = None,
                 recommendation: Recommendation | None = None,
                 related: tuple[Recommendation, ...] = (), client: Client | None = None,
                 recorded_phases: Callable[[str], Phases | None] | None = None,
                 latency: tuple[Latency, ...] = (), tick: float | None = None,
                 shared_by: tuple[int, ...] = ()) -> None:
        """`tick`: the time (ts) of the tick whose figures `process` has. `shared_by`: the pids
        of the processes of its job now (job_pids)."""
        super().__init__()
        self.client = client
        self.latency = latency  # [[cost.latency]] of this process or its job, when opened
        self.recorded_phases = recorded_phases  # a replay's: the balance at the tick shown
        self.process = process
        self.recommendation = recommendation
        self.related = related
        self.phases: Phases | None = None
        self.phases_error: str | None = None
        self.comparison: Comparison | None = None
        # The process's last sighting and the first tick it was no longer in (None: it runs,
        # as far as the snapshots since the screen opened say): set by saw_tick.
        self.last_seen: float | None = None
        self.gone_at: float | None = None
        # A recommendation's screen: the tick shown (its ts) when it is not in it, None while
        # it is (saw_tick: it follows the ticks, a replay's steps among them).
        self.missing_at: float | None = None
        self.tick_shown = tick  # the tick (ts) whose figures the screen shows
        self.phases_loading = False  # a read of the phase balance runs
        self.phases_stale = False  # a replay stepped while it ran: read again when it ends
        # what the comparison with the previous run is doing, or why there is none
        self.comparison_note = ("comparing with the previous run…" if client is not None
                                else "run the command on the host")
        self.whole_command = False  # `w`: the process's whole command line, not its first lines
        # Its job's processes now (itself included): a job of several is compared as this
        # process's own command line's runs where the store has an earlier one (probe 154 M1:
        # two weird.py processes' figures together, $8.19/h and 50% idle, on the screen of a
        # busy $4.10/h one, read "within noise"); else the job's, said to be theirs together.
        self.shared_by = shared_by
        self.fell_back = False  # its own command line had no earlier run: the job's compared
        self.compared = (process.key if process is not None and len(shared_by) > 1
                         else compare_target(process) if process is not None else "")

    @property
    def key(self) -> str:
        return self.process.key if self.process else (self.recommendation.id
                                                      if self.recommendation else "")

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            if self.process is not None:
                # what it is about first: the SM chart came before it, its heading mid-screen
                yield HangingStatic(self.heading(), id="details-heading")
            if self.process is not None and self.client is not None:  # a replay has no history
                yield Label("SM share over the last hour", id="sm-label")
                yield Plot(id="sm", empty="loading the SM share history…")
            # a wrapped item's continuation lines indented under it (screens/hanging.py)
            yield HangingStatic(self.render_hanging(), id="details-body")
        yield KeyFooter()

    def on_mount(self) -> None:
        if self.process is not None:
            self.load_phases()
            if self.client is not None:
                self.load_comparison()

    @work(exclusive=True, group="compare", exit_on_error=False,
          description="compare this job's latest run with its previous one (GET /v1/compare)")
    async def load_comparison(self) -> None:
        from daemon.client import ApiError, ClientError

        if self.process is None or self.client is None:
            return
        try:
            try:
                result = await self.client.compare_previous(self.compared)
            except ApiError as exc:
                if exc.status != 404 or self.compared == compare_target(self.process):
                    raise
                # no earlier run of its own command line: its job's runs, said to be theirs
                self.compared, self.fell_back = compare_target(self.process), True
                result = await self.client.compare_previous(self.compared)
        except ApiError as exc:
            note = ("no earlier run of it in the store yet" if exc.status == 404 else
                    f"the daemon could not compare: {exc.message}")
            self.set_comparison(None, note)
        except ClientError as exc:
            self.set_comparison(None, f"cannot compare: {exc}")
        else:
            self.set_comparison(result, "")

    def set_comparison(self, result: Comparison | None, note: str) -> None:
        self.comparison, self.comparison_note = result, note
        if self.is_mounted:
            self.query_one("#details-body", Static).update(self.render_hanging())

    def reload_recorded_phases(self) -> None:
        """A replay's balance again, at the tick now shown: one read at a time (a read that
        was overtaken by a step reads again when it ends, once, however many steps came)."""
        if self.phases_loading:
            self.phases_stale = True
        else:
            self.load_phases()

    @work(exclusive=True, group="phases", exit_on_error=False,
          description="load a process's phase balance from mlcostd")
    async def load_phases(self) -> None:
        self.phases_loading = True
        try:
            await self._load_phases()
        finally:
            self.phases_loading = False
        if self.phases_stale:
            self.phases_stale = False
            self.load_phases()

    async def _load_phases(self) -> None:
        from daemon.client import ClientError

        if self.process is None:
            return
        if self.client is None:
            if self.recorded_phases is None:
                self.set_phases(None, "phases: no daemon and no recording to read them from")
                return
            try:
                phases = await asyncio.to_thread(self.recorded_phases, self.process.key)
            except Exception as exc:  # a damaged recording: say so, keep the screen
                self.set_phases(None, f"phases: cannot read the recording: {exc}")
                return
            self.set_phases(phases, None if phases is not None else
                            "phases: none recorded in the 5 minutes before this tick")
            return
        try:
            client, key = self.client, self.process.key
            history = await covering(lambda since: client.process_history(
                key, "sm_share", since, 240), HISTORY_RANGE_S, fmt.clock())
        except ClientError as exc:
            self.query_one("#sm", Plot).show(None, f"SM share history unavailable: {exc}")
        else:
            until = fmt.clock()
            self.query_one("#sm", Plot).show(history_chart(history, HISTORY_RANGE_S, until,
                                                           percent=True))
            self.query_one("#sm-label", Label).update(
                f"SM share — {covered(history, HISTORY_RANGE_S, until)} — "
                f"{summary(history.values, True)}")
        try:
            phases = await self.client.phases(self.process.key)
        except ClientError as exc:
            self.set_phases(None, f"phases: {exc}")
            return
        self.set_phases(phases, None)

    def set_phases(self, phases: Phases | None, error: str | None) -> None:
        self.phases, self.phases_error = phases, error
        if self.is_mounted:
            self.query_one("#details-body", Static).update(self.render_hanging())

    def saw_tick(self, now: Now) -> None:
        """A snapshot of the host arrived (the App hands each one over while this screen is
        open): a process no longer in it has exited (or, in a replay, is not running at that
        tick), and the screen says so instead of showing its last figures as current."""
        if now.ts is None:
            return
        if self.recommendation is not None:
            self._follow_recommendation(now)
        if self.process is None:
            return
        key = self.process.key
        current = next((p for p in now.processes if p.key == key), None)
        moved = False  # its figures, recommendations or latency at this tick differ
        if current is not None:
            self.last_seen, gone = now.ts, None
            # Its figures as this tick has them: "$/h now, $ so far", its GPU memory and SM
            # share went on showing the tick the screen was opened at (a replay's steps too).
            related = tuple(r for r in now.recommendations if is_about(r, current))
            latency = now.latency_of(current)
            shared_by = job_pids(current, now)
            moved = (current != self.process or related != self.related
                     or latency != self.latency or shared_by != self.shared_by)
            self.process, self.related, self.latency = current, related, latency
            self.shared_by = shared_by
        else:
            gone = self.gone_at if self.gone_at is not None else now.ts
        stepped = (self.client is None and self.tick_shown is not None
                   and now.ts != self.tick_shown)  # a replay moved
        self.tick_shown = now.ts
        if stepped and self.recorded_phases is not None and self.is_mounted:
            self.reload_recorded_phases()  # the balance at the tick shown now
        if gone != self.gone_at or moved:
            self.gone_at = gone
            if self.is_mounted:
                self.query_one("#details-heading", Static).update(self.heading())
                self.query_one("#details-body", Static).update(self.render_hanging())

    def _follow_recommendation(self, now: Now) -> None:
        """This recommendation as the tick `now` has it (its figures move tick to tick: a
        replay stepped with the screen open showed the tick it was opened at), or, not in it,
        said so over its last figures."""
        shown = self.recommendation
        assert shown is not None
        current = next((r for r in now.recommendations if r.id == shown.id), None)
        missing = None if current is not None else now.ts  # (a replay steps both ways)
        if (current is None or current == shown) and missing == self.missing_at:
            return  # (the same: nothing to draw)
        self.recommendation = current if current is not None else shown
        self.missing_at = missing
        if self.is_mounted:
            self.query_one("#details-body", Static).update(self.render_body())

    @property
    def exited(self) -> bool:
        """Its process is gone from the daemon's view (False for a recommendation's screen)."""
        return self.gone_at is not None

    def kill_target(self) -> tuple[Process | None, tuple[Recommendation, ...]]:
        """What `k` acts on here (MlcostTop.kill_target): this screen's process and the
        recommendations shown about it, or this recommendation (the App finds its process)."""
        if self.process is not None:
            return self.process, self.related
        return None, (self.recommendation,) if self.recommendation is not None else ()

    def offers(self, action: str) -> bool:
        """Whether the App's key for `action` (a, x, k, h) acts on what this screen shows: `k`
        where its process has a recommendation to stop it, `a` and `x` where it shows a
        recommendation; `h` opens the host's history over it. The main screen's highlighted
        rows, hidden behind it, are never the target."""
        if action == "kill":
            return any(r.action_kind == "sigterm" for r in self.kill_target()[1])
        if action in ("apply_recommendation", "snooze_recommendation"):
            return self.recommendation is not None or bool(self.related)
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # a recommendation's details offered `c` and then said it is for a process
        if action in ("compare_previous", "whole_command"):
            return self.process is not None
        return True

    def heading(self) -> HangingText:
        """The process's heading, its command line cut to COMMAND_LINES lines of this screen's
        width unless `w` asked for all of it."""
        assert self.process is not None
        width = self.size.width if self.is_mounted and self.size.width else self.app.size.width
        return HangingText(process_heading(self.process, self.gone_at, self.last_seen,
                                           None if self.whole_command else command_cells(width)))

    def on_resize(self) -> None:
        if self.process is not None and self.is_mounted:
            self.query_one("#details-heading", Static).update(self.heading())

    def action_whole_command(self) -> None:
        """The whole command line in the heading, or back to its first lines."""
        if self.process is None:
            return
        self.whole_command = not self.whole_command
        self.query_one("#details-heading", Static).update(self.heading())

    def action_compare_previous(self) -> None:
        """Copy the compare command and show it (the screen shows the comparison itself when
        the daemon has one; the command gives the text, JSON or HTML on the host)."""
        if self.process is None:
            self.notify("compare is for a process: open one from the process table",
                        title="compare")
            return
        command = compare_command(self.process, self.compared)
        self.app.copy_to_clipboard(command)
        self.notify(f"{command}\n(copied) run it on the host: the latest run against "
                    "the previous one, figure by figure, better / worse / within noise",
                    title="compare with the previous run", timeout=15)

    def render_hanging(self) -> HangingText:
        return HangingText(self.render_body())

    def render_body(self) -> Text:
        if self.process is not None:
            return self._process_text(self.process)
        if self.recommendation is not None:
            return self._recommendation_text(self.recommendation)
        return Text("nothing selected")

    def _process_text(self, p: Process) -> Text:
        """The body under its heading (process_heading) and the SM chart."""
        text = Text()
        gone = self.gone_at
        if p.owner:  # who owns it: pod, Slurm job, systemd unit (from its cgroup)
            text.append("Owner ", style="bold")
            text.append("  ".join(f"{k} {v}" for k, v in sorted(p.owner.items())) + "\n")
        # what it is, how sure, from where, why; its inference audit (screens/kind_section.py)
        text.append_text(kind_section(p, recorded=self.client is None
                                      and self.recorded_phases is not None))
        text.append("GPUs " + ("when last seen " if gone is not None else ""), style="bold")
        text.append(f"{','.join(map(str, p.gpus)) or '-'}   GPU memory {fmt.size(p.gpu_memory_bytes)}"
                    f"   SM share {fmt.pct(p.sm_share)}   CPU {fmt.pct(p.cpu_percent)}"
                    f"   RSS {fmt.size(p.rss_bytes)}   I/O wait {fmt.pct(p.io_wait_percent)}\n")
        text.append("Cost ", style="bold")
        if gone is not None:
            text.append(f"{fmt.money(p.burn_per_hour, '/h')} when last seen, nothing now; "
                        f"{fmt.money(p.cost)} in all (as last seen)\n")
        else:
            text.append(f"{fmt.money(p.burn_per_hour, '/h')} now, {fmt.money(p.cost)} so far\n")
        text.append_text(energy_section(p, exited=gone is not None))  # its watts, kWh and CO2e (screens/energy_section.py)
        for histogram in self.latency:  # [[cost.latency]] of this process or its job
            text.append("Latency ", style="bold")
            if histogram.error:
                text.append(f"{histogram.metric}: {histogram.error}\n", style=MUTED)
                continue
            text.append(f"p50 {latency_text(histogram.p50_seconds)}   p99 "
                        f"{latency_text(histogram.p99_seconds)}   over "
                        f"{fmt.number(histogram.requests, '', 0)} requests\n")
            text.append(f"  beside SM share {fmt.pct(p.sm_share)}   "
                        f"{cost_per_1k_text(histogram.cost_per_request)}")
            text.append(f"   {histogram.metric}\n", style=MUTED)
        text.append("Compare ", style="bold")
        text.append(self.compare_subject(p) + ": ")
        if self.comparison is not None:
            text.append(self.comparison.verdict,
                        style=VERDICT_STYLES.get(self.comparison.verdict, "bold"))
            text.append(" (below)")
        else:
            text.append(self.comparison_note, style=MUTED)
        text.append(f"\n  c copies: {compare_command(p, self.compared)}\n\n", style=MUTED)
        text.append("Phase balance", style="bold")
        phases = self.phases.phases if self.phases and self.phases.phases else p.phases
        status = (self.phases.stack_status if self.phases and self.phases.stack_status
                  else p.stack_status)
        text.append(f"  (stack sampling: {status or '-'})\n", style=MUTED)
        if p.phase_now is not None and p.phase_now != p.phase and gone is None:
            # (daemon.api.document.phase_now) the balance below is of the last 30 min
            if p.phase_now == COMPUTE:  # back at work after stacks that said otherwise
                text.append(f"  now: {p.phase_now} (SM share {fmt.pct(p.sm_share)}); the "
                            f"balance below, mostly {p.phase}, was sampled before it went back "
                            "to work\n")
            else:  # its GPU quiet now: what its stacks say it does while it is
                text.append(f"  now: {p.phase_now} (SM share {fmt.pct(p.sm_share)}): its GPU is "
                            f"quiet, and its stacks say {p.phase_now} while it is; the balance "
                            f"below is mostly {p.phase}\n")
        if p.phase_confidence == LOW_CONFIDENCE:
            text.append(f"  {phase_label(p.phase, LOW_CONFIDENCE)}: low confidence, from /proc, "
                        "no stacks (py-spy may not read this process; README \"When ptrace is denied\")\n",
                        style=MUTED)
        if self.phases_error:
            text.append(f"  {self.phases_error}\n", style=MUTED)
        text.append_text(phase_lines(phases))
        if self.related:
            text.append("\nRecommendations for this process\n", style="bold")
            for rec in self.related:  # priced as the recommendation's own screen prices it
                text.append("  ")
                text.append_text(savings_figures(rec))
                text.append(f"\n    {rec.summary}\n")
                text.append(f"    a {ACTION_TEXT.get(rec.action_kind, rec.action_kind)}\n",
                            style=MUTED)
        if self.comparison is not None:
            text.append("\nCompared with the previous run\n", style="bold")
            text.append_text(comparison_lines(self.comparison))
        return text

    def compare_subject(self, p: Process) -> str:
        """What the Compare line compares: this job's runs, or, where its job label (by default
        the script's name) is several processes now, this process's command line's runs, or the
        job's, said to be all of them together and not this process alone."""
        others = len(self.shared_by) > 1
        if not others:
            return "with this job's previous run"
        pids = ", ".join(map(str, self.shared_by))
        label = p.job  # (daemon.wire: one line, its control bytes written out)
        if self.compared == p.key:
            return (f"with this process's previous run (runs of its command line; job {label} "
                    f"is {len(self.shared_by)} processes now: pids {pids})")
        return (f"with job {label}'s previous run, its {len(self.shared_by)} processes now "
                f"together (pids {pids}), not this process alone"
                + (" (no earlier run of its own command line)" if self.fell_back else ""))

    def _recommendation_text(self, r: Recommendation) -> Text:
        text = Text()
        if self.missing_at is not None:
            text.append(f"Not recommended at {fmt.clock_time(self.missing_at)}",
                        style="bold reverse " + WARN)
            text.append(" (the tick shown): below, as it was when last recommended\n\n",
                        style="bold " + WARN)
        text.append(f"{r.rule}", style="bold")
        text.append(f"  about {target_label(r.target).removesuffix(' idle')}  (id {r.id})\n",
                    style=MUTED)
        text.append(r.summary + "\n\n")
        text.append("Saves ", style="bold")
        text.append_text(savings_text(r))
        text.append("\n")
        text.append(f"  {r.method}\n\n", style=MUTED)
        text.append("What the action does\n", style="bold")
        text.append(f"  {ACTION_LABELS.get(r.action_kind, r.action_kind)}: "
                    f"{ACTION_TEXT.get(r.action_kind, r.action_kind)}\n")
        if r.action_text:
            text.append(f"  {r.action_text}\n")
        if r.action.get("commands"):
            for command in r.action["commands"]:
                text.append(f"    $ {command}\n", style="bold")
        if r.action.get("patch"):
            text.append(f"\n{r.action['patch']}\n")
        text.append("\nEvidence\n", style="bold")
        text.append_text(evidence_lines(r.evidence))
        text.append("\na apply (dry run first) · x snooze 24 h · escape back\n", style=MUTED)
        return text
