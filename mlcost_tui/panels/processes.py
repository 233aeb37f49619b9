"""The process panel: GPU processes and their workers (keyed by 'pid:start_time'), with filter,
sort column, invert and tree mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
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
    # Groups the rows by owner (pod, Slurm job, unit), the costliest first within each job.
    SortColumn("job", "job", lambda p: (p.workload or "~", -(p.burn_per_hour or 0.0)),
               descending=False),
    SortColumn("command", "command", lambda p: p.command, descending=False),
)


class ProcessPanel(KeyedTable):
    COLUMNS = (("pid", "PID"), ("user", "user"), ("gpus", "GPUs"), ("gpu_mem", "GPU mem"),
               ("sm", "SM"), ("cpu", "CPU"), ("cost", "$/h"), ("spent", "spent"),
               ("phase", "phase"), ("phases", "phase balance"), ("io", "I/O wait"),
               ("job", "job"), ("command", "command"))
    WIDTHS = {"gpu_mem": 7, "sm": 4, "cpu": 5, "cost": 8, "spent": 10,
              "phase": len("host_preprocess"), "io": 8}
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
            or needle in str(proc.pid) or needle in (proc.workload or "").lower()

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

    def selected(self) -> Process | None:
        key = self.selected_key
        return self.processes.get(key) if key else None

    def show(self, now: Now) -> None:
        self.processes = {p.key: p for p in now.processes}
        cells_for, formatters = self.cells_for, CELL_FORMATTERS
        self.sync([(p.key, cells_for(p.key, cell_inputs(p, depth), formatters))
                   for p, depth in self.ordered(now.processes)])
        self.border_title = self.title()

    def cells(self, p: Process, depth: int) -> tuple[object, ...]:
        return tuple(f(v) for f, v in zip(CELL_FORMATTERS, cell_inputs(p, depth), strict=True))


def cell_inputs(p: Process, depth: int) -> tuple[Any, ...]:
    """What each column's cell is made from (compared with last time's to skip unchanged cells)."""
    return ((p.pid, depth), p.user, p.gpus, p.gpu_memory_bytes, (p.sm_share, bool(p.gpus)),
            p.cpu_percent, p.burn_per_hour, p.cost, p.phase, p.phases, p.io_wait_percent,
            p.workload, p.command)


# Cells are immutable once made, so one Text serves every row showing the same value.
_CACHE = 4096


@lru_cache(_CACHE)
def _pid_cell(pid_depth: tuple[int, int]) -> str:
    pid, depth = pid_depth
    return ("  " * (depth - 1) + "└ " if depth else "") + str(pid)


@lru_cache(_CACHE)
def _sm_cell(share_held: tuple[float | None, bool]) -> Text:
    share, held = share_held
    return Text(fmt.pct(share), style=utilization_style(share) if held else MUTED)


@lru_cache(_CACHE)
def _burn_cell(value: float | None) -> Text:
    return Text(fmt.money(value), style=money_style(value))


@lru_cache(_CACHE)
def _phase_cell(phase: str | None) -> Text:
    return Text(phase or fmt.DASH, style=MUTED if not phase or phase == fmt.DASH else "")


@lru_cache(_CACHE)
def _io_cell(value: float | None) -> Text:
    return Text(fmt.pct(value), style=io_stall_style(value))


@lru_cache(_CACHE)
def _command_cell(command: str) -> str:
    return fmt.short_command(command, 70)


CELL_FORMATTERS: tuple[Callable[[Any], object], ...] = (
    _pid_cell, lambda user: user[:12], lambda gpus: ",".join(map(str, gpus)) or fmt.DASH,
    lru_cache(_CACHE)(fmt.size), _sm_cell, lru_cache(_CACHE)(fmt.pct), _burn_cell,
    lru_cache(_CACHE)(fmt.money), _phase_cell, fmt.phase_bar, _io_cell,
    lambda job: job[:20] if job else fmt.DASH, _command_cell,
)
