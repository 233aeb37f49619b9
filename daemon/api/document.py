"""The /v1/now document's GPU and process entries, from this sample and the one before."""

from __future__ import annotations

from typing import Any

from daemon.sources.sample import GpuSample, ProcessSample
from daemon.wire import process_key


def gpu_view(gpu: GpuSample) -> dict[str, Any]:
    return {
        "index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "status": gpu.status,
        "error": gpu.error, "utilization": gpu.utilization, "sm_activity": gpu.sm_activity,
        "memory_used_bytes": gpu.memory_used_bytes, "memory_total_bytes": gpu.memory_total_bytes,
        "power_watts": gpu.power_watts, "temperature_c": gpu.temperature_c,
        "sm_clock_mhz": gpu.sm_clock_mhz, "memory_clock_mhz": gpu.memory_clock_mhz,
    }


def process_view(proc: ProcessSample, before: ProcessSample | None,
                 seconds: float) -> dict[str, Any]:
    """One process with its rates since the tick before (CPU %, bytes/s, I/O wait %)."""
    cpu_percent = read_rate = write_rate = io_wait_percent = None
    if before is not None and seconds > 0:
        cpu_percent = 100.0 * (proc.cpu_seconds - before.cpu_seconds) / seconds
        if proc.read_bytes is not None and before.read_bytes is not None:
            read_rate = (proc.read_bytes - before.read_bytes) / seconds
        if proc.write_bytes is not None and before.write_bytes is not None:
            write_rate = (proc.write_bytes - before.write_bytes) / seconds
        if proc.iowait_seconds is not None and before.iowait_seconds is not None:
            io_wait_percent = 100.0 * (proc.iowait_seconds - before.iowait_seconds) / seconds
    return {
        "key": process_key(proc.pid, proc.start_time),
        "pid": proc.pid, "start_time": proc.start_time, "ppid": proc.ppid, "user": proc.user,
        "command": proc.command,
        "gpus": [{"index": u.gpu_index, "memory_bytes": u.memory_bytes, "sm_share": u.sm_share}
                 for u in proc.gpus],
        "gpu_memory_bytes": sum(u.memory_bytes or 0 for u in proc.gpus) if proc.gpus else None,
        "sm_share": sum(u.sm_share for u in proc.gpus) if proc.gpus else None,
        "cpu_percent": cpu_percent, "rss_bytes": proc.rss_bytes,
        "read_bytes_per_s": read_rate, "write_bytes_per_s": write_rate,
        "io_wait_percent": io_wait_percent, "state": proc.state,
        "threads": proc.threads, "threads_in_d": proc.threads_in_d,
    }
