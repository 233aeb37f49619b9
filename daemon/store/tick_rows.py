"""The rows one tick writes: a Sample turned into the tuples of the ticks, gpu_samples,
proc_samples and proc_gpu_samples tables, by position, in the compact units of
`daemon.store.schema`, and the statements that insert them.

Kept apart from the writer (`daemon.store.writer`), which decides when and in which transaction
they go in and what happens when they cannot. Each statement is one constant, so SQLite's
statement cache prepares it once; a tick's many rows of a table go in through `WideInsert`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from daemon.sources.owners import encode_owner
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.schema import (
    GPU_READING,
    STATUS_CODES,
    encode_status,
    hundredths,
    millis,
    tenths,
)
from daemon.store.wide_insert import WideInsert

# A GPU's facts as the gpus table keeps them: uuid, name, total and driver-reserved memory.
GpuFacts = tuple[str, str, int | None, int | None]
# A row of proc_samples: ts, proc, cpu_ms, rss, read_b, write_b, iowait_ms, state, threads,
# threads_d; of proc_gpu_samples: ts, proc, gpu, mem, sm.
ProcessSampleRow = tuple[int, int, int, int, int | None, int | None, int | None, str, int, int]
GpuUseRow = tuple[int, int, int, int | None, int]

INSERT_TICK = (
    "INSERT INTO ticks (ts, tick, nvml_status, n_gpus, n_processes, io_some, io_full,"
    " cpu_some, io_some_us, io_full_us, cpu_some_us) VALUES (?,?,?,?,?,?,?,?,?,?,?)")
INSERT_GPU = (
    "INSERT OR REPLACE INTO gpus (gpu, uuid, name, memory_total_bytes, memory_reserved_bytes)"
    " VALUES (?,?,?,?,?)")

INSERT_GPU_SAMPLES = WideInsert(
    "INSERT OR REPLACE INTO gpu_samples (ts, gpu, status, util, sm, mem, power_mw, temp,"
    " sm_clock, mem_clock, error)", 11)
INSERT_PROCESS = (
    "INSERT INTO processes (pid, start_ms, ppid, user, command, first_ts, last_ts, owner)"
    " VALUES (?,?,?,?,?,?,?,?)")
FIND_PROCESS = "SELECT id, command FROM processes WHERE pid = ? AND start_ms = ?"
INSERT_PROCESS_SAMPLES = WideInsert(
    "INSERT OR REPLACE INTO proc_samples (ts, proc, cpu_ms, rss, read_b, write_b, iowait_ms,"
    " state, threads, threads_d)", 10)
INSERT_GPU_USES = WideInsert(
    "INSERT OR REPLACE INTO proc_gpu_samples (ts, proc, gpu, mem, sm)", 5)


def tick_row(ts: int, sample: Sample) -> tuple[object, ...]:
    """The tick's row in `ticks`: its number, NVML's status, its sizes and the host's PSI."""
    host = sample.host
    return (ts, sample.tick, encode_status(sample.nvml_status), len(sample.gpus),
            len(sample.processes), hundredths(host.io_some_avg10),
            hundredths(host.io_full_avg10), hundredths(host.cpu_some_avg10),
            host.io_some_total_us, host.io_full_total_us, host.cpu_some_total_us)


def gpu_facts(gpu: GpuSample) -> GpuFacts:
    return (gpu.uuid, gpu.name, gpu.memory_total_bytes, gpu.memory_reserved_bytes)


INSERT_GPU_READING = (
    "INSERT OR REPLACE INTO meter_readings (kind, name, ts, value, detail) VALUES (?,?,?,?,?)")


def gpu_reading(ts: int, index: int, facts: GpuFacts) -> tuple[object, ...]:
    """A GPU's facts as its meter reading (schema.GPU_READING), written with its `gpus` row."""
    uuid, name, total, reserved = facts
    return (GPU_READING, str(index), ts, float(total or 0), json.dumps({
        "uuid": uuid, "name": name, "memory_total_bytes": total,
        "memory_reserved_bytes": reserved}, sort_keys=True))


def facts_changed(known: GpuFacts | None, facts: GpuFacts) -> bool:
    """Whether a GPU's facts need writing: new or changed, except that a reading without the
    memory facts (a lost GPU) keeps the ones recorded."""
    return known != facts and not (known and known[:2] == facts[:2]
                                   and (facts[2] is None or facts[3] is None))


def gpu_sample_rows(ts: int, gpus: Sequence[GpuSample]) -> list[tuple[object, ...]]:
    """Each GPU's row in `gpu_samples`."""
    return [(ts, gpu.index, STATUS_CODES.get(gpu.status, gpu.status), tenths(gpu.utilization),
             tenths(gpu.sm_activity), gpu.memory_used_bytes, millis(gpu.power_watts),
             gpu.temperature_c, gpu.sm_clock_mhz, gpu.memory_clock_mhz, gpu.error)
            for gpu in gpus]


def process_row(ts: int, proc: ProcessSample, start_ms: int) -> tuple[object, ...]:
    """A process's row in `processes`, the first time it is recorded."""
    return (proc.pid, start_ms, proc.ppid, proc.user, proc.command, ts, ts,
            encode_owner(proc.owner))


def process_sample_rows(ts: int, processes: Sequence[ProcessSample],
                        idents: Sequence[int]) -> list[ProcessSampleRow]:
    """Each process's row in `proc_samples`; `idents[i]` is the id of `processes[i]`."""
    return [(ts, ident, round(proc.cpu_seconds * 1000), proc.rss_bytes, proc.read_bytes,
             proc.write_bytes,
             None if (iowait := proc.iowait_seconds) is None else round(iowait * 1000),
             proc.state, proc.threads, proc.threads_in_d)
            for ident, proc in zip(idents, processes, strict=True)]


def gpu_use_rows(ts: int, processes: Sequence[ProcessSample],
                 idents: Sequence[int]) -> list[GpuUseRow]:
    """What each process holds on each GPU, its rows in `proc_gpu_samples` (one per process and
    GPU: of a GPU listed twice, the last reading, as INSERT OR REPLACE would keep), a process's
    rows next to each other."""
    return [(ts, ident, use.gpu_index, use.memory_bytes, round(use.sm_share * 10))
            for ident, proc in zip(idents, processes, strict=True)
            for use in (proc.gpus if len(proc.gpus) < 2 else _each_gpu_once(proc.gpus))]


def _each_gpu_once(uses: tuple[GpuUse, ...]) -> tuple[GpuUse, ...]:
    return tuple({use.gpu_index: use for use in uses}.values())
