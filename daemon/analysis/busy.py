"""What "busy" and "idle" mean for a GPU, defined once.

`[idle].utilization` (config) is the one input: a GPU whose device utilization is at or above it
is busy, below it idle. The cost model (how a GPU's price is split, what counts as wasted), the
recommendation rules and the idle events all take their verdict from `gpu_is_busy`, fed by one
`IdleThresholds`, so changing the setting changes all of them. Thresholds that mean something
else (a GPU "well used" at 70%, the hysteresis of idle events) are named for what they mean.
"""

from __future__ import annotations

from dataclasses import dataclass

# 5% is where nvidia-smi readings of an idle GPU with a CUDA context open stop (periodic
# housekeeping); the default of [idle].utilization.
DEFAULT_IDLE_UTILIZATION_PCT = 5.0
# How long idle becomes an event, and advice (defaults of [idle].gpu_held_after, gpu_unheld_after
# and host_after; our choice): 10 minutes held idle is long past any eval or checkpoint pause of
# a healthy job; a host idle for 30 minutes costs a full on-demand hour on most clouds' minds.
DEFAULT_GPU_HELD_AFTER_S = 600.0
DEFAULT_GPU_UNHELD_AFTER_S = 600.0
DEFAULT_HOST_IDLE_AFTER_S = 1800.0
# How long a process that ran before (a run of its kernels seen, or a part of its life before
# mlcostd first read it) is watched idle before it is offered a SIGTERM or its host the stop
# (default of [idle].longest_period): a periodic job sleeps between its runs, and no reading
# tells its sleep from a finished job's; the longest common schedule is daily (a nightly job).
DEFAULT_LONGEST_PERIOD_S = 86400.0


def gpu_is_busy(utilization_pct: float | None, idle_utilization_pct: float) -> bool | None:
    """True when the GPU is busy (utilization >= the idle threshold), False when idle, None
    when its utilization is unknown (no reading, or the GPU is lost)."""
    if utilization_pct is None:
        return None
    return utilization_pct >= idle_utilization_pct


@dataclass(frozen=True)
class IdleThresholds:
    """The [idle] settings: what idle is and when it becomes an event (defaults: above).
    `resume_utilization_pct` is the hysteresis of an open event (activity must reach it, for
    `close_after_s`, to close the event)."""

    idle_utilization_pct: float = DEFAULT_IDLE_UTILIZATION_PCT
    resume_utilization_pct: float = 10.0
    gpu_held_after_s: float = DEFAULT_GPU_HELD_AFTER_S
    gpu_unheld_after_s: float = DEFAULT_GPU_UNHELD_AFTER_S
    host_after_s: float = DEFAULT_HOST_IDLE_AFTER_S
    close_after_s: float = 30.0
    history: int = 200  # closed events kept

    def gpu_is_busy(self, utilization_pct: float | None) -> bool | None:
        """`gpu_is_busy` at this threshold."""
        return gpu_is_busy(utilization_pct, self.idle_utilization_pct)
