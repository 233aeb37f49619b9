"""One GPU (enter on its row): what it is and costs, the processes on it, and its utilization
and memory over the last hour. Identical idle GPUs shown on one line open together."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static

from daemon.wire import Gpu, Process
from mlcost_tui import format as fmt
from mlcost_tui.footer import KeyFooter
from mlcost_tui.plot import Chart, Plot, covered, covering, history_chart, summary
from mlcost_tui.thresholds import GOOD, MUTED, WARN

if TYPE_CHECKING:
    from daemon.client import Client

RANGE_S = 3600
POINTS = 240


def packed(fields: list[str], width: int, indent: str = "  ", gap: str = "   ") -> str:
    """`fields` on lines of at most `width` cells (0: one line), broken between fields, never
    inside one: at 80 columns the terminal broke `power 400 W   77°C` before `77°C`."""
    lines: list[str] = []
    line = ""
    for field in fields:
        longer = f"{line}{gap}{field}" if line else field
        if line and width and len(indent + longer) > width:
            lines.append(line)
            line = field
        else:
            line = longer
    lines.append(line)
    return "".join(f"{indent}{line}\n" for line in lines)


def gpu_text(gpus: tuple[Gpu, ...], processes: tuple[Process, ...], width: int = 0) -> Text:
    """The GPUs' figures and the processes on them, in lines of at most `width` cells (0: as
    long as they are; the screen passes its own width)."""
    text = Text()
    for gpu in gpus:
        state = "no verdict" if gpu.busy is None else "busy" if gpu.busy else "IDLE"
        text.append(f"GPU {gpu.index}", style="bold")
        text.append(f"  {gpu.name}  {gpu.uuid}  {state}\n", style=MUTED)
        text.append(packed([f"utilization {fmt.pct(gpu.utilization)}",
                            f"SM activity {fmt.pct(gpu.sm_activity)}",
                            f"memory {fmt.size(gpu.memory_used_bytes)} of "
                            f"{fmt.size(gpu.memory_total_bytes)}",
                            f"power {fmt.number(gpu.power_watts, ' W')}",
                            fmt.number(gpu.temperature_c, '°C')], width))
        text.append(f"  {fmt.money(gpu.price_per_hour, '/h')}, of which wasted "
                    f"{fmt.money(gpu.wasted_per_hour, '/h')}\n")
    indices = {g.index for g in gpus}
    on_it = [p for p in processes if indices & set(p.gpus)]
    one = len(gpus) == 1
    if not on_it:  # (identical idle GPUs open together: "them", "these GPUs")
        text.append(f"\nNo process on {'it' if one else 'them'}", style="bold")
        text.append(f": nothing holds memory on {'this GPU' if one else 'these GPUs'}\n",
                    style=MUTED)
    else:
        text.append(f"\n{fmt.plural(len(on_it), 'process', 'processes')} on "
                    f"{'it' if one else 'them'}\n", style="bold")
    for p in sorted(on_it, key=lambda p: -(p.burn_per_hour or 0.0)):
        # Its memory and SM share on these GPUs, not its sums over every GPU it holds (a 4-GPU
        # job read "280.0G SM 340%" on GPU 0's page).
        here = [share for share in p.per_gpu if share.index in indices]
        memory = sum(s.memory_bytes or 0 for s in here) if here else p.gpu_memory_bytes
        sm = max((s.sm_share or 0.0 for s in here), default=0.0) if here else p.sm_share
        figures = (f"{fmt.money(p.burn_per_hour, '/h'):>9}  {fmt.size(memory):>7}  "
                   f"SM {fmt.pct(sm):>4}  {(p.phase_now or fmt.DASH):<11} ")
        text.append(f"  {p.pid:>7}  ", style="bold")
        text.append(figures)
        # the command in what is left of the line (cut with `…`, not wrapped under the pid)
        room = width - 11 - len(figures) if width else 60
        text.append(fmt.short_command(p.command, max(room, 12)), style=MUTED)
        if len(p.gpus) > 1:
            text.append(("\n    " if width else "  ") +
                        f"(on {fmt.plural(len(p.gpus), 'GPU')}: {fmt.gpu_list(p.gpus)}; "
                        f"{fmt.size(p.gpu_memory_bytes)} in all; $/h for all of them)",
                        style=MUTED)
        text.append("\n")
    return text


class GpuScreen(Screen):
    # a, x, k and h act on the main screen's rows, which this screen hides: not from here
    MAIN_ROW_KEYS = False
    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back", id="gpu.back")]
    DEFAULT_CSS = """
    GpuScreen VerticalScroll { padding: 0 1; }
    GpuScreen Plot { height: 7; margin-bottom: 1; }
    """

    def __init__(self, gpus: tuple[Gpu, ...], processes: tuple[Process, ...],
                 client: Client | None = None) -> None:
        super().__init__()
        self.gpus = gpus
        self.processes = processes
        self.client = client

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(gpu_text(self.gpus, self.processes, self.text_width()), id="gpu-body")
            for gpu in self.gpus[:1]:  # identical idle GPUs: the first one's history
                yield Label(f"GPU {gpu.index} utilization", id="utilization-label")
                yield Plot(id="utilization")
                yield Label(f"GPU {gpu.index} memory used", id="memory-label")
                yield Plot(id="memory")
        yield KeyFooter()

    def text_width(self) -> int:
        """The body's width: the screen's, less its padding and the scrollbar."""
        return max(self.app.size.width - 4, 20)

    def on_resize(self) -> None:
        if self.is_mounted:
            self.query_one("#gpu-body", Static).update(
                gpu_text(self.gpus, self.processes, self.text_width()))

    def on_mount(self) -> None:
        self.load_history()

    @work(exclusive=True, group="gpu-history", exit_on_error=False,
          description="load one GPU's utilization and memory history from mlcostd")
    async def load_history(self) -> None:
        from daemon.client import ClientError

        if not self.gpus:
            return
        if self.client is None:
            for name in ("utilization", "memory"):
                self.query_one(f"#{name}", Plot).show(None, "history needs a daemon "
                                                            "(a replay has none)")
            return
        gpu = self.gpus[0]
        until = fmt.clock()
        try:
            client = self.client
            util = await covering(lambda since: client.gpu_history(
                gpu.index, "utilization", since, POINTS), RANGE_S, until)
            memory = await covering(lambda since: client.gpu_history(
                gpu.index, "memory_used_bytes", since, POINTS), RANGE_S, until)
        except ClientError as exc:
            for name in ("utilization", "memory"):
                self.query_one(f"#{name}", Plot).show(None, f"unavailable: {exc}")
            return
        self.query_one("#utilization", Plot).show(
            history_chart(util, RANGE_S, until, percent=True, style=GOOD))
        self.query_one("#utilization-label", Label).update(
            f"GPU {gpu.index} utilization — {covered(util, RANGE_S, until)} — "
            f"{summary(util.values, True)}")
        total = gpu.memory_total_bytes
        points = [(p.ts, p.avg) for p in memory.points]
        since = max(points[0][0] if points else until - RANGE_S, until - RANGE_S)
        self.query_one("#memory", Plot).show(Chart(
            points, since, until, float(total) if total else None, fmt.size, WARN))
        self.query_one("#memory-label", Label).update(
            f"GPU {gpu.index} memory used — {covered(memory, RANGE_S, until)} — now "
            f"{fmt.size(points[-1][1]) if points else fmt.DASH} of {fmt.size(total)}")
