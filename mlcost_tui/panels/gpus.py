"""The GPU panel: one row per GPU (keyed by UUID), or one line for identical idle GPUs when the
screen is short (mlcost_tui.layout decides). Whether a GPU is idle is the daemon's verdict
(`Gpu.busy`, from its [idle].utilization setting), never a threshold of the TUI's own; the bars'
load colours come from mlcost_tui.thresholds."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.text import Text

from daemon.wire import Gpu, HostUsage, Now
from mlcost_tui import format as fmt
from mlcost_tui.footer import PANEL_KEYS
from mlcost_tui.keyed_table import Column, KeyedTable
from mlcost_tui.thresholds import (
    BAD,
    GOOD,
    MUTED,
    memory_bar_style,
    memory_style,
    money_style,
    temperature_style,
    utilization_style,
)

SPARK_POINTS = 16
UTIL_BAR = 8
MEMORY_BAR = 6


class GpuPanel(KeyedTable):
    BINDINGS = PANEL_KEYS  # tab and enter, in the footer (mlcost_tui/footer.py)
    COLUMNS = (
        Column("gpu", "GPU", 5), Column("name", "model", 14, priority=3),
        Column("util", "util", 5 + UTIL_BAR), Column("recent", "recent util", SPARK_POINTS, 6),
        Column("sm", "SM act", 6, 5), Column("memory", "memory", 12 + MEMORY_BAR, 1),
        Column("power", "power", 6, 4), Column("temp", "temp", 5, 4),
        Column("cost", "$/h", 7), Column("wasted", "wasted $/h", 10, 2),
        Column("state", "state", 8),
    )
    DEFAULT_CSS = "GpuPanel { height: auto; max-height: 12; scrollbar-size-vertical: 1; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.recent: dict[str, deque[float]] = {}
        self.group_idle = False
        self.gpus: dict[str, tuple[Gpu, ...]] = {}  # row key -> the GPUs on that row
        self.set_title("GPUs")

    def remember(self, now: Now) -> None:
        """Keep each GPU's recent utilization for the sparkline (also while paused)."""
        for gpu in now.gpus:
            series = self.recent.setdefault(gpu.id, deque(maxlen=SPARK_POINTS))
            if gpu.utilization is not None:
                series.append(gpu.utilization)

    def show(self, now: Now) -> None:
        title = host_title(now.host_usage)
        if now.unseen_gpus:  # the burn's part no row shows: paid for, not listed by NVML
            title += (f" · {now.unseen_gpus} more not seen by NVML "
                      f"({fmt.money(now.unseen_per_hour, '/h')}, wasted)")
        self.set_title(title)
        rows = group_rows(sorted(now.gpus, key=lambda g: g.index), self.group_idle)
        self.gpus = {key: gpus for key, gpus in rows}
        shown = self.shown_keys
        self.sync([(key, pick(self.cells(gpus), shown)) for key, gpus in rows])

    def selected_gpus(self) -> tuple[Gpu, ...]:
        key = self.selected_key
        return self.gpus.get(key, ()) if key else ()

    def cells(self, gpus: Sequence[Gpu]) -> dict[str, object]:
        gpu = gpus[0]
        util_style = utilization_style(gpu.utilization)
        util = Text(f"{fmt.pct(gpu.utilization):>4} ", style=util_style, end="")
        util.append_text(fmt.load_bar(None if gpu.utilization is None
                                      else gpu.utilization / 100, UTIL_BAR, util_style))
        used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
        memory = fmt.load_bar(used / total if used is not None and total else None,
                              MEMORY_BAR, memory_bar_style(used, total))
        memory.append(f" {fmt.size(used)}/{fmt.size(total)}", style=memory_style(used, total))
        if gpu.status != "ok":
            state = Text(gpu.status.upper(), style="bold " + BAD)
        elif gpu.busy is None:
            state = Text(fmt.DASH, style=MUTED)  # the daemon gave no verdict
        elif gpu.busy:
            state = Text("busy", style=GOOD)
        else:
            state = Text("IDLE", style="bold reverse " + BAD)
            if len(gpus) > 1:
                state.append(f" ×{len(gpus)}", style="bold " + BAD)
        price = _total(g.price_per_hour for g in gpus)
        wasted = _total(g.wasted_per_hour for g in gpus)
        return {
            "gpu": gpu_label(gpus), "name": gpu.name.replace("NVIDIA ", ""), "util": util,
            "recent": Text(fmt.sparkline(list(self.recent.get(gpu.id, ())), SPARK_POINTS),
                           style=util_style),
            "sm": Text(fmt.pct(gpu.sm_activity), style=utilization_style(gpu.sm_activity)
                       if gpu.sm_activity is not None else MUTED),
            "memory": memory, "power": fmt.number(gpu.power_watts, " W"),
            "temp": Text(fmt.number(gpu.temperature_c, "°C"),
                         style=temperature_style(gpu.temperature_c)),
            "cost": Text(fmt.money(price), style=money_style(gpu.price_per_hour)),
            "wasted": Text(fmt.money(wasted),
                           style=BAD if wasted is not None and wasted > 0.005 else ""),
            "state": state,
        }


def host_title(host: HostUsage | None) -> str:
    """'GPUs · host CPU 23% of 16 · memory 5.1G/15.6G · load 1.20 0.90 0.70': the GPU host's
    figures as its daemon read them; just 'GPUs' when the document has none (an older daemon,
    a replay)."""
    if host is None:
        return "GPUs"
    cpus = f" of {host.cpus}" if host.cpus else ""
    parts = ["GPUs", f"host CPU {fmt.pct(host.cpu_percent)}{cpus}"]
    if host.memory_total_bytes:
        parts.append(f"memory {fmt.size(host.memory_used_bytes)}/"
                     f"{fmt.size(host.memory_total_bytes)}")
    if host.load is not None:
        parts.append("load " + " ".join(f"{v:.2f}" for v in host.load))
    return " · ".join(parts)


def pick(cells: dict[str, object], keys: Sequence[str]) -> tuple[object, ...]:
    return tuple(cells[k] for k in keys)


def _total(values: object) -> float | None:
    known = [v for v in values if v is not None]  # type: ignore[attr-defined]
    return sum(known) if known else None


def gpu_label(gpus: Sequence[Gpu]) -> str:
    """'3', '5-7', '3,5-7' or '1,4,6': runs of three or more indices as a range ('3,5,6,7'
    did not fit the column and lost GPU 7 with no sign of it)."""
    indices = sorted(g.index for g in gpus)
    parts: list[str] = []
    i = 0
    while i < len(indices):
        j = i
        while j + 1 < len(indices) and indices[j + 1] == indices[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{indices[i]}-{indices[j]}")
        else:
            parts.extend(str(v) for v in indices[i:j + 1])
        i = j + 1
    return ",".join(parts)


def idle_look(gpu: Gpu) -> tuple[object, ...] | None:
    """What an idle GPU shows (None for a busy or unhealthy one): GPUs that look the same on
    screen can share a line."""
    if gpu.busy is not False or gpu.status != "ok":
        return None
    return (gpu.name, fmt.pct(gpu.utilization), fmt.size(gpu.memory_used_bytes),
            fmt.size(gpu.memory_total_bytes), gpu.price_per_hour)


def grouped_gpu_lines(gpus: Sequence[Gpu]) -> int:
    """How many lines the GPUs take when identical idle ones share one (mlcost_tui.layout
    gives the GPU panel that many rows where it can)."""
    return len(group_rows(sorted(gpus, key=lambda g: g.index), True))


def group_rows(gpus: Sequence[Gpu], group_idle: bool) -> list[tuple[str, tuple[Gpu, ...]]]:
    """(row key, GPUs) in index order; with `group_idle`, identical idle GPUs share the row of
    the first of them."""
    if not group_idle:
        return [(g.id, (g,)) for g in gpus]
    groups: dict[tuple[object, ...], list[Gpu]] = {}
    for gpu in gpus:
        look = idle_look(gpu)
        if look is not None:
            groups.setdefault(look, []).append(gpu)
    rows: list[tuple[str, tuple[Gpu, ...]]] = []
    for gpu in gpus:
        look = idle_look(gpu)
        members = groups.get(look, []) if look is not None else []
        if len(members) < 2:
            rows.append((gpu.id, (gpu,)))
        elif members[0] is gpu:
            rows.append(("idle:" + ",".join(g.id for g in members), tuple(members)))
    return rows
