"""Idle rules: a GPU held by a process but idle, and a whole host idle (stop it).

Idle means idle: the idle-GPU rule fires only for a process that shows no sign of work over
the whole window (`signs_of_work` is empty): no kernels of its own (by their mean, or at a few
readings however small), no CPU use while its GPU idles (a thread computing while the main
thread joins it), no reads or D state, and no data wait, host compute, checkpoint, eval, sync or comm in its phase balance (whose stack
classification saw its CPU and I/O). A starved job at 4% utilization is working: it gets the
pipeline advice, never this one. Its SIGTERM action also needs the stacks to show the process
waiting on input or sleeping (an idle phase); where no stack was sampled (py-spy missing or not
permitted) the advice stays, with the command to look first instead of the SIGTERM. Nor does
a low-confidence idle phase (from /proc alone, where ptrace is denied: daemon.analysis.
proc_phases) earn a SIGTERM: /proc cannot tell a process waiting for nothing from one waiting on
a peer, a lock or a socket that is about to answer, so it gets the look-first action too. Nor
do stacks waiting on a lock (someone holds it) or on a child process it started (an encoder, a
download tool: `waits_for_child`, which the child's own stacks would have to show idle), nor
an asyncio event loop that a timer wakes within a minute (TIMER_WAIT: a coroutine polling a
folder or a queue between sleeps, or a stalled job's heartbeat, which no stack tells apart),
nor stacks waiting on its sockets while it holds an unconnected UDP socket on all addresses on
a port in the ephemeral range (Kind.udp_wildcard_ports: a UDP server that bound such a port
reads as a statsd client; one that sleeps in time.sleep is the client), nor a sleeper whose CPU time moves between its sleeps (`polls_for_work`: a worker polling a
job table, a broker or a folder, which no stack dump catches), nor a process that computed at
least
BETWEEN_BATCHES_MIN_COMPUTE of the window and is not a notebook (a job between batches: it
works, its GPU idles between them), nor one that ran a run of work (RUN_OF_WORK_MIN_S of
kernels, not a warm-up pass) and now sleeps in a plain sleep (`one_run_then_sleeps`: one run
seen, a periodic job between its runs looks the same).

Never a SIGTERM for a server: a process whose kind (daemon.analysis.kinds) is online inference,
or that listens and has served (accepted connections, serving frames in any thread), or whose
parent serves (Kind.serving_parent: the GPU worker of an HTTP front end), is left
to `idle_server`, which advises scaling to zero, consolidating or sharing the GPU. So is a
queue consumer, a worker whose stacks wait for its next job (JOB_WAIT: a multiprocessing
manager's queue, a job server's socket that nothing comes to): it serves jobs as a server
serves requests, and between jobs there is nothing to prefetch and nothing to stop. So the
SIGTERM stays for notebooks and stopped jobs.

Nor is the whole host stopped (`host_idle`) while a process on it works or serves, however
idle its GPUs read: a job whose input comes slower than its GPU steps (producer threads decoding
in Python, a GPU busy 2% of the time) keeps every GPU below the idle line, and stopping the host
stops it. Nor while idle_gpu_held would look first at a process on it instead of offering the
SIGTERM (`idle_verdict`, the one test of both): what mlcostd would not stop on its own it does
not stop with its host (a periodic job between its runs, one run seen, a job between batches, a
child process it waits for, a lock, a poller, no stacks to read...). `mlcostd idle` answers
"active" for all of them too (`work_reasons`, Analyzer.periodic).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

from daemon.analysis.busy import DEFAULT_GPU_HELD_AFTER_S, DEFAULT_HOST_IDLE_AFTER_S
from daemon.analysis.cost import HostPrice
from daemon.analysis.host_signals import READ_MIN_PER_S
from daemon.analysis.kinds import (
    NOTEBOOK,
    ONLINE_INFERENCE,
    held_on_all_addresses,
    served_on,
)
from daemon.analysis.rules.base import (
    UPPER_BOUND,
    Finding,
    Rule,
    money,
    process_evidence,
)
from daemon.analysis.rules.window import GIB, Analysis, ProcessWindow
from daemon.analysis.stack_rules import (
    CHILD_WAIT,
    FD_WAITS,
    FILE_WAIT,
    JOB_WAIT,
    LOCK_WAIT,
    PROMPT_WAIT,
    REMOTE_WAIT,
    SCRIPT_PROMPT,
    SIGNAL_WAIT,
    SLEEP_CALL,
    SLEEP_WAIT,
    STOPPED,
    TIMER_WAIT,
    waiting_stacks,
)
from daemon.clock import duration, utc_clock
from daemon.sources.kindfacts import SOCKETS_EVERY_S
from daemon.wire import (
    CHECKPOINT,
    COMM,
    COMPUTE,
    DATA_WAIT,
    EVAL,
    HOST_PREPROCESS,
    IDLE,
    LOW_CONFIDENCE,
    OUTPUT,
    SYNC,
    signal_command,
)
from pricing.offer import HOURS_PER_MONTH

# A process's own kernels: its SM share (or the GPM SM activity of its GPUs) averaged over the
# window. A context that is merely open reads 0; any kernels at all read above 1%.
OWN_KERNELS_MIN_PCT = 1.0
# A phase of work (data wait, host compute, checkpoint...) in at least this share of the window
# is a sign of work; 2% is one stack sample in fifty, above the noise of a stray dump.
WORK_PHASE_MIN_SHARE = 0.02
WORK_PHASES = (DATA_WAIT, HOST_PREPROCESS, CHECKPOINT, OUTPUT, EVAL, SYNC, COMM)
# Computing this share of the window, then idle past idle_held_min_s: a job between batches (a
# nightly job that computes 5 minutes an hour; with the defaults, 10 idle minutes and a
# 30-minute phase window, a job that finished reads so for up to ~20 minutes, then below it),
# not a kernel that ran one warm-up pass and waits; a notebook may have computed any share (a
# cell ran, then its user left).
BETWEEN_BATCHES_MIN_COMPUTE = 0.10
# Its kernels ran in at least this many separate runs in the window, however short (5 s of work
# every 2 minutes computes 4%): a periodic job, not one warm-up pass that then waits.
PERIODIC_MIN_RUNS = 2
# Seconds of its kernels before it went idle (ProcessWindow.kernel_s_before_idle) that make one
# run of work, not a warm-up pass: a warm-up forward pass runs a fraction of a second of kernels
# (the demo notebook's 0.3 s, a stalled loop's two 0.1 s steps 0.16 s, a rank's 1 s pass 0.9 s),
# a periodic eval or scorer seconds (probe 132's eval 4.5 s, probe 109's scorer 3.5 s). Such a
# run, then a plain sleep (`time.sleep` in its loop), is a periodic job's first interval as
# much as a finished job: look first (`one_run_then_sleeps`). A warm-up of 2 s or more reads
# as a run: a look first, never a stop of a job between its runs.
RUN_OF_WORK_MIN_S = 2.0
# Its kernels ran at this many ticks of its idle span (any SM share above 0), the last in the
# span's later half: a small kernel every few seconds (30 ms per 3 s averages 0.2%, below
# OWN_KERNELS_MIN_PCT and WORK_RUN_MIN_PCT) is work; a warm-up pass as it went idle, nothing
# after it, is not, and one stray reading is not three.
OWN_KERNEL_TICKS_MIN = 3
# CPU it used while its GPU idled, in cores over the idle span: a thread that computes (a
# preprocessing thread its main thread joins, native code with the GIL released) uses most of
# a core on a quiet host and 0.3-0.4 of one on a loaded one (probe 132: 31-40% beside a CPU
# hog); a process that only sleeps, waits on a socket or polls between sleeps uses a few
# ten-thousandths (measured: 0.00002-0.0002 cores). A tenth of a core (hung.py's
# HUNG_CPU_MAX_CORES, the line between a rank that spins and one that waits) keeps a
# margin on both sides; 0.2 missed a thread computing half the time on this 2-core test host
# under load.
CPU_WORK_MIN_CORES = 0.1
# A sleep whose process used this much CPU over its idle span (in cores) does something between
# its sleeps: a worker polling a job table, an HTTP broker or a folder through a helper, none of
# which the stacks catch (a poll lasts a millisecond). Measured (CPU time from
# /proc/PID/schedstat over 60 s, 2-core host): `while True: time.sleep(2)` 1.1 ms a minute; a
# SQLite poll then a 2 s sleep 4.3 ms, an HTTP GET then a 5 s sleep 10.4 ms, a folder listed in
# a helper then a 2 s sleep 3.5 ms; so 2 ms a minute. A loop that checks a resume file every
# second (5.2 ms) reads as a poller too: no CPU figure tells them apart, and it gets the
# look-first (never a stop of a worker). /proc/PID/stat counts CPU in 10 ms steps, so at least
# POLL_MIN_CPU_S must have moved as well: seen after ~5 idle minutes for the slowest pollers.
POLL_MIN_CORES = 2e-3 / 60
POLL_MIN_CPU_S = 0.02
D_STATE_MAX_FRACTION = 0.05  # ticks with a thread in D state: more is blocking on I/O
IOWAIT_MAX_FRACTION = 0.01
WINDOW_EDGE_S = 10.0  # idle this close to the window's length: idle through all of it


def signs_of_work(proc: ProcessWindow) -> list[str]:
    """What says the process is working during the window; empty: it is idle."""
    signs = []
    # Kernels count while it sits idle; a warm-up pass before that is no sign of work now.
    sm = proc.sm_activity_idle_mean
    if sm is not None and sm >= OWN_KERNELS_MIN_PCT:
        signs.append(f"its kernels keep {sm:.1f}% of the SMs busy while its GPU idles")
    elif proc.kernel_ticks_idle >= OWN_KERNEL_TICKS_MIN:
        signs.append(f"its kernels ran at {proc.kernel_ticks_idle} readings while its GPU "
                     "idled, the latest recently (short kernels now and then)")
    cores = proc.cpu_idle_cores
    if cores is not None and cores >= CPU_WORK_MIN_CORES:
        signs.append(f"it uses {cores:.2f} of a CPU core while its GPU idles")
    if proc.read_bytes_per_s >= READ_MIN_PER_S:
        signs.append(f"it reads {proc.read_bytes_per_s / 1e6:.1f} MB/s")
    if proc.d_state_fraction > D_STATE_MAX_FRACTION:
        signs.append(f"it is blocked on I/O (D state) in {proc.d_state_fraction:.0%} of ticks")
    if proc.iowait_fraction > IOWAIT_MAX_FRACTION:
        signs.append(f"its I/O wait is {proc.iowait_fraction:.0%} of the window")
    for phase in WORK_PHASES:
        share = float((proc.phases.get(phase) or {}).get("share", 0.0) or 0.0)
        if share >= WORK_PHASE_MIN_SHARE:
            signs.append(f"its stacks show {phase} for {share:.0%} of the window")
    return signs


def _idle_stack_waiting(proc: ProcessWindow, prefix: str) -> Mapping[str, Any] | None:
    """The first stack of its idle phase whose reason starts with `prefix`, where its stacks
    wait so for at least JOB_WAIT_MIN_SHARE of the window; None otherwise."""
    found = waiting_stacks(proc.phases, prefix)
    return found[0] if found else None


def waits_for_jobs(proc: ProcessWindow) -> Mapping[str, Any] | None:
    """The stack in which it waits for its next job (a queue consumer between jobs), where its
    stacks wait so for at least JOB_WAIT_MIN_SHARE of the window; None otherwise."""
    return _idle_stack_waiting(proc, JOB_WAIT)


def waits_for_child(proc: ProcessWindow) -> Mapping[str, Any] | None:
    """The stack in which it waits for a child process it started (CHILD_WAIT), where its
    stacks wait so for at least JOB_WAIT_MIN_SHARE of the window; None otherwise."""
    return _idle_stack_waiting(proc, CHILD_WAIT)


def is_server(proc: ProcessWindow) -> bool:
    """A server is never offered SIGTERM: it serves (listens and has served) or is online
    inference by its evidence, or its parent serves (Kind.serving_parent: an HTTP front end
    that hands requests to this GPU worker over a pipe; stopping the worker hangs the
    service). Nor is a queue consumer, which serves jobs (`waits_for_jobs`)."""
    return (proc.kind.serves or proc.kind.kind == ONLINE_INFERENCE
            or proc.kind.serving_parent > 0 or waits_for_jobs(proc) is not None)


def polls_for_work(proc: ProcessWindow) -> Mapping[str, Any] | None:
    """The sleep its stacks wait in, where it does something between its sleeps (its CPU time
    moved, POLL_MIN_CORES over its idle span): a poller (a worker that queries a job table or an
    HTTP broker, lists a folder through a helper, then sleeps when nothing came), whose poll no
    stack dump catches. Never stopped from here: look first. None otherwise (a process that
    only sleeps uses next to no CPU)."""
    cores = proc.cpu_idle_cores
    if cores is None or cores < POLL_MIN_CORES or cores * proc.trailing_idle_s < POLL_MIN_CPU_S:
        return None
    return sleeps(proc)


def sleeps(proc: ProcessWindow) -> Mapping[str, Any] | None:
    """The top stack of its idle phase where that is a plain sleep (`time.sleep(...)`, or a
    `sleep(` of its own, on the line its stacks wait at); None otherwise."""
    top = next(iter((proc.phases.get(IDLE) or {}).get("top_stacks") or []), None)
    if not isinstance(top, Mapping):
        return None
    reason = str(top.get("reason", ""))
    if not reason.startswith(SLEEP_WAIT) or not SLEEP_CALL.search(reason):
        return None
    return top


def ran_before(proc: ProcessWindow) -> bool:
    """It ran a run of work before it went idle (RUN_OF_WORK_MIN_S seconds of kernels or more):
    in the window (a run at WORK_RUN_MIN_PCT), or before it as mlcostd saw it (its history: a
    run older than the window, or recorded in the store before mlcostd restarted)."""
    earlier = proc.history.kernel_s if proc.history else 0.0
    return ((proc.work_runs >= 1 and proc.kernel_s_before_idle >= RUN_OF_WORK_MIN_S)
            or earlier >= RUN_OF_WORK_MIN_S)


def one_run_then_sleeps(proc: ProcessWindow, a: Analysis) -> Mapping[str, Any] | None:
    """The sleep its stacks wait in where, before it went idle, it ran one run of work
    (`ran_before`: in the window, or before it as mlcostd saw it, across a restart too) and it
    is no notebook, and mlcostd has watched it idle less than [idle].longest_period
    (longest_period_s): a periodic job in its first interval (one run seen: after it starts,
    after the daemon restarts, or every interval where its period outlasts the window) reads
    so, as does a job that ran once and finished; nothing the window holds tells them apart,
    so idle_gpu_held looks first and the host is not stopped. So does a wait for a signal
    (`signal.pause()`: a job another process pokes to run reads the same, probe 143 F8). None
    otherwise (a warm-up pass, then a sleep, keeps the SIGTERM; so does one watched idle past
    the longest period, and a wait for a signal before any run: it may wait to be stopped)."""
    if (proc.kind.kind == NOTEBOOK or not ran_before(proc)
            or proc.idle_watched_s(a.end) >= a.limit("longest_period_s")):
        return None
    return sleeps(proc) or waits_for_signal(proc)


def waits_for_signal(proc: ProcessWindow) -> Mapping[str, Any] | None:
    """The top stack of its idle phase where it waits for a signal (SIGNAL_WAIT); else None."""
    top = next(iter((proc.phases.get(IDLE) or {}).get("top_stacks") or []), None)
    return top if isinstance(top, Mapping) and str(top.get("reason", "")).startswith(
        SIGNAL_WAIT) else None


def ran_unseen(proc: ProcessWindow, a: Analysis) -> bool:
    """It held its GPU before mlcostd first read it (ProcessWindow.unseen_s: it was running
    when mlcostd started), is no notebook, and mlcostd has watched it idle less than
    [idle].longest_period: what it did before is unseen, and a periodic job between its runs
    reads as one that never worked. idle_gpu_held looks first instead of its SIGTERM, and the
    host is not stopped, until it has been watched idle that long (a job hung before mlcostd
    started then gets the SIGTERM)."""
    return (proc.kind.kind != NOTEBOOK and proc.unseen_s > 0
            and proc.idle_watched_s(a.end) < a.limit("longest_period_s"))


def is_periodic(proc: ProcessWindow) -> bool:
    """Its kernels ran in PERIODIC_MIN_RUNS or more separate runs in the window (counted only
    where its GPUs idle at the window's end) and it is no notebook: a periodic job between runs
    (a cron-like scorer that keeps its model loaded, a watcher that works when a file arrives),
    not one warm-up pass that then waits. One run is not enough: a job that ran once and
    finished reads the same. The one test of idle_gpu_held's look-first for such a job, of
    host_idle's (`at_work`) and of GET /v1/idle's (daemon.analysis.analyzer.Analyzer.periodic)."""
    return proc.kind.kind != NOTEBOOK and proc.work_runs >= PERIODIC_MIN_RUNS


def idle_for(seconds: float, a: Analysis) -> str:
    """How long it has been idle, as far as the rules' window sees: idle through the whole
    window reads "at least 30 min", so it never contradicts an idle event open for hours."""
    if a.window_s > 0 and seconds >= a.window_s - WINDOW_EDGE_S:
        return f"at least {duration(seconds)} (the whole window the rules read)"
    return duration(seconds)


def _gpus(proc: ProcessWindow) -> str:
    """'GPU 3', 'GPUs 0, 1': the GPUs it holds, as the GPU panel numbers them."""
    return f"GPU{'s' if len(proc.gpus) != 1 else ''} {', '.join(map(str, proc.gpus))}"


def _sigterm(proc: ProcessWindow) -> dict[str, object]:
    """The SIGTERM, worded by what the process is: a notebook kernel holds its user's session
    (what they loaded in it is lost), anything else is a job whose stacks show it waiting for
    nothing."""
    how = (f"save the notebook and shut its kernel down (or ask its user), or send SIGTERM to "
           f"pid {proc.pid} after confirmation: what its user loaded in the kernel (the model, "
           "variables) is lost" if proc.kind.kind == NOTEBOOK
           else f"stop the job: send SIGTERM to pid {proc.pid} after confirmation")
    return {"kind": "sigterm", "pid": proc.pid, "start_time": proc.start_time,
            "signal": "SIGTERM", "confirm": True, "text": f"release the GPU: {how}"}


def _look_first(proc: ProcessWindow) -> dict[str, object]:
    """No stack says it waits: show what it runs before anyone stops it."""
    return {"kind": "copy_commands",
            "text": f"no stack sample confirms pid {proc.pid} is waiting: look at what it runs, "
                    "then close it or stop it",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_prompt(proc: ProcessWindow, script_at: str | None = None) -> dict[str, object]:
    """An interactive Python prompt waits for its user's next line: its user's session, with
    what they loaded in it; closed by them when done, not stopped from here. `script_at`: a
    script's input() prompt there (file:line) asks its user instead: they answer it."""
    text = (f"pid {proc.pid} waits at an input() prompt of its script ({script_at}) for its "
            "user's answer: ask its user to answer it, or to end the script if it is no longer "
            "wanted, to free the GPU; stopping it loses what the script has done so far"
            if script_at is not None else
            f"pid {proc.pid} is an interactive Python prompt waiting for its user's next "
            "line: ask its user to close it when done (exit() or Ctrl-D at the prompt) "
            "to free the GPU; stopping it loses what they loaded in it")
    return {"kind": "copy_commands", "text": text,
            "commands": [f"ps -o user,tty,etime,args -p {proc.pid}  # whose prompt, on which "
                         "terminal, open how long",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_file(proc: ProcessWindow, where: str) -> dict[str, object]:
    """Its stacks sleep in a loop that checks for a path (FILE_WAIT): a done-marker, a go-file
    or a resume file that another job or a person writes. Who writes it no stack says: find
    the path and its writer before anyone stops it."""
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} sleeps in a loop until a file appears ({where}): a "
                    "done-marker, a go-file or a resume file that another job on this host or "
                    "a person writes; it goes on when the file appears. Find the path it checks "
                    "and whether anything will write it (a preprocessing job still at work) "
                    "before stopping it or the host; if nothing will, stop it",
            "commands": [f"sudo strace -tt -e trace=file -p {proc.pid}  # the path it checks "
                         "when it wakes",
                         "ps -eo pid,user,etime,pcpu,args --sort=-pcpu | head  # what else "
                         "works on this host",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_sockets_unknown(proc: ProcessWindow) -> dict[str, object]:
    """Its sockets could not all be read (Kind.sockets_unknown): it may listen on a port no read
    saw, a server waiting for requests. What to look at, never a SIGTERM from here."""
    return {"kind": "copy_commands",
            "text": f"whether pid {proc.pid} serves is not known (a socket table, TCP or UDP, "
                    "is longer than mlcostd reads): see what it listens on and who is connected "
                    "before stopping it",
            "commands": [f"sudo ss -ltnp | grep 'pid={proc.pid},'  # the ports it listens on",
                         f"sudo ss -lunp | grep 'pid={proc.pid},'  # its UDP ports",
                         f"sudo ss -tnp | grep 'pid={proc.pid},'  # its connections",
                         f"sudo py-spy dump --pid {proc.pid}"]}


def _look_first_no_stacks(proc: ProcessWindow) -> dict[str, object]:
    """Only /proc says it waits (ptrace denied): what to look at without a stack."""
    return {"kind": "copy_commands",
            "text": f"only /proc says pid {proc.pid} is waiting (low confidence, no stacks): "
                    "look at what it does, then close it or stop it",
            "commands": [f"cat /proc/{proc.pid}/wchan; echo; grep -E 'State|Threads' "
                         f"/proc/{proc.pid}/status", f"cat /proc/{proc.pid}/io",
                         f"ls -l /proc/{proc.pid}/fd | grep -c socket",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_lock(proc: ProcessWindow, where: str, reason: str) -> dict[str, object]:
    """Its stacks wait on a lock: someone holds it, and stopping the waiter loses its work.
    A file lock's holder is another process (lslocks, /proc/locks); a thread lock's (`with
    lock:`, `.acquire()`, threads that wait on locks) is a thread of its own, which only its
    stack dump shows: that comes first, and lslocks is said to list file locks only."""
    dump = f"sudo py-spy dump --pid {proc.pid}"
    files = ["lslocks -o PID,COMMAND,TYPE,MODE,PATH  # who holds which file lock (flock, lockf)",
             "cat /proc/locks  # the same, by inode, where lslocks is missing"]
    file_lock = "flock" in reason or "lockf" in reason
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} waits on a lock ({where}): whoever holds it decides when it "
                    "goes on; find the holder before stopping anything"
                    + ("" if file_lock else " (a thread lock: its own threads' stacks show which "
                                            "one holds it)"),
            "commands": [*files, dump] if file_lock else [dump, *files]}


def _look_first_between(proc: ProcessWindow, computed: float) -> dict[str, object]:
    """It computed in the window: a job between batches, not a finished one, as far as the
    window tells; what to do with the GPU between batches, not a SIGTERM."""
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} computed {computed:.0%} of the window before it went idle: "
                    "a job between batches? Release the GPU between them (schedule each batch as "
                    "its own job, or unload the model); stop it only if it is done",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_periodic(proc: ProcessWindow) -> dict[str, object]:
    """Its kernels ran in separate runs in the window: a periodic job (a cron-like scorer, a
    watcher that works when something arrives) that holds the GPU between runs."""
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} worked in {proc.work_runs} separate runs in the window: a "
                    "periodic job or one that works when something arrives? Release the GPU "
                    "between runs (start it per run, or unload the model while it waits); stop "
                    "it only if it is done",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_one_run(proc: ProcessWindow, where: str, how: str = "sleeps"
                        ) -> dict[str, object]:
    """One run of work, then a plain sleep (`how`: or a wait for a signal): a periodic job's
    first interval or a finished job. A run before the window (its history) says when mlcostd
    last saw it run."""
    ran = proc.kernel_s_seen
    earlier = proc.history.work_at if proc.history else None
    when = (f" (its run last seen at {utc_clock(earlier)}, before the window the rules read, "
            "or before mlcostd restarted)" if earlier is not None and proc.work_at is None
            else "")
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} ran {ran:.0f} s of kernels{when}, then "
                    f"{how} ({where}): one run seen: a periodic job between its runs looks the "
                    "same (its next run may come after the window). Look at what it waits for "
                    "before stopping it; if it runs again, release the GPU between runs (start "
                    "it per run, or unload the model while it waits); stop it only if it is done",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_unseen(proc: ProcessWindow, a: Analysis) -> dict[str, object]:
    """It held its GPU before mlcostd first read it: seen only since then, and what it did
    before is unseen (a periodic job between its runs reads as one that never worked)."""
    since = proc.watched_since
    longest = a.limit("longest_period_s")
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} was seen only since mlcostd started at {utc_clock(since)}; it "
                    f"ran {duration(proc.unseen_s)} before that unseen, holding its GPU, and no "
                    f"run of its kernels has been seen in the {duration(proc.idle_watched_s(a.end))} "
                    "watched since: a periodic job between its runs looks the same as one that "
                    "hangs or is done. Look at what it waits for before stopping it; mlcostd "
                    f"offers the SIGTERM once it has watched it idle for {duration(longest)} "
                    "([idle].longest_period)",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         f"ps -o pid,lstart,etime,args -p {proc.pid}  # since when it runs",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_poller(proc: ProcessWindow, where: str) -> dict[str, object]:
    """Its stacks sleep and it does something between sleeps: a worker polling for jobs."""
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} sleeps ({where}) and does something between its sleeps (its "
                    f"CPU time moved {proc.cpu_idle_cores or 0:.4f} of a core): a worker polling "
                    "for jobs (a job table, a broker, a folder)? Look at what it does before "
                    "stopping it (if it waits for jobs, scale the workers with the queue "
                    "instead)",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         f"sudo strace -f -tt -p {proc.pid}  # what it does when it wakes",
                         signal_command(proc.pid, proc.start_time)]}


def _look_first_child(proc: ProcessWindow, child: Mapping[str, Any]) -> dict[str, object]:
    """Its stacks wait for a child process it started: the child works for it (an encoder, a
    download, an index built in a multiprocessing.Process) or waits itself; what the child
    runs decides, not the idle GPU. How to overlap it with the GPU's work follows how it was
    started (the wait's frame in the stack's reason: subprocess.py, else multiprocessing's)."""
    overlap = ("run the tool for the next item while the GPU works on this one "
               "(subprocess.Popen ahead of the step, or a thread pool of subprocess.run calls)"
               if "(subprocess.py:" in str(child.get("reason", "")) else
               "start the next item's process while the GPU works on this one and join it "
               "after the step (or hand the items to a multiprocessing.Pool or a "
               "ProcessPoolExecutor)")
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} waits for a child process it started "
                    f"({child.get('file')}:{child.get('line')}): the child works for it or waits "
                    "for a transfer itself; look at the child before stopping anything. To use "
                    f"the GPU meanwhile, {overlap}",
            "commands": [f"ps --ppid {proc.pid} -o pid,stat,etime,pcpu,args  # its children",
                         f"sudo py-spy dump --pid {proc.pid}"]}


def _look_first_remote(proc: ProcessWindow, where: str) -> dict[str, object]:
    """Its stacks sleep in a loop that requests from a remote service (REMOTE_WAIT): a retry with
    backoff of a store that throttles or fails, or a poll of one not ready. It goes on when the
    service answers: what to look at and what would keep the GPU fed, never a stop."""
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} retries or polls a remote service ({where}: it sleeps "
                    "between requests) and goes on when the service answers: look at the "
                    "service first (throttling such as HTTP 503 SlowDown or 429, an outage, "
                    "credentials), or prefetch/cache its shards locally so the GPU does not wait "
                    "on the store; stopping it loses the job",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         f"sudo strace -f -tt -e trace=network -p {proc.pid}  # its requests "
                         "when it wakes",
                         f"ss -tnp | grep 'pid={proc.pid},'  # whom it talks to"]}


def _look_first_peers(proc: ProcessWindow, where: str) -> dict[str, object]:
    """Its stacks wait on its sockets with connections it opened: whoever is at the other end
    (a job server, a coordinator) may send it work at any moment."""
    peers = proc.kind.peer_connections
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} waits on its sockets ({where}) with {peers} TCP "
                    f"connection{'s' if peers != 1 else ''} it opened: a job server or a "
                    "coordinator at the other end may send it work; look at what it is "
                    "connected to before stopping anything (if it is a worker between jobs, "
                    "scale the workers with the queue instead)",
            "commands": [f"ss -tnp | grep 'pid={proc.pid},'  # whom it is connected to",
                         f"sudo py-spy dump --pid {proc.pid}"]}


def _look_first_datagrams(proc: ProcessWindow, where: str) -> dict[str, object]:
    """Its stacks wait on its sockets and it holds an unconnected UDP socket on all addresses
    on a port in the ephemeral range (Kind.udp_wildcard_ports): a server that bound such a
    port reads as a statsd or DNS client; datagrams may come at any moment."""
    held = held_on_all_addresses(proc.kind.udp_wildcard_ports)
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} waits on its sockets ({where}) and holds {held}: it may "
                    "be serving datagrams (a UDP server on a port in the ephemeral range reads "
                    "the same as a client's socket), or only send them (statsd). Look at what "
                    "it receives before stopping it (a server given a port below the "
                    "ephemeral range is counted as one)",
            "commands": [f"ss -uanp | grep 'pid={proc.pid},'  # its UDP sockets",
                         f"sudo py-spy dump --pid {proc.pid}"]}


def _look_first_timer(proc: ProcessWindow, where: str) -> dict[str, object]:
    """Its stacks wait in an asyncio event loop that a timer wakes within a minute (TIMER_WAIT):
    a coroutine polling a folder, a file or a queue between sleeps, or a stalled job's
    heartbeat; no stack shows which."""
    return {"kind": "copy_commands",
            "text": f"pid {proc.pid} waits in its asyncio event loop ({where}), woken by a timer "
                    "within a minute: a coroutine may be polling for work between "
                    "`await asyncio.sleep(...)`s (a folder, a file, a queue) or keeping a "
                    "stalled job's heartbeat; py-spy shows no coroutine. Look at what it "
                    "awaits before stopping it (if it is a worker waiting for files, scale the "
                    "workers with the work instead)",
            "commands": [f"sudo py-spy dump --pid {proc.pid}",
                         f"ls -l /proc/{proc.pid}/fd  # the files and folders it holds open",
                         f"sudo strace -f -tt -e trace=file -p {proc.pid}  # what it looks at "
                         "when it wakes"]}


# What decided idle_gpu_held's action (IdleVerdict.reason): the SIGTERM, or one look first.
SIGTERM = "sigterm"
NO_STACKS, SOCKETS_UNKNOWN, PROC_ONLY, ON_A_LOCK = ("no_stacks", "sockets_unknown", "proc_only",
                                                   "on_a_lock")
AT_PROMPT = "at_prompt"
ON_A_CHILD, ON_PEERS, ON_A_TIMER, POLLER = "on_a_child", "on_peers", "on_a_timer", "poller"
ON_DATAGRAMS = "on_datagrams"
ON_REMOTE = "on_a_remote_service"
ON_A_FILE = "on_a_file"
BETWEEN_BATCHES, PERIODIC, ONE_RUN, UNSEEN = ("between_batches", "periodic", "one_run",
                                              "ran_unseen")


class IdleVerdict(NamedTuple):
    """idle_gpu_held's action for a process whose GPUs idle, and what decided it (`reason`:
    SIGTERM, or the look first that replaced it). `why`, for a look first, says it in words
    for GET /v1/idle (work_reasons); None for the SIGTERM. A look first means mlcostd cannot
    tell that stopping the process stops nothing that works or may run again, so the host is
    not stopped either (`at_work`). The texts are made when asked: at_work asks only the
    reason, every round, for every process on an idle GPU."""
    reason: str
    make_action: Callable[[], dict[str, object]]
    make_why: Callable[[], str] | None = None

    @property
    def looks_first(self) -> bool:
        return self.reason != SIGTERM

    @property
    def action(self) -> dict[str, object]:
        return self.make_action()

    @property
    def why(self) -> str | None:
        return self.make_why() if self.make_why is not None else None


def idle_verdict(proc: ProcessWindow, a: Analysis) -> IdleVerdict:
    """SIGTERM only where stacks show it waiting for nothing, and it did no work in the window
    (a notebook kernel may have: a cell ran, then its user left), or stopped by a signal (state
    T: nothing of it runs until it is continued); else what to look at first. The one test of
    idle_gpu_held's SIGTERM and of the host stop it holds back (`at_work`): whatever is looked
    at first keeps its host. (A sign of work or a server never reaches idle_gpu_held; `at_work`
    counts them before this.)"""
    waiting = proc.phases.get(IDLE) or {}
    if proc.kind.sockets_unknown:
        return IdleVerdict(
            SOCKETS_UNKNOWN, lambda: _look_first_sockets_unknown(proc),
            lambda: "it may serve: whether it (or its parent) listens on a port is not known "
                    "(a socket table, TCP or UDP, is longer than mlcostd reads)")
    if not waiting:
        return IdleVerdict(
            NO_STACKS, lambda: _look_first(proc),
            lambda: "no stack sample says what it waits for (py-spy missing, not allowed or not "
                    "yet run on it): idle_gpu_held looks first, and what is not known is not "
                    "stopped")
    if waiting.get("confidence") == LOW_CONFIDENCE:
        return IdleVerdict(
            PROC_ONLY, lambda: _look_first_no_stacks(proc),
            lambda: "only /proc says it waits (no stacks): it may wait on a peer, a lock or a "
                    "socket about to answer")
    first = next(iter(waiting.get("top_stacks") or []), None)
    top: Mapping[str, Any] = first if isinstance(first, Mapping) else {}
    waits_in, where = str(top.get("reason", "")), f"{top.get('file')}:{top.get('line')}"
    if waits_in.startswith(PROMPT_WAIT):
        if SCRIPT_PROMPT in waits_in:
            return IdleVerdict(
                AT_PROMPT, lambda: _look_first_prompt(proc, where),
                lambda: f"waits at an input() prompt of its script ({where}) for its user's "
                        "answer: its user answers it or ends it")
        return IdleVerdict(
            AT_PROMPT, lambda: _look_first_prompt(proc),
            lambda: "an interactive Python prompt waiting for its user's next line: its user "
                    "closes it when done")
    if waits_in.startswith(LOCK_WAIT):
        return IdleVerdict(
            ON_A_LOCK, lambda: _look_first_lock(proc, where, waits_in),
            lambda: f"waits on a lock ({where}): whoever holds it decides when it goes on")
    child = waits_for_child(proc)
    if child is not None:
        at = f"{child.get('file')}:{child.get('line')}"
        return IdleVerdict(
            ON_A_CHILD, partial(_look_first_child, proc, child),
            lambda: f"waits for a child process it started ({at}): the child runs on this host")
    if waits_in.startswith(REMOTE_WAIT):  # a notebook's cell retrying a download works too
        return IdleVerdict(
            ON_REMOTE, lambda: _look_first_remote(proc, where),
            lambda: f"retries or polls a remote service ({where}: it sleeps between requests) "
                    "and goes on when the service answers")
    if waits_in.startswith(FILE_WAIT):
        return IdleVerdict(
            ON_A_FILE, lambda: _look_first_file(proc, where),
            lambda: f"sleeps in a loop until a file appears ({where}): another job or a person "
                    "may be writing it")
    notebook = proc.kind.kind == NOTEBOOK
    if not notebook and proc.kind.peer_connections > 0 and waits_in.startswith(FD_WAITS):
        return IdleVerdict(
            ON_PEERS, lambda: _look_first_peers(proc, where),
            lambda: f"waits on its sockets ({where}) with TCP connections it opened: whoever is "
                    "at the other end may send it work")
    if not notebook and proc.kind.udp_wildcard_ports and waits_in.startswith(FD_WAITS):
        held = held_on_all_addresses(proc.kind.udp_wildcard_ports)
        return IdleVerdict(
            ON_DATAGRAMS, lambda: _look_first_datagrams(proc, where),
            lambda: f"waits on its sockets ({where}) and holds {held}: it may be serving "
                    "datagrams")
    if not notebook and waits_in.startswith(TIMER_WAIT):
        return IdleVerdict(
            ON_A_TIMER, lambda: _look_first_timer(proc, where),
            lambda: f"waits in its asyncio event loop ({where}), woken by a timer within a "
                    "minute: a coroutine may poll for work between its sleeps")
    if waits_in.startswith(STOPPED):
        # Stopped by a signal: not between batches, whatever it computed before the stop
        # (how much of the window that was depends on when the stop came)
        return IdleVerdict(SIGTERM, lambda: _sigterm(proc))
    poll = polls_for_work(proc) if not notebook else None
    if poll is not None:
        polled = f"{poll.get('file')}:{poll.get('line')}"
        return IdleVerdict(
            POLLER, lambda: _look_first_poller(proc, polled),
            lambda: f"polls for work between sleeps ({polled}: its CPU time moves while its "
                    "stacks sleep)")
    computed = float((proc.phases.get(COMPUTE) or {}).get("share", 0.0) or 0.0)
    if not notebook and computed >= BETWEEN_BATCHES_MIN_COMPUTE:
        return IdleVerdict(
            BETWEEN_BATCHES, lambda: _look_first_between(proc, computed),
            lambda: f"computed {computed:.0%} of the window before it went idle: a job between "
                    "batches may compute again (stopping the host would stop its next batch)")
    if is_periodic(proc):  # GET /v1/idle names it from Analyzer.periodic, with its runs
        return IdleVerdict(
            PERIODIC, lambda: _look_first_periodic(proc),
            lambda: f"a periodic job between runs: its kernels ran in {proc.work_runs} separate "
                    "runs of the rules' window")
    one_run = one_run_then_sleeps(proc, a)
    if one_run is not None:
        slept = f"{one_run.get('file')}:{one_run.get('line')}"
        how = ("waits for a signal" if str(one_run.get("reason", "")).startswith(SIGNAL_WAIT)
               else "sleeps")
        return IdleVerdict(
            ONE_RUN, lambda: _look_first_one_run(proc, slept, how),
            lambda: f"ran {proc.kernel_s_seen:.0f} s of kernels, then {how}: one run seen, a "
                    "periodic job between its runs may run again (stopping the host would stop "
                    "its next run)")
    if ran_unseen(proc, a):
        return IdleVerdict(
            UNSEEN, lambda: _look_first_unseen(proc, a),
            lambda: f"held its GPU before mlcostd started watching it at "
                    f"{utc_clock(proc.watched_since)} ({duration(proc.unseen_s)} unseen): a "
                    "periodic job between its runs may run again; watched idle "
                    f"{duration(proc.idle_watched_s(a.end))} of [idle].longest_period "
                    f"({duration(a.limit('longest_period_s'))})")
    return IdleVerdict(SIGTERM, lambda: _sigterm(proc))


def _waits_at(stacks: list[Any]) -> str:
    """'file:line' of the first of its idle phase's top stacks."""
    top = stacks[0] if stacks and isinstance(stacks[0], Mapping) else {}
    return f"{top.get('file')}:{top.get('line')}"


def check_idle_gpu_held(a: Analysis, rule: Rule) -> list[Finding]:
    found = []
    for proc in a.processes:
        if proc.trailing_idle_s < a.limit("idle_held_min_s"):
            continue
        if signs_of_work(proc):
            continue  # working, however slowly: the phase rules give the advice, not SIGTERM
        if is_server(proc):
            continue  # a server waits for requests: idle_server's advice, never SIGTERM
        waiting = dict(proc.phases.get(IDLE) or {})  # its stacks waiting on input or sleeping
        idle_share = float(waiting.get("share", 0.0) or 0.0)
        idle_stacks = list(waiting.get("top_stacks") or [])
        monthly = proc.burn_per_hour * HOURS_PER_MONTH
        gib = proc.memory_peak_bytes / GIB
        verdict = idle_verdict(proc, a)
        remote = verdict.reason == ON_REMOTE
        found.append(rule.make(
            proc.id,
            f"pid {proc.pid} ({proc.user}: {proc.job}) holds {_gpus(proc)} "
            f"({gib:.1f} GiB) idle for {idle_for(proc.trailing_idle_s, a)}, burning "
            f"{money(proc.burn_per_hour)}/h"
            + ("" if waiting and waiting.get("confidence") != LOW_CONFIDENCE
               else " (only /proc, no stacks, says it is waiting)" if waiting
               else " (no stack sampled to confirm it is waiting)")
            + (f" while it retries/waits on a remote store ({_waits_at(idle_stacks)}): look at "
               "the service, or prefetch/cache its shards locally" if remote else ""),
            monthly,
            f"{money(proc.burn_per_hour)}/h x {HOURS_PER_MONTH:g} h/month = {money(monthly)}"
            f"/month if it stayed idle; money comes back only when the freed GPU is used or the "
            f"instance shrinks or stops; {UPPER_BOUND}",
            {**process_evidence(a, proc), "idle_seconds": proc.trailing_idle_s,
             "memory_peak_bytes": proc.memory_peak_bytes,
             "utilization_mean": proc.gpu_utilization_mean,
             "idle_utilization_pct": a.idle_utilization_pct,
             "no_sign_of_work": {
                 "sm_activity_idle_mean": proc.sm_activity_idle_mean,
                 "kernel_ticks_idle": proc.kernel_ticks_idle,
                 "cpu_idle_cores": proc.cpu_idle_cores,
                 "kernel_s_before_idle": round(proc.kernel_s_before_idle, 2),
                 "work_runs": proc.work_runs,
                 "kernel_s_seen": round(proc.kernel_s_seen, 2),
                 "watched_since": proc.watched_since,
                 "unseen_s": round(proc.unseen_s, 1),
                 "idle_watched_s": round(proc.idle_watched_s(a.end), 1),
                 "read_bytes_per_s": proc.read_bytes_per_s,
                 "d_state_fraction": proc.d_state_fraction,
                 "iowait_fraction": proc.iowait_fraction,
                 "idle_share": idle_share,
                 # (what the live check before its SIGTERM compares: api/actions.py)
                 "udp_wildcard_ports": list(proc.kind.udp_wildcard_ports),
                 "waiting_in": [{"file": st.get("file"), "line": st.get("line"),
                                 "function": st.get("function"), "reason": st.get("reason")}
                                for st in idle_stacks[:3]]}},
            verdict.action,
            scope={"frees": list(proc.gpus)},
            # what it costs before how long: a 40-column row cuts the rest (probe 148: "pid
            # 8261 holds GPU 3 idle for at least 2…" lost the unit and the money)
            headline=(f"pid {proc.pid} retries a remote store" if remote
                      else f"pid {proc.pid} idle")
                     + f" at {money(proc.burn_per_hour)}/h on {_gpus(proc)}, for "
                     f"{idle_for(proc.trailing_idle_s, a)}"))
    return found


REQUESTS_PER = 1000  # cost per request is quoted per 1k requests, as [[cost.unit_costs]] do
SOCKET_READS_EVERY_S = SOCKETS_EVERY_S


def request_rate(a: Analysis, proc: ProcessWindow) -> tuple[str, dict[str, Any]]:
    """A server's request rate and cost per 1k requests, as text and evidence: from a request
    counter configured for it or its job ([[cost.unit_costs]] with unit "requests"), else a
    lower bound from the connections its socket reads caught (and so an upper bound of the
    cost per request), else what would measure it."""
    counter = a.request_counters.get(proc.id) or a.request_counters.get(proc.job)
    rate = counter.get("units_per_second") if counter else None
    if counter and rate and counter.get("units"):
        unit_cost = counter.get("unit_cost")
        per_k = (float(unit_cost) * REQUESTS_PER / float(counter["per"]) if unit_cost
                 else proc.burn_per_hour / (rate * 3600) * REQUESTS_PER)
        return (f"{rate * 60:.3g} requests/min at {money(per_k)} per 1k requests (counter "
                f"{counter.get('metric')}: {counter['units']:g} requests in "
                f"{duration(float(counter.get('seconds') or 0))})",
                {"source": "request counter", "requests_per_minute": rate * 60,
                 "cost_per_1k_requests": per_k, "requests": counter["units"],
                 "seconds": counter.get("seconds"), "metric": counter.get("metric"),
                 "bound": "measured"})
    caught, over = proc.kind.connections_caught, proc.kind.connections_over_s
    if caught > 0 and over is not None:
        # A single read spans no time: count it over the gap to the next one.
        span = max(over, SOCKET_READS_EVERY_S)
        least = caught / span
        per_k = proc.burn_per_hour / (least * 3600) * REQUESTS_PER
        return (f"at least {least * 60:.3g} requests/min, so at most {money(per_k)} per 1k "
                f"requests ({caught} connection{'s' if caught != 1 else ''} caught by socket "
                f"reads over {duration(span)}; one opened and closed between two reads, "
                f"{SOCKET_READS_EVERY_S:g} s apart, is not seen)",
                {"source": "socket reads", "requests_per_minute": least * 60,
                 "cost_per_1k_requests": per_k, "connections_caught": caught,
                 "seconds": span, "bound": "requests at least, cost at most"})
    return ("request rate not measured: no connection was open at any socket read (requests "
            f"shorter than the {SOCKET_READS_EVERY_S:g} s between reads are not seen); a "
            "[[cost.unit_costs]] counter of its requests (unit = \"requests\", its own or its "
            "load balancer's) gives the rate and the cost per request",
            {"source": None, "requests_per_minute": None, "cost_per_1k_requests": None,
             "connections_caught": caught, "seconds": over, "bound": "not measured"})


def _consumer_text(job_wait: Mapping[str, Any]) -> tuple[str, str, str]:
    """What idle_server says of a queue consumer (`job_wait`: the stack it waits for jobs in):
    what it does, what to do, and its action's text."""
    where = f"{job_wait.get('file')}:{job_wait.get('line')}"
    return (f"takes jobs from a queue or a job server and waits for its next one ({where}: "
            f"{job_wait.get('reason') or JOB_WAIT})",
            "scale the workers with the queue's depth (to zero while it is empty), consolidate "
            "it with other workers on one GPU, or share the GPU (MPS, MIG, time-slicing)",
            "a worker waiting for jobs is never stopped from here: scale the workers with the "
            "queue's depth (an autoscaler on the queue length, such as KEDA), so that none "
            "holds a GPU while the queue is empty, or give it a MIG slice")


def _held_connection_text(proc: ProcessWindow, ports: str) -> tuple[str, str, str]:
    """What idle_server says of a server whose only connection is one it holds open
    (Kind.one_held_connection): a distributed job's rank waiting for its peer reads the same as
    a server with one client, so it says both: what it does, what to do, its action's text."""
    return (f"listens (TCP {ports}) and all it accepted is one connection, held open: a "
            "distributed job's rank waiting for its peer, or a server with one client",
            "look at who is at the other end first: a rank's job waits for that peer (scaling "
            "it to zero stops the job); a server can be scaled to zero between requests, "
            "consolidated or share its GPU (MPS, MIG, time-slicing)",
            f"never stopped from here: `ss -tnp | grep 'pid={proc.pid},'` shows whom it is "
            "connected to; if it is a rank, its job waits for that peer; if it serves, scale it "
            "to zero behind its load balancer or autoscaler, or give it a MIG slice")


def check_idle_server(a: Analysis, rule: Rule) -> list[Finding]:
    """A server (or a queue consumer) whose GPUs idle at the end of the window: scale to zero,
    consolidate, share."""
    found = []
    for proc in a.processes:
        if not is_server(proc) or proc.trailing_idle_s < a.limit("idle_held_min_s"):
            continue
        ports = served_on(proc.kind.listening_ports, proc.kind.udp_ports,
                          proc.kind.unix_listening)
        monthly = proc.burn_per_hour * HOURS_PER_MONTH
        gib = proc.memory_peak_bytes / GIB
        sm = proc.sm_activity_idle_mean
        rate_text, requests = request_rate(a, proc)
        does = (f"serves ({ports})" if not proc.kind.serving_parent or proc.kind.serves
                else f"works for a server (its parent, pid {proc.kind.serving_parent}, serves on "
                     "a port)")
        advice = ("scale it to zero between requests, consolidate it with other models on one "
                  "GPU, or share the GPU (MPS, MIG, time-slicing)")
        action = ("a server is never stopped from here: scale it to zero behind its load "
                  "balancer or autoscaler, move it onto a GPU it shares with other models, "
                  "or give it a MIG slice")
        # one that waits for jobs and has served no connection is a consumer, whatever its
        # kind's words ("--server HOST:PORT" names the job server it connects to); not the
        # worker of a front end that serves (its parent hands it each request over a pipe: a
        # job wait too, but its work is the server's requests)
        job_wait = (None if proc.kind.serves or proc.kind.serving_parent
                    else waits_for_jobs(proc))
        held = job_wait is None and proc.kind.one_held_connection
        headline = (f"scale pid {proc.pid} to zero between "
                    f"{'requests' if job_wait is None else 'jobs'}: {_gpus(proc)} idle for "
                    f"{idle_for(proc.trailing_idle_s, a)}")
        if job_wait is not None:
            does, advice, action = _consumer_text(job_wait)
            if requests.get("source") is None:  # no counter, and no request comes to a port
                rate_text = ("its job rate not measured (a [[cost.unit_costs]] counter of its "
                             "jobs would give the rate and the cost per job)")
        elif held:  # a rank's peer, or one client: not "scale to zero" on that alone
            does, advice, action = _held_connection_text(proc, ports)
            headline = (f"pid {proc.pid} holds {_gpus(proc)} idle for "
                        f"{idle_for(proc.trailing_idle_s, a)} with one connection open: a "
                        "rank waiting for its peer, or a server with one client?")
        found.append(rule.make(
            proc.id,
            f"pid {proc.pid} ({proc.user}: {proc.job}) {does} and its "
            f"{_gpus(proc)} ({gib:.1f} GiB held) {'has' if len(proc.gpus) == 1 else 'have'} "
            "been idle for "
            f"{idle_for(proc.trailing_idle_s, a)} at {money(proc.burn_per_hour)}/h, "
            f"{rate_text}: {advice}",
            monthly,
            f"{money(proc.burn_per_hour)}/h x {HOURS_PER_MONTH:g} h/month = {money(monthly)}"
            f"/month if it stayed this idle and the GPU went to other work; cost per request = "
            f"its burn / its request rate; {UPPER_BOUND}",
            {**process_evidence(a, proc), "idle_seconds": proc.trailing_idle_s,
             "requests": requests,
             "memory_peak_bytes": proc.memory_peak_bytes,
             "utilization_mean": proc.gpu_utilization_mean,
             "sm_activity_idle_mean": sm,
             "kind": proc.kind.as_dict(),
             "waits_for_jobs": None if job_wait is None else {
                 "file": job_wait.get("file"), "line": job_wait.get("line"),
                 "function": job_wait.get("function"), "reason": job_wait.get("reason")},
             "signs_of_work": signs_of_work(proc),
             "one_held_connection": held},
            {"kind": "advice", "text": action},
            scope={"frees": list(proc.gpus)},
            headline=headline))
    return found


def _stop_commands(price: HostPrice) -> list[str]:
    if price.provider == "aws":
        return ['TOKEN=$(curl -sX PUT http://169.254.169.254/latest/api/token '
                '-H "X-aws-ec2-metadata-token-ttl-seconds: 60")',
                'ID=$(curl -s -H "X-aws-ec2-metadata-token: $TOKEN" '
                'http://169.254.169.254/latest/meta-data/instance-id)',
                f"aws ec2 stop-instances --region {price.region or 'us-east-1'} "
                "--instance-ids $ID"]
    if price.provider == "gcp":
        return ["gcloud compute instances stop $(hostname) --zone $(curl -s -H "
                "'Metadata-Flavor: Google' http://metadata.google.internal/computeMetadata/v1/"
                "instance/zone | cut -d/ -f4)"]
    if price.provider == "azure":
        return ["az vm deallocate --resource-group <group> --name $(hostname)"]
    return ["sudo shutdown -h now"]


def at_work(a: Analysis) -> list[ProcessWindow]:
    """The processes on the host at the window's end (on idle GPUs: trailing idle time) that
    work (a sign of work in the window) or serve (a server, a queue consumer), or that
    idle_gpu_held would look at first instead of offering the SIGTERM (`idle_verdict`: a child
    process it waits for, a periodic job between its runs, one run seen, a job between batches,
    no stacks, a lock, a poller...): what may not be stopped is not stopped with its host."""
    return [proc for proc in a.processes
            if proc.trailing_idle_s > 0 and (is_server(proc) or signs_of_work(proc)
                                             or idle_verdict(proc, a).looks_first)]


def work_reasons(proc: ProcessWindow, a: Analysis) -> list[str]:
    """What of `at_work`'s tests GET /v1/idle cannot read in the tick's /v1/now alone: the
    window's signs of work, its parent serving, and why idle_gpu_held looks first at it
    (`idle_verdict`; a periodic job's runs come from Analyzer.periodic instead)."""
    reasons = [f"the rules' window: {sign}" for sign in signs_of_work(proc)]
    if proc.kind.serving_parent:
        reasons.append(f"its parent (pid {proc.kind.serving_parent}) serves on a port: part of a "
                       "server")
    if not reasons and not is_server(proc):
        verdict = idle_verdict(proc, a)
        if verdict.why is not None and verdict.reason != PERIODIC:
            reasons.append(verdict.why)
    return reasons


def check_host_idle(a: Analysis, rule: Rule) -> list[Finding]:
    if a.host_trailing_idle_s < a.limit("host_idle_min_s"):
        return []
    if at_work(a):
        return []  # its GPUs idle, but stopping it stops a process that works or serves
    fraction = a.host_trailing_idle_s / a.window_s if a.window_s > 0 else 1.0
    monthly = a.price.per_hour * HOURS_PER_MONTH * min(fraction, 1.0)
    return [rule.make(
        "host",
        f"the whole host has been idle for {idle_for(a.host_trailing_idle_s, a)} at "
        f"{money(a.price.per_hour)}/h: stop it",
        monthly,
        f"{money(a.price.per_hour)}/h x {HOURS_PER_MONTH:g} h/month x {min(fraction, 1):.0%} "
        f"idle in the window = {money(monthly)}/month; {UPPER_BOUND}",
        {"window": {"start": a.start, "end": a.end, "seconds": a.window_s},
         "idle_seconds": a.host_trailing_idle_s, "price": a.price.as_dict(),
         "idle_utilization_pct": a.idle_utilization_pct,
         "gpus": [{"index": g.index, "utilization_mean": g.utilization_mean, "held": g.held}
                  for g in a.gpus]},
        {"kind": "copy_commands", "commands": _stop_commands(a.price)},
        scope={"whole_host": True},
        headline=f"stop the host: idle for {idle_for(a.host_trailing_idle_s, a)}")]


IDLE_GPU_HELD = Rule(
    "idle_gpu_held", "GPU(s) held by a process and idle (below [idle].utilization, "
    "default 5%) at the end of the window, the process showing no sign of work in it (no "
    "kernels, reads or D state; stacks waiting on input or sleeping)",
    f">= {DEFAULT_GPU_HELD_AFTER_S / 60:g} min", "idle time, memory held, process",
    "release the GPU (SIGTERM after confirmation)", f"process burn x {HOURS_PER_MONTH:g} h",
    check_idle_gpu_held, limits=("idle_held_min_s",))
IDLE_SERVER = Rule(
    "idle_server", "GPU(s) held by a server (it listens and has served, or is online inference "
    "by its kind) and idle (below [idle].utilization) at the end of the window",
    f">= {DEFAULT_GPU_HELD_AFTER_S / 60:g} min",
    "idle time, memory held, listening ports, kind evidence",
    "scale to zero / consolidate / share the GPU (never SIGTERM)",
    f"process burn x {HOURS_PER_MONTH:g} h",
    check_idle_server, limits=("idle_held_min_s",))
HOST_IDLE = Rule(
    "host_idle", "every GPU idle (held or not; a GPU at work whose process NVML does "
    "not list counts as work) at the end of the window, and no process on it working (a sign "
    "of work in the window), serving (a server, a queue consumer) or looked at first by "
    "idle_gpu_held (a periodic job between its runs, a job between batches, no stacks...)",
    f">= {DEFAULT_HOST_IDLE_AFTER_S / 60:g} min", "idle time, per-GPU utilization, price",
    "stop this instance", f"host price x {HOURS_PER_MONTH:g} h x idle fraction", check_host_idle,
    limits=("host_idle_min_s",))
