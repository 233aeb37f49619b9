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

import os
import re
import stat
from dataclasses import dataclass

MAX_THREADS_READ = 256  # a process with thousands of threads is read in part: its first ones
_MAX_WCHAN_CHARS = 64
_KERNEL_SYMBOL = re.compile(r"[A-Za-z0-9_.]{1,64}")  # what wchan holds; anything else: not it

# Syscall numbers (x86_64) that mean "waiting for something": what a blocked main thread shows.
SYSCALL_NAMES_X86_64 = {
    0: "read", 1: "write", 7: "poll", 17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev",
    23: "select", 35: "nanosleep", 45: "recvfrom", 47: "recvmsg", 61: "wait4", 74: "fsync",
    75: "fdatasync", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait", 270: "pselect6",
    271: "ppoll", 281: "epoll_pwait", 441: "epoll_pwait2",
}
# The same calls on aarch64 (the kernel's generic table, include/uapi/asm-generic/unistd.h),
# which has no read-only poll/select/epoll_wait: ppoll, pselect6 and epoll_pwait stand in.
SYSCALL_NAMES_AARCH64 = {
    22: "epoll_pwait", 63: "read", 64: "write", 65: "readv", 66: "writev", 67: "pread64",
    68: "pwrite64", 72: "pselect6", 73: "ppoll", 82: "fsync", 83: "fdatasync", 98: "futex",
    101: "nanosleep", 115: "clock_nanosleep", 207: "recvfrom", 212: "recvmsg", 260: "wait4",
    441: "epoll_pwait2",
}
# The reads in which a thread blocks on a pipe's next bytes.
PIPE_READ_CALLS = frozenset({"read", "readv"})
# What blocked_read says of the descriptor a main thread waits on (never its path: the name of a
# user's file is the user's data).
NAMED_PIPE = "a named pipe (FIFO)"
ANONYMOUS_PIPE = "a pipe"
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


def read_facts(pid: int, proc_root: str = "/proc") -> ProcFacts | None:
    """What /proc shows of `pid` without ptrace; None when it is gone."""
    base = f"{proc_root}/{pid}"
    main_state = _state_of(_read(f"{base}/stat"))
    if main_state is None:
        return None
    try:
        tids = sorted(os.listdir(f"{base}/task"), key=lambda t: (t != str(pid), t))
    except OSError:
        tids = [str(pid)]
    running = in_d = read = 0
    main_tid = str(pid)
    for tid in tids[:MAX_THREADS_READ]:
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


def blocked_read(pid: int, proc_root: str = "/proc") -> str | None:
    """What the main thread of `pid` is blocked reading, where that is a pipe: NAMED_PIPE (a
    FIFO in the file system, which a scheduler or a feeder writes jobs into) or ANONYMOUS_PIPE
    (its stdin from a parent, say). None where it is not blocked in a read (PIPE_READ_CALLS),
    reads something else (a file, a socket, a terminal), or /proc would not say (no ptrace
    access: /proc/PID/syscall is PTRACE_MODE_ATTACH, as py-spy needs)."""
    fields = (_read(f"{proc_root}/{pid}/syscall", 256) or "").split()
    if len(fields) < 2:
        return None
    try:
        number, fd = int(fields[0]), int(fields[1], 16)
    except ValueError:
        return None
    if number < 0 or syscall_name(number) not in PIPE_READ_CALLS or not 0 <= fd < 1 << 31:
        return None
    link = f"{proc_root}/{pid}/fd/{fd}"
    try:
        if not stat.S_ISFIFO(os.stat(link).st_mode):
            return None
        target = os.readlink(link)
    except (OSError, ValueError):
        return None
    return ANONYMOUS_PIPE if target.startswith("pipe:[") else NAMED_PIPE
