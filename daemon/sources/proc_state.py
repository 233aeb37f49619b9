"""What /proc says about a process without ptrace: where its threads sleep, whether it may be
traced at all.

py-spy reads a process's memory, which needs ptrace access (PTRACE_MODE_ATTACH): root with
CAP_SYS_PTRACE, or the same user where yama's `kernel.yama.ptrace_scope` allows it. Hardened
hosts and pods without SYS_PTRACE deny it. What stays readable then, per the kernel's own checks
(fs/proc/base.c):

- `/proc/PID/stat`, `/proc/PID/task/TID/stat` (state letter, CPU ticks) and
  `/proc/PID/task/TID/schedstat`: anyone;
- `/proc/PID/wchan` (the kernel function a thread sleeps in): PTRACE_MODE_READ, which yama does
  not restrict; without it the kernel answers "0", read here as unknown;
- `/proc/PID/io` (read and write bytes, socket and pipe bytes included): PTRACE_MODE_READ, the
  same as wchan; the per-tick process source reads it already;
- `/proc/PID/syscall` (the system call a thread is blocked in): PTRACE_MODE_ATTACH, the very
  check py-spy meets. It is read here for its evidence where allowed, and `may_trace` uses it
  as the probe: readable means py-spy may attach, EPERM/EACCES means it may not.

Nothing here raises for a process that is gone or hidden: a field the kernel would not give is
None.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import re
import stat
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

log = logging.getLogger(__name__)

# A process with thousands of threads is read in part: its main thread, then the first others
# its task folder lists (`thread_ids`). The kernel lists them in batches and the listing stops
# once this many are found: a user's 20,000 threads cost a tick 0.45 s when every one was read
# (probe 146, M1); the D-state thread looked for is then found or not among these.
MAX_THREADS_READ = 256
_MAX_WCHAN_CHARS = 64
_KERNEL_SYMBOL = re.compile(r"[A-Za-z0-9_.]{1,64}")  # what wchan holds; anything else: not it

# Syscall numbers (x86_64) that mean "waiting for something": what a blocked main thread shows.
SYSCALL_NAMES_X86_64 = {
    0: "read", 1: "write", 2: "open", 7: "poll", 17: "pread64", 18: "pwrite64", 19: "readv",
    20: "writev", 23: "select", 35: "nanosleep", 45: "recvfrom", 47: "recvmsg", 61: "wait4",
    74: "fsync", 75: "fdatasync", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait",
    247: "waitid", 257: "openat", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
    437: "openat2", 441: "epoll_pwait2",
}
# The same calls on aarch64 (the kernel's generic table, include/uapi/asm-generic/unistd.h),
# which has no read-only poll/select/epoll_wait: ppoll, pselect6 and epoll_pwait stand in.
SYSCALL_NAMES_AARCH64 = {
    22: "epoll_pwait", 56: "openat", 63: "read", 64: "write", 65: "readv", 66: "writev",
    67: "pread64", 68: "pwrite64", 72: "pselect6", 73: "ppoll", 82: "fsync", 83: "fdatasync",
    95: "waitid", 98: "futex", 101: "nanosleep", 115: "clock_nanosleep", 207: "recvfrom",
    212: "recvmsg", 260: "wait4", 437: "openat2", 441: "epoll_pwait2",
}
# The reads in which a thread blocks on a pipe's next bytes.
PIPE_READ_CALLS = frozenset({"read", "readv"})
# The opens in which a thread blocks opening a FIFO for reading until a writer opens it (the
# kernel's fifo_open waits in wait_for_partner, which /proc/PID/wchan names): a worker that
# reopens its job FIFO after each writer (`with open("jobs.fifo") as f: for line in f:`) waits
# there between its writers.
OPEN_CALLS = frozenset({"open", "openat", "openat2"})
FIFO_OPEN_WAIT = "wait_for_partner"
# The epoll waits whose epoll descriptor is their first argument and whose timeout in
# milliseconds (an int; -1: none) is their fourth, on x86_64 and aarch64 alike (epoll_pwait2
# takes a timespec's address instead: its timeout is not read).
EPOLL_WAIT_CALLS = frozenset({"epoll_wait", "epoll_pwait"})
# The waits in which a thread blocks until a child process of it exits: os.system (C's system()
# waits so), os.waitpid or os.wait after os.fork, os.spawn*(P_WAIT), subprocess's wait with no
# timeout. The Python ones leave no frame below the user's line.
CHILD_WAIT_CALLS = frozenset({"wait4", "waitid"})
# What blocked_read says of a main thread blocked in one of CHILD_WAIT_CALLS.
CHILD_EXIT = "a child process's exit"
# What blocked_read says of the descriptor a main thread waits on (never its path: the name of a
# user's file is the user's data).
NAMED_PIPE = "a named pipe (FIFO)"
ANONYMOUS_PIPE = "a pipe"
# An inotify descriptor (/proc/PID/fd/N -> anon_inode:inotify): the kernel's report of changes
# in the folders it watches (a hand-written inotify loop, inotify_simple, asyncinotify), read
# directly or through an epoll that holds it (/proc/PID/fdinfo of the epoll: its `tfd:` lines).
INOTIFY = "an inotify descriptor"
# An epoll wait (an asyncio event loop's, the selectors module's) with a timeout of at most
# TIMER_WAKES_MAX_MS: the thread wakes on a timer within that, whatever comes on its
# descriptors. A loop that awaits asyncio.sleep(1) between looks at a folder waits so; a stalled
# `await event.wait()` waits with no timeout (-1), a stalled `await asyncio.sleep(3600)` with an
# hour's. No figure: a stack's most frequent reason is the one shown.
TIMER_WAKES = "an epoll wait that a timer ends within a minute"
TIMER_WAKES_MAX_MS = 60_000
_INT32 = 1 << 32
SYSCALL_NAMES = {"x86_64": SYSCALL_NAMES_X86_64, "amd64": SYSCALL_NAMES_X86_64,
                 "aarch64": SYSCALL_NAMES_AARCH64, "arm64": SYSCALL_NAMES_AARCH64}
_THIS_MACHINE = os.uname().machine


@dataclass(frozen=True, slots=True)
class ProcFacts:
    """One look at a process from /proc, no ptrace. None: not readable (or not there)."""

    pid: int
    threads: int  # threads read (at most MAX_THREADS_READ)
    running: int  # threads in R
    in_d: int  # threads in D (uninterruptible, usually disk)
    main_state: str | None  # the main thread's state letter
    wchan: str | None  # where the main thread sleeps in the kernel (None: not readable / "0")
    syscall: str | None  # the main thread's blocked system call by name or number; "running"
    traceable: bool | None  # /proc/PID/syscall readable: py-spy may attach (None: gone)


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, limit).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _state_of(stat_text: str | None) -> str | None:
    if not stat_text:
        return None
    close = stat_text.rfind(")")  # the command name may hold spaces and parentheses
    rest = stat_text[close + 1:].split()
    return rest[0] if rest else None


def may_trace(pid: int, proc_root: str = "/proc") -> bool | None:
    """Whether this process may ptrace-attach to `pid` (as py-spy must): /proc/PID/syscall is
    guarded by the same check. None where the process is gone."""
    try:
        fd = os.open(f"{proc_root}/{pid}/syscall", os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError:
        return False
    except OSError:
        return None
    try:
        os.read(fd, 256)
        return True
    except PermissionError:
        return False
    except OSError:
        return None
    finally:
        os.close(fd)


def _syscall_name(text: str | None) -> str | None:
    if not text:
        return None
    first = text.split()[0] if text.split() else ""
    if first == "running":
        return "running"
    try:
        number = int(first)
    except ValueError:
        return None
    if number < 0:
        return None  # -1: blocked, but not in a system call
    return syscall_name(number)


def syscall_name(number: int, machine: str = _THIS_MACHINE) -> str:
    """A blocking system call's name on this machine's architecture ('syscall N' when the
    number is not one of the waits mlcost reads, or the architecture is not known)."""
    return SYSCALL_NAMES.get(machine, {}).get(number, f"syscall {number}")


def thread_ids(pid: int, proc_root: str = "/proc", limit: int = MAX_THREADS_READ) -> list[str]:
    """The thread ids of `pid` to read: its main thread first, then the first others its task
    folder lists, `limit` in all. The folder is read lazily and left once enough are found (a
    whole listing of a process's 20,000 threads is itself a cost). Only the main thread where
    the folder cannot be read (gone: its reads then fail as well)."""
    main = str(pid)
    found = [main]
    try:
        with os.scandir(f"{proc_root}/{pid}/task") as listing:
            for entry in listing:
                if len(found) >= limit:
                    break
                if entry.name != main:
                    found.append(entry.name)
    except OSError:
        pass
    return found


def read_facts(pid: int, proc_root: str = "/proc") -> ProcFacts | None:
    """What /proc shows of `pid` without ptrace; None when it is gone."""
    base = f"{proc_root}/{pid}"
    main_state = _state_of(_read(f"{base}/stat"))
    if main_state is None:
        return None
    running = in_d = read = 0
    main_tid = str(pid)
    for tid in thread_ids(pid, proc_root):
        # the main thread's state is the one /proc/PID/stat gave (the leader's): not read twice
        state = main_state if tid == main_tid else _state_of(_read(f"{base}/task/{tid}/stat"))
        if state is None:
            continue  # exited while we looked
        read += 1
        running += state == "R"
        in_d += state == "D"
    wchan = (_read(f"{base}/wchan", _MAX_WCHAN_CHARS) or "").strip()
    syscall_text = _read(f"{base}/syscall", 256)
    traceable = True if syscall_text is not None else may_trace(pid, proc_root)
    return ProcFacts(
        pid=pid, threads=read, running=running, in_d=in_d, main_state=main_state,
        wchan=wchan if _KERNEL_SYMBOL.fullmatch(wchan) and wchan != "0" else None,
        syscall=_syscall_name(syscall_text), traceable=traceable)


def blocked_read(pid: int, proc_root: str = "/proc", *, epoll: bool = True) -> str | None:
    """What the main thread of `pid` is blocked waiting to read, where /proc tells:

    - in a read (PIPE_READ_CALLS) of a pipe: NAMED_PIPE (a FIFO in the file system, which a
      scheduler or a feeder writes jobs into) or ANONYMOUS_PIPE (its stdin from a parent, say);
    - in an open (OPEN_CALLS) of a FIFO that no writer holds open yet (wchan FIFO_OPEN_WAIT):
      NAMED_PIPE, the same wait for its next job before the first byte;
    - in a read of an inotify descriptor, or an epoll wait (EPOLL_WAIT_CALLS) whose epoll holds
      one: INOTIFY (it waits for a file to appear in a folder it watches);
    - in any other epoll wait with a timeout of at most TIMER_WAKES_MAX_MS: TIMER_WAKES (a
      timer wakes it soon: a loop that polls, or a heartbeat);
    - in a wait for a child process to exit (CHILD_WAIT_CALLS): CHILD_EXIT (os.system,
      os.waitpid after a fork: no Python frame below the user's line says so).

    None where it is not blocked in one of those, reads something else (a file, a socket, a
    terminal), waits with no timeout or a longer one, or /proc would not say (no ptrace access:
    /proc/PID/syscall is PTRACE_MODE_ATTACH, as py-spy needs). Also None for an epoll wait
    where `epoll` is False: its epoll's watches are not read (`BlockedReads`: a read of them
    was slow once for that process).

    Blocking reads of a user's /proc files: call it in a worker (`BlockedReads`), never on the
    daemon's loop."""
    fields = (_read(f"{proc_root}/{pid}/syscall", 256) or "").split()
    if len(fields) < 2:
        return None
    try:
        number, fd = int(fields[0]), int(fields[1], 16)
    except ValueError:
        return None
    if number < 0:
        return None
    call = syscall_name(number)
    if call in CHILD_WAIT_CALLS:
        return CHILD_EXIT
    if call in OPEN_CALLS:  # (its path is in its memory, never read: the FIFO's name is data;
        # its first argument is a folder's descriptor or AT_FDCWD, not what it waits on)
        wchan = (_read(f"{proc_root}/{pid}/wchan", _MAX_WCHAN_CHARS) or "").strip()
        return NAMED_PIPE if wchan == FIFO_OPEN_WAIT else None
    if not 0 <= fd < 1 << 31:
        return None
    if call in EPOLL_WAIT_CALLS:
        return _epoll_wait(pid, fd, fields, proc_root) if epoll else None
    if call not in PIPE_READ_CALLS:
        return None
    link = f"{proc_root}/{pid}/fd/{fd}"
    try:
        target = os.readlink(link)
    except (OSError, ValueError):
        return None
    if target == "anon_inode:inotify":
        return INOTIFY
    if target.startswith("pipe:["):
        return ANONYMOUS_PIPE
    mode = cached_mode(link)  # (a path: a FIFO, or a file, socket or device, on any mount)
    return NAMED_PIPE if mode is not None and stat.S_ISFIFO(mode) else None


class _Statx(ctypes.Structure):
    """The head of struct statx (linux/stat.h) up to stx_mode; the kernel writes 256 bytes."""

    _fields_ = [("stx_mask", ctypes.c_uint32), ("stx_blksize", ctypes.c_uint32),
                ("stx_attributes", ctypes.c_uint64), ("stx_nlink", ctypes.c_uint32),
                ("stx_uid", ctypes.c_uint32), ("stx_gid", ctypes.c_uint32),
                ("stx_mode", ctypes.c_uint16), ("rest", ctypes.c_byte * 226)]


_AT_FDCWD = -100
_AT_STATX_DONT_SYNC = 0x4000  # the attributes the kernel holds: never asks the file system
_STATX_TYPE = 0x0001
_LIBC = ctypes.CDLL(None, use_errno=True)
_STATX = getattr(_LIBC, "statx", None)  # glibc 2.28+
if _STATX is not None:
    _STATX.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint,
                       ctypes.POINTER(_Statx)]


def cached_mode(path: str) -> int | None:
    """The file type bits of `path` (a /proc/PID/fd/N link: the file a process holds open) as
    the kernel already knows them, without asking the file's file system (statx with
    AT_STATX_DONT_SYNC, STATX_TYPE): a stat() of a file on a user's FUSE mount, or a hard NFS
    mount whose server is gone, waits on that file system, and root's daemon loop waited with
    it for as long as the user kept the read hanging (probe 110: 169 s). None where statx is
    not there or fails."""
    if _STATX is None:
        return None
    found = _Statx()
    if _STATX(_AT_FDCWD, os.fsencode(path), _AT_STATX_DONT_SYNC, _STATX_TYPE,
              ctypes.byref(found)) != 0 or not found.stx_mask & _STATX_TYPE:
        return None
    return int(found.stx_mode)


MAX_EPOLL_FDS_READ = 64  # the descriptors of an epoll looked at for an inotify one


def _epoll_wait(pid: int, epoll_fd: int, fields: list[str], proc_root: str) -> str | None:
    """INOTIFY where the epoll `epoll_fd` of `pid` holds an inotify descriptor; else
    TIMER_WAKES where the wait's timeout (`fields`: /proc/PID/syscall's, the fourth argument,
    an int in its register's low 32 bits) is 0 < t <= TIMER_WAKES_MAX_MS; else None.

    The 16 KiB limit bounds what is kept, not the kernel's work: it prints every watch of the
    epoll before the first bytes come back, and a user may give one epoll millions (each
    (file, fd) pair counts: one eventfd dup'ed to many numbers, each registered, the dups
    closed): 3 s at 2,000,000, 6.7 s at the per-user limit of 5.4 M (probe 146, H1)."""
    info = _read(f"{proc_root}/{pid}/fdinfo/{epoll_fd}", 16384) or ""
    # one `tfd: N events: ...` line per descriptor in the epoll (fs/eventpoll.c)
    targets = [line.split()[1] for line in info.splitlines() if line.startswith("tfd:")
               and len(line.split()) > 1]
    for target in targets[:MAX_EPOLL_FDS_READ]:
        if not target.isdigit():
            continue
        try:
            if os.readlink(f"{proc_root}/{pid}/fd/{target}") == "anon_inode:inotify":
                return INOTIFY
        except OSError:
            continue
    if len(fields) < 5:
        return None
    try:
        timeout = int(fields[4], 16) % _INT32
    except ValueError:
        return None
    if timeout >= _INT32 // 2:
        return None  # negative: no timeout
    return TIMER_WAKES if 0 < timeout <= TIMER_WAKES_MAX_MS else None


# How long a dump's task waits for `blocked_read` in its worker, and how much CPU one read may
# take before its process's epoll is not read again. A read of an ordinary process's /proc
# files takes well under a millisecond; one not done by then is left to finish in the worker (a
# kernel read cannot be interrupted) and the wait is not known (None, the classifier's
# fallback). Its process is remembered as slow by the CPU the read took (the kernel's
# formatting of every watch, ~3 s at 2,000,000), not by the wall time: on a loaded host a read
# that waited for a core would otherwise lose an ordinary process its named waits for life.
BLOCKED_READ_BUDGET_S = 0.5
# How many processes whose epoll read was slow are remembered (the oldest forgotten first;
# those gone are forgotten with the daemon's other per-process state).
MAX_SLOW_REMEMBERED = 4096


def _timed_read(pid: int, proc_root: str, epoll: bool) -> tuple[str | None, float]:
    """blocked_read(pid) and the CPU seconds this thread spent on it (the kernel's time in
    its reads included)."""
    started = time.thread_time()
    answer = blocked_read(pid, proc_root, epoll=epoll)
    return answer, time.thread_time() - started


class BlockedReads:
    """`blocked_read` in a worker thread of its own, never on the daemon's loop, bounded in
    time: what a blocked main thread waits on, right after its dump (daemon.runtime.attribution).

    The kernel's answer for a user's epoll costs time in proportion to its watches, which the
    user chooses (probe 146, H1: ~3 s at 2,000,000, the loop held through each read, 40% of
    ticks lost). Here the read runs in one dedicated thread (a read stuck there holds neither
    the loop nor its default executor, which the store and the API use); a dump waits for it at
    most `budget_s`, after which its wait is not known (None). A process (pid, start time) whose
    read took more than `budget_s` of CPU is read without its epoll's watches from then on: an
    epoll wait of its main thread is not named (None). While a slow read still runs, other
    reads are not started (None: not known): at most one slow read at a time, and one per
    process in its life."""

    def __init__(self, budget_s: float = BLOCKED_READ_BUDGET_S, proc_root: str = "/proc"
                 ) -> None:
        if budget_s <= 0:
            raise ValueError(f"BlockedReads: budget_s={budget_s} must be > 0")
        self.budget_s = budget_s
        self.proc_root = proc_root
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlcost-proc-wait")
        # the read in the worker, and whose (the process it is for)
        self._running: Future[tuple[str | None, float]] | None = None
        self._running_for = (0, 0.0)
        #: processes (pid, start time) whose read took over budget_s of CPU: no epoll read
        self.slow: OrderedDict[tuple[int, float], None] = OrderedDict()

    async def read(self, pid: int, start_time: float) -> str | None:
        """blocked_read(pid) for the process (pid, start_time), in the worker; None when it
        took over budget_s (that process's epoll is not read again once the read is seen to
        have taken that much CPU), or a slow read of another still runs."""
        running = self._running
        if running is not None:
            if not running.done():
                return None
            self._running = None
            self._note(self._running_for, running)  # one that outlasted its dump's wait
        key = (pid, start_time)
        running = self._running = self._worker.submit(_timed_read, pid, self.proc_root,
                                                      key not in self.slow)
        self._running_for = key
        try:
            await asyncio.wait_for(asyncio.wrap_future(running), self.budget_s)
        except asyncio.TimeoutError:
            return None
        self._running = None
        return self._note(key, running)

    def _note(self, key: tuple[int, float], done: Future[tuple[str | None, float]]
              ) -> str | None:
        """A finished read's answer; its process remembered as slow where it took over
        budget_s of CPU."""
        if done.cancelled() or done.exception() is not None:
            return None
        answer, cpu_s = done.result()
        if cpu_s > self.budget_s and key not in self.slow:
            self.slow[key] = None
            while len(self.slow) > MAX_SLOW_REMEMBERED:
                self.slow.popitem(last=False)
            log.warning("reading what pid %d's main thread waits on took %.1f s of CPU (an "
                        "epoll with very many watches?); its epoll is not read again", key[0],
                        cpu_s)
        return answer

    def forget(self, live: set[tuple[int, float]]) -> None:
        """Forget the processes not in `live` (gone)."""
        for key in [key for key in self.slow if key not in live]:
            del self.slow[key]

    def close(self) -> None:
        """Stop the worker once its read ends (not waited for: it may be a slow one)."""
        self._worker.shutdown(wait=False, cancel_futures=True)
