"""The phase of a process whose Python stack cannot be read (ptrace denied, or `[attribution]
stacks = false`), from what /proc shows without ptrace: the lower-confidence fallback.

Inputs are the same HostSignals the stack classifier uses (CPU, read and write bytes with
sockets and pipes, D state, iowait, whether its GPU was busy: daemon.analysis.host_signals) plus
one look at /proc (daemon.sources.proc_state: thread states, the main thread's wchan and blocked
system call where readable). The order mirrors `phases.classify`'s signal steps: writing a lot
is a checkpoint, reading or blocking on I/O is data wait, the main thread on a CPU is host
compute, a thread blocked with nothing moving is idle. Without frames it cannot tell eval from
host compute, output from a checkpoint, or a sync from idle, nor name the line: every verdict
is marked low confidence and its reason starts with NO_STACKS_EVIDENCE, and its "stack" is one
pseudo-frame (file NO_STACK_FILE) naming the kernel wait point, so the report shows where the
evidence came from.
"""

from __future__ import annotations

from daemon.analysis.host_signals import ON_CPU_MIN, WRITE_MIN_PER_S, HostSignals
from daemon.analysis.phase_balance import NO_STACK_FILE
from daemon.analysis.phases import NO_STACKS_EVIDENCE, Classification
from daemon.analysis.stack_rules import WORKER_PROCESSES_FEED_IT
from daemon.sources.frames import Frame
from daemon.sources.proc_state import ProcFacts
from daemon.wire import CHECKPOINT, COMM, COMPUTE, DATA_WAIT, HOST_PREPROCESS, IDLE, UNKNOWN

# Kernel wait points (wchan: the function names change between kernels, so parts of names) and
# system calls that mean "waiting for bytes": a read on a pipe or a socket. Waiting there with
# the GPU idle is waiting for input (6.18: anon_pipe_read, unix_stream_read_generic).
_READ_WAITS = ("pipe_read", "unix_stream_read", "unix_stream_data_wait", "sk_wait_data",
               "tcp_recvmsg", "udp_recvmsg", "skb_wait_for_more_packets", "wait_woken")
_READ_CALLS = ("read", "pread64", "readv", "recvfrom", "recvmsg")
# ...and "waiting for nothing in particular": a timer, a lock or a condition, an event loop, a
# child, a server's accept (6.18: hrtimer_nanosleep, futex_do_wait, do_epoll_wait).
_IDLE_WAITS = ("nanosleep", "futex", "select", "poll", "do_wait", "inet_csk_accept",
               "unix_accept")
_IDLE_CALLS = ("nanosleep", "clock_nanosleep", "futex", "select", "pselect6", "poll", "ppoll",
               "epoll_wait", "epoll_pwait", "epoll_pwait2", "wait4")


def _waits_for(wait: str, waits: tuple[str, ...], calls: tuple[str, ...]) -> bool:
    return wait in calls or any(part in wait for part in waits)


def _said(phase: str, why: str) -> Classification:
    return Classification(phase, f"{NO_STACKS_EVIDENCE}: {why}", None)


def where(facts: ProcFacts | None) -> Frame:
    """The pseudo-frame a fallback sample is stored with: where the main thread waits, as far
    as /proc says (its kernel wait point or blocked system call), else its state."""
    if facts is None:
        return Frame("no stack, no /proc", NO_STACK_FILE, 0)
    if facts.wchan:
        return Frame(f"kernel wait {facts.wchan}", NO_STACK_FILE, 0)
    if facts.syscall:
        return Frame(f"system call {facts.syscall}", NO_STACK_FILE, 0)
    return Frame(f"state {facts.main_state or '?'}", NO_STACK_FILE, 0)


def classify_from_proc(facts: ProcFacts | None, signals: HostSignals | None, *,
                       gpu_busy: bool = False, busy_workers: int = 0,
                       busy_peers: int = 0) -> Classification:
    """The phase from /proc alone (see the module docstring); never raises.

    `busy_workers`: its worker processes (children without a GPU: DataLoader workers), which
    it waits on whether they compute or wait on storage themselves; `busy_peers`: processes holding GPUs with the same parent (ranks of its job) that run
    now. Waiting while its workers work is data wait; while its peers work, communication
    (waiting for them at a barrier or a collective)."""
    if gpu_busy:
        return _said(COMPUTE, "its GPU busy")
    if signals is not None:
        writing = signals.streams(signals.write_per_s, WRITE_MIN_PER_S)
        if writing is not None:
            return _said(CHECKPOINT, f"writing {writing} while the GPU idles (a checkpoint "
                         "or output write)")
        reading = signals.input_read()
        if reading is not None:
            return _said(DATA_WAIT, f"reading {reading} (files, pipes or sockets) while the "
                         "GPU idles")
    if (facts is not None and (facts.in_d or facts.main_state == "D")) or (
            signals is not None and (signals.d_state or signals.iowait_growing)):
        return _said(DATA_WAIT, "blocked on I/O (D state or iowait growing) while the GPU idles")
    cpu = signals.on_cpu if signals is not None else None
    if cpu is not None and cpu >= ON_CPU_MIN:
        return _said(HOST_PREPROCESS, f"on-CPU {cpu:.0%} with no I/O while the GPU idles "
                     "(host compute; eval cannot be told apart without a stack)")
    # State R also means runnable and waiting for a core: only where the main thread's clocks
    # were not read does one sampled R stand for host compute.
    if cpu is None and facts is not None and facts.main_state == "R":
        return _said(HOST_PREPROCESS, "main thread running with no I/O while the GPU idles")
    wait = _wait_point(facts)
    if busy_workers:
        # WORKER_PROCESSES_FEED_IT: the prefetch patch offers more of them, not a thread pool
        return _said(DATA_WAIT, f"waiting ({wait or 'blocked'}) on its {busy_workers} worker "
                     f"process(es) (a data loader) while the GPU idles: "
                     f"{WORKER_PROCESSES_FEED_IT}")
    if busy_peers:
        return _said(COMM, f"waiting ({wait or 'blocked'}) while {busy_peers} peer "
                     "process(es) of its job (same parent) run: waiting for them")
    # A read that brings nothing (input() at a prompt) looks the same from here as a slow feed
    # whose bytes came just outside the last seconds (seen at load 25 on 2 cores): data wait,
    # the side that never calls a working job idle.
    if wait is not None and _waits_for(wait, _READ_WAITS, _READ_CALLS):
        return _said(DATA_WAIT, f"main thread waiting for input ({wait}) while the GPU idles")
    others = 0 if facts is None else facts.running - (facts.main_state == "R")
    if others > 0:
        return _said(HOST_PREPROCESS, f"{others} thread(s) running while the main "
                     "thread waits and the GPU idles")
    if wait is not None and _waits_for(wait, _IDLE_WAITS, _IDLE_CALLS):
        return _said(IDLE, f"waiting ({wait}), no CPU and no I/O, with the GPU idle")
    if facts is not None and facts.main_state == "S" and cpu is not None:
        return _said(IDLE, f"sleeping, on-CPU {cpu:.0%}, no I/O, with the GPU idle")
    return _said(UNKNOWN, "not enough seen from /proc yet")


def _wait_point(facts: ProcFacts | None) -> str | None:
    if facts is None:
        return None
    return facts.wchan or (facts.syscall if facts.syscall != "running" else None)
