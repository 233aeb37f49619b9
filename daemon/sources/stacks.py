"""Python stacks of GPU processes, taken with `py-spy dump` as a subprocess.

py-spy reads the target's memory from outside (ptrace/process_vm_readv), so the target needs no
agent. We always pass `--nonblocking` (the target is never paused, at the price of an occasional
torn stack) and never `--locals` (variable values could hold secrets) or `--native`.

Dumps are expensive for the daemon (a process spawn, ~10-20 ms wall, a few ms CPU), so the
sampler runs one py-spy at a time, rate-limits per process and globally, and stops dumping when
py-spy's CPU time exceeds a share of wall time. Every failure comes back as a status in a
DumpResult; nothing here raises for a bad target.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import shutil
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from daemon import clock as daemon_clock
from daemon.sources.frames import (  # re-exported: the sampler's results are these types
    ERROR,
    MAX_DUMP_BYTES,
    NOT_PYTHON,
    OK,
    OUTPUT_TOO_LARGE,
    OVER_BUDGET,
    PERMISSION_DENIED,
    PROCESS_GONE,
    PY_SPY_MISSING,
    RATE_LIMITED,
    STATUSES,
    TIMEOUT,
    UNSUPPORTED_PYTHON,
    DumpResult,
    Frame,
    ThreadStack,
    main_thread,
    parse_dump,
    stack_hash,
    to_json,
)
from daemon.sources.safe_text import one_line

log = logging.getLogger(__name__)

__all__ = [
    "ERROR", "MAX_DUMP_BYTES", "NOT_PYTHON", "OK", "OUTPUT_TOO_LARGE", "OVER_BUDGET",
    "PERMISSION_DENIED", "PROCESS_GONE",
    "PY_SPY_MISSING", "RATE_LIMITED", "STATUSES", "TIMEOUT", "UNSUPPORTED_PYTHON",
    "DumpResult", "Frame", "StackSampler", "ThreadStack", "classify_error", "find_py_spy",
    "main_thread", "parse_dump", "stack_hash", "to_json", "worker_pids",
]

PERMISSION_HINT = (
    "py-spy needs root or CAP_SYS_PTRACE to read another process; with yama "
    "(/proc/sys/kernel/yama/ptrace_scope = 1) only descendants can be read unless it runs as "
    "root, and containers need --cap-add SYS_PTRACE"
)

# py-spy's error when a --nonblocking read caught the target changing its stack (transient).
_TORN = "Failed to get stack traces"
# How much of py-spy's stderr we keep in an error message, and read.
_MAX_ERROR_CHARS = 400
_MAX_STDERR_BYTES = 64 << 10
# How many pids status_by_pid remembers (oldest forgotten first).
_MAX_TRACKED_PIDS = 1024
# A py-spy killed after its timeout is waited for this long; one that has not ended by then
# is left to end in the background (`StackSampler.unfinished`): a py-spy in uninterruptible
# sleep (a lookup on a user's hung FUSE mount, or a hard NFS mount whose server is gone)
# ignores SIGKILL, and waiting for it held the one-at-a-time lock: no process on the host had
# a stack sampled again, and nothing said so (probe 110).
KILL_WAIT_S = 2.0
# While this many have not ended, no py-spy is started (each holds a process and its pipes).
MAX_UNFINISHED = 4


def classify_error(stderr: str, pid: int) -> tuple[str, str]:
    """(status, message) for a failed py-spy run, from its real error texts."""
    # py-spy prints "Error: <msg>" then causes, then a Rust backtrace: keep the message part.
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    cut = next((i for i, ln in enumerate(lines) if ln.startswith("Stack backtrace")), len(lines))
    # py-spy's errors quote the target's names: control bytes shown, not kept.
    message = one_line(" | ".join(lines[:cut])[:_MAX_ERROR_CHARS]) or "py-spy failed without a message"
    low = message.lower()
    if "permission denied" in low or "operation not permitted" in low or "os error 1)" in low:
        return PERMISSION_DENIED, f"pid {pid}: {message}. {PERMISSION_HINT}"
    if not psutil.pid_exists(pid) or "no such process" in low:
        return PROCESS_GONE, f"pid {pid} exited: {message}"
    if "failed to get process executable name" in low:
        return PROCESS_GONE, f"pid {pid}: {message}"
    if "unsupported version of python" in low:
        return UNSUPPORTED_PYTHON, f"pid {pid}: {message}; upgrade py-spy for this Python"
    if "failed to find python version" in low or "failed to find a python interpreter" in low:
        return NOT_PYTHON, f"pid {pid} is not a Python process (or its interpreter is not found)"
    if _TORN.lower() in low:
        return ERROR, f"pid {pid}: {message} (torn stack: the target ran on while read; transient)"
    return ERROR, f"pid {pid}: {message}"


def find_py_spy() -> str | None:
    """py-spy next to this interpreter (a venv's bin/), else on PATH, else None."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _looks_like_worker(proc: psutil.Process, parent_exe: str | None) -> bool:
    with proc.oneshot():
        cmdline = " ".join(proc.cmdline())
        exe = proc.exe()
    if "resource_tracker" in cmdline or "forkserver import main" in cmdline:
        return False
    # fork (Linux default for DataLoader) copies the parent's exe and cmdline; spawn and
    # forkserver children run `python -c "from multiprocessing.spawn import spawn_main ..."`.
    return (parent_exe is not None and exe == parent_exe) or "multiprocessing" in cmdline


def worker_pids(pid: int) -> list[int]:
    """Child processes of `pid` that look like Python multiprocessing (DataLoader) workers.

    Workers of a forkserver are children of the forkserver process, so they are looked for one
    level further down. Returns [] when `pid` is gone or unreadable.
    """
    try:
        parent = psutil.Process(pid)
        parent_exe = parent.exe()
        children = parent.children(recursive=False)
    except (psutil.Error, OSError):
        return []
    found: list[int] = []
    for child in children:
        try:
            if "forkserver import main" in " ".join(child.cmdline()):
                found.extend(c.pid for c in child.children(recursive=False))
            elif _looks_like_worker(child, parent_exe):
                found.append(child.pid)
        except (psutil.Error, OSError):
            continue  # exited while we looked
    return sorted(found)


class StackSampler:
    """Runs `py-spy dump` on request, within rate limits and a CPU budget.

    - per process: at most one dump every `min_interval_s`;
    - globally: `global_max_per_s` dumps per second on average, in bursts of at most
      `global_burst` (so a main process and its DataLoader workers can be dumped together);
    - CPU: py-spy's CPU seconds over the last `budget_window_s` stay under
      `cpu_budget_ratio` of that window (1% of one core by default).
    """

    def __init__(
        self,
        py_spy: str | None = None,
        min_interval_s: float = 2.0,
        global_max_per_s: float = 2.0,
        timeout_s: float = 2.0,
        cpu_budget_ratio: float = 0.01,
        *,
        global_burst: float = 4.0,
        budget_window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_output_bytes: int = MAX_DUMP_BYTES,
    ) -> None:
        if global_max_per_s <= 0 or timeout_s <= 0 or cpu_budget_ratio <= 0:
            raise ValueError(
                f"StackSampler: global_max_per_s={global_max_per_s}, timeout_s={timeout_s} and "
                f"cpu_budget_ratio={cpu_budget_ratio} must all be > 0"
            )
        self.py_spy = py_spy if py_spy is not None else find_py_spy()
        self.min_interval_s = min_interval_s
        self.global_max_per_s = global_max_per_s
        self.global_burst = max(1.0, global_burst)
        self.timeout_s = timeout_s
        self.max_output_bytes = max_output_bytes
        self.cpu_budget_ratio = cpu_budget_ratio
        self.budget_window_s = budget_window_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._last_by_pid: dict[int, float] = {}
        self._tokens = self.global_burst
        self._tokens_at = clock()
        self._waiting = 0  # dump() calls not yet past the limits (waiting for the lock)
        self._cpu_spent: deque[tuple[float, float]] = deque()  # (clock, cpu seconds)
        #: last status of a dump that actually ran or failed (not rate_limited), by pid
        self.status_by_pid: OrderedDict[int, str] = OrderedDict()
        #: totals since start, for `mlcostd check` and the benchmark
        self.dumps_total = 0
        self.cpu_seconds_total = 0.0
        self.wall_seconds_total = 0.0
        #: py-spy runs killed that have not ended: their process id -> the pid they dumped
        self.unfinished: dict[int, int] = {}
        self._reapers: set[asyncio.Task[None]] = set()

    @property
    def problem(self) -> str | None:
        """What stops stack sampling now, in words (for /v1/health); None when nothing does."""
        if not self.unfinished:
            return None
        dumped = ", ".join(str(pid) for pid in sorted(set(self.unfinished.values())))
        pause = ("no stack is sampled until one ends" if len(self.unfinished) >= MAX_UNFINISHED
                 else f"those processes ({dumped}) are not sampled until it ends")
        return (f"stack sampling: {len(self.unfinished)} py-spy run(s) did not end when killed "
                f"(stuck in the kernel: a file system they read hangs?); {pause}")

    # -- public ---------------------------------------------------------------------------

    async def dump(self, pid: int) -> DumpResult:
        """Dump `pid`'s Python threads; a status (never an exception) says what happened."""
        ts = daemon_clock.now()
        if not self.py_spy or not _is_executable(self.py_spy):
            return self._record(DumpResult(pid, ts, PY_SPY_MISSING, error=(
                f"py-spy not found (looked for {self.py_spy or 'py-spy beside ' + sys.executable + ' and on PATH'}); "
                "install it with `pip install py-spy`"
            )))
        self._waiting += 1
        try:
            await self._lock.acquire()  # one py-spy at a time
        finally:
            self._waiting -= 1
        try:
            return await self._dump_locked(pid, ts)
        finally:
            self._lock.release()

    def available(self) -> int:
        """How many dumps the global limit allows now, less those asked for and not yet
        started: a caller that asks for no more is not answered rate_limited for the global
        limit, so it can choose which processes get the dumps (daemon.runtime.attribution)."""
        self._refill(self._clock())
        return max(0, int(self._tokens) - self._waiting)

    def cpu_seconds_in_window(self, now: float | None = None) -> float:
        """py-spy CPU seconds spent within the last budget_window_s."""
        now = self._clock() if now is None else now
        while self._cpu_spent and self._cpu_spent[0][0] < now - self.budget_window_s:
            self._cpu_spent.popleft()
        return sum(cpu for _, cpu in self._cpu_spent)

    def forget(self, pids: Iterable[int]) -> None:
        """Drop what we remember about processes that exited."""
        for pid in pids:
            self._last_by_pid.pop(pid, None)
            self.status_by_pid.pop(pid, None)

    # -- internals ------------------------------------------------------------------------

    async def _dump_locked(self, pid: int, ts: float) -> DumpResult:
        """dump() once it holds the lock: the limits, then py-spy."""
        now = self._clock()
        last = self._last_by_pid.get(pid)
        if last is not None and now - last < self.min_interval_s:
            return DumpResult(pid, ts, RATE_LIMITED, error=(
                f"pid {pid} was dumped {now - last:.2f}s ago (min_interval_s={self.min_interval_s})"
            ))
        self._refill(now)
        if self._tokens < 1.0:
            return DumpResult(pid, ts, RATE_LIMITED, error=(
                f"global limit of {self.global_max_per_s}/s dumps reached"
            ))
        spent = self.cpu_seconds_in_window(now)
        budget = self.cpu_budget_ratio * self.budget_window_s
        if spent >= budget:
            return DumpResult(pid, ts, OVER_BUDGET, error=(
                f"py-spy used {spent:.3f} CPU s in the last {self.budget_window_s:.0f}s, "
                f"over the budget of {budget:.3f}s (cpu_budget_ratio={self.cpu_budget_ratio})"
            ))
        if not psutil.pid_exists(pid):
            return self._record(DumpResult(pid, ts, PROCESS_GONE, error=f"pid {pid} does not exist"))
        if len(self.unfinished) >= MAX_UNFINISHED or pid in self.unfinished.values():
            return self._record(DumpResult(pid, ts, TIMEOUT, error=self.problem))
        self._tokens -= 1.0
        self._last_by_pid[pid] = now
        result = await self._run(pid, ts)
        if result.status == ERROR and _TORN in (result.error or ""):
            result = await self._run(pid, ts)  # --nonblocking read a frame mid-change: once more
        return self._record(result)

    def _leave(self, proc: asyncio.subprocess.Process, pid: int) -> None:
        """A killed py-spy (of `pid`) that has not ended: waited for in the background,
        counted in `unfinished` until it ends."""
        self.unfinished[proc.pid] = pid
        log.warning("py-spy (pid %d) dumping pid %d did not end %g s after SIGKILL (stuck in "
                    "the kernel: a file system it reads hangs?); pid %d is not sampled until it "
                    "ends", proc.pid, pid, KILL_WAIT_S, pid)

        async def reap() -> None:
            try:
                await proc.wait()
            finally:
                self.unfinished.pop(proc.pid, None)

        task = asyncio.get_running_loop().create_task(reap())
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._tokens_at)
        self._tokens = min(self.global_burst, self._tokens + elapsed * self.global_max_per_s)
        self._tokens_at = now

    def _record(self, result: DumpResult) -> DumpResult:
        self.status_by_pid[result.pid] = result.status
        self.status_by_pid.move_to_end(result.pid)
        while len(self.status_by_pid) > _MAX_TRACKED_PIDS:
            self.status_by_pid.popitem(last=False)
        return result

    @staticmethod
    async def _output(proc: asyncio.subprocess.Process, cap: int
                      ) -> tuple[bytes, bytes, bool]:
        """py-spy's stdout (at most `cap` bytes), its stderr (the first _MAX_STDERR_BYTES),
        and whether stdout had more: then py-spy is killed, its output not read further."""
        errors = asyncio.ensure_future(_read_capped(proc.stderr, _MAX_STDERR_BYTES,
                                                    drain=True))
        try:
            stdout, too_large = await _read_capped(proc.stdout, cap, drain=False)
            if too_large:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                # what it wrote before it died, dropped: its pipe's end (asyncio waits for it)
                await _read_capped(proc.stdout, 0, drain=True)
            stderr, _ = await errors
            await proc.wait()
        finally:
            errors.cancel()
        return stdout, stderr, too_large

    async def _run(self, pid: int, ts: float) -> DumpResult:
        argv = [str(self.py_spy), "dump", "--json", "--nonblocking", "--pid", str(pid)]
        cpu_before = _children_cpu()
        started = self._clock()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**_clean_env(), "RUST_BACKTRACE": "0"},
            )
        except FileNotFoundError:
            return DumpResult(pid, ts, PY_SPY_MISSING, error=f"py-spy not found at {self.py_spy}")
        except PermissionError as exc:
            return DumpResult(pid, ts, PY_SPY_MISSING, error=f"py-spy at {self.py_spy} cannot run: {exc}")
        except OSError as exc:
            return DumpResult(pid, ts, ERROR, error=f"could not start py-spy: {exc}")
        timed_out = too_large = False
        try:
            stdout, stderr, too_large = await asyncio.wait_for(
                self._output(proc, self.max_output_bytes), self.timeout_s)
        except asyncio.TimeoutError:
            timed_out = True
            stdout, stderr = b"", b""
        finally:
            if proc.returncode is None:
                # Only py-spy is killed; with --nonblocking the target was never stopped.
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                try:
                    await asyncio.wait_for(proc.wait(), KILL_WAIT_S)
                except asyncio.TimeoutError:
                    if proc.returncode is None:  # (ended, its pipes held open: not stuck)
                        self._leave(proc, pid)
        wall = self._clock() - started
        # Children's rusage also counts any other child the daemon reaped meanwhile; py-spy is
        # single-threaded, so its CPU cannot exceed its wall time: cap it there.
        cpu = min(max(0.0, _children_cpu() - cpu_before), wall)
        self._cpu_spent.append((self._clock(), cpu))
        self.dumps_total += 1
        self.cpu_seconds_total += cpu
        self.wall_seconds_total += wall
        if timed_out:
            status = PROCESS_GONE if not psutil.pid_exists(pid) else TIMEOUT
            return DumpResult(pid, ts, status, wall_s=wall, error=(
                f"py-spy dump of pid {pid} took over {self.timeout_s}s and was killed"
            ))
        if too_large:
            return DumpResult(pid, ts, OUTPUT_TOO_LARGE, wall_s=wall, error=(
                f"py-spy's dump of pid {pid} printed over {self.max_output_bytes} bytes (its "
                "threads' stacks are that deep, or their names that long) and was killed; "
                "its stacks are not read"))
        err_text = stderr.decode("utf-8", "replace")
        if proc.returncode != 0:
            status, message = classify_error(err_text, pid)
            return DumpResult(pid, ts, status, error=message, wall_s=wall)
        try:
            # off the loop: redacting every name of up to MAX_DUMP_BYTES takes ~0.25 s
            threads = await asyncio.to_thread(parse_dump, stdout.decode("utf-8", "replace"))
        except (ValueError, TypeError, AttributeError) as exc:
            if not psutil.pid_exists(pid):
                return DumpResult(pid, ts, PROCESS_GONE, error=f"pid {pid} exited during the dump", wall_s=wall)
            return DumpResult(pid, ts, ERROR, wall_s=wall, error=(
                f"pid {pid}: py-spy output is not the expected JSON ({exc})"
            ))
        return DumpResult(pid, ts, OK, threads=threads, wall_s=wall)


async def _read_capped(stream: asyncio.StreamReader | None, cap: int, *, drain: bool
                       ) -> tuple[bytes, bool]:
    """Up to `cap` bytes of `stream` to its end, and whether it had more: then the bytes read
    so far are dropped and reading stops, unless `drain` (the rest is read and dropped)."""
    if stream is None:
        return b"", False
    chunks: list[bytes] = []
    total = 0
    over = False
    while chunk := await stream.read(1 << 16):
        total += len(chunk)
        if total > cap:
            over = True
            chunks.clear()
            if not drain:
                break
        elif not over:
            chunks.append(chunk)
    return b"".join(chunks), over


def _is_executable(path: str) -> bool:
    if os.sep in path:
        return os.path.isfile(path) and os.access(path, os.X_OK)
    return shutil.which(path) is not None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _clean_env() -> dict[str, str]:
    # py-spy needs nothing from our environment but PATH and locale.
    keep = ("PATH", "LANG", "LC_ALL", "HOME")
    return {k: v for k, v in os.environ.items() if k in keep}
