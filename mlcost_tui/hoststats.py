"""The host line (CPU, memory, load) of the machine mlcost-top runs on, read from /proc like top
does: shown when the daemon is local (a unix socket or --demo), where it is the GPU host.

Two small reads per poll (/proc/stat, /proc/meminfo) and os.getloadavg; no psutil in the TUI."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class HostStats:
    cpu_percent: float | None  # busy share of all CPUs since the last reading
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    load: tuple[float, float, float] | None
    cpus: int


def _cpu_times(proc: Path) -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs."""
    try:
        fields = (proc / "stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already in user
    return total - idle, total


def _memory(proc: Path) -> tuple[int | None, int | None]:
    try:
        lines = (proc / "meminfo").read_text().splitlines()
    except OSError:
        return None, None
    info = {}
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            info[name] = int(parts[0]) * 1024
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None or available is None:
        return None, total
    return total - available, total


class HostMeter:
    """Readings of this machine; the CPU share is over the time since the previous reading."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self._last: tuple[int, int] | None = _cpu_times(proc)

    def read(self) -> HostStats:
        times = _cpu_times(self.proc)
        cpu = None
        if times is not None and self._last is not None and times[1] > self._last[1]:
            cpu = 100.0 * (times[0] - self._last[0]) / (times[1] - self._last[1])
        if times is not None:
            self._last = times
        used, total = _memory(self.proc)
        try:
            load: tuple[float, float, float] | None = os.getloadavg()
        except OSError:
            load = None
        return HostStats(cpu, used, total, load, os.cpu_count() or 1)
