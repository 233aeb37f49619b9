"""The process panel: GPU processes and their workers (keyed by 'pid:start_time'), with filter,
sort (any shown column: by click on its header, or < > in on-screen order), invert and tree mode.

Each column is declared once (ProcessColumn): what its cell is made from, how that is drawn, how
it sorts and how important it is when the terminal is narrow. A new column is one entry in
COLUMNS."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

from rich.text import Text

from daemon.wire import (
    COMPUTE,
    ELLIPSIS,
    IDLE,
    LOW_CONFIDENCE,
    UNKNOWN,
    Now,
    Process,
    phase_label,
    program_words,
)
from mlcost_tui import format as fmt
from mlcost_tui.footer import PANEL_KEYS
from mlcost_tui.keyed_table import Column, KeyedTable
from mlcost_tui.thresholds import (
    MUTED,
    io_stall_style,
    money_style,
    utilization_style,
)

# Cells are immutable once made, so one Text serves every row showing the same value.
_CACHE = 4096
PID_WIDTH = 7  # Linux pids go up to 4194304
TREE_PID_WIDTH = PID_WIDTH + 6  # three levels of branches
GPU_WIDTH = 4  # '0-3', '0,1', '0+4' (mlcost_tui.format.gpu_list)


@dataclass(slots=True)
class Row:
    """A process as one line of the table: the process, its tree branch and the GPUs it works
    for (its own, else its parent's for a DataLoader worker). Built for every process on every
    refresh (500 at a time), and never changed once built: a plain slots class, as a frozen
    dataclass's init cost 3.5 us against 0.8 (1.3 ms a refresh at 500 processes)."""

    process: Process
    branch: str = ""
    parent_gpus: tuple[int, ...] = ()
    gpus_idle: bool = False  # it holds GPUs and every one is IDLE now (the daemon's verdict)


@dataclass(frozen=True)
class ProcessColumn(Column):
    value: Callable[[Row], Any] = lambda row: None  # what the cell is made from
    draw: Callable[[Any], Any] = str  # the cell, from the value (cached where it pays)
    sort: Callable[[Process], Any] | None = None  # the sort key (default: none)
    descending: bool = True  # the natural order: biggest first


@lru_cache(_CACHE)
def _pid_cell(pid_branch: tuple[int, str]) -> str:
    pid, branch = pid_branch
    return branch + str(pid)


@lru_cache(_CACHE)
def _gpus_cell(own_parent: tuple[tuple[int, ...], tuple[int, ...]]) -> Text:
    own, parent = own_parent
    if own:
        return Text(fmt.gpu_list(own, GPU_WIDTH))
    if parent:  # a worker: the GPU it feeds, in brackets
        return Text(f"({fmt.gpu_list(parent, GPU_WIDTH - 2)})", style=MUTED)
    return Text(fmt.DASH, style=MUTED)


@lru_cache(_CACHE)
def _sm_cell(share_held: tuple[float | None, bool]) -> Text:
    share, held = share_held
    return Text(fmt.pct(share), style=utilization_style(share) if held else MUTED)


@lru_cache(_CACHE)
def _burn_cell(value: float | None) -> Text:
    return Text(fmt.money(value), style=money_style(value))


def _phase_value(process: Process, gpus_idle: bool) -> tuple[str | None, bool, str | None]:
    """What its phase cell is made from: the phase it is in now, its GPUs' verdict, how sure."""
    phase, confidence = process.current_phase
    return phase, gpus_idle, confidence


@lru_cache(_CACHE)
def _phase_cell(phase_idle: tuple[str | None, bool, str | None]) -> Text:
    phase, gpus_idle, confidence = phase_idle
    if gpus_idle and phase in (COMPUTE, UNKNOWN, None, "", fmt.DASH):
        # The phase is what its recent stacks say; every GPU it holds is IDLE now (the GPU panel's
        # verdict): it is not computing, whatever the last stacks said, and where they said
        # nothing (unknown, or no sample yet) idle is what is known. A wait (data_wait,
        # checkpoint...) stays: it says why the GPU is idle.
        return Text(IDLE, style=MUTED)
    if not phase or phase == fmt.DASH:
        return Text(fmt.DASH, style=MUTED)
    # "data_wait~": decided from /proc alone, no stack (README "When ptrace is denied")
    return Text(phase_label(phase, confidence), style=MUTED if confidence == LOW_CONFIDENCE else "")


@lru_cache(_CACHE)
def _io_cell(value: float | None) -> Text:
    return Text(fmt.pct(value), style=io_stall_style(value))


@lru_cache(_CACHE)
def _command_cell(command: str, width: int = 200) -> str:
    """The command in the column's width: what tells the rows apart first, cut at a word."""
    return fmt.short_command(command, width)


@lru_cache(_CACHE)
def command_order(command: str) -> str:
    """What the command column sorts by: what it shows, the interpreter left out (shown or not,
    depending on the width) and the leading `…` of a module dropped: `python -m
    pkg.inference_server --gpu 4` by `inference_server --gpu 4`, `python hostile.py` by
    `hostile.py`. The whole command line put every `python -m` before every script (the
    folder of python and `-m` decided), and the column read unsorted."""
    words = program_words(command)
    if words and words[0].startswith("python"):
        words = words[2 if len(words) > 2 and words[1] == "-m" else
                      1 if len(words) > 1 and words[1].endswith(".py") else 0:]
    return " ".join(words).lstrip(ELLIPSIS).casefold()


def compute_share(p: Process) -> float:
    """The share of its time a process computes (the phase balance column sorts by it)."""
    return dict(fmt.phase_shares(p.phases)).get(COMPUTE, 0.0)


def _size(value: float | None) -> str:
    return fmt.size(value)


def _rate(value: float | None) -> str:
    return DASH if value is None else fmt.size(value) + "/s"


DASH = fmt.DASH
# The kind column's words: narrow, so it fits beside the others on a wide screen only.
KIND_SHORT = {"training": "train", "batch_inference": "batch", "online_inference": "serve",
              "notebook": "notebook", "other": "other"}


@lru_cache(_CACHE)
def _kind_cell(kind: str | None) -> Text:
    if not kind:
        return Text(DASH, style=MUTED)
    return Text(KIND_SHORT.get(kind, kind[:8]), style=MUTED if kind == "other" else "")


COLUMNS: tuple[ProcessColumn, ...] = (
    ProcessColumn("pid", "PID", PID_WIDTH, value=lambda r: (r.process.pid, r.branch),
                  draw=_pid_cell, sort=lambda p: p.pid, descending=False),
    ProcessColumn("user", "user", 8, 3, value=lambda r: r.process.user,
                  draw=lambda user: fmt.crop(user, 8), sort=lambda p: p.user, descending=False),
    ProcessColumn("gpus", "GPU", GPU_WIDTH, 1, value=lambda r: (r.process.gpus, r.parent_gpus),
                  draw=_gpus_cell, sort=lambda p: p.gpus, descending=False),
    ProcessColumn("gpu_mem", "GPU mem", 7, 2, value=lambda r: r.process.gpu_memory_bytes,
                  draw=lru_cache(_CACHE)(_size), sort=lambda p: p.gpu_memory_bytes or 0),
    ProcessColumn("sm", "SM", 4, 1, value=lambda r: (r.process.sm_share, bool(r.process.gpus)),
                  draw=_sm_cell, sort=lambda p: p.sm_share or 0.0),
    ProcessColumn("cpu", "CPU", 5, 3, value=lambda r: r.process.cpu_percent,
                  draw=lru_cache(_CACHE)(fmt.pct), sort=lambda p: p.cpu_percent or 0.0),
    ProcessColumn("rss", "RSS", 7, 7, value=lambda r: r.process.rss_bytes,
                  draw=lru_cache(_CACHE)(_size), sort=lambda p: p.rss_bytes or 0),
    ProcessColumn("cost", "$/h", 7, value=lambda r: r.process.burn_per_hour, draw=_burn_cell,
                  sort=lambda p: p.burn_per_hour or 0.0),
    ProcessColumn("spent", "spent", 9, 4, value=lambda r: r.process.cost,
                  draw=lru_cache(_CACHE)(fmt.money), sort=lambda p: p.cost or 0.0),
    # Dropped first (priority 9): shown on a wide screen (200 columns), not at 80.
    ProcessColumn("kind", "kind", 8, 9, value=lambda r: r.process.kind, draw=_kind_cell,
                  sort=lambda p: (p.kind or "~", -(p.burn_per_hour or 0.0)), descending=False),
    # The phase it is in now (the daemon's phase_now): back at work on its GPU after stacks
    # that said idle or data_wait, it computes, whatever the last stacks said.
    ProcessColumn("phase", "phase", 11, value=lambda r: _phase_value(r.process, r.gpus_idle),
                  draw=_phase_cell, sort=lambda p: p.phase_now or "", descending=False),
    ProcessColumn("phases", "phase balance", 13, 6, value=lambda r: r.process.phases,
                  draw=lambda phases: fmt.phase_bar(phases, 13), sort=compute_share),
    ProcessColumn("io", "I/O wait", 8, 4, value=lambda r: r.process.io_wait_percent,
                  draw=_io_cell, sort=lambda p: p.io_wait_percent or 0.0),
    ProcessColumn("read", "read/s", 8, 8, value=lambda r: r.process.read_bytes_per_s,
                  draw=lru_cache(_CACHE)(_rate), sort=lambda p: p.read_bytes_per_s or 0.0),
    ProcessColumn("state", "S", 1, 8, value=lambda r: r.process.state,
                  sort=lambda p: p.state, descending=False),
    # its owner's workload label (pod, Slurm job, unit), named as the report names it; the
    # ledger's job label (`Process.job`, "by job") is another thing
    ProcessColumn("job", "workload", 16, 8, value=lambda r: r.process.workload or DASH,
                  draw=lambda job: job if len(job) <= 16 else job[:15] + "…",
                  # groups the rows by owner (pod, Slurm job, unit), costliest first in each
                  sort=lambda p: (p.workload or "~", -(p.burn_per_hour or 0.0)),
                  descending=False),
    ProcessColumn("command", "command", 24, flex=True, value=lambda r: r.process.command,
                  draw=_command_cell, sort=lambda p: command_order(p.command),
                  descending=False),
)
BY_KEY = {c.key: c for c in COLUMNS}
WIDE_COMMAND_FROM = 150
DEFAULT_SORT = "cost"


class ProcessPanel(KeyedTable):
    BINDINGS = PANEL_KEYS  # tab and enter, in the footer (mlcost_tui/footer.py)
    COLUMNS = COLUMNS
    DEFAULT_CSS = "ProcessPanel { height: 1fr; scrollbar-size-vertical: 1; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.filter_text = ""
        self.sort_key = DEFAULT_SORT
        self.inverted = False
        self.tree_mode = False
        self.show_jobs = False  # the job column: only when some process has one
        self.show_kinds = False  # the kind column: only when the daemon classifies kinds
        self.processes: dict[str, Process] = {}
        self.width = 0
        self.set_title("Processes")

    @property
    def sort_column(self) -> ProcessColumn:
        return BY_KEY[self.sort_key]

    def columns_for(self, width: int) -> tuple[Column, ...]:
        columns = [c for c in COLUMNS if (c.key != "job" or self.show_jobs)
                   and (c.key != "kind" or self.show_kinds)]
        # The command says what a process is: it keeps a quarter of a wide screen (from
        # WIDE_COMMAND_FROM columns; below, user, CPU, spent and I/O wait come first).
        if width >= WIDE_COMMAND_FROM:
            columns = [ProcessColumn(c.key, c.label, max(c.width or 0, width // 4), c.priority,
                                     c.flex, c.value, c.draw, c.sort, c.descending)
                       if c.key == "command" else c for c in columns]
        if self.tree_mode:
            columns = [ProcessColumn(c.key, c.label, TREE_PID_WIDTH, c.priority, c.flex,
                                     c.value, c.draw, c.sort, c.descending)
                       if c.key == "pid" else c for c in columns]
        from mlcost_tui.keyed_table import fit_columns

        return fit_columns(columns, width)

    def fit(self, width: int) -> bool:
        self.width = width
        return self.show_columns(self.columns_for(width))

    def sort_by(self, key: str) -> None:
        """Sort by column `key`; the same column again flips the order."""
        if key == self.sort_key:
            self.inverted = not self.inverted
        else:
            self.sort_key, self.inverted = key, False

    def step_sort(self, step: int) -> None:
        """The next (step 1) or previous (-1) shown column, in on-screen order."""
        keys = [k for k in self.shown_keys if BY_KEY[k].sort is not None]
        if not keys:
            return
        index = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_key, self.inverted = keys[(index + step) % len(keys)], False

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

    def ordered(self, processes: tuple[Process, ...]) -> list[Row]:
        """Processes in display order, with their tree branches in tree mode."""
        column = self.sort_column
        sort = column.sort or (lambda p: p.pid)
        reverse = column.descending != self.inverted
        shown = [p for p in processes if self.matches(p)]
        shown.sort(key=lambda p: (sort(p), p.pid), reverse=reverse)
        if not self.tree_mode:
            return [Row(p) for p in shown]
        pids = {p.pid for p in shown}
        children: dict[int, list[Process]] = {}
        roots = []
        for p in shown:
            if p.ppid in pids and p.ppid != p.pid:
                children.setdefault(p.ppid, []).append(p)
            else:
                roots.append(p)
        out: list[Row] = []

        def walk(p: Process, lead: str, branch: str, gpus: tuple[int, ...], depth: int) -> None:
            out.append(Row(p, branch, gpus))
            kids = children.get(p.pid, []) if depth < 8 else []
            for i, child in enumerate(kids):
                last = i == len(kids) - 1
                walk(child, lead + ("  " if last else "│ "), lead + ("└ " if last else "├ "),
                     p.gpus or gpus, depth + 1)

        for root in roots:
            walk(root, "", "", (), 0)
        return out

    def selected(self) -> Process | None:
        key = self.selected_key
        return self.processes.get(key) if key else None

    def show(self, now: Now) -> None:
        self.processes = {p.key: p for p in now.processes}
        jobs = any(p.workload for p in now.processes)
        kinds = any(p.kind for p in now.processes)
        if (jobs, kinds) != (self.show_jobs, self.show_kinds) and self.width:
            self.show_jobs, self.show_kinds = jobs, kinds
            self.fit(self.width)
        columns = [BY_KEY[k] for k in self.shown_keys]
        values = [c.value for c in columns]
        widths = {c.key: c.width for c in self.columns_shown}
        draws = [partial(_command_cell, width=widths.get(c.key) or 200)
                 if c.key == "command" else c.draw for c in columns]
        cells_for = self.cells_for
        idle = {g.index for g in now.gpus if g.busy is False}

        def cells(row: Row) -> tuple[Any, ...]:
            if row.process.gpus and idle.issuperset(row.process.gpus):
                row = dataclasses.replace(row, gpus_idle=True)
            return cells_for(row.process.key, tuple(v(row) for v in values), draws)

        # Every row sorted; cells built for the rows on screen (the rest when they show).
        self.sync([(row.process.key, partial(cells, row)) for row in self.ordered(now.processes)])
        self.set_title(self.title())
