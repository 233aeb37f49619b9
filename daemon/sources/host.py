"""The GPU host's CPU, memory and load, read from /proc once per tick as top does.

Two small reads (/proc/stat's first line, /proc/meminfo, kept open) and os.getloadavg; no
psutil. The CPU
counters stay cumulative in the raw sample: the busy share between two ticks is derived
(daemon.analysis.derive.HostUsageModel). The TUI's host line shows these figures through the
/v1/now document, so it is the GPU host's line wherever mlcost-top runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from daemon.sources.sample import HostUsageSample

PROC = Path("/proc")


class ProcFile:
    """A /proc file kept open and read again from its start (pread) at each read: opening it
    walks the path through /proc each time, which cost more than the read itself (measured
    cold, as the tick finds it: /proc/meminfo 109 us opened and read, 37 us read again).
    Opened at its first read, and again at the next read after an open that failed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    def read(self, limit: int = 4096) -> bytes:
        """Its first `limit` bytes as they are now. OSError where it cannot be opened or read."""
        if self._fd < 0:
            # (a kernel file: never a link to follow, as root, to somewhere else)
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        return os.pread(self._fd, limit, 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _cpu_times(stat: ProcFile) -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot."""
    try:
        fields = stat.read().split(b"\n", 1)[0].split()
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


def _memory(meminfo: ProcFile) -> tuple[int | None, int | None]:
    """(used, total) bytes, used = MemTotal - MemAvailable (what free(1) calls used + buffers
    the kernel could not give back)."""
    try:
        text = meminfo.read()  # MemTotal and MemAvailable are the first and third lines
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


class HostReader:
    """This machine's CPU counters, memory and load, read at every tick through /proc/stat and
    /proc/meminfo kept open (ProcFile). `close` when done."""

    def __init__(self, proc: Path = PROC) -> None:
        self._stat = ProcFile(str(proc / "stat"))
        self._meminfo = ProcFile(str(proc / "meminfo"))

    def read(self) -> HostUsageSample:
        """The figures now; a field is None where /proc (or the kernel) does not say."""
        times = _cpu_times(self._stat)
        used, total = _memory(self._meminfo)
        try:
            load: tuple[float, float, float] | None = os.getloadavg()
        except OSError:
            load = None
        return HostUsageSample(
            cpu_busy_ticks=times[0] if times is not None else None,
            cpu_total_ticks=times[1] if times is not None else None,
            memory_used_bytes=used, memory_total_bytes=total, load=load,
            cpus=os.cpu_count() or 1)

    def close(self) -> None:
        self._stat.close()
        self._meminfo.close()


def read_host_usage(proc: Path = PROC) -> HostUsageSample:
    """This machine's CPU counters, memory and load now, read once (HostReader, for each
    tick); a field is None where /proc (or the kernel) does not say."""
    reader = HostReader(proc)
    try:
        return reader.read()
    finally:
        reader.close()
