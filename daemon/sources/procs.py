"""The process source: CPU, memory, I/O and stalls of every GPU process and its children.

psutil finds processes and reads the facts read once per process (user, command line, start
time, parent). The per-tick counters come straight from /proc/PID/stat and /proc/PID/io, which
costs a fraction of psutil's `oneshot()` (DESIGN.md gives the measured figures). A process is
keyed by (pid, start time); a process that exits while we read it is simply not in this tick.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import psutil

from daemon import clock as daemon_clock
from daemon.sources.host import ProcFile
from daemon.sources.owners import OwnerReader
from daemon.sources.proc_state import thread_ids
from daemon.sources.redact import redact_argv, redact_text
from daemon.sources.safe_text import one_line
from daemon.sources.sample import GpuUse, HostPressure, ProcessSample

log = logging.getLogger(__name__)

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
BOOT_TIME = psutil.boot_time()


def delay_accounting_enabled() -> bool | None:
    """Whether the kernel counts block I/O delay per task (None: cannot tell)."""
    try:
        with open("/proc/sys/kernel/task_delayacct") as f:
            return f.read().strip() == "1"
    except OSError:
        return None


def read_argv(pid: int) -> list[str]:
    """A process's argv from /proc/PID/cmdline, as bytes: psutil reads it as text, where a
    carriage return in an argument came back as a newline. Its rules otherwise: NUL-separated,
    or (a process that rewrote its title) space-separated; [] for a zombie or a kernel
    thread. FileNotFoundError when it is gone (also for one that exits while it is read: the
    read's ESRCH), PermissionError when it may not be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            data = f.read()
    except ProcessLookupError:
        raise FileNotFoundError(f"/proc/{pid}/cmdline: the process exited") from None
    if not data:
        return []
    sep = b"\0" if data.endswith(b"\0") else b" "
    if data.endswith(sep):
        data = data[:-1]
    words = data.split(sep)
    if sep == b"\0" and len(words) == 1 and b" " in data:
        words = data.split(b" ")
    return [os.fsdecode(word) for word in words]


@dataclass(slots=True)
class _Known:
    """Facts about a process read once, when it is first seen."""

    pid: int
    start_ticks: int  # field 22 of /proc/PID/stat: start time in clock ticks after boot
    start_time: float
    ppid: int
    user: str
    command: str
    owner: dict[str, str]
    last_io: int = -1  # read_bytes + write_bytes + iowait ticks at the last tick
    # What the last read saw, and the sample built from it: a process whose /proc/PID/stat
    # and /proc/PID/io read the same bytes (an idle worker, a helper) and whose GPU uses are
    # the same gets the same sample again, not parsed and built anew.
    last_stat: bytes = b""
    last_io_data: bytes = b""
    last_sample: ProcessSample | None = None
    # /proc/PID/io's counters as last parsed: (read_bytes, write_bytes, read_chars, write_chars)
    last_io_counters: tuple[int | None, int | None, int | None, int | None] = (
        None, None, None, None)
    stat_fd: int = -1  # /proc/PID/stat and /proc/PID/io kept open: re-read with pread(0)
    io_fd: int = -1
    blkio_ticks: int = 0  # block I/O delay summed over all threads, at the last I/O tick
    forgotten: bool = False  # its descriptors are closed; the tick must not open new ones
    read_by_tick: bool = False  # the tick's last read of it succeeded, since discovery looked
    # /proc/PID/stat up to the end of its name, "PID (NAME", when the command line was read
    # (set by discovery with start_ticks, from the same read): an exec (or a rename) changes
    # the name, and the command line is read again (a profiled `pyenv exec python train.py`
    # was recorded as the bash shim it started as).
    head: bytes = b""
    command_read_at: float = 0.0  # monotonic: a process that renames itself each tick is
    # read again at most every COMMAND_REREAD_S


# A process's own /proc files, never a link followed (the paths are the kernel's, but a test
# root or a reused path must not redirect a root daemon's open), never inherited by a child.
_PROC_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def _read(path: str) -> bytes:
    fd = os.open(path, _PROC_FLAGS)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


COMMAND_REREAD_S = 10.0  # a renamed process's command line is read again at most this often
# A process discovered this young may not have exec'd yet: its command line then is its
# parent's (a fork before its exec; python starting python keeps the name "python"), or empty
# (mid-exec). The first tick reads it once more.
YOUNG_S = 1.0


def _reread(fd: int) -> bytes:
    """A /proc file read again through its open descriptor (half the cost of open+read+close).
    A descriptor of a process that has exited fails with ESRCH; it never shows another process
    that reused the pid."""
    return os.pread(fd, 4096, 0)


def _after_name(data: bytes) -> list[bytes]:
    return data[data.rindex(b")") + 2:].split()


def _stat_fields(pid: int) -> list[bytes]:
    """Fields of /proc/PID/stat after the command name; index 0 is field 3 (state)."""
    data = _read(f"/proc/{pid}/stat")
    return data[data.rindex(b")") + 2:].split()


# The children (and theirs) of one GPU process that are watched: a DataLoader's workers, a
# preprocessing pool, an encoder it runs. Each costs two open descriptors and two reads a tick;
# a user's process that forks 1500 sleeping children took a core's third and 3000 of the
# daemon's descriptors. Those beyond are not read (their I/O and CPU are not in its signals).
MAX_CHILDREN_WATCHED = 128


class ProcessSource:
    """Discovery (psutil, slow, beside the tick) and counters (/proc, fast, in the tick).

    `discover` and `read` run on different threads. The open /proc descriptors are shared
    between them, so `_fds` guards each process's descriptors: discovery never closes one while
    the tick reads through it (a closed number is soon reused by another open, and a pread on
    it would read another process's file).
    """

    def __init__(self, children: bool = True, owners: OwnerReader | None = None) -> None:
        self.children = children
        self.owners = owners if owners is not None else OwnerReader()
        self._fds = threading.Lock()
        self._known: dict[int, _Known] = {}
        self._children_of: dict[int, tuple[int, ...]] = {}
        self._parents = _Parents()
        self.delay_accounting = delay_accounting_enabled()
        self.io_readable = True  # False once /proc/PID/io is refused (not root)

    def discover(self, gpu_pids: set[int], scan_children: bool = True,
                 devices: Mapping[int, tuple[str, ...]] | None = None,
                 keep: Mapping[int, float] | None = None) -> None:
        """Learn new GPU processes and their children. Slow (psutil): run it beside the tick.

        Finding children means reading every process on the host once; with
        `scan_children=False` only new GPU processes are looked for children (their workers
        start within a few seconds of them), and known ones keep the children found before.
        `devices` maps a GPU process to the UUIDs of the GPUs it holds (for its owner's pod).
        `keep`: pid -> when it was last seen on a GPU that no longer answers
        (NvmlSource.sick_holders); such a process and its children stay watched while it is the
        process NVML saw, one started before that (a pid reused since is someone else).
        """
        devices = devices or {}
        children_of: dict[int, tuple[int, ...]] = {}
        for pid, seen_at in (keep or {}).items():
            if pid in gpu_pids or not self._learn(pid):
                continue
            if self._known[pid].start_time > seen_at:
                self._forget(pid)
                continue
            children_of[pid] = tuple(k for k in self._children_of.get(pid, ())
                                     if self._learn(k))
        new = {pid for pid in gpu_pids if pid not in self._children_of}
        scan = self.children and (scan_children or bool(new))
        kids_by_parent = self._parents.children_by_parent() if scan else {}
        for pid in gpu_pids:
            self._learn(pid, devices.get(pid, ()))
            if self.children and not scan and pid in self._children_of:
                children_of[pid] = tuple(k for k in self._children_of[pid] if self._learn(k))
            elif self.children and pid in self._known:
                found: list[int] = []
                for kid in self._parents.descendants(pid, kids_by_parent):
                    if len(found) >= MAX_CHILDREN_WATCHED:
                        break  # (bounded: two descriptors and a read a tick each)
                    if self._learn(kid):
                        found.append(kid)
                children_of[pid] = tuple(found)
        self._children_of = children_of
        watched = (set(gpu_pids) | set(children_of)
                   | {kid for kids in children_of.values() for kid in kids})
        for pid in list(self._known):
            if pid not in watched:
                self._forget(pid)

    def _learn(self, pid: int, devices: tuple[str, ...] = ()) -> bool:
        """Read the once-per-process facts; False if the process is gone or unreadable."""
        known = self._known.get(pid)
        if known is not None and self._still_there(known):
            return True
        try:
            stat = _read(f"/proc/{pid}/stat")
            start_ticks = int(_after_name(stat)[19])
            head = stat[:stat.rindex(b")")]  # its name as its command line is read
        except (OSError, ValueError, IndexError):
            self._forget(pid)
            return False
        if known is not None and known.start_ticks == start_ticks:
            return True
        if known is not None:
            self._forget(pid)
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                start_time = proc.create_time()
                ppid = proc.ppid()
                try:
                    user = proc.username()
                except (KeyError, psutil.AccessDenied):
                    user = str(proc.uids().real)
                try:
                    argv = read_argv(pid)
                except PermissionError:
                    argv = []
                except FileNotFoundError:
                    raise psutil.NoSuchProcess(pid) from None
                command = redact_argv(argv) if argv else f"[{redact_text(proc.name())}]"
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            self._forget(pid)
            return False
        owner = self.owners.owner_of(pid, devices)  # its cgroup: once, like the command line
        # Text a user wrote is data: control bytes shown as \x1b, never sent to a terminal.
        # Done here, once per (pid, start time), like the redaction.
        owner = {key: one_line(value) for key, value in owner.items()}
        # Not yet its own command line, maybe (YOUNG_S; or none read): the first tick reads it
        # again (_renamed, as for an exec that changed its name).
        settled = argv and daemon_clock.now() - start_time >= YOUNG_S
        self._known[pid] = _Known(pid, start_ticks, start_time, ppid, one_line(user),
                                  one_line(command), owner, head=head if settled else b"")
        return True

    def _still_there(self, known: _Known) -> bool:
        """Whether a known process still runs, through the descriptor the tick reads it by: a
        pread of an exited process's file fails, and it never shows a process that reused the
        pid. False when the tick has not opened it yet (then its start time is read again).
        Where the tick read it since the last round, that read answers (one pread a process a
        round saved: an exit is then noticed a round later, and the tick's reads of an exited
        process fail from the start, so nothing is recorded for it meanwhile)."""
        with self._fds:
            if known.forgotten or known.stat_fd < 0:
                return False
            if known.read_by_tick:  # the tick's read says so: no read of our own
                known.read_by_tick = False
                return True
            try:
                _reread(known.stat_fd)
            except OSError:
                return False
        return True

    def _forget(self, pid: int) -> None:
        known = self._known.pop(pid, None)
        if known is None:
            return
        with self._fds:
            _close(known)

    def close(self) -> None:
        """Close every descriptor (the daemon is stopping)."""
        for pid in list(self._known):
            self._forget(pid)

    def read(self, gpu_uses: dict[int, tuple[GpuUse, ...]]) -> tuple[ProcessSample, ...]:
        """This tick's counters of every GPU process and its known children. Never raises."""
        samples = []
        known_by_pid, children_of, lock = self._known, self._children_of, self._fds
        pids = dict.fromkeys(gpu_uses)  # in order, each once: GPU processes, then children
        for pid in gpu_uses:
            kids = children_of.get(pid)
            if kids:
                pids.update(dict.fromkeys(kids))
        read_one, no_uses = self._read_one, ()
        with lock:  # once a tick, not once a process: discovery waits the tick's few ms
            for pid in pids:
                known = known_by_pid.get(pid)
                if known is None or known.forgotten:
                    continue  # discovery has not seen it yet; it will within a few seconds
                sample = read_one(known, gpu_uses.get(pid, no_uses))
                if sample is not None:
                    samples.append(sample)
        return tuple(samples)

    def _read_one(self, known: _Known, uses: tuple[GpuUse, ...]) -> ProcessSample | None:
        """One process's counters; the caller holds `_fds`."""
        known.read_by_tick = False  # until this read succeeds
        try:
            if known.stat_fd < 0:
                known.stat_fd = os.open(f"/proc/{known.pid}/stat", _PROC_FLAGS)
                if int(_after_name(_reread(known.stat_fd))[19]) != known.start_ticks:
                    # The pid was reused: a different process. Discovery learns the new one.
                    _close(known)
                    return None
            data = os.pread(known.stat_fd, 4096, 0)
        except (OSError, ValueError, IndexError):
            return None  # exited, possibly mid-read
        io_data = b""
        if self.io_readable:
            try:
                if known.io_fd < 0:
                    known.io_fd = os.open(f"/proc/{known.pid}/io", _PROC_FLAGS)
                io_data = os.pread(known.io_fd, 4096, 0)
            except PermissionError:
                self.io_readable = False
                log.warning("cannot read /proc/%d/io (needs root across users): read and write "
                            "bytes are not recorded", known.pid)
            except OSError:
                return None
        last = known.last_sample
        if (last is not None and data == known.last_stat and io_data == known.last_io_data
                and uses == last.gpus and last.state != "D" and not last.threads_in_d):
            known.read_by_tick = True  # nothing moved since the last tick: the same sample
            return last
        try:
            name_end = data.rindex(b")")
            pending = (data[:name_end] != known.head
                       and not self._renamed(known, data[:name_end]))
            fields = data[name_end + 2:].split()
            sample = self._sample(known, uses, fields, io_data)
        except (ValueError, IndexError):
            return None  # a torn or unexpected read: not this tick
        if sample is not None:
            # (a rename still pending keeps the same bytes from reading as "nothing moved")
            known.last_stat = b"" if pending else data
            known.last_io_data, known.last_sample = io_data, sample
            known.last_io_counters = (sample.read_bytes, sample.write_bytes, sample.read_chars,
                                      sample.write_chars)
        return sample

    @staticmethod
    def _renamed(known: _Known, head: bytes) -> bool:
        """The process's name changed since its command line was read (an exec: a shell or a
        launcher that became the program): read it again, at most every COMMAND_REREAD_S.
        False while that is pending (too soon, or the new command line not there yet, mid-exec):
        the caller looks again at the next tick."""
        now = time.monotonic()
        if now - known.command_read_at < COMMAND_REREAD_S:
            return False
        try:
            argv = read_argv(known.pid)
        except OSError:
            argv = None  # exited, or no longer readable: it keeps the command it had for now
        if not argv and not known.head:
            # Discovery found no command line either: it has none (a zombie, a kernel thread,
            # one root may not read) and keeps its [name], never read again.
            known.head = head
            return True
        if not argv:
            return False  # mid-exec: the new command line is not there yet (next tick)
        known.command_read_at = now
        known.command = one_line(redact_argv(argv))
        known.head = head
        return True

    def _sample(self, known: _Known, uses: tuple[GpuUse, ...], fields: list[bytes],
                io_data: bytes) -> ProcessSample | None:
        """The sample of one read: `fields` of /proc/PID/stat after the command name, and
        /proc/PID/io as read (b"" where it is not readable)."""
        state = fields[0].decode()
        if state in GONE_STATES:
            return None  # exited, not yet reaped by its parent: gone, as far as costs go
        cpu_seconds = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        children_cpu_seconds = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
        threads = int(fields[17])
        rss_bytes = int(fields[21]) * PAGE_SIZE
        blkio_ticks = int(fields[39]) if len(fields) > 39 else 0  # main thread only
        if io_data == known.last_io_data:  # no I/O since the last tick (most processes)
            read_bytes, write_bytes, read_chars, write_chars = known.last_io_counters
        elif io_data:
            # "rchar: N wchar: N syscr: N syscw: N read_bytes: N write_bytes: N ...",
            # one split for all (a split per line cost as much as the read)
            io = io_data.split()
            read_chars = int(io[1])
            write_chars = int(io[3])
            read_bytes = int(io[9])
            write_bytes = int(io[11])
        else:
            read_bytes = write_bytes = read_chars = write_chars = None
        io_marker = (read_bytes or 0) + (write_bytes or 0) + blkio_ticks
        threads_in_d = 0
        if threads == 1 and (state == "D" or io_marker != known.last_io):
            # Doing I/O on its one thread: its stat just read is that thread's (no task/ walk)
            threads_in_d, known.blkio_ticks = int(state == "D"), blkio_ticks
        elif state == "D" or io_marker != known.last_io:
            # Doing I/O this tick: look at every thread (a loader thread may be the one waiting).
            threads_in_d, known.blkio_ticks = _task_stalls(known.pid)
        known.last_io = io_marker
        known.read_by_tick = True
        blkio = max(known.blkio_ticks, blkio_ticks)
        iowait = blkio / CLOCK_TICKS if self.delay_accounting else None
        # by position, in ProcessSample's field order: a keyword init costs more, once per
        # process per tick
        return ProcessSample(
            known.pid, known.start_time, known.ppid, known.user, known.command, uses,
            cpu_seconds, children_cpu_seconds, rss_bytes, read_bytes, write_bytes, read_chars,
            write_chars, iowait, state, threads, threads_in_d, known.owner)


# /proc/PID/stat states of a process that has exited: zombie (waiting for its parent to reap
# it; it holds nothing) and dead.
GONE_STATES = frozenset({"Z", "X", "x"})


class ThreadTimes(NamedTuple):
    """A thread's cumulative clocks, in seconds: on a CPU, and runnable but waiting for a core
    (0.0 where the kernel keeps no schedstat and the wait cannot be told apart); and how many
    times it was put on a CPU (schedstat's third field: it stands still while the thread sleeps
    in a call nothing wakes, a read no byte comes to; None without schedstat)."""

    on_cpu: float
    queued: float
    runs: int | None = None


class MainThreadClock:
    """How long a process's main thread ran on a CPU, and how long it waited for a core.

    A process's CPU time says little when a loader or logging thread spins beside a main thread
    blocked in a C call; the main thread's own time says whether the Python code its stacks show
    is running or waiting. Read from /proc/PID/task/PID/schedstat (field 1: nanoseconds on a
    CPU; field 2: nanoseconds runnable on a run queue, waiting for a core; field 3: times put on
    a CPU, which says whether a thread blocked in a read woke at all). The two clocks are kept
    apart: a thread waiting for a core shows state R, "running", but does no work, and at load
    31 on 2 cores a main thread that ran 3.2% of the time waited 68% (daemon.analysis.phases.
    cpu_demand turns both into a share a loaded host does not change). Where schedstat is
    missing, utime + stime of /proc/PID/task/PID/stat, with no queue time. Read only for the
    processes someone asks about (those in a low-utilization window), through a descriptor kept
    open per process: one pread a tick.
    """

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc  # another root only for tests that replay recorded files
        self._fds: dict[tuple[int, float], tuple[int, bool]] = {}  # key -> (fd, is schedstat)

    def times(self, pid: int, start_time: float) -> ThreadTimes | None:
        """The main thread's clocks so far; None when it is gone."""
        key = (pid, start_time)
        try:
            if key not in self._fds:
                self._fds[key] = _open_thread_clock(self._proc, pid)
            fd, schedstat = self._fds[key]
            data = _reread(fd)
            if schedstat:
                on_cpu_ns, queued_ns, runs = data.split()[:3]
                return ThreadTimes(int(on_cpu_ns) / 1e9, int(queued_ns) / 1e9, int(runs))
            fields = _after_name(data)
            return ThreadTimes((int(fields[11]) + int(fields[12])) / CLOCK_TICKS, 0.0)
        except (OSError, ValueError, IndexError):
            self.forget(pid, start_time)
            return None

    def forget(self, pid: int, start_time: float) -> None:
        opened = self._fds.pop((pid, start_time), None)
        if opened is not None:
            os.close(opened[0])

    def keep_only(self, keys: set[tuple[int, float]]) -> None:
        """Close the descriptors of processes no longer asked about."""
        for key in [k for k in self._fds if k not in keys]:
            self.forget(*key)

    def close(self) -> None:
        self.keep_only(set())


def _open_thread_clock(proc: str, pid: int) -> tuple[int, bool]:
    try:
        return os.open(f"{proc}/{pid}/task/{pid}/schedstat", _PROC_FLAGS), True
    except FileNotFoundError:
        if not os.path.isdir(f"{proc}/{pid}"):
            raise
        return os.open(f"{proc}/{pid}/task/{pid}/stat", _PROC_FLAGS), False


def _close(known: _Known) -> None:
    """Close a process's descriptors for good; the caller holds the source's `_fds` lock."""
    known.forgotten = True
    for fd in (known.stat_fd, known.io_fd):
        if fd >= 0:
            os.close(fd)
    known.stat_fd = known.io_fd = -1


# Scans for children between full ones, which read every process's parent anew: a process
# whose parent exited has another one since, and a pid may be reused between two scans.
FULL_SCAN_EVERY = 6


class _Parents:
    """Every host process's parent, from /proc/PID/stat, kept from one scan to the next.

    Finding the children of GPU processes means knowing every process's parent (psutil's
    children() makes one pass per parent, which at 64 GPU processes cost more than everything
    else together; psutil.process_iter costs 5-6x this read, building a Process object for
    each). A parent does not change while a process lives, so a scan reads the stat of the
    pids it has not seen before, and only every FULL_SCAN_EVERY-th scan reads them all; the
    descendants of a GPU process found through remembered parents are read again to confirm
    them (a pid reused since has another parent), a read per child, not per host process."""

    def __init__(self) -> None:
        self._ppid: dict[int, int] = {}
        self._remembered: set[int] = set()  # pids whose parent was not read by the last scan
        self._scans = 0

    def children_by_parent(self) -> dict[int, list[int]]:
        remembered = self._ppid if self._scans % FULL_SCAN_EVERY else {}
        self._scans += 1
        ppids: dict[int, int] = {}
        kept = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            ppid = remembered.get(pid)
            if ppid is not None:
                kept.add(pid)
            else:
                try:
                    ppid = int(_stat_fields(pid)[1])
                except (OSError, ValueError, IndexError):
                    continue  # exited meanwhile
            ppids[pid] = ppid
        self._ppid = ppids  # only what is listed now: the pids of exited processes go
        self._remembered = kept
        kids: dict[int, list[int]] = {}
        for pid, ppid in ppids.items():
            if ppid:
                kids.setdefault(ppid, []).append(pid)
        return kids

    def descendants(self, pid: int, kids_by_parent: dict[int, list[int]]) -> list[int]:
        """`pid`'s children, theirs, and so on, as the last scan saw them; a parent remembered
        from an earlier scan is read again, and a process whose parent is another is left out
        (and its parent corrected)."""
        found, todo = [], list(kids_by_parent.get(pid, ()))
        while todo:
            kid = todo.pop()
            if kid in self._remembered:
                try:
                    ppid = int(_stat_fields(kid)[1])
                except (OSError, ValueError, IndexError):
                    continue  # exited since
                self._remembered.discard(kid)
                if ppid != self._ppid.get(kid):
                    self._ppid[kid] = ppid  # a pid reused since: not this parent's child
                    continue
            found.append(kid)
            todo.extend(kids_by_parent.get(kid, ()))
        return found


def _task_stalls(pid: int) -> tuple[int, int]:
    """(threads in uninterruptible sleep, block I/O delay ticks summed over threads).

    Read only for processes doing I/O this tick: /proc/PID/stat gives both for the main thread
    alone, and the thread waiting on a disk is often another one. At most MAX_THREADS_READ
    threads, the main one first (`thread_ids`): on the loop, each tick, a user's 20,000
    threads cost 0.45 s a tick when all were read (probe 146, M1).
    """
    in_d = blkio = 0
    for tid in thread_ids(pid):
        try:
            data = _read(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()
        if fields[0] == b"D":
            in_d += 1
        if len(fields) > 39:
            blkio += int(fields[39])
    return in_d, blkio


def _psi_line(line: str) -> dict[str, float]:
    parts = dict(item.split("=", 1) for item in line.split()[1:])
    return {key: float(value) for key, value in parts.items()}


class PressureReader:
    """Host-wide PSI for I/O and CPU at every tick, through /proc/pressure/{io,cpu} kept open
    (host.ProcFile). `close` when done."""

    def __init__(self, root: str = "/proc/pressure") -> None:
        self._files = {resource: ProcFile(f"{root}/{resource}") for resource in ("io", "cpu")}

    def read(self) -> HostPressure:
        """The figures now; fields are None where the kernel has no PSI."""
        values: dict[str, float | int | None] = {}
        for resource, file in self._files.items():
            try:
                lines = file.read().decode().splitlines()
            except OSError:
                continue
            for line in lines:
                kind = line.split(" ", 1)[0]
                if kind not in ("some", "full") or (resource == "cpu" and kind == "full"):
                    continue
                parsed = _psi_line(line)
                values[f"{resource}_{kind}_avg10"] = parsed.get("avg10")
                total = parsed.get("total")
                values[f"{resource}_{kind}_total_us"] = int(total) if total is not None else None
        return HostPressure(**values)  # type: ignore[arg-type]

    def close(self) -> None:
        for file in self._files.values():
            file.close()


def read_pressure(root: str = "/proc/pressure") -> HostPressure:
    """Host-wide PSI for I/O and CPU now, read once (PressureReader, for each tick); fields are
    None where the kernel has no PSI."""
    reader = PressureReader(root)
    try:
        return reader.read()
    finally:
        reader.close()
