"""The client a workload imports to use a simulated GPU.

    from daemon.sim.device import Device
    with Device(gpu_index=0) as dev:
        dev.alloc(30 << 30)          # simulated device memory; no real RAM is used
        dev.kernel(0.25, sm=0.85)    # blocks like a CUDA synchronize; the GPU counts as busy

Each Device owns one record in the state dir (see daemon.sim.state) that the simulated NVML
library reads. Everything else a workload does (reading files, decoding, sleeping) is real.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import mmap
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from daemon.sim import state

_PR_SET_PTRACER = 0x59616D61  # "Yama"
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value


def allow_any_tracer() -> None:
    """Let py-spy read this process as a non-root user on yama ptrace_scope=1 hosts."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux, or no yama: nothing to allow


class _AllocLock:
    """The host's allocations, one at a time (an exclusive flock of the attach folder): two
    processes that each see room for themselves cannot both take it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.folder,
                          os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)  # (the lock goes with it)


class Device:
    """One process's attachment to one simulated GPU.

    Not thread-safe across threads sharing one Device: give each thread its own Device or
    serialize calls, as a CUDA stream would.
    """

    def __init__(self, gpu_index: int = 0, state_dir: str | os.PathLike[str] | None = None) -> None:
        state_dir = state_dir if state_dir is not None else os.environ.get(state.STATE_DIR_ENV)
        if not state_dir:
            raise RuntimeError(
                f"no simulated host: set {state.STATE_DIR_ENV} to a state dir made by "
                "`python -m daemon.sim SCENARIO`, or pass state_dir="
            )
        host = state.read_host(state_dir)
        count = len(host["gpus"])
        if not 0 <= gpu_index < count:
            raise ValueError(f"gpu_index={gpu_index}: this simulated host has GPUs 0..{count - 1}")
        self.gpu_index = gpu_index
        self.memory_total = int(host["gpus"][gpu_index]["memory_total"])
        self.pid = os.getpid()
        self._memory = 0
        self._busy_ns = 0
        self._sm_busy_ns = 0
        self._last_kernel_end_ns = 0
        self._attach_ns = time.monotonic_ns()
        self._kernel: tuple[int, float] | None = None  # the running kernel's start (ns) and sm
        self._lock = threading.Lock()
        allow_any_tracer()

        attach_dir = Path(state_dir) / state.ATTACH_DIR
        attach_dir.mkdir(mode=0o700, exist_ok=True)
        self.path = attach_dir / state.attach_file_name(gpu_index, self.pid)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until close or death: readers test it
            os.ftruncate(fd, state.RECORD_SIZE)
            self._mm = mmap.mmap(fd, state.RECORD_SIZE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._seq = 0
        self._write()
        os.replace(tmp, self.path)  # readers only ever see a complete record
        self._closed = False
        atexit.register(self.close)

    # -- the workload's API -------------------------------------------------------------------

    def alloc(self, nbytes: int) -> None:
        """Hold `nbytes` more of simulated device memory (MemoryError past the GPU's total)."""
        if nbytes < 0:
            raise ValueError(f"alloc({nbytes}): nbytes must be >= 0")
        with self._lock, _AllocLock(self.path.parent):
            others = self._others_memory()
            if others + self._memory + nbytes > self.memory_total:
                raise MemoryError(
                    f"CUDA out of memory (simulated): GPU {self.gpu_index} has "
                    f"{self.memory_total} bytes, other processes hold {others}, this process "
                    f"holds {self._memory}, asked {nbytes}"
                )
            self._memory += nbytes
            self._write()

    def _others_memory(self) -> int:
        """Device memory that the other live processes hold on this GPU, from their records
        (one whose owner died, its flock gone with it, holds nothing)."""
        held = 0
        folder = self.path.parent
        for name in os.listdir(folder):
            parsed = state.parse_attach_file_name(name)
            if parsed is None or parsed[0] != self.gpu_index or parsed[1] == self.pid:
                continue
            try:
                fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # gone (detached) since the listing
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    continue  # its owner's exclusive lock is gone: a dead process's record
                except BlockingIOError:
                    pass  # alive
                for _ in range(64):  # a record no write overlapped (state.RECORD's counters)
                    rec = state.RECORD.unpack(os.pread(fd, state.RECORD.size, 0))
                    if rec[0] == rec[-1]:
                        held += rec[3]
                        break
            finally:
                os.close(fd)
        return held

    def free(self, nbytes: int) -> None:
        """Release `nbytes` of simulated device memory (never below zero)."""
        with self._lock:
            self._memory = max(0, self._memory - nbytes)
            self._write()

    @property
    def memory(self) -> int:
        return self._memory

    def kernel(self, seconds: float, sm: float = 0.9) -> None:
        """Run a kernel for `seconds` with `sm` of the SMs active, blocking until it ends."""
        self.launch(sm)
        try:
            time.sleep(max(0.0, seconds))
        finally:
            self.synchronize()

    def launch(self, sm: float = 0.9) -> None:
        """Start a kernel with `sm` of the SMs active and return at once, as a CUDA launch does:
        the GPU is busy until synchronize(). (A test sets a busy GPU this way, without a
        workload process.) One kernel at a time: a launch while one runs is refused."""
        if not 0.0 < sm <= 1.0:
            raise ValueError(f"kernel(sm={sm}): sm is the fraction of SMs active, in (0, 1]")
        with self._lock:
            if self._kernel is not None:
                raise RuntimeError("a kernel is already running on this Device: synchronize()")
            self._kernel = (time.monotonic_ns(), sm)
            self._write()

    def synchronize(self) -> None:
        """End the running kernel (if any): its time counts as busy, and the GPU is idle."""
        end = time.monotonic_ns()
        with self._lock:
            if self._kernel is None:
                return
            (start, sm), self._kernel = self._kernel, None
            self._busy_ns += end - start
            self._sm_busy_ns += int((end - start) * sm)
            self._last_kernel_end_ns = end
            if not self._closed:
                self._write()

    def close(self) -> None:
        """Detach: the process no longer appears on the GPU. Idempotent."""
        if getattr(self, "_closed", True) or os.getpid() != self.pid:
            return  # a forked child must not remove its parent's record
        self._closed = True
        atexit.unregister(self.close)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        self._mm.close()
        os.close(self._fd)

    def __enter__(self) -> Device:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the record ---------------------------------------------------------------------------

    def _write(self) -> None:
        # Begin counter (at the end) first, then the data, then the end counter (at the start):
        # a reader that sees both counters equal read a record no write overlapped.
        self._seq += 1
        kernel_start_ns, kernel_sm = self._kernel or (0, 0.0)
        mm = self._mm
        state.SEQ.pack_into(mm, state.SEQ_BEGIN_OFFSET, self._seq)
        state.DATA.pack_into(
            mm, state.DATA_OFFSET, self.pid, self.gpu_index, self._memory, self._busy_ns,
            self._sm_busy_ns, kernel_start_ns, kernel_sm, self._attach_ns,
            self._last_kernel_end_ns,
        )
        state.SEQ.pack_into(mm, 0, self._seq)
