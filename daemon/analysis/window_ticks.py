"""The rules' 30-minute window: its length (defined here, once) and the compact record of one
tick kept in it.

The analyzer keeps one tick per ~5 s for 30 minutes (361 at the default step). Keeping each
tick's whole frozen Sample and Burn cost ~58 kB a tick at 8 GPUs x 64 processes (+20 MB of RSS
once the window filled, measured with bench/soak.py); a `WindowTick` keeps only what
`daemon.analysis.rules.window` reads, its numbers in arrays of doubles (8 bytes each, not an
object each), and shares the previous tick's keys and command lines when they did not change.
`WindowTick.processes` gives the processes back as `ProcessTick`s when the rules run.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field, replace

from daemon.analysis.cost import Burn
from daemon.sources.sample import GPU_OK, GpuSample, GpuUse, Sample

WINDOW_S = 1800.0  # the rules, the live phase balance and the kind markers look back this far

ProcessKey = tuple[int, float]  # (pid, start_time)
Who = tuple[str, str, dict[str, str]]  # user, command (redacted), owner
NUMBERS = 5  # per process in WindowTick.numbers, at these offsets:
# iowait_seconds, read_bytes, write_bytes, burn/h, cpu_seconds (its own, cumulative)
IOWAIT, READ, WRITE, BURN, CPU = range(NUMBERS)


@dataclass(frozen=True, slots=True)
class ProcessTick:
    """One process at one tick, as the rules read it."""

    key: ProcessKey
    ppid: int
    who: Who
    gpus: tuple[GpuUse, ...]
    in_d: bool  # it, or a thread of it, in uninterruptible (disk) sleep
    iowait_seconds: float | None
    read_bytes: int | None
    write_bytes: int | None
    burn_per_hour: float | None  # None: the tick's burn has no entry for it
    cpu_seconds: float | None = None  # its own CPU time since it started

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
    """One tick in the rules' window: its time, the GPUs' readings, the host's burn totals and
    the processes in columns (the i-th process is keys[i], ppids[i] ..., `process(i)`; NaN
    stands for None)."""

    ts: float
    gpus: tuple[GpuSample, ...]
    total_per_hour: float
    idle_per_hour: float
    wasted_per_hour: float
    keys: tuple[ProcessKey, ...]
    ppids: tuple[int, ...]
    who: tuple[Who, ...]
    in_d: bytes  # 1: it, or a thread of it, in D state
    numbers: array[float]  # NUMBERS per process
    use_first: array[int]  # process i's GPU uses are use_*[use_first[i]:use_first[i + 1]]
    use_gpu: array[int]
    use_memory: array[float]
    use_sm: array[float]
    # Per process, worked out once when the tick enters the window (the rules read each tick
    # at every evaluation, ~60 times over its 30 minutes): the mean utilization of the GPUs it
    # holds that read OK, the mean GPM SM activity of those that report it (Hopper on), and
    # its own SM share per GPU held; NaN where there is none.
    util_mean: array[float]
    gpm_mean: array[float]
    own_sm: array[float]
    # Each GPU's highest utilization since the window tick before (StepMeans): busy or idle is
    # told from it (a burst between two window ticks is work); empty: the reading itself.
    peak_util: dict[int, float] = field(default_factory=dict)

    def process(self, i: int) -> ProcessTick:
        """The i-th process as the rules read it (built on each call, dropped after use)."""
        at = NUMBERS * i
        iowait, read, write, burn, cpu = (
            self.numbers[at + IOWAIT], self.numbers[at + READ], self.numbers[at + WRITE],
            self.numbers[at + BURN], self.numbers[at + CPU])
        first = self.use_first[i]
        uses = tuple(GpuUse(self.use_gpu[j], _int(self.use_memory[j]), self.use_sm[j])
                     for j in range(first, self.use_first[i + 1]))
        return ProcessTick(self.keys[i], self.ppids[i], self.who[i], uses, self.in_d[i] == 1,
                           _float(iowait), _int(read), _int(write), _float(burn), _float(cpu))

    def holds_gpu(self, i: int) -> bool:
        """Whether the i-th process holds a GPU at this tick."""
        return self.use_first[i + 1] > self.use_first[i]


class StepMeans:
    """The ticks between two window ticks, so the window tick stands for all of them, not only
    the moment it was taken at: each GPU's highest utilization over them (what tells busy from
    idle: `WindowTick.peak_util`) and highest memory, the GPM SM activity and each process's
    SM share on each GPU averaged over them, its GPU memory at its highest. A job whose
    kernels ran in bursts between window ticks (every 5 s) read as idle for minutes, and was
    offered SIGTERM, while the idle events (per tick) saw it working. The GPUs' utilization
    itself stays the moment's: the shares of time (below or above a level, the p95) count
    moments, as they did."""

    __slots__ = ("peak", "gpu_memory", "gpm", "share", "memory")

    def __init__(self) -> None:
        self.peak: dict[int, float] = {}  # GPU index -> highest utilization
        self.gpu_memory: dict[int, int] = {}  # GPU index -> highest memory used
        self.gpm: dict[int, list[float]] = {}  # GPU index -> [sum, ticks]
        self.share: dict[tuple[ProcessKey, int], list[float]] = {}  # (process, GPU) -> same
        self.memory: dict[tuple[ProcessKey, int], int] = {}  # (process, GPU) -> highest

    def add(self, sample: Sample) -> None:
        """One tick (each tick, the window's included)."""
        peak, gpu_memory, gpm = self.peak, self.gpu_memory, self.gpm
        share, memory = self.share, self.memory
        for g in sample.gpus:
            if g.status == GPU_OK and g.utilization is not None:
                if g.utilization > peak.get(g.index, -1.0):
                    peak[g.index] = g.utilization
            if g.memory_used_bytes is not None and g.memory_used_bytes > gpu_memory.get(
                    g.index, -1):
                gpu_memory[g.index] = g.memory_used_bytes
            if g.sm_activity is not None:
                _add(gpm, g.index, g.sm_activity)
        for p in sample.processes:
            if not p.gpus:
                continue
            key = p.key
            for use in p.gpus:
                at = (key, use.gpu_index)
                _add(share, at, use.sm_share)
                held = use.memory_bytes
                if held is not None and held > memory.get(at, -1):
                    memory[at] = held

    def clear(self) -> None:
        self.peak = {}  # (a new dict: the window tick keeps the last one as its peak_util)
        self.gpu_memory.clear()
        self.gpm.clear()
        self.share.clear()
        self.memory.clear()


def _add(sums: dict, key: object, value: float) -> None:
    entry = sums.get(key)
    if entry is None:
        sums[key] = [value, 1.0]
    else:
        entry[0] += value
        entry[1] += 1.0


def _mean(sums: dict, key: object, default: float | None) -> float | None:
    entry = sums.get(key)
    return default if entry is None else entry[0] / entry[1]


def window_tick(sample: Sample, burn: Burn, previous: WindowTick | None = None,
                step: StepMeans | None = None) -> WindowTick:
    """The compact record of `sample` and its `burn`; keys, parents and command lines equal to
    `previous`'s are shared with it. With `step` (the ticks since the last window tick, this
    one's included): each GPU's peak utilization over the step beside its reading, its
    memory and GPM SM activity and the processes' SM shares and memory over the step (the
    highest, the mean)."""
    burns = burn.processes
    numbers, first = array("d"), array("I", [0])
    gpu, memory, sm = array("I"), array("d"), array("d")
    util_mean, gpm_mean, own_sm = array("d"), array("d"), array("d")
    gpus = sample.gpus
    peak_util: dict[int, float] = {}
    if step is not None:
        peak_util = step.peak
        gpus = tuple(
            replace(g, memory_used_bytes=step.gpu_memory.get(g.index, g.memory_used_bytes),
                    sm_activity=_mean(step.gpm, g.index, g.sm_activity))
            if g.status == GPU_OK and g.utilization is not None else g
            for g in gpus)
    utils = {g.index: g.utilization for g in gpus
             if g.status == GPU_OK and g.utilization is not None}
    gpm = [(g.index, g.sm_activity) for g in gpus if g.sm_activity is not None]
    keys, who = [], []
    before = dict(zip(previous.keys, previous.who, strict=True)) if previous is not None else {}
    for p in sample.processes:
        key = p.key
        pb = burns.get(key)
        numbers.extend((_nan(p.iowait_seconds), _nan(p.read_bytes), _nan(p.write_bytes),
                        _nan(pb.burn_per_hour if pb is not None else None),
                        _nan(p.cpu_seconds)))  # IOWAIT ... CPU
        mine = [use.gpu_index for use in p.gpus]
        for use in p.gpus:
            gpu.append(use.gpu_index)
            if step is None:
                memory.append(_nan(use.memory_bytes))
                sm.append(use.sm_share)
            else:
                at = (key, use.gpu_index)
                memory.append(_nan(step.memory.get(at, use.memory_bytes)))
                sm.append(_mean(step.share, at, use.sm_share) or 0.0)
        first.append(len(gpu))
        # (the same sums, in the same order, as the rules made from the columns before)
        vals = [utils[g] for g in mine if g in utils]
        util_mean.append(sum(vals) / len(vals) if vals else math.nan)
        sm_vals = [activity for index, activity in gpm if index in mine]
        gpm_mean.append(sum(sm_vals) / len(sm_vals) if sm_vals else math.nan)
        own_sm.append(sum(sm[len(sm) - len(mine):]) / len(mine) if mine else math.nan)
        person = (p.user, p.command, p.owner)
        last = before.get(key)
        keys.append(key)
        who.append(last if last is not None and last == person else person)
    key_column, ppids, who_column = tuple(keys), tuple(p.ppid for p in sample.processes), tuple(who)
    if previous is not None:  # a steady host: the same processes as 5 s ago, one copy
        key_column = previous.keys if previous.keys == key_column else key_column
        ppids = previous.ppids if previous.ppids == ppids else ppids
        who_column = previous.who if previous.who == who_column else who_column
    return WindowTick(
        sample.ts, gpus, burn.total_per_hour, burn.idle_per_hour, burn.wasted_per_hour,
        key_column, ppids, who_column,
        bytes(1 if p.state == "D" or p.threads_in_d > 0 else 0 for p in sample.processes),
        numbers, first, gpu, memory, sm, util_mean, gpm_mean, own_sm, peak_util)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _float(value: float) -> float | None:
    return None if math.isnan(value) else value


def _int(value: float) -> int | None:
    return None if math.isnan(value) else int(value)
