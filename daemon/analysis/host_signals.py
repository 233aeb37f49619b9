"""What a process did over the last seconds, seen from outside its Python stack.

A blocking call into C (pickle.dump, array.tofile, a read inside a C extension) leaves no Python
frame, so frames alone cannot tell a checkpoint from a host sync. `HostSignals` are what such a
call looks like from outside, measured by the attribution between dumps: the main thread's
on-CPU time, the process's read and write bytes, D state and iowait, and whether its GPU was
busy while the host waited. The thresholds here are where the classifier (daemon.analysis.phases)
and its /proc fallback (daemon.analysis.proc_phases) read a signal as a phase.
"""

from __future__ import annotations

from dataclasses import dataclass

# Signal thresholds (HostSignals). A log line or a metrics write is kilobytes a second; a
# checkpoint or an output file is megabytes: 4 MB/s written while the GPU idles is the latter.
WRITE_MIN_PER_S = 4e6
# Reading 1 MB/s while the GPU idles is the input pipeline, not a config file or a log tail.
READ_MIN_PER_S = 1e6
# The same lines per CPU-second the process and its children got (HostSignals.tree_cpu), so a
# verdict does not flip with the machine's load: on a loaded host a writer (a compressor it
# waits for) gets less CPU and writes fewer bytes a second, but as many per CPU-second. Only
# over at least IO_MIN_SECONDS_WORTH seconds' worth of bytes at the line (a sleeping process's
# few kilobytes over a sliver of CPU are no stream); a quarter of a second's worth, as at load
# 35-40 on 2 cores a compressor wrote ~3 MB in the 3 s the signals cover, under a second's 4 MB.
IO_MIN_SECONDS_WORTH = 0.25
# The main thread on a CPU at least half of the time it was not waiting for a core (see
# cpu_demand), with no I/O, is computing on the host.
ON_CPU_MIN = 0.5


# A main thread on a CPU at least ON_CPU_MIN of its time, whose process read under this many
# bytes per CPU-second it got, spends its CPU on something else than the reading: copying from
# the page cache runs at hundreds of MB per CPU-second and a read from disk leaves the CPU, where
# a loop that reads a small record and then decodes it in Python (probe 120's: 2.4 MB/s at half
# a core) computes on the host.
READ_BOUND_MIN_PER_CPU_S = 50e6


# A main thread in a timed hand-over wait (`jobs.get(timeout=1)` in a loop that looks at a stop
# flag between tries) wakes each time the timeout runs out, finds nothing and waits again: a few
# microseconds on a CPU a wake-up. On a CPU under this share of the time it was not waiting for
# a core (see cpu_demand), its wake-ups brought it no work.
TIMED_WAKES_CPU_MAX = 0.05
# A main thread waiting for a core at least a quarter of the time is slowed by the host's load.
QUEUED_MIN = 0.25
# Its child processes on a CPU a tenth of a core between them are at work (decoders feeding a
# queue, workers computing): an idle multiprocessing manager or a sleeping submitter uses a few
# thousandths. Not half a core, which a loaded host denies a busy child (a decoder beside two
# busy cores got 0.4-0.6); a child runnable at the last tick counts as at work whatever it got.
CHILDREN_CPU_MIN = 0.1
# Children of a process that multiprocessing starts for itself, no workers of its loop: they
# wait for nothing the job needs (found in a child's command line).
MULTIPROCESSING_HELPERS = ("resource_tracker", "forkserver", "semaphore_tracker")


def cpu_demand(on_cpu_s: float, queued_s: float, wall_s: float) -> float | None:
    """The share of a thread's time that it ran, leaving out the time it waited for a core.

    A runnable thread waiting on a run queue does no work, so it is not counted as running;
    nor is it counted as sleeping, since it wanted the CPU. That time is left out of the
    denominator, and the share is run / (run + sleep), the thread's own demand: a CPU-bound
    thread reads ~1 and a thread that mostly waits on the GPU or a loader reads low, however
    loaded the host (at load 31 on 2 cores a main thread ran 3.2% of the wall time and queued
    68.1%: it reads 10%, not 71%). All the time queued: it wanted a CPU throughout, 1.0.
    None: no time passed."""
    if wall_s <= 0:
        return None
    own = wall_s - max(queued_s, 0.0)
    if own <= 0:
        return 1.0
    return min(max(on_cpu_s, 0.0) / own, 1.0)


# The GPU quiet at least this share of its main thread's own time (the time it ran or slept,
# not waiting for a core: gpu_quiet_share): under it, the GPU worked nearly all of that time,
# and the thread's CPU ran beside the GPU's work, not while the GPU waited for it.
GPU_QUIET_MIN = 0.1


def gpu_quiet_share(gpu_utilization: float, main_thread_queued: float | None) -> float | None:
    """The share of its main thread's own time (the time it was not waiting for a core, as
    cpu_demand counts it) that its GPU was quiet, `gpu_utilization` (0-1) being the share of
    the wall time a kernel ran: the wall time the GPU was quiet, less the time the thread
    waited for a core, over the thread's own time. A loop that computes on the host between
    kernels waits for a core while its GPU is quiet (the GPU waits for the batch that thread
    makes), so that time is left out of both sides, as the demand leaves it out of the
    thread's: 25 ms of tokenizing before a 60-ms step, on a loaded host 45 ms of wall time
    with 20 of them queued, is a demand of 25 / 85, the GPU's quiet share of the thread's own
    time (25 / 85) whatever the load, where the wall time the GPU was quiet (45 / 105) grows
    with the load. None where the GPU was quiet under GPU_QUIET_MIN of that time."""
    queued = min(max(main_thread_queued or 0.0, 0.0), 1.0)
    if queued >= 1.0:
        return None
    quiet = (1.0 - min(max(gpu_utilization, 0.0), 1.0) - queued) / (1.0 - queued)
    return quiet if quiet >= GPU_QUIET_MIN else None


@dataclass(frozen=True, slots=True)
class HostSignals:
    """What a process did over the last seconds, seen from outside its Python stack.

    Rates are over `seconds`; the read and write rates are the larger of storage bytes and
    syscall bytes (pipes and sockets count as reading), summed over the process and its
    children. None: not measured (the kernel would not say, or too few ticks yet).
    """

    seconds: float
    # Share of the time its main thread ran, out of the time it was not waiting for a core
    # (cpu_demand), 0-1: its run-queue wait is neither host work nor idle.
    main_thread_cpu: float | None
    process_cpu: float | None  # share of one core, all its threads
    # Share of the wall time its main thread was runnable but waiting for a core (schedstat),
    # 0-1. None: not measured.
    main_thread_queued: float | None = None
    # Whether its main thread ran or waited for a core at all between the last two ticks
    # (schedstat): False, it slept throughout, in a call nothing woke (a socket read no byte
    # came to). None: not measured (no schedstat, or fewer than two readings).
    main_thread_woke: bool | None = None
    # What its main thread is blocked waiting on at the stack dump, where /proc tells
    # (daemon.sources.proc_state.blocked_read): a pipe (NAMED_PIPE, ANONYMOUS_PIPE), an inotify
    # descriptor (INOTIFY), an epoll wait a timer ends within a minute (TIMER_WAKES); None:
    # none of those, not blocked, or not read.
    main_thread_blocked_on: str | None = None
    read_per_s: float = 0.0
    write_per_s: float = 0.0
    # CPU-seconds a second of the process and its children (waited-for ones included): the
    # time it got to run, which a loaded host shares out. None: not measured.
    tree_cpu: float | None = None
    # Its child processes in state R (on a CPU or waiting for one) or D at the last tick.
    children_running: int = 0
    d_state: bool = False  # a thread of it was in uninterruptible (disk) sleep
    iowait_growing: bool = False  # its block I/O delay grew (delay accounting)
    gpu_busy: bool | None = None  # its GPUs busy on average (daemon.analysis.busy.gpu_is_busy)
    # Whether it held a GPU at any of the ticks read (False: none, so no wait of it is a sync
    # on its GPU's work); None: not known.
    gpu_held: bool | None = None
    # Its GPUs' mean utilization over the seconds, 0-1: the share of the time a kernel ran.
    # None: not measured.
    gpu_utilization: float | None = None
    # ESTABLISHED TCP connections it opened (to a broker, a job server, a peer; not those
    # accepted on its own ports), as its kind read them (daemon.analysis.kinds.Kind.
    # peer_connections). None: no kind yet.
    connections_opened: int | None = None
    # Its TCP connections all go to GPU processes of its own job (its parent, children or
    # sibling ranks) or to itself, as its kind read them (Kind.job_peers_only): a bare socket
    # read waits for a peer of its job (comm), not for a job server's next job.
    job_peers_only: bool = False
    # It is an interactive Python prompt, its stdin a terminal, as its kind read it
    # (Kind.interactive_prompt): a main thread with no Python frame waits at the prompt.
    interactive_prompt: bool = False

    def streams(self, per_s: float, line: float) -> str | None:
        """How a rate of `per_s` bytes a second meets `line`: per wall second, or per
        CPU-second it got (over at least IO_MIN_SECONDS_WORTH seconds' worth of the line's
        bytes); None if neither."""
        if per_s >= line:
            return f"{per_s / 1e6:.3g} MB/s"
        cpu = self.tree_cpu
        if (cpu and per_s * self.seconds >= line * IO_MIN_SECONDS_WORTH
                and per_s / cpu >= line):
            return (f"{per_s / 1e6:.3g} MB/s, {per_s / cpu / 1e6:.3g} MB per CPU-second it "
                    "got (the rate a loaded host slows)")
        return None

    def input_read(self, caught_on_cpu: bool = False) -> str | None:
        """How it reads its input, by `streams` at READ_MIN_PER_S; None where it reads less, or
        where its main thread was on a CPU (at least ON_CPU_MIN of the time, or
        `caught_on_cpu`: its stack dump found it running a line of its own that calls no
        I/O) and the process read under READ_BOUND_MIN_PER_CPU_S per CPU-second it got (host
        compute, not a wait)."""
        reading = self.streams(self.read_per_s, READ_MIN_PER_S)
        cpu = self.on_cpu
        if reading is None or cpu is None or (cpu < ON_CPU_MIN and not caught_on_cpu):
            return reading
        got = self.tree_cpu if self.tree_cpu else (self.process_cpu or cpu)
        return None if self.read_per_s < READ_BOUND_MIN_PER_CPU_S * got else reading

    @property
    def on_cpu(self) -> float | None:
        """The main thread's on-CPU share, or the whole process's where that is not known."""
        return self.main_thread_cpu if self.main_thread_cpu is not None else self.process_cpu
