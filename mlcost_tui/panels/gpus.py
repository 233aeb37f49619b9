"""The GPU panel: one row per GPU (keyed by UUID). Whether a GPU is idle is the daemon's verdict
(`Gpu.busy`, from its [idle].utilization setting), never a threshold of the TUI's own."""

from __future__ import annotations

from collections import deque

from rich.text import Text

from daemon.wire import Gpu, Now
from mlcost_tui import format as fmt
from mlcost_tui.keyed_table import KeyedTable
from mlcost_tui.thresholds import (
    BAD,
    MUTED,
    memory_style,
    money_style,
    temperature_style,
    utilization_style,
)

SPARK_POINTS = 16


class GpuPanel(KeyedTable):
    COLUMNS = (("gpu", "GPU"), ("name", "model"), ("util", "util"), ("recent", "recent util"),
               ("sm", "SM act"), ("memory", "memory"), ("power", "power"), ("temp", "temp"),
               ("cost", "$/h"), ("wasted", "wasted $/h"), ("state", "state"))
    WIDTHS = {"util": 4, "sm": 6, "memory": 13, "power": 6, "temp": 5, "cost": 7, "wasted": 10}
    DEFAULT_CSS = "GpuPanel { height: auto; max-height: 12; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.recent: dict[str, deque[float]] = {}
        self.border_title = "GPUs"

    def remember(self, now: Now) -> None:
        """Keep each GPU's recent utilization for the sparkline (also while paused)."""
        for gpu in now.gpus:
            series = self.recent.setdefault(gpu.id, deque(maxlen=SPARK_POINTS))
            if gpu.utilization is not None:
                series.append(gpu.utilization)

    def show(self, now: Now) -> None:
        self.sync([(gpu.id, self.cells(gpu)) for gpu in sorted(now.gpus, key=lambda g: g.index)])

    def cells(self, gpu: Gpu) -> tuple[object, ...]:
        util_style = utilization_style(gpu.utilization)
        memory = f"{fmt.size(gpu.memory_used_bytes)}/{fmt.size(gpu.memory_total_bytes)}"
        if gpu.status != "ok":
            state = Text(gpu.status.upper(), style="bold " + BAD)
        else:
            if gpu.busy is None:
                state = Text(fmt.DASH, style=MUTED)  # the daemon gave no verdict
            elif gpu.busy:
                state = Text("busy", style="green")
            else:
                state = Text(" IDLE ", style="bold reverse " + BAD)
        return (
            str(gpu.index), gpu.name.replace("NVIDIA ", ""),
            Text(fmt.pct(gpu.utilization), style=util_style),
            Text(fmt.sparkline(list(self.recent.get(gpu.id, ())), SPARK_POINTS),
                 style=util_style),
            Text(fmt.pct(gpu.sm_activity), style=utilization_style(gpu.sm_activity)
                 if gpu.sm_activity is not None else "grey50"),
            Text(memory, style=memory_style(gpu.memory_used_bytes, gpu.memory_total_bytes)),
            fmt.number(gpu.power_watts, " W"),
            Text(fmt.number(gpu.temperature_c, "°C"), style=temperature_style(gpu.temperature_c)),
            Text(fmt.money(gpu.price_per_hour), style=money_style(gpu.price_per_hour)),
            Text(fmt.money(gpu.wasted_per_hour),
                 style=BAD if gpu.wasted_per_hour and gpu.wasted_per_hour > 0.005 else ""),
            state,
        )
