"""Colour thresholds, in one place: which load, memory, temperature or price shows in which colour.

Whether a GPU is idle is not decided here: the daemon sends its verdict (Gpu.busy, from
[idle].utilization) and the panels show it."""

from __future__ import annotations

from daemon.wire import (
    CHECKPOINT,
    COMM,
    COMPUTE,
    DATA_WAIT,
    EVAL,
    HOST_PREPROCESS,
    IDLE,
    OUTPUT,
    SYNC,
    UNKNOWN,
)

# Utilization colours (load, not the idle verdict): below LOW red, below HIGH yellow, else green.
LOW_UTILIZATION_PCT = 30.0
HIGH_UTILIZATION_PCT = 70.0
# Memory use share above which memory shows yellow / red.
MEMORY_WARN_FRACTION = 0.80
MEMORY_FULL_FRACTION = 0.95
# Temperature (degrees C).
TEMPERATURE_WARN_C = 75
TEMPERATURE_HOT_C = 85
# A process waiting on I/O more than this share of the time is stalled.
IO_STALL_WARN_PCT = 10.0
IO_STALL_BAD_PCT = 40.0
# Dollars per hour per row above which the figure is highlighted.
EXPENSIVE_PER_HOUR = 5.0
# The daemon counts as slow when /v1/now takes longer than this.
SLOW_RESPONSE_S = 1.0

GOOD = "green"
WARN = "yellow"
BAD = "red"
MUTED = "grey50"
MONEY = "bold"
MUTED_TRACK = "grey30"  # the empty part of a load bar

PHASE_COLOURS = {
    COMPUTE: "green",
    DATA_WAIT: "red",
    HOST_PREPROCESS: "magenta",
    CHECKPOINT: "yellow",
    OUTPUT: "bright_yellow",
    EVAL: "cyan",
    SYNC: "bright_red",
    COMM: "blue",
    IDLE: "grey35",
    UNKNOWN: "grey62",
}


def utilization_style(value: float | None) -> str:
    if value is None:
        return MUTED
    if value < LOW_UTILIZATION_PCT:
        return BAD
    if value < HIGH_UTILIZATION_PCT:
        return WARN
    return GOOD


def memory_style(used: int | None, total: int | None) -> str:
    if not used or not total:
        return ""
    share = used / total
    return BAD if share >= MEMORY_FULL_FRACTION else WARN if share >= MEMORY_WARN_FRACTION else ""


def memory_bar_style(used: int | None, total: int | None) -> str:
    """The memory bar's colour: green, then yellow and red as the GPU's memory fills."""
    return memory_style(used, total) or (GOOD if used and total else MUTED)


def temperature_style(value: int | None) -> str:
    if value is None:
        return MUTED
    return BAD if value >= TEMPERATURE_HOT_C else WARN if value >= TEMPERATURE_WARN_C else ""


def io_stall_style(value: float | None) -> str:
    if value is None:
        return MUTED
    return BAD if value >= IO_STALL_BAD_PCT else WARN if value >= IO_STALL_WARN_PCT else ""


def money_style(per_hour: float | None) -> str:
    if per_hour is None:
        return MUTED
    return "bold " + WARN if per_hour >= EXPENSIVE_PER_HOUR else ""
