"""When ptrace is denied: phases from /proc alone (daemon.analysis.proc_phases), their low
confidence through the balance, the rules and the wire, and `check` naming the processes it
cannot trace with the way to grant it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from simhost import poll

from daemon.analysis.host_signals import HostSignals, cpu_demand
from daemon.analysis.phase_balance import NO_STACK_FILE, StackSample, phase_balance
from daemon.analysis.phases import NO_STACKS_EVIDENCE
from daemon.analysis.proc_phases import classify_from_proc, where
from daemon.sources import proc_state
from daemon.sources.frames import Frame, stack_hash
from daemon.sources.proc_state import (
    ANONYMOUS_PIPE,
    CHILD_EXIT,
    INOTIFY,
    NAMED_PIPE,
    TIMER_WAKES,
    BlockedReads,
    ProcFacts,
    blocked_read,
    may_trace,
    read_facts,
    syscall_name,
)
from daemon.wire import (
    CHECKPOINT,
    COMM,
    COMPUTE,
    DATA_WAIT,
    HIGH_CONFIDENCE,
    HOST_PREPROCESS,
    IDLE,
    LOW_CONFIDENCE,
    Process,
    phase_label,
)

ROOT = Path(__file__).resolve().parents[2]


def facts(**kw) -> ProcFacts:
    base = {"pid": 1, "threads": 1, "running": 0, "in_d": 0, "main_state": "S", "wchan": None,
            "syscall": None, "traceable": False}
    return ProcFacts(**{**base, **kw})


def signals(**kw) -> HostSignals:
    return HostSignals(**{"seconds": 3.0, "main_thread_cpu": 0.01, "process_cpu": 0.01,
                          "tree_cpu": 0.01, **kw})


@pytest.mark.parametrize("seen, said, phase", [
    (facts(), signals(write_per_s=50e6), CHECKPOINT),
    (facts(), signals(read_per_s=8e6), DATA_WAIT),
    (facts(in_d=1), signals(), DATA_WAIT),
    (facts(wchan="anon_pipe_read"), signals(read_per_s=300e3), DATA_WAIT),
    (facts(wchan="unix_stream_read_generic"), signals(read_per_s=300e3), DATA_WAIT),
    (facts(syscall="recvfrom"), signals(read_per_s=300e3), DATA_WAIT),
    (facts(main_state="R", running=1), signals(main_thread_cpu=0.97), HOST_PREPROCESS),
    # A CPU-bound main thread that got a core 6% of the time on a loaded host: still busy.
    (facts(main_state="R", running=1), signals(main_thread_cpu=cpu_demand(0.18, 2.82, 3.0)),
     HOST_PREPROCESS),
    (facts(wchan="futex_do_wait", running=2), signals(process_cpu=1.5), HOST_PREPROCESS),
    (facts(wchan="hrtimer_nanosleep"), signals(), IDLE),
    (facts(wchan="futex_do_wait"), signals(), IDLE),
    (facts(wchan="do_epoll_wait"), signals(), IDLE),
])
def test_the_fallback_reads_the_phase_from_proc_and_says_so(seen, said, phase):
    verdict = classify_from_proc(seen, said)
    assert verdict.phase == phase, verdict.reason
    assert verdict.reason.startswith(NO_STACKS_EVIDENCE + ": ")
    assert verdict.frame is None  # no stack: no line is named


def test_a_main_thread_waiting_for_a_core_is_not_host_compute():
    # finetune_with_loader at load ~31 on 2 cores: over 3 s its main thread ran 3.2% of the
    # time and waited on a run queue 68.1%, sampled in state R ("running") beside its busy
    # DataLoader workers. Counted as running it read 71% busy: host_preprocess.
    queued = facts(main_state="R", running=1)
    said = signals(main_thread_cpu=cpu_demand(0.096, 2.043, 3.0), process_cpu=0.2)
    assert said.main_thread_cpu < 0.11
    verdict = classify_from_proc(queued, said, busy_workers=2)
    assert verdict.phase == DATA_WAIT, verdict.reason


def test_waiting_on_workers_is_data_wait_and_on_working_peers_comm():
    waiting = facts(wchan="poll_schedule_timeout.constprop.0")
    assert classify_from_proc(waiting, signals(), busy_workers=2).phase == DATA_WAIT
    assert classify_from_proc(facts(wchan="futex_do_wait"), signals(),
                              busy_peers=1).phase == COMM
    assert classify_from_proc(waiting, signals()).phase == IDLE  # nobody works: idle


def test_a_busy_gpu_is_compute_and_nothing_seen_is_unknown():
    assert classify_from_proc(facts(), signals(), gpu_busy=True).phase == COMPUTE
    assert classify_from_proc(None, None).phase == "unknown"


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)


@pytest.mark.parametrize("code, phase", [
    ("import sys; sys.stdin.buffer.read(1)", DATA_WAIT),  # blocked reading a pipe
    ("import time; time.sleep(120)", IDLE),
    ("while True: pass", HOST_PREPROCESS),
])
def test_real_processes_read_from_proc_without_a_stack(code, phase):
    child = _child(code)
    try:
        def verdict() -> str | None:
            seen = read_facts(child.pid)
            if seen is None or seen.main_state not in ("S", "R") or (
                    seen.main_state == "S" and not (seen.wchan or seen.syscall)):
                return None  # starting up, or its wait point not there yet
            found = classify_from_proc(seen, None)
            return found.phase if found.phase == phase else None

        poll(verdict, 30, f"pid {child.pid} read as {phase} from /proc",
             explain=lambda: f"{read_facts(child.pid)}")
    finally:
        child.kill()
        child.wait()


def test_blocked_read_names_a_pipe_or_a_named_pipe_and_nothing_else(tmp_path):
    """A main thread blocked reading its stdin pipe reads ANONYMOUS_PIPE, one reading a FIFO
    NAMED_PIPE, and so does one blocked opening a FIFO that no writer has opened (probe 132 L2:
    `with open("jobs.fifo") as f:` between its writers read as data wait, "prefetch its
    input"); one blocked reading a socket or asleep, None (and never the FIFO's path)."""
    fifo, unwritten = tmp_path / "jobs.fifo", tmp_path / "next.fifo"
    os.mkfifo(fifo)
    os.mkfifo(unwritten)
    children = {
        ANONYMOUS_PIPE: _child("import sys; sys.stdin.readline()"),
        NAMED_PIPE: _child(f"for line in open({str(fifo)!r}): pass"),
        "opening": _child(f"with open({str(unwritten)!r}) as f:\n    f.read()"),
        None: _child("import socket; a, b = socket.socketpair(); a.recv(1)"),
        "asleep": _child("import time; time.sleep(120)"),
        # a file by its path, not a FIFO: its type read from what the kernel holds (a stat
        # of a file on a hung FUSE or NFS mount waited on it, on the daemon's loop)
        "terminal": _child("import os; leader, follower = os.openpty(); os.read(follower, 1)"),
    }
    writer = os.open(fifo, os.O_RDWR)  # the FIFO's writer: its reader's open returns
    try:
        for said, child in children.items():
            wanted = (None if said in ("asleep", "terminal") else NAMED_PIPE
                      if said == "opening" else said)

            def blocked(child: subprocess.Popen[bytes] = child) -> bool:
                facts = read_facts(child.pid)  # blocked in its system call by now
                return facts is not None and facts.syscall not in (None, "running")

            poll(blocked, 30, f"pid {child.pid} blocked ({said})")
            poll(lambda child=child, wanted=wanted: blocked_read(child.pid) == wanted, 30,
                 f"pid {child.pid} read as {wanted}",
                 explain=lambda child=child: f"{blocked_read(child.pid)} {read_facts(child.pid)}")
    finally:
        os.close(writer)
        for child in children.values():
            child.kill()
            child.wait()


def test_blocked_read_names_a_wait_for_a_childs_exit():
    """os.system and os.waitpid after os.fork block in wait4 in C: CHILD_EXIT, the one thing
    that says a GPU process there waits for a child it started (probe 152, H1)."""
    children = {
        "os.system": _child("import os; os.system('sleep 120')"),
        "os.waitpid": _child("import os, time\npid = os.fork()\n"
                             "if pid == 0:\n    time.sleep(120)\n    os._exit(0)\n"
                             "os.waitpid(pid, 0)"),
    }
    try:
        for said, child in children.items():
            poll(lambda child=child: blocked_read(child.pid) == CHILD_EXIT, 30,
                 f"pid {child.pid} ({said}) read as waiting for a child's exit",
                 explain=lambda child=child: f"{blocked_read(child.pid)} {read_facts(child.pid)}")
    finally:
        for child in children.values():
            for task in psutil.Process(child.pid).children(recursive=True):
                task.kill()
            child.kill()
            child.wait()


# A folder watched with inotify through ctypes, as a program without a dependency does it.
_INOTIFY = ("import ctypes, ctypes.util, os; "
            "libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True); "
            "fd = libc.inotify_init1(0); "
            "assert libc.inotify_add_watch(fd, os.fsencode({folder!r}), 0x88) >= 0; ")


def test_blocked_read_names_an_inotify_wait_and_a_loop_that_a_timer_wakes_soon(tmp_path):
    """A main thread blocked reading an inotify descriptor, or in an epoll wait (the selectors
    module, an asyncio loop's add_reader) whose epoll holds one, reads INOTIFY; an asyncio loop awaiting asyncio.sleep(1)
    TIMER_WAKES; a loop awaiting an Event nothing sets (no timer), or asyncio.sleep(3600),
    None; and a selectors wait of 5 s on a socket (no inotify) TIMER_WAKES."""
    folder = str(tmp_path)
    children = {
        "read": (INOTIFY, _child(_INOTIFY.format(folder=folder) + "os.read(fd, 4096)")),
        "selector": (INOTIFY, _child(
            _INOTIFY.format(folder=folder) + "import selectors; s = selectors.DefaultSelector(); "
            "s.register(fd, selectors.EVENT_READ)\nwhile True: s.select(timeout=30)")),
        # asyncinotify's way: the loop's epoll holds the descriptor (add_reader), and a timer
        # due within a minute does not hide it
        "asyncio reader": (INOTIFY, _child(
            _INOTIFY.format(folder=folder) + "import asyncio\nasync def main():\n"
            "    asyncio.get_running_loop().add_reader(fd, print)\n"
            "    while True: await asyncio.sleep(1)\nasyncio.run(main())")),
        "asyncio poll": (TIMER_WAKES, _child(
            "import asyncio\nasync def main():\n    while True: await asyncio.sleep(1)\n"
            "asyncio.run(main())")),
        "asyncio event": (None, _child(
            "import asyncio\nasync def main(): await asyncio.Event().wait()\n"
            "asyncio.run(main())")),
        "asyncio hour": (None, _child(
            "import asyncio; asyncio.run(asyncio.sleep(3600))")),
        "socket select": (TIMER_WAKES, _child(
            "import selectors, socket; a, b = socket.socketpair(); "
            "s = selectors.DefaultSelector(); s.register(a, selectors.EVENT_READ)\n"
            "while True: s.select(timeout=5)")),
    }
    try:
        for said, (wanted, child) in children.items():
            def waits(child: subprocess.Popen[bytes] = child) -> bool:
                facts = read_facts(child.pid)
                return facts is not None and facts.syscall in ("read", "epoll_wait",
                                                               "epoll_pwait")

            poll(waits, 30, f"pid {child.pid} blocked ({said})",
                 explain=lambda child=child: f"{read_facts(child.pid)}")
            poll(lambda child=child, wanted=wanted: blocked_read(child.pid) == wanted, 30,
                 f"pid {child.pid} ({said}) read as {wanted}",
                 explain=lambda child=child: f"{blocked_read(child.pid)} {read_facts(child.pid)}")
    finally:
        for _, child in children.values():
            child.kill()
            child.wait()


# An epoll holding `watches` watches (each (file, fd) pair counts: an eventfd dup'ed to many
# numbers, each registered, the dups closed; probe 146's epoll_bomb.py), its main thread then
# waiting in epoll_wait with no timeout. The kernel prints every watch at each read of the
# epoll's /proc/PID/fdinfo.
_EPOLL_WATCHES = (
    "import os, resource, select\n"
    "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n"
    "ep = select.epoll(); left = {watches}\n"
    "while left:\n"
    "    base = os.eventfd(0); dups = []\n"
    "    for _ in range(min(left, hard - 200)):\n"
    "        dups.append(os.dup(base)); ep.register(dups[-1], select.EPOLLIN)\n"
    "    left -= len(dups)\n"
    "    for d in dups: os.close(d)\n"
    "print(ep.fileno(), flush=True)\n"
    "ep.poll(-1)\n")


def _epoll_child(watches: int) -> tuple[subprocess.Popen[str], int]:
    """A child waiting in an epoll of `watches` watches, and that epoll's descriptor."""
    child = subprocess.Popen([sys.executable, "-c", _EPOLL_WATCHES.format(watches=watches)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    epoll_fd = int(child.stdout.readline())
    poll(lambda: (read_facts(child.pid) or facts()).syscall in ("epoll_wait", "epoll_pwait"),
         30, f"pid {child.pid} waiting in its epoll",
         explain=lambda: f"{read_facts(child.pid)}")
    return child, epoll_fd


def test_an_epoll_of_many_watches_is_read_off_the_loop_and_a_slow_read_is_not_repeated(
        monkeypatch):
    """probe 146 H1: a user's epoll of millions of watches made each read of its fdinfo take
    ~3 s (the kernel prints them all), on the daemon's loop, after every dump of the process.
    BlockedReads reads in its own worker; a read not done within its budget leaves the wait
    unknown (None) while the loop goes on, no other read starts while it runs, and that
    process's epoll is not read again once the read is seen to have taken more CPU than the
    budget (the kernel's time formatting the watches; a read that only waited for a core on a
    loaded host does not count). (300,000 real watches; the read is held in the worker,
    spending CPU as the kernel does, until the test has seen all that, so no timing decides
    the outcome.)"""
    child, epoll_fd = _epoll_child(300_000)
    fdinfo = f"/proc/{child.pid}/fdinfo/{epoll_fd}"
    real_read = proc_state._read
    reads: list[tuple[str, int]] = []  # (path, thread)
    entered, release = threading.Event(), threading.Event()

    def recorded(path: str, limit: int = 4096) -> str | None:
        reads.append((path, threading.get_ident()))
        if path == fdinfo:
            entered.set()
            deadline = time.monotonic() + 60
            # the kernel's read: CPU spent in the reading thread, as long as the test needs
            while not release.is_set() and time.monotonic() < deadline:
                pass
        return real_read(path, limit)

    monkeypatch.setattr(proc_state, "_read", recorded)
    start = psutil_start(child.pid)
    reader = BlockedReads(budget_s=0.05)

    async def run() -> None:
        loop_thread = threading.get_ident()
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.get_running_loop().create_task(tick())
        try:
            assert await reader.read(child.pid, start) is None  # over budget: not known
            assert entered.is_set()
            assert all(thread != loop_thread for _, thread in reads), reads
            ticked = ticks
            assert ticked > 0  # the loop ran on while the worker read
            before = len(reads)
            # while the slow read runs, no other read starts (another process: unknown)
            assert await reader.read(os.getpid(), 1.0) is None
            assert len(reads) == before
            release.set()
            running = reader._running
            assert running is not None
            await asyncio.wrap_future(running)  # the slow read ends in its own time
            # the same process again: its wait read without its epoll (one slow read in a life)
            assert await reader.read(child.pid, start) is None
            assert (child.pid, start) in reader.slow
            again = [path for path, _ in reads[before:]]
            assert f"/proc/{child.pid}/syscall" in again and fdinfo not in again, again
        finally:
            ticker.cancel()
            reader.close()

    try:
        asyncio.run(run())
    finally:
        release.set()
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def psutil_start(pid: int) -> float:
    import psutil

    return psutil.Process(pid).create_time()


def test_a_read_that_only_waited_past_its_budget_does_not_mark_its_process_slow(monkeypatch):
    """A read over its dump's budget in wall time but not in CPU (its worker waited for a core
    on a loaded host, or a file system answered late) leaves that dump's wait unknown, and no
    more: the process's epoll is still read next time (marked slow for its life on the wall
    time, an ordinary watcher would lose its named waits to one hiccup)."""
    real_read = proc_state._read
    release = threading.Event()
    reads: list[str] = []

    def waiting(path: str, limit: int = 4096) -> str | None:
        reads.append(path)
        if len(reads) == 1:
            release.wait(60)  # the first read waits, spending no CPU
        return real_read(path, limit)

    monkeypatch.setattr(proc_state, "_read", waiting)
    me = (os.getpid(), 1.0)
    reader = BlockedReads(budget_s=0.05)

    async def run() -> None:
        try:
            assert await reader.read(*me) is None  # over its wall budget: not known
            release.set()
            running = reader._running
            assert running is not None
            await asyncio.wrap_future(running)
            await reader.read(*me)  # the next dump's read notes the first one's CPU
            assert me not in reader.slow, reader.slow
        finally:
            reader.close()

    try:
        asyncio.run(run())
    finally:
        release.set()


def test_attribution_reads_a_blocked_main_thread_s_wait_in_its_worker_not_on_the_loop(
        tmp_path, monkeypatch):
    """The dump of a process whose main thread waits in an epoll holding an inotify
    descriptor (asyncinotify's way) names INOTIFY in its host signals, read in BlockedReads'
    worker: no read of its epoll's fdinfo on the daemon's loop (probe 146 H1: Attribution._rows
    read it on the loop, ~3 s at 2,000,000 watches)."""
    from daemon.config import AttributionConfig
    from daemon.runtime.attribution import Attribution
    from daemon.sources.frames import OK, DumpResult, ThreadStack
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
    from daemon.store.writer import Store

    folder = str(tmp_path)
    child = _child(_INOTIFY.format(folder=folder) + "import asyncio\nasync def main():\n"
                   "    asyncio.get_running_loop().add_reader(fd, print)\n"
                   "    await asyncio.Event().wait()\nasyncio.run(main())")
    real_read = proc_state._read
    fdinfo_reads: list[int] = []  # the threads that read the child's epoll's fdinfo

    def recorded(path: str, limit: int = 4096) -> str | None:
        if path.startswith(f"/proc/{child.pid}/fdinfo/"):
            fdinfo_reads.append(threading.get_ident())
        return real_read(path, limit)

    class Sampler:
        def available(self) -> int:
            return 0  # no dump but the test's own

        async def dump(self, pid: int) -> DumpResult:
            frame = Frame("select", "/usr/lib/python3/selectors.py", 468)
            return DumpResult(pid, 1000.0, OK, threads=[
                ThreadStack(pid, "MainThread", False, (frame,), pid, False, pid)])

    store = Store(tmp_path / "mlcost.db")
    seen: list[str | None] = []
    try:
        poll(lambda: blocked_read(child.pid) == INOTIFY, 30, f"pid {child.pid} in its epoll",
             explain=lambda: f"{read_facts(child.pid)}")
        proc = ProcessSample(child.pid, psutil_start(child.pid), os.getpid(), "ann",
                             "python watch.py", (GpuUse(0, 1 << 30, 0.0),))
        attribution = Attribution(AttributionConfig(min_window=0.5, dump_interval=0.5), store,
                                  Sampler())  # type: ignore[arg-type]
        # (where the read runs is what is tested, not its budget: a loaded CI machine's worker
        # may wait longer than 0.5 s for a core)
        attribution._blocked.budget_s = 60.0
        real_rows = attribution._rows

        def rows(*args, **kwargs):  # what the row was made with
            seen.append(kwargs.get("blocked_on"))
            return real_rows(*args, **kwargs)

        monkeypatch.setattr(attribution, "_rows", rows)
        monkeypatch.setattr(proc_state, "_read", recorded)

        gpu = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 1 << 30, 40 << 30)

        async def run() -> int:
            loop_thread = threading.get_ident()
            for tick in range(3):  # its host signals: two ticks' snapshots or more
                attribution.on_tick(Sample(1000.0 + tick, tick, gpus=(gpu,), processes=(proc,)))
            assert attribution.host_signals(proc) is not None
            await attribution._sample(proc, 0.0, 0.0)
            await attribution.stop()
            return loop_thread

        loop_thread = asyncio.run(run())
    finally:
        store.close()
        child.kill()
        child.wait()
    assert fdinfo_reads, "the epoll's fdinfo was never read"
    assert loop_thread not in fdinfo_reads
    assert seen == [INOTIFY]


def _sample(ts: float, phase: str, frames: tuple[Frame, ...], reason: str = "") -> StackSample:
    return StackSample(ts, 7, 7, stack_hash(frames), frames, phase, 0.0, reason)


def test_a_phase_from_proc_samples_has_low_confidence_and_one_from_stacks_high():
    proc_frame = where(facts(wchan="anon_pipe_read"))
    assert proc_frame.filename == NO_STACK_FILE and "anon_pipe_read" in proc_frame.name
    stack = (Frame("load", "/srv/train.py", 12),)
    samples = [_sample(i, DATA_WAIT, (proc_frame,), f"{NO_STACKS_EVIDENCE}: reading")
               for i in range(3)] + [_sample(10 + i, IDLE, stack) for i in range(2)]
    balance = phase_balance(samples, window_s=10.0, busy_seconds=0.0)
    assert balance[DATA_WAIT]["confidence"] == LOW_CONFIDENCE
    assert balance[IDLE]["confidence"] == HIGH_CONFIDENCE
    assert balance[DATA_WAIT]["top_stacks"][0]["reason"].startswith(NO_STACKS_EVIDENCE)


def test_the_wire_reads_the_confidence_and_marks_the_phase():
    low = Process.from_dict({"pid": 1, "phase": "data_wait", "phase_confidence": "low"})
    assert low.phase_confidence == "low"
    assert phase_label(low.phase, low.phase_confidence) == "data_wait~"
    assert phase_label("data_wait", "high") == "data_wait"
    odd = Process.from_dict({"pid": 1, "phase": "idle", "phase_confidence": "\x1b[31mhuh"})
    assert odd.phase_confidence is None  # an unknown word is not shown


# -- rules: never a SIGTERM from /proc evidence alone -----------------------------------------

def _idle_window_recs(idle_part: dict, cpu_per_s: float = 0.0) -> list:
    from test_rules import CATALOG, P4D, window

    from daemon.analysis.rules import build_analysis, evaluate

    # Held idle for 10 min (ticks 10 s apart), using `cpu_per_s` CPU-seconds a second.
    samples = window(n=61, utils=[0.0] * 8, holders={0: 0.0},
                     proc_kw=lambda i: {"cpu_seconds": float(i * 10) * cpu_per_s})
    key = f"42:{samples[0].processes[0].start_time:.3f}"
    phases = {key: {IDLE: {"seconds": 570.0, "share": 0.95, "gpu_idle_seconds": 570.0,
                           **idle_part}}}
    found = evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32))
    return [r for r in found if r.rule == "idle_gpu_held"]


def test_no_sigterm_for_a_working_process_from_low_confidence_proc_evidence_alone():
    from_proc = {"confidence": LOW_CONFIDENCE, "top_stacks": [{
        "frames": ["<proc>:0 kernel wait futex_do_wait"], "file": NO_STACK_FILE, "line": 0,
        "function": "kernel wait futex_do_wait", "samples": 30,
        "reason": f"{NO_STACKS_EVIDENCE}: waiting (futex_do_wait), no CPU and no I/O"}]}
    [rec] = _idle_window_recs(from_proc)
    assert rec.action["kind"] != "sigterm"
    assert "only /proc" in rec.action["text"] and "only /proc" in rec.summary
    # The same evidence from stacks does propose it: the test above can fail.
    from_stacks = {"confidence": HIGH_CONFIDENCE, "top_stacks": [{
        "frames": ["train.py:88 main"], "file": "/srv/train.py", "line": 88,
        "function": "main", "samples": 30, "reason": "sleeping or waiting"}]}
    [rec] = _idle_window_recs(from_stacks)
    assert rec.action["kind"] == "sigterm"
    # A CPU at work while the GPU idles is work whatever the stacks say (probe 132 H3): no
    # idle advice at all, from either evidence.
    assert _idle_window_recs(from_proc, cpu_per_s=1.0) == []
    assert _idle_window_recs(from_stacks, cpu_per_s=1.0) == []


# -- check: which processes can be traced ---------------------------------------------------

UNTRACEABLE = textwrap.dedent("""
    import ctypes, sys
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: only CAP_SYS_PTRACE may trace
    print("ready", flush=True)
    sys.stdin.read()
""")

# Runs check_tracing as a tracer without CAP_SYS_PTRACE: as root, after dropping to nobody
# (modules imported first); as another user, as that user.
CHECKER = textwrap.dedent("""
    import json, os, sys
    from daemon.commands.check import check_tracing, how_to_grant_ptrace
    import daemon.sources.proc_state, daemon.sources.redact, daemon.sources.safe_text
    scope = os.open(sys.argv[1], os.O_RDONLY)  # before the drop: the test's folder is 0700
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    pids = [int(p) for p in sys.argv[2].split(",")]
    result = check_tracing(pids, scope_path=f"/proc/self/fd/{scope}")
    print(json.dumps({"status": result.status, "detail": result.detail, "fix": result.fix}))
""")


def test_check_names_a_process_it_cannot_trace_and_how_to_grant_it(tmp_path):
    scope = tmp_path / "ptrace_scope"
    scope.write_text("2\n")
    program = tmp_path / "gpu_job.py"
    program.write_text(UNTRACEABLE)
    target = subprocess.Popen([sys.executable, str(program), "--epochs", "3"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        result = subprocess.run([sys.executable, "-c", CHECKER, str(scope), str(target.pid)],
                                capture_output=True, text=True, timeout=60, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert result.returncode == 0, result.stderr
        said = json.loads(result.stdout)
    finally:
        target.kill()
        target.wait()
    assert said["status"] == "warn"
    assert f"pid {target.pid} (" in said["detail"] and "gpu_job.py --epochs 3" in said["detail"]
    assert "0 GPU process(es) can be traced, 1 cannot (yama ptrace_scope=2)" in said["detail"]
    assert "SYS_PTRACE" in said["fix"] and "securityContext" in said["fix"]
    assert "sysctl -w kernel.yama.ptrace_scope=1" in said["fix"]


def test_check_says_ok_where_every_process_can_be_traced(tmp_path):
    from daemon.commands.check import OK, check_tracing

    child = _child("import sys; sys.stdin.buffer.read(1)")
    try:
        if not may_trace(child.pid):
            pytest.skip("this host lets no one trace even its own child (yama scope 3?)")
        found = check_tracing([child.pid], scope_path=str(tmp_path / "no-yama"))
    finally:
        child.kill()
        child.wait()
    assert found.status == OK and "no yama ptrace_scope" in found.detail
    assert "all 1 GPU process(es) can be traced" in found.detail


# -- live: a real mlcostd with py-spy off (--no-stacks) -------------------------------------

def test_a_daemon_without_stacks_shows_low_confidence_phases_from_proc(mlcostd, tmp_path):
    """Two corpus programs under `mlcostd run --no-stacks`: a job that waits for a trigger
    (idle, sleeping in the kernel) and one decoding frames on the CPU (host preprocessing).
    py-spy never runs (no stack status), /v1/now marks both phases low confidence with the
    /proc evidence, the report shows them with ~, and no SIGTERM is proposed from it."""
    from test_corpus import CORPUS, FAST_STACKS, scenario_file

    path = scenario_file(tmp_path, [
        {"name": "waits", "command": [sys.executable, str(CORPUS / "await_trigger.py")]},
        {"name": "decodes", "command": [sys.executable, str(CORPUS / "decode_frames.py")]}])
    daemon = mlcostd("idle-host", interval=1.0, config={
        **FAST_STACKS, "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s"},
        "cost": {"evaluate_every": "5s"}}, args=["--simulate", str(path), "--no-stacks"])
    expected = {"await_trigger": IDLE, "decode_frames": HOST_PREPROCESS}
    state: dict = {}

    def all_from_proc() -> bool:
        procs = [p for p in daemon.now()["processes"] if p.get("gpus")]
        state["seen"] = {name: p for p in procs for name in expected if name in p["command"]}
        return len(state["seen"]) == 2 and all(
            p["phase"] == expected[name] and p["phase_confidence"] == "low"
            for name, p in state["seen"].items())

    poll(all_from_proc, 120, "both processes' phases from /proc, low confidence",
         explain=lambda: json.dumps({n: {k: p.get(k) for k in ("phase", "phase_confidence",
                                                                 "phase_reasons", "phases")}
                                     for n, p in state.get("seen", {}).items()}, indent=1))
    for name, proc in state["seen"].items():
        assert proc["stack_status"] is None  # py-spy was never run
        assert proc["phase_reasons"][expected[name]].startswith(NO_STACKS_EVIDENCE)
        shown = Process.from_dict(proc)
        assert phase_label(shown.phase, shown.phase_confidence) == expected[name] + "~"
    waiting = state["seen"]["await_trigger"]

    def idle_advice() -> list:
        return [r for r in daemon.call("recommendations")
                if r.rule == "idle_gpu_held" and r.target == waiting["key"]]

    [advice] = poll(idle_advice, 90, "the idle-GPU advice for the waiting job")
    assert advice.action_kind != "sigterm"  # /proc evidence alone: look first
    report = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(daemon.db),
                             "--since", "10m"], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert "host_preprocess~" in report.stdout and "idle~" in report.stdout, report.stdout
    assert "low confidence, from /proc, no stacks" in report.stdout


# -- attribution: py-spy really refused ------------------------------------------------------

def test_a_process_py_spy_may_not_read_is_classified_from_proc_and_not_dumped_again(tmp_path):
    """A real refusal: the target makes itself non-dumpable (PR_SET_DUMPABLE 0) and py-spy runs
    without CAP_SYS_PTRACE (as nobody where the test is root), so the kernel denies it."""
    import asyncio
    import shutil

    from daemon.config import AttributionConfig
    from daemon.runtime.attribution import Attribution
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
    from daemon.sources.stacks import PERMISSION_DENIED, StackSampler, find_py_spy
    from daemon.store.writer import Store

    py_spy = find_py_spy()
    if py_spy is None:
        pytest.skip("py-spy is not installed")
    drop = ""
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: cannot run py-spy without CAP_SYS_PTRACE")
        drop = "setpriv --reuid=65534 --regid=65534 --clear-groups "
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f"#!/bin/sh\nexec {drop}{py_spy} \"$@\"\n")
    wrapper.chmod(0o755)
    program = tmp_path / "gpu_job.py"
    program.write_text(UNTRACEABLE)
    target = subprocess.Popen([sys.executable, str(program)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    store = Store(tmp_path / "mlcost.db")
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        import psutil

        start = psutil.Process(target.pid).create_time()
        proc = ProcessSample(target.pid, start, os.getpid(), "ann", "python gpu_job.py",
                             (GpuUse(0, 1 << 30, 0.0),))
        gpu = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 1 << 30, 40 << 30)
        sampler = StackSampler(py_spy=str(wrapper), min_interval_s=0.0, global_max_per_s=100.0,
                               cpu_budget_ratio=1.0, timeout_s=20.0)
        attribution = Attribution(AttributionConfig(min_window=0.5, dump_interval=0.5), store,
                                  sampler)

        async def run() -> None:
            result = await sampler.dump(target.pid)
            assert result.status == PERMISSION_DENIED, result.error
            [row] = attribution._rows(proc, result, 0.0, None, busy_elsewhere=False)
            # it blocks reading its stdin pipe: waiting for input, from /proc
            assert row.reason.startswith(NO_STACKS_EVIDENCE) and row.phase == DATA_WAIT, row
            assert row.frames[0][1] == NO_STACK_FILE
            dumps = sampler.dumps_total
            for tick in range(3):  # in a dip: /proc samples from now on, no more py-spy
                attribution.on_tick(Sample(1000.0 + tick, tick, gpus=(gpu,), processes=(proc,)))
                await asyncio.sleep(0)
            assert sampler.dumps_total == dumps
            assert attribution.samples_kept >= 2  # its window's /proc samples, stored
            await attribution.stop()

        asyncio.run(run())
    finally:
        store.close()
        target.kill()
        target.wait()


def test_proc_samples_are_bounded_per_tick_and_every_process_gets_its_turn(tmp_path):
    """Forty GPU processes in a window on a host without stacks: a tick samples at most
    PROC_SAMPLES_PER_S a second of them from /proc (bounded work, whatever the host's size),
    the longest unsampled first, so all forty are sampled within 40 / 8 = 5 ticks."""
    import asyncio

    from daemon.config import AttributionConfig
    from daemon.runtime.attribution import PROC_SAMPLES_PER_S, Attribution
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
    from daemon.store.writer import Store

    store = Store(tmp_path / "mlcost.db")
    # forty processes /proc can read (this one, under forty start times), idle on their GPU
    procs = tuple(ProcessSample(os.getpid(), 1000.0 + i, os.getppid(), "ann", "python job.py",
                                (GpuUse(0, 1 << 30, 0.0),)) for i in range(40))
    gpu = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 40 << 30, 40 << 30)
    attribution = Attribution(AttributionConfig(min_window=0.5, dump_interval=60.0,
                                                stacks=False), store, interval_s=1.0)
    per_tick = int(PROC_SAMPLES_PER_S)
    kept = []

    async def run() -> None:
        for tick in range(6):
            attribution.on_tick(Sample(2000.0 + tick, tick, gpus=(gpu,), processes=procs))
            kept.append(attribution.samples_kept)
        await attribution.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()
    # the window qualifies on the second tick: the first tick's samples are written with it
    assert kept[1] == 2 * per_tick and kept[4] == 40, kept
    # none sampled twice within its dump_interval (60 s): forty rows are the forty processes
    assert kept[5] == 40


def test_main_thread_clocks_are_read_only_for_processes_whose_proc_sample_is_near(tmp_path):
    """Forty processes in a window without stacks, eight /proc samples a tick: the main
    thread's clock is read for those whose turn comes within the signals' snapshots, at most
    SIGNAL_TICKS x 8 a tick, not for all forty; and every sample taken once the window is
    under way still has the main thread's CPU in its signals."""
    import asyncio

    from daemon.config import AttributionConfig
    from daemon.runtime.attribution import PROC_SAMPLES_PER_S, SIGNAL_TICKS, Attribution
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
    from daemon.store.writer import Store

    store = Store(tmp_path / "mlcost.db")
    procs = tuple(ProcessSample(os.getpid(), 1000.0 + i, os.getppid(), "ann", "python job.py",
                                (GpuUse(0, 1 << 30, 0.0),)) for i in range(40))
    gpu = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 40 << 30, 40 << 30)
    attribution = Attribution(AttributionConfig(min_window=0.5, dump_interval=2.0,
                                                stacks=False), store, interval_s=1.0)
    reads_this_tick = []
    clock_times = attribution._main_threads.times

    def counted(pid, start_time):
        reads_this_tick.append((pid, start_time))
        return clock_times(pid, start_time)

    attribution._main_threads.times = counted  # type: ignore[method-assign]
    signals_at_sample = []  # (tick, main thread CPU known) of each /proc sample
    host_signals = attribution.host_signals
    tick_now = [0]

    def observed(proc):
        said = host_signals(proc)
        signals_at_sample.append((tick_now[0], said is not None
                                  and said.main_thread_cpu is not None))
        return said

    attribution.host_signals = observed  # type: ignore[method-assign]
    reads = []

    async def run() -> None:
        for tick in range(20):
            tick_now[0] = tick
            reads_this_tick.clear()
            attribution.on_tick(Sample(3000.0 + tick, tick, gpus=(gpu,), processes=procs))
            reads.append(len(reads_this_tick))
        await attribution.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()
    bound = SIGNAL_TICKS * int(PROC_SAMPLES_PER_S)
    assert max(reads) <= bound < len(procs), reads
    later = [known for tick, known in signals_at_sample if tick >= 2 * SIGNAL_TICKS]
    assert len(later) >= 8 * int(PROC_SAMPLES_PER_S) and all(later), signals_at_sample


@pytest.mark.parametrize("machine, number, name, phase", [
    ("x86_64", 0, "read", DATA_WAIT), ("aarch64", 63, "read", DATA_WAIT),
    ("x86_64", 202, "futex", IDLE), ("aarch64", 98, "futex", IDLE),
    ("x86_64", 232, "epoll_wait", IDLE), ("aarch64", 22, "epoll_pwait", IDLE),
    ("aarch64", 73, "ppoll", IDLE), ("aarch64", 207, "recvfrom", DATA_WAIT),
])
def test_blocking_calls_are_named_on_x86_64_and_aarch64(machine, number, name, phase):
    """/proc/PID/syscall gives a number of the machine's own table: on an arm64 host (Grace
    Hopper, Graviton) 63 is read and 0 is io_setup, so the x86_64 table would misname it."""
    assert syscall_name(number, machine) == name
    said = signals(read_per_s=300e3) if phase == DATA_WAIT else signals()
    assert classify_from_proc(facts(syscall=name), said).phase == phase
    assert syscall_name(0, "aarch64") == "syscall 0"  # io_setup: not a wait mlcost reads
    assert syscall_name(63, "riscv64") == "syscall 63"  # an architecture without a table
