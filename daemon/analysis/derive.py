"""Derived models: what one tick means, built from this raw sample and the one before it.

A raw `Sample` (daemon.sources.sample) holds facts as read: cumulative CPU seconds, bytes read,
I/O wait seconds. What a person wants to see (CPU %, bytes per second, I/O wait %) is a rate
between two samples, so it is computed here, once, in typed immutable models (below's
`Model::new(sample, last)`). ProcessModel and GpuUseModel are named tuples: one is built per
process (per GPU use) per /v1/now, and a frozen dataclass's init costs ~5x as much (a setattr
per field). The live daemon and replay both build the /v1/now document from these, so the two
cannot compute a rate two ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from daemon.sources.sample import GPU_FIELDS, GpuSample, HostUsageSample, ProcessSample, Sample
from daemon.wire import process_key


class GpuUseModel(NamedTuple):
    """What one process holds on one GPU this tick (a named tuple, as ProcessModel: one is
    built per GPU use per /v1/now)."""

    gpu_index: int
    memory_bytes: int | None
    sm_share: float


class ProcessModel(NamedTuple):
    """One process this tick, with its rates since the tick before (None on its first tick)."""

    key: str  # daemon.wire.process_key: 'pid:start_time'
    pid: int
    start_time: float
    ppid: int
    user: str
    command: str
    gpus: tuple[GpuUseModel, ...]
    gpu_memory_bytes: int | None  # summed over its GPUs; None when it holds no GPU
    sm_share: float | None  # summed over its GPUs; None when it holds no GPU
    cpu_percent: float | None
    rss_bytes: int
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    io_wait_percent: float | None
    state: str
    threads: int
    threads_in_d: int
    owner: dict[str, str]  # daemon.sources.owners: pod_uid, slurm_job, systemd_unit, ...

    @classmethod
    def from_samples(cls, proc: ProcessSample, before: ProcessSample | None,
                     seconds: float) -> ProcessModel:
        """The model of `proc`, with rates over the `seconds` since `before` (same process)."""
        # Built once per process per /v1/now: the rates inline (None where either side or the
        # interval is unknown), one pass over its GPUs, and the tuple made by tuple.__new__
        # (a named tuple's own __new__ is a Python call).
        cpu = read = write = iowait = None
        if before is not None and seconds > 0:
            now: float | None = proc.cpu_seconds
            then: float | None = before.cpu_seconds
            if now is not None and then is not None:
                cpu = 100.0 * ((now - then) / seconds)
            now, then = proc.read_bytes, before.read_bytes
            if now is not None and then is not None:
                read = (now - then) / seconds
            now, then = proc.write_bytes, before.write_bytes
            if now is not None and then is not None:
                write = (now - then) / seconds
            now, then = proc.iowait_seconds, before.iowait_seconds
            if now is not None and then is not None:
                iowait = 100.0 * ((now - then) / seconds)
        gpu_memory: int | None = None
        sm_share: float | None = None
        uses: tuple[GpuUseModel, ...] = ()
        new_tuple = tuple.__new__
        if proc.gpus:
            gpu_memory, sm_share = 0, 0
            models = []
            for u in proc.gpus:
                models.append(new_tuple(GpuUseModel, (u.gpu_index, u.memory_bytes, u.sm_share)))
                gpu_memory += u.memory_bytes or 0
                sm_share += u.sm_share
            uses = tuple(models)
        return new_tuple(cls, (
            process_key(proc.pid, proc.start_time), proc.pid, proc.start_time, proc.ppid,
            proc.user, proc.command, uses, gpu_memory, sm_share, cpu, proc.rss_bytes, read,
            write, iowait, proc.state, proc.threads, proc.threads_in_d, proc.owner))


@dataclass(frozen=True, slots=True)
class GpuModel(GpuSample):
    """One GPU this tick: its sample's fields (declared once, in GpuSample) and its busy/idle
    verdict under the configured idle threshold."""

    busy: bool | None = None  # None: utilization unknown (or the GPU failed this tick)

    @classmethod
    def from_sample(cls, gpu: GpuSample, busy: bool | None) -> GpuModel:
        fields: dict[str, Any] = {name: getattr(gpu, name) for name in GPU_FIELDS}
        return cls(**fields, busy=busy)


@dataclass(frozen=True, slots=True)
class HostUsageModel:
    """The host's CPU busy share since the tick before (None on the first), memory and load."""

    cpu_percent: float | None
    cpus: int
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    load: tuple[float, float, float] | None

    @classmethod
    def from_samples(cls, usage: HostUsageSample,
                     before: HostUsageSample | None) -> HostUsageModel:
        cpu = None
        if (before is not None and usage.cpu_busy_ticks is not None
                and usage.cpu_total_ticks is not None and before.cpu_busy_ticks is not None
                and before.cpu_total_ticks is not None
                and usage.cpu_total_ticks > before.cpu_total_ticks):
            busy = usage.cpu_busy_ticks - before.cpu_busy_ticks
            # iowait may step back on tickless kernels (proc(5)), so the share is bounded
            cpu = min(100.0, max(0.0, 100.0 * busy / (usage.cpu_total_ticks
                                                       - before.cpu_total_ticks)))
        return cls(cpu_percent=cpu, cpus=usage.cpus, memory_used_bytes=usage.memory_used_bytes,
                   memory_total_bytes=usage.memory_total_bytes, load=usage.load)


@dataclass(frozen=True, slots=True)
class TickModel:
    """A whole tick: every GPU and process, rates against the previous sample."""

    ts: float
    tick: int
    gpus: tuple[GpuModel, ...]
    processes: tuple[ProcessModel, ...]
    host_usage: HostUsageModel | None = None  # None where the sample has none (replay)

    @classmethod
    def from_samples(cls, sample: Sample, previous: Sample | None,
                     busy: dict[int, bool | None]) -> TickModel:
        """`busy` maps a GPU index to its verdict (the caller applies the idle threshold)."""
        # (each process's key spelled out, not its `key` property: a call per process, twice)
        before = ({(p.pid, p.start_time): p for p in previous.processes}
                  if previous is not None else {})
        seconds = sample.ts - previous.ts if previous is not None else 0.0
        model, earlier = ProcessModel.from_samples, before.get
        return cls(
            ts=sample.ts, tick=sample.tick,
            gpus=tuple(GpuModel.from_sample(g, busy.get(g.index)) for g in sample.gpus),
            processes=tuple([model(p, earlier((p.pid, p.start_time)), seconds)
                             for p in sample.processes]),
            host_usage=HostUsageModel.from_samples(
                sample.host_usage, previous.host_usage if previous is not None else None)
            if sample.host_usage is not None else None)
