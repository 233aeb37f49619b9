"""The GPU host's CPU, memory and load, read from /proc once per tick as top does.

Two small reads (/proc/stat's first line, /proc/meminfo) and os.getloadavg; no psutil. The CPU
counters stay cumulative in the raw sample: the busy share between two ticks is derived
(daemon.analysis.derive.HostUsageModel). The TUI's host line shows these figures through the
/v1/now document, so it is the GPU host's line wherever mlcost-top runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.sources.sample import HostUsageSample

PROC = Path("/proc")


def _cpu_times(proc: Path) -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot."""
    try:
        with open(proc / "stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 5 or fields[0] != b"cpu":
        return None
    try:
        values = [int(v) for v in fields[1:9]]
    except ValueError:
        return None
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values)  # user .. steal; guest time is already counted in user
    return total - idle, total


def _memory(proc: Path) -> tuple[int | None, int | None]:
    """(used, total) bytes, used = MemTotal - MemAvailable (what free(1) calls used + buffers
    the kernel could not give back)."""
    try:
        with open(proc / "meminfo", "rb") as f:
            text = f.read(4096)  # MemTotal and MemAvailable are the first and third lines
    except OSError:
        return None, None
    info: dict[bytes, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(b":")
        if name in (b"MemTotal", b"MemAvailable"):
            parts = rest.split()
            if parts and parts[0].isdigit():
                info[name] = int(parts[0]) * 1024
    total, available = info.get(b"MemTotal"), info.get(b"MemAvailable")
    if total is None or available is None:
        return None, total
    return total - available, total


def read_host_usage(proc: Path = PROC) -> HostUsageSample:
    """This machine's CPU counters, memory and load now; a field is None where /proc (or the
    kernel) does not say."""
    times = _cpu_times(proc)
    used, total = _memory(proc)
    try:
        load: tuple[float, float, float] | None = os.getloadavg()
    except OSError:
        load = None
    return HostUsageSample(
        cpu_busy_ticks=times[0] if times is not None else None,
        cpu_total_ticks=times[1] if times is not None else None,
        memory_used_bytes=used, memory_total_bytes=total, load=load,
        cpus=os.cpu_count() or 1)
