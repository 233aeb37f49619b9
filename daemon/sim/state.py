"""The state directory shared by a simulated host's workloads and its NVML readers.

Layout of a state dir:
  host.json            the host (scenario name, GPUs, faults) and the start epoch
  clock                the host's tick: one 8-byte counter, mmap'd (see TickClock)
  attach/gpuG-pidP.att one fixed-size record per (process, GPU), mmap'd by both sides
  workloads.log        what the workloads print

A record is written by exactly one process (its owner), lock-free: the owner bumps a "begin"
counter at the END of the record, writes the data, then copies the counter to the START. A reader
unpacks the whole record in one ascending pass and accepts it only when both counters agree, so
it never uses torn values. The owner holds an exclusive flock on the file for its lifetime; the
kernel drops it when the process dies, which is how a reader tells a dead attachment from a live
one without reading /proc.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path
from typing import Any

STATE_DIR_ENV = "MLCOST_SIM_DIR"
HOST_FILE = "host.json"
CLOCK_FILE = "clock"
ATTACH_DIR = "attach"
LOG_FILE = "workloads.log"

# pid, gpu, memory_bytes, busy_ns, sm_busy_ns, kernel_start_ns (0: none), kernel_sm,
# attach_ns, last_kernel_end_ns. All times are time.monotonic_ns() (one clock for the host).
DATA = struct.Struct("<IIQQQqdqq")
SEQ = struct.Struct("<Q")
DATA_OFFSET = SEQ.size
SEQ_BEGIN_OFFSET = DATA_OFFSET + DATA.size
# seq_end, the data fields, seq_begin: what a reader unpacks in one call
RECORD = struct.Struct("<Q" + DATA.format[1:] + "Q")
RECORD_SIZE = 128  # RECORD.size rounded up: room to grow without changing the file size
assert RECORD.size <= RECORD_SIZE


# The tick counter: one aligned 8-byte word, written with one store by its only writer (the
# daemon's tick, or a test), so a reader never sees half of a change.
TICK = struct.Struct("<q")


class TickClock:
    """A simulated host's clock in ticks: faults scheduled with at_tick/until_tick fire by it.

    `mlcostd run --simulate` sets it to the number of ticks it has begun since the simulation
    started; a test that reads NVML without a daemon sets it itself. Readers in any process map
    the same file; a host without the file (or not yet ticked) reads tick 0.
    """

    def __init__(self, state_dir: str | os.PathLike[str], writable: bool = False) -> None:
        path = Path(state_dir) / CLOCK_FILE
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._mm: mmap.mmap | None = None
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            return
        try:
            if writable and os.fstat(fd).st_size < TICK.size:
                os.ftruncate(fd, TICK.size)
            if os.fstat(fd).st_size >= TICK.size:
                prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
                self._mm = mmap.mmap(fd, TICK.size, prot=prot)
        finally:
            os.close(fd)

    @property
    def tick(self) -> int:
        mm = self._mm
        return TICK.unpack_from(mm, 0)[0] if mm is not None else 0

    def set(self, tick: int) -> None:
        if self._mm is None:
            raise RuntimeError("this clock was opened read-only or its state dir is gone")
        TICK.pack_into(self._mm, 0, tick)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None


def attach_file_name(gpu_index: int, pid: int) -> str:
    return f"gpu{gpu_index}-pid{pid}.att"


def parse_attach_file_name(name: str) -> tuple[int, int] | None:
    """(gpu_index, pid) from a record's file name, or None for anything else."""
    if not (name.startswith("gpu") and name.endswith(".att")):
        return None
    gpu, sep, pid = name[3:-4].partition("-pid")
    if not sep or not gpu.isdigit() or not pid.isdigit():
        return None
    return int(gpu), int(pid)


def read_host(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The host description written by scenario.start; FileNotFoundError if it is not a state dir."""
    with open(Path(state_dir) / HOST_FILE, encoding="utf-8") as f:
        return json.load(f)


def write_host(state_dir: str | os.PathLike[str], host: dict[str, Any]) -> None:
    """Write host.json atomically, so a reader never sees half of it."""
    path = Path(state_dir) / HOST_FILE
    tmp = path.with_suffix(".tmp")
    # 0600 (nothing in a state dir is for another user to read), whatever the umask
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(host, indent=2, sort_keys=True))
    os.replace(tmp, path)
