"""The process panel: GPU processes and their workers (keyed by 'pid:start_time'), with filter,
sort column, invert and tree mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from daemon.wire import Now, Process
from mlcost_tui import format as fmt
from mlcost_tui.keyed_table import KeyedTable
from mlcost_tui.thresholds import MUTED, io_stall_style, money_style, utilization_style


@dataclass(frozen=True)
class SortColumn:
    key: str
    label: str
    value: Callable[[Process], Any]
    descending: bool = True  # the natural order: biggest first


SORTS = (
    SortColumn("cost", "$/h", lambda p: p.burn_per_hour or 0.0),
    SortColumn("gpu_mem", "GPU mem", lambda p: p.gpu_memory_bytes or 0),
    SortColumn("sm", "SM", lambda p: p.sm_share or 0.0),
    SortColumn("cpu", "CPU", lambda p: p.cpu_percent or 0.0),
    SortColumn("io", "I/O wait", lambda p: p.io_wait_percent or 0.0),
    SortColumn("pid", "PID", lambda p: p.pid, descending=False),
    SortColumn("user", "user", lambda p: p.user, descending=False),
    SortColumn("command", "command", lambda p: p.command, descending=False),
)


class ProcessPanel(KeyedTable):
    COLUMNS = (("pid", "PID"), ("user", "user"), ("gpus", "GPUs"), ("gpu_mem", "GPU mem"),
               ("sm", "SM"), ("cpu", "CPU"), ("cost", "$/h"), ("spent", "spent"),
               ("phase", "phase"), ("phases", "phase balance"), ("io", "I/O wait"),
               ("command", "command"))
    DEFAULT_CSS = "ProcessPanel { height: 1fr; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.filter_text = ""
        self.sort_index = 0
        self.inverted = False
        self.tree_mode = False
        self.processes: dict[str, Process] = {}
        self.border_title = "Processes"

    @property
    def sort_column(self) -> SortColumn:
        return SORTS[self.sort_index]

    def title(self) -> str:
        arrow = "▲" if (not self.sort_column.descending) != self.inverted else "▼"
        parts = [f"Processes — sort {self.sort_column.label} {arrow}"]
        if self.tree_mode:
            parts.append("tree")
        if self.filter_text:
            parts.append(f"filter '{self.filter_text}'")
        return " · ".join(parts)

    def matches(self, proc: Process) -> bool:
        needle = self.filter_text.lower()
        return not needle or needle in proc.command.lower() or needle in proc.user.lower() \
            or needle in str(proc.pid)

    def ordered(self, processes: tuple[Process, ...]) -> list[tuple[Process, int]]:
        """Processes in display order with their tree depth."""
        column = self.sort_column
        reverse = column.descending != self.inverted
        shown = [p for p in processes if self.matches(p)]
        shown.sort(key=lambda p: (column.value(p), p.pid), reverse=reverse)
        if not self.tree_mode:
            return [(p, 0) for p in shown]
        pids = {p.pid for p in shown}
        children: dict[int, list[Process]] = {}
        roots = []
        for p in shown:
            if p.ppid in pids and p.ppid != p.pid:
                children.setdefault(p.ppid, []).append(p)
            else:
                roots.append(p)
        out: list[tuple[Process, int]] = []

        def walk(p: Process, depth: int) -> None:
            out.append((p, depth))
            if depth < 8:
                for child in children.get(p.pid, []):
                    walk(child, depth + 1)

        for root in roots:
            walk(root, 0)
        return out

    def show(self, now: Now) -> None:
        self.processes = {p.key: p for p in now.processes}
        self.sync([(p.key, self.cells(p, depth)) for p, depth in self.ordered(now.processes)])
        self.border_title = self.title()

    def cells(self, p: Process, depth: int) -> tuple[object, ...]:
        pid = ("  " * (depth - 1) + "└ " if depth else "") + str(p.pid)
        phase = p.phase or fmt.DASH
        return (
            pid, p.user[:12], ",".join(map(str, p.gpus)) or fmt.DASH,
            fmt.size(p.gpu_memory_bytes),
            Text(fmt.pct(p.sm_share), style=utilization_style(p.sm_share) if p.gpus else MUTED),
            fmt.pct(p.cpu_percent),
            Text(fmt.money(p.burn_per_hour), style=money_style(p.burn_per_hour)),
            fmt.money(p.cost),
            Text(phase, style=MUTED if phase == fmt.DASH else ""),
            fmt.phase_bar(p.phases),
            Text(fmt.pct(p.io_wait_percent), style=io_stall_style(p.io_wait_percent)),
            fmt.short_command(p.command, 70),
        )
