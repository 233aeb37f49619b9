"""The rules' 30-minute window: its length (defined here, once) and the compact record of one
tick kept in it.

The analyzer keeps one tick per ~5 s for 30 minutes (360 at the default step). Keeping each
tick's whole frozen Sample and Burn cost ~58 kB a tick at 8 GPUs x 64 processes (+20 MB of RSS
once the window filled, measured with bench/soak.py); a `WindowTick` keeps only what
`daemon.analysis.rules.window` reads, and reuses the previous tick's objects for values that
did not change (process keys, GPU uses, who ran it, counters), so a steady host costs a few
kB a tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from daemon.analysis.cost import Burn
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

T = TypeVar("T")

WINDOW_S = 1800.0  # the rules, the live phase balance and the kind markers look back this far


@dataclass(frozen=True, slots=True)
class ProcessTick:
    """One process at one tick, as the rules read it."""

    key: tuple[int, float]  # (pid, start_time)
    ppid: int
    who: tuple[str, str, dict[str, str]]  # user, command (redacted), owner: shared tick to tick
    gpus: tuple[GpuUse, ...]
    in_d: bool  # it, or a thread of it, in uninterruptible (disk) sleep
    iowait_seconds: float | None
    read_bytes: int | None
    write_bytes: int | None
    burn_per_hour: float | None  # None: the tick's burn has no entry for it

    @property
    def pid(self) -> int:
        return self.key[0]

    @property
    def user(self) -> str:
        return self.who[0]

    @property
    def command(self) -> str:
        return self.who[1]

    @property
    def owner(self) -> dict[str, str]:
        return self.who[2]


@dataclass(frozen=True, slots=True)
class WindowTick:
    """One tick in the rules' window: its time, the GPUs' readings, the processes as the rules
    read them, and the host's burn totals."""

    ts: float
    gpus: tuple[GpuSample, ...]
    processes: tuple[ProcessTick, ...]
    total_per_hour: float
    idle_per_hour: float
    wasted_per_hour: float


def window_tick(sample: Sample, burn: Burn, previous: WindowTick | None = None) -> WindowTick:
    """The compact record of `sample` and its `burn`. Values equal to `previous`'s for the same
    process are taken from it, so an unchanged process adds little more than its record."""
    before = {p.key: p for p in previous.processes} if previous is not None else {}
    burns = burn.processes
    processes = []
    for p in sample.processes:
        key = p.key
        pb = burns.get(key)
        processes.append(_process_tick(p, key, pb.burn_per_hour if pb is not None else None,
                                       before.get(key)))
    return WindowTick(sample.ts, sample.gpus, tuple(processes), burn.total_per_hour,
                      burn.idle_per_hour, burn.wasted_per_hour)


def _process_tick(p: ProcessSample, key: tuple[int, float], burn_per_hour: float | None,
                  last: ProcessTick | None) -> ProcessTick:
    in_d = p.state == "D" or p.threads_in_d > 0
    if last is None:
        return ProcessTick(key, p.ppid, (p.user, p.command, p.owner), p.gpus, in_d,
                           p.iowait_seconds, p.read_bytes, p.write_bytes, burn_per_hour)
    who = last.who
    if who[0] != p.user or who[1] != p.command or who[2] != p.owner:
        who = (p.user, p.command, p.owner)
    return ProcessTick(
        last.key, p.ppid, who,
        last.gpus if last.gpus == p.gpus else p.gpus, in_d,
        _same(last.iowait_seconds, p.iowait_seconds), _same(last.read_bytes, p.read_bytes),
        _same(last.write_bytes, p.write_bytes), _same(last.burn_per_hour, burn_per_hour))


def _same(before: T, now: T) -> T:
    """`before` when it equals `now` (one object kept instead of two equal ones)."""
    return before if before == now else now
