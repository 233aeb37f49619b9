"""What a GPU process is doing while its GPU is quiet, from its Python stack: the phase.

The rules are data (FRAME_RULES, SOURCE_CALLS in daemon.analysis.stack_rules): frames of the
real libraries (torch DataLoader, torch.save and distributed checkpoint, Hugging Face Trainer,
Lightning loops, torch.cuda synchronize, c10d collectives, vLLM's engine loop) and generic
signals (I/O and waiting frames of the standard library, what the innermost user line calls, the
process in D state, iowait growth, the same user line repeating). `classify` applies them in a
fixed order of precedence. Nothing here knows the names of mlcost's own demo workloads.

A blocking call into C (pickle.dump, array.tofile, a read inside a C extension) leaves no Python
frame, so frames alone cannot tell a checkpoint from a host sync. `HostSignals`
(daemon.analysis.host_signals) are what such a call looks like from outside, measured by the
attribution between dumps: the main thread's on-CPU time, the process's read and write bytes,
D state and iowait, and whether its GPU was busy while the host waited. A host waiting while
its GPU is idle is not a sync (a sync waits on a busy GPU); writing a lot is a checkpoint;
reading or blocking on a read is data wait; the main thread on-CPU with no I/O is host compute
(eval where the frames say so).
Every Classification carries its reason: the rule or signal that decided it.

Writing output (logs, metrics, predictions, embeddings as JSON lines, CSV or text) is its own
phase, `output`, told from the frames (json, csv, logging) and the user's line (a write of a
formatted record, or a flush/fsync just after one), never from a write rate: a JSON-lines
appender writes less per second on a loaded host, and must not turn into host preprocessing
there. Checkpoints (pickle, torch.save, zip, raw arrays) stay `checkpoint`, whose cadence feeds
the spot advice; output does not.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from itertools import islice

from daemon.analysis.host_signals import (
    CHILDREN_CPU_MIN,
    ON_CPU_MIN,
    QUEUED_MIN,
    READ_MIN_PER_S,
    TIMED_WAKES_CPU_MAX,
    WRITE_MIN_PER_S,
    HostSignals,
)
from daemon.analysis.source_lines import SourceLine, read_source_line
from daemon.analysis.stack_rules import (
    BOTOCORE_FILES,
    C_ON_CPU,
    CHILD_WAIT,
    CONTEXT,
    FILE_WAIT,
    FOLDER_LISTING,
    HANDOFF_CALL,
    IO,
    JOB,
    JOB_WAIT,
    LIBRARY,
    LOCK,
    LOCK_CALL,
    LOCK_WAIT,
    LOOP_LINES_LOOKED_AT,
    PATH_CHECK,
    PEER_WAIT,
    POLL_LINES_LOOKED_AT,
    POLLING_TAKE,
    PROMPT_WAIT,
    PYTHON_ON_CPU,
    REMOTE_FETCHES,
    REMOTE_WAIT,
    RUNS_OPTIMIZER_STEP,
    SCRIPT_PROMPT,
    SLEEP_CALL,
    SOCKET_READ_CALL,
    SOURCE_CALLS,
    SQS_RECEIVE_CALL,
    STOPPED,
    STREAM_BLOCK_CALL,
    TIMED_WAIT_CALL,
    TIMER_WAIT,
    WAIT,
    WORKER_PROCESSES_FEED_IT,
    WORKS_ON_INPUT,
    WRITE_CALL,
    FrameRule,
    awaited_answer,
    event_loop_wait,
    first_match,
    folder_watcher,
    future_wait,
    is_child_wait,
    is_comprehension,
    is_handoff_wait,
    is_process_pool_thread,
    is_serving_frame,
    is_socket_frame,
    is_user_code,
    name_matches,
    optimizer_step,
    process_read,
    retry_sleep,
    rule_for,
    stream_read,
    user_frame,
)
from daemon.sources.frames import Frame, ThreadStack, main_thread
from daemon.sources.proc_state import (
    ANONYMOUS_PIPE,
    CHILD_EXIT,
    INOTIFY,
    NAMED_PIPE,
    TIMER_WAKES,
)
from daemon.wire import (
    CHECKPOINT,
    COMM,
    COMPUTE,
    DATA_WAIT,
    EVAL,
    HOST_PREPROCESS,
    IDLE,
    OUTPUT,
    SYNC,
    UNKNOWN,
)

# A sample classified from /proc alone, where py-spy may not read the process
# (daemon.analysis.proc_phases), has a reason that starts with this and one pseudo-frame
# (daemon.analysis.phase_balance.NO_STACK_FILE).
NO_STACKS_EVIDENCE = "from /proc, no stacks"
# How a wait's reason ends where the dump found the GPU idle; the middle band, where the GPU
# works a third of the time or more, reads the same wait as the step's compute and drops it.
WITH_GPU_IDLE = " with the GPU idle"
# A main thread that py-spy found off a CPU at a line of its own calling nothing known to wait,
# its GPU busy meanwhile (classify): the GIL, a core, or a call into C; unknown.
OFF_CPU_AT_ITS_LINE = ("main thread off a CPU at a line of its own that calls nothing known "
                       "to wait, its GPU busy meanwhile (the GIL, a core, or a call into C)")
RUNNING_AT_ITS_LINE = ("main thread running at a line of its own that calls nothing known to "
                       "wait, its GPU busy meanwhile (its own code, or a call into C)")


@dataclass(frozen=True, slots=True)
class Classification:
    phase: str
    reason: str
    frame: Frame | None  # the innermost frame in user code: the line responsible
    # The thread whose stack holds `frame` where that is not the main thread: the reader thread
    # a waiting main thread takes its batches from. None: the main thread's.
    thread: ThreadStack | None = None


_EVAL_NAME = re.compile(r"(^|_)(eval|evaluate|evaluation|valid|validate|validation|test)(_|$)",
                        re.IGNORECASE)
# Where @torch.no_grad() leaves its decorate_context frame (torch >= 2.0, then older torch).
_NO_GRAD_FILES = ("*/torch/utils/_contextlib.py", "*/torch/autograd/grad_mode.py")


def _where(frame: Frame) -> str:
    return f"{os.path.basename(frame.filename)}:{frame.line} {frame.name}"


def _is_eval_function(frame: Frame) -> bool:
    last = frame.name.rsplit(".", 1)[-1]
    return is_user_code(frame) and bool(_EVAL_NAME.search(last))


def classify(
    threads: Sequence[ThreadStack],
    *,
    gpu_busy: bool,
    proc_state: str = "S",
    iowait_growing: bool = False,
    repeated_leaf: bool = False,
    source_line: SourceLine | None = read_source_line,
    signals: HostSignals | None = None,
    busy_elsewhere: bool = False,
) -> Classification:
    """The phase of a process from its main thread's stack and process-level signals (and,
    where the main thread waits for another thread, from that thread's stack).

    `busy_elsewhere`: the process's GPU was busy (its SM share at or above high_sm_share) while
    this main thread had nothing of its own to show: a main thread that only waits (joins a
    thread, waits on a condition or a queue) is then compute, its GPU work another thread's (a
    thread per GPU, as DataParallel's parallel_apply runs the replicas). A main thread that
    reads, writes or computes is what it shows, whatever the GPU did around it.

    Precedence, GPU quiet: a process stopped by a signal (state T: idle, STOPPED) > context
    frames anywhere (checkpoint, eval: a library's checkpoint or
    evaluation frames, or a user function named eval/validate/test...) > comm/sync library
    frames > I/O frames or an I/O call on the innermost user line (a bare socket's read, or an
    HTTP request's wait for its answer to begin, with nothing coming to it, `signals` say, is a
    worker waiting for its next job: idle, JOB_WAIT; so is botocore's request under a user
    line that receives from SQS, `_receives_from_sqs`; a bare socket's read, whatever comes,
    where the process's TCP connections all go to its own job's GPU processes, its parent,
    children or sibling ranks, `signals.job_peers_only`, is a rank waiting for its peer: comm,
    `_waits_for_peer`) >
    the innermost data-loading or serving library frame > a wait on a queue, condition or
    event (or a get in C on the user line: a queue.SimpleQueue) while another thread of the
    process works on input (data wait: `_fed_by`, that thread's line the responsible one) > a
    wait through multiprocessing (a pipe, a queue, a manager's proxy), or for concurrent.futures
    results beside a ProcessPoolExecutor's thread, while its child processes run on a CPU (data
    wait: worker processes feed it, `_fed_by_children`, `_fed_by_process_pool`) > a get on a
    broker's queue (a multiprocessing manager's, a Pool worker's task queue, a redis blocking
    pop, a Celery worker's event loop or prefork pool: idle, JOB_WAIT) > an asyncio event loop
    (no notebook kernel's) waiting while the process holds TCP connections it opened
    (`signals.connections_opened`: idle, JOB_WAIT) > waiting frames or a sleep/wait call on
    the user line (idle; a sleep whose function, or its caller, polls a redis queue with a
    non-blocking take, an SQS queue with a receive, or a folder with a listing, a few lines
    away, `_polls_broker`: JOB_WAIT; one in a loop that checks for a path, `_waits_for_file`:
    FILE_WAIT; input() in C on the user's line, not reading a pipe: a person's prompt in a
    terminal, PROMPT_WAIT) > D
    state or iowait growth (data_wait) > the same user line repeating (sync) > a blocked main
    thread (idle) > unknown. GPU busy: comm and eval still count as themselves (collectives and
    evaluation keep a GPU busy too); everything else is compute.

    A main thread blocked reading a pipe in C (`signals.main_thread_blocked_on`, no frame below
    its line, not an input() prompt) comes right after the I/O frames: a worker waiting for its
    next job where nothing arrived, else reading input (`_reads_pipe`). A named pipe (a FIFO:
    blocked in its open with no writer yet, or reading it) comes before any frame below the
    user's line, which only say which Python call opened it (Path.open, Path.read_text). A wait inside the
    subprocess module or multiprocessing's Process.join (CHILD_WAITS) comes after the signals
    and before the other waiting frames: waiting for a child process it started (idle,
    CHILD_WAIT: `_waits_for_child`). A hand-over wait with no thread working on input, while a
    thread of the user's code blocks reading a bare socket and nothing came over the tick (a
    timed wait's wake-ups to look again bring nothing), is a worker waiting for its next job
    (idle, JOB_WAIT: `_fed_by_network`). A get of a multiprocessing queue or a read of a
    multiprocessing pipe by the user's line (not under a torch DataLoader), where the signals
    named nothing and no child of it works, comes right before the plain waiting frames: another
    process hands it its work (idle, JOB_WAIT: `_process_feeds_it`).

    With `signals` (HostSignals), after the library frames and a reader thread's work, and
    before the waiting frames: a
    process writing >= WRITE_MIN_PER_S (a second, or a CPU-second it got: HostSignals.streams)
    is checkpointing, one reading >= READ_MIN_PER_S (likewise, unless its main thread is on a
    CPU and it reads little per CPU-second: HostSignals.input_read) or in
    D state or with iowait growing waits for data, a main thread on-CPU >= ON_CPU_MIN is host
    compute (eval under a torch.no_grad/inference_mode decorator), and so is one caught on a
    CPU in a comprehension of the user's that calls no I/O, whatever the signals; and the same line repeating,
    or a sync call on it, is a sync only if the GPU was busy (`signals.gpu_busy`): waiting on
    an idle GPU is idle, not a sync.

    `source_line` reads a frame's source line (None: don't read sources); `proc_state` is the
    process state letter from /proc; `repeated_leaf` says the innermost user line was the same
    in the previous samples.
    """
    thread = main_thread(threads)
    frames: tuple[Frame, ...] = thread.frames if thread else ()
    responsible = user_frame(frames)
    if not frames:
        if gpu_busy:
            return Classification(COMPUTE, "GPU busy (no Python stack)", None)
        if (signals is not None and signals.interactive_prompt and thread is not None
                and not thread.active):
            return Classification(
                IDLE, f"{PROMPT_WAIT}: an interpreter in a terminal reading its user's next "
                "line (in C: no Python frame)", None)
        return Classification(UNKNOWN, "no Python stack for the main thread", None)

    context = first_match(frames, CONTEXT)
    if context is None:
        context = _eval_by_name(frames)
    library = first_match(frames, LIBRARY)

    if gpu_busy:
        if library is not None and library[0].phase == COMM:
            return _said(library, responsible, "GPU busy in a collective")
        if context is not None and context[0].phase == EVAL:
            return _said(context, responsible, "GPU busy")
        return Classification(COMPUTE, "GPU busy", responsible)

    if proc_state == "T":
        # Stopped by a signal (Ctrl-Z, SIGSTOP): whatever its stack shows, nothing of it runs
        # until it is continued (a debugger's stop is "t", not this).
        return Classification(IDLE, f"{STOPPED}: nothing of it runs until it is continued "
                              "(kill -CONT, or fg in its shell)", responsible)
    if context is not None:
        return _said(context, responsible)
    if library is not None and library[0].phase in (COMM, SYNC):
        return _said(library, responsible)

    # Frames below (inner to) the innermost user frame: what the user's line called.
    called = frames[: frames.index(responsible)] if responsible is not None else frames
    if signals is not None and signals.main_thread_blocked_on == INOTIFY:
        return _watches_folder(responsible, called, source_line)
    if (signals is not None and signals.main_thread_blocked_on == NAMED_PIPE
            and not _calls(responsible, PROMPT_CALL, source_line)):
        # /proc says it: blocked opening a FIFO that no writer holds (wchan wait_for_partner)
        # or reading one, whichever Python call opened it (open(), os.open, Path.open,
        # Path.read_text: pathlib's frames below the user's line read as a file read, or as a
        # blocked main thread); the frames only say where
        return _reads_pipe(NAMED_PIPE, responsible, signals, source_line)
    # A broker's queue read (a redis blocking pop) reads its socket too: the wait is the job's.
    io = first_match(called, IO) if first_match(called, JOB) is None else None
    if io is not None:
        stream = stream_read(called) if io[0].phase == DATA_WAIT else None
        if stream is not None:
            return _stream_read(stream, io, responsible, signals, source_line)
        if io[0].phase == DATA_WAIT and is_socket_frame(io[1]):
            receive = _receives_from_sqs(called, responsible, source_line)
            if receive is not None:
                return receive
            answer = awaited_answer(called)
            if answer is None and not _client_read(called):
                peer = _waits_for_peer(signals, _where(io[1]), responsible)
                if peer is not None:
                    return peer
            if answer is not None:  # a request whose answer has not begun: a long poll?
                nothing = _nothing_arriving(
                    signals, f"an HTTP request whose answer has not begun, {_where(answer)}",
                    responsible, "a job server holding the request until it has a job (a "
                    "long poll), or a server that does not answer")
            else:
                nothing = (None if _client_read(called)
                           else _nothing_arriving(signals, _where(io[1]), responsible))
            if nothing is not None:
                return nothing
        return _said(io, responsible)
    line_call = _source_call(responsible, source_line) if not called else None
    if (not called and signals is not None
            and signals.main_thread_blocked_on == ANONYMOUS_PIPE
            and not _calls(responsible, PROMPT_CALL, source_line)):
        return _reads_pipe(signals.main_thread_blocked_on, responsible, signals, source_line)
    if line_call is not None and line_call[0] in (DATA_WAIT, CHECKPOINT, OUTPUT):
        if line_call[0] == DATA_WAIT and _calls(responsible, SOCKET_READ_CALL, source_line):
            what = f"`{_code(responsible, source_line)}`"
            nothing = (_waits_for_peer(signals, what, responsible)
                       or _nothing_arriving(signals, what, responsible))
            if nothing is not None:
                return nothing
        return Classification(line_call[0], line_call[1], responsible)
    if library is not None:
        return _said(library, responsible)
    wait = first_match(called, JOB) or first_match(called, LOCK) or first_match(called, WAIT)
    if wait is not None and not busy_elsewhere and _is_handoff(wait):
        waiting = f"{wait[0].reason} ({_where(wait[1])})"
        fed = (_fed_by(threads, thread, waiting, source_line)
               or _fed_by_network(threads, thread, called, waiting, responsible, signals,
                                  source_line))
        if fed is not None:
            return fed
    if (wait is None and not called and not busy_elsewhere and responsible is not None
            and _calls(responsible, HANDOFF_CALL, source_line)):
        # A get that leaves no Python frame (queue.SimpleQueue's is C): the same hand-over.
        waiting = (f"waiting in a queue's get in C, no Python frame (a queue.SimpleQueue): "
                   f"`{_code(responsible, source_line)}` ({_where(responsible)})")
        fed = (_fed_by(threads, thread, waiting, source_line)
               or _fed_by_network(threads, thread, called, waiting, responsible, signals,
                                  source_line))
        if fed is not None:
            return fed
    read = process_read(called, frames) if wait is not None else None
    if wait is not None and not busy_elsewhere and (_through_multiprocessing(wait[1])
                                                    or read is not None):
        # (a pipe's poll with a timeout waits in select, below the multiprocessing frames)
        where = _where(wait[1] if _through_multiprocessing(wait[1]) or read is None else read)
        fed = _fed_by_children(f"on a multiprocessing pipe or queue ({where})",
                               responsible, signals)
        if fed is not None:
            return fed
    if wait is not None and not busy_elsewhere and _is_handoff(wait):
        fed = _fed_by_process_pool(threads, thread, called, responsible, signals)
        if fed is not None:
            return fed
    if wait is not None and wait[0].kind == JOB and not busy_elsewhere:
        return _said(wait, responsible)
    if wait is not None and wait[0].kind == WAIT and not busy_elsewhere:
        client = _event_loop_client(called, wait, responsible, signals)
        if client is not None:
            return client
    if signals is not None:
        # Caught on a CPU at a line of its own that calls no I/O; in a comprehension, running
        # Python, whatever the process read or wrote elsewhere in the seconds the signals
        # cover (a loop that reads a record, then decodes it in Python, spends its time in
        # the decoding).
        caught = (thread is not None and thread.active and responsible is not None
                  and responsible is frames[0] and line_call is None)
        # A dump caught at a sync of its own (`loss.item()`) that saves nothing: the writes of
        # the last seconds were another line's (the checkpoint's own samples name it), and a
        # checkpoint verdict here named `loss.item()` as the checkpoint (probe 144 F4).
        writes_elsewhere = (line_call is not None and line_call[0] == SYNC
                            and not _calls(responsible, SAVE_CALL, source_line))
        # A dump caught at any sync while its GPU was busy waits on its GPU's work there
        # (blocked, spinning in the driver, or runnable again and waiting for a core: py-spy
        # reads the last two as active): the CPU, reads and writes of those seconds were other
        # lines' and other threads' (the samples caught there name them), so none of them is a
        # verdict on it. "Host compute" at `loss.item()` named the wait as the tokenizing a
        # loop did between its steps (probe 144, F3), and "reading … while the GPU idles" as
        # the data wait of a job whose worker processes' batches arrive over a pipe, its GPU
        # 94-99% busy (probe 145, H1).
        waits_on_gpu = (line_call is not None and line_call[0] == SYNC
                        and signals.gpu_busy is True)
        measured = None if waits_on_gpu else _from_signals(
            frames, signals, responsible, caught_on_cpu=caught,
            in_python=caught and responsible is not None and is_comprehension(responsible),
            writes_elsewhere=writes_elsewhere)
        if measured is not None:
            return measured
    child = next((f for f in reversed(called) if is_child_wait(f)), None)
    if child is not None and not busy_elsewhere:
        return _waits_for_child(child, responsible, signals)
    if (not called and responsible is not None and not busy_elsewhere and signals is not None
            and signals.main_thread_blocked_on == CHILD_EXIT):
        # os.system, or os.waitpid after os.fork: the wait is in C, no frame below the line;
        # /proc says it (wait4). It read idle, and a SIGTERM was offered mid-download (probe
        # 152, H1); with its GPU's reading still busy after a warm-up, `sync` at that line.
        return _waits_for_child(responsible, responsible, signals, how=CHILD_EXIT_HOW)
    if thread is not None and not thread.active and not busy_elsewhere:
        watched = _watched_by_observer(threads, thread, responsible)
        if watched is not None:
            return watched
    if wait is not None and wait[0].kind == WAIT and not busy_elsewhere:
        # (after the signals: a read, a write or a CPU they measure names its own phase, as
        # the plain wait below it did)
        fed = _process_feeds_it(called, frames, responsible)
        if fed is not None:
            return fed
    if wait is not None and wait[0].kind == WAIT and not busy_elsewhere:
        locked = _waits_for_locked_threads(threads, thread, wait, source_line)
        if locked is not None:
            return locked
    if wait is not None:
        if busy_elsewhere and wait[0].kind in (WAIT, JOB):
            return _said(wait, responsible, "GPU busy meanwhile: its work runs in another "
                                            "thread while the main thread waits",
                         phase=COMPUTE)
        if wait[0].kind == WAIT:
            timer = _event_loop_timer(called, wait, responsible, signals)
            if timer is not None:
                return timer
        return _said(wait, responsible)
    if line_call is not None and line_call[0] == IDLE:
        if _calls(responsible, PROMPT_CALL, source_line) and (
                signals is None or signals.main_thread_blocked_on is None):
            # input() in C on its user's line, not on a pipe (a terminal, or /proc would not
            # say): a person is asked, as at a REPL's prompt (probe 152 M1: "Start the 12 h
            # fine-tune now? [y/N]" was offered the SIGTERM). On a pipe, a notebook kernel's
            # stdin from Jupyter: as before, its notebook's own SIGTERM (issue 21)
            return Classification(
                IDLE, f"{PROMPT_WAIT}: {SCRIPT_PROMPT} waiting for its user's answer "
                f"(`{_code(responsible, source_line)}`)", responsible)
        outside = frames.index(responsible) + 1 if responsible is not None else len(frames)
        polling = _polls_broker(responsible, frames[outside] if outside < len(frames) else None,
                                source_line)
        if polling is not None:
            return polling
        retrying = _retries_remote(responsible,
                                   frames[outside] if outside < len(frames) else None,
                                   source_line)
        if retrying is not None:
            return retrying
        awaited = _waits_for_file(responsible,
                                  frames[outside] if outside < len(frames) else None,
                                  source_line)
        if awaited is not None:
            return awaited
        return Classification(IDLE, line_call[1] + WITH_GPU_IDLE, responsible)
    library_retry = (retry_sleep(called[0]) if called and thread is not None
                     and not thread.active else None)
    if library_retry is not None:
        # (before the repeating line: asleep in the backoff, its user line repeats, and read
        # "waiting with its GPU idle and no I/O" it kept the SIGTERM)
        code = _code(responsible, source_line)
        return Classification(
            IDLE, f"{REMOTE_WAIT}: sleeping in the backoff of {library_retry} "
            f"({_where(called[0])}) between tries of a request its line makes"
            + (f" (`{code}`)" if code else "") + ": a service that throttled or failed; "
            "it goes on when the service answers", responsible)
    if proc_state == "D":
        return Classification(DATA_WAIT, "process in uninterruptible I/O sleep (D state)", responsible)
    if iowait_growing:
        return Classification(DATA_WAIT, "block I/O wait growing (delay accounting)", responsible)
    if (line_call is not None and line_call[0] == SYNC) or repeated_leaf:
        if signals is not None and (signals.gpu_busy is False or signals.gpu_held is False):
            cpu = signals.on_cpu
            if cpu is None or cpu < ON_CPU_MIN:
                return Classification(
                    IDLE, ("waiting with its GPU idle" if signals.gpu_held is not False else
                           "waiting with no GPU of its own")
                    + f" and no I/O: not a sync (a sync waits on a busy GPU){_cpu_text(signals)}",
                    responsible)
        elif line_call is not None and line_call[0] == SYNC:
            return Classification(SYNC, line_call[1] + _busy_text(signals), responsible)
        elif _queued_text(signals) and thread is not None and thread.active:
            # The line repeats because the thread is runnable and waits for a core, not for its
            # GPU: the step's GPU work (busy meanwhile) is what runs, a loaded host its delay.
            return Classification(
                COMPUTE if signals is not None and signals.gpu_busy else UNKNOWN,
                "the same user line repeats while the main thread is runnable"
                + _queued_text(signals) + _busy_text(signals), responsible)
        elif (line_call is None and thread is not None
              and responsible is not None and responsible is frames[0]
              and signals is not None and signals.gpu_busy is True
              and (signals.main_thread_cpu is None
                   or signals.main_thread_cpu >= ON_CPU_MIN / 2)):
            # At a line of its own that calls nothing known to wait, which it kept running at:
            # its main thread ran a quarter or more of the time it did not queue for a core
            # (or its clock is not read yet), where a thread blocked in a sync runs next to
            # none. Off a CPU: the GIL or a core on a loaded host (a CI run of the tokenizer read
            # a sync at `encode`, which the band made "waits on its own GPU's work"); on one, its
            # own code running. Unknown, as off a CPU below: nothing says it waits on its GPU.
            return Classification(
                UNKNOWN, (OFF_CPU_AT_ITS_LINE if not thread.active else RUNNING_AT_ITS_LINE)
                + _cpu_text(signals), responsible)
        else:
            return Classification(
                SYNC, "the same user line repeats while the host waits (a host sync such as "
                f".item()/.cpu() leaves no Python frame){_busy_text(signals)}", responsible,
            )
    if thread is not None and not thread.active:
        if (signals is not None and signals.gpu_busy is True and responsible is not None
                and responsible is frames[0] and line_call is None):
            # Off a CPU at a line of its own that calls nothing known to wait, its GPU busy
            # meanwhile: most often waiting for the GIL or a core (a tokenizer's `encode` on a
            # loaded host, beside its GPU's stream thread), or in a call into C. Nothing says
            # it waits, nor on what: not idle, and not "waits while its GPU works" in the
            # middle band (a CI run of the tokenizer read that at `encode`).
            return Classification(UNKNOWN, OFF_CPU_AT_ITS_LINE, responsible)
        return Classification(IDLE, "main thread blocked" + WITH_GPU_IDLE, responsible)
    return Classification(UNKNOWN, "host code running while the GPU idles"
                          + _queued_text(signals), responsible)


# Other threads looked at for the one a waiting main thread takes its input from.
MAX_THREADS_LOOKED_AT = 64


def _on_a_lock(thread: ThreadStack, source_line: SourceLine | None) -> Frame | None:
    """The user line at which `thread` (blocked: py-spy not active) waits on a lock: a lock's
    frame below it (LOCK: a semaphore, a file lock), or a lock's acquire in C on it (LOCK_CALL:
    `with stats_lock:`, `lock.acquire()`, no Python frame below); None otherwise."""
    line = user_frame(thread.frames)
    if line is None or thread.active:
        return None
    called = thread.frames[: thread.frames.index(line)]
    if first_match(called, LOCK) is not None:
        return line
    return line if not called and _calls(line, LOCK_CALL, source_line) else None


def _waits_for_locked_threads(threads: Sequence[ThreadStack], main: ThreadStack | None,
                              wait: tuple[FrameRule, Frame], source_line: SourceLine | None
                              ) -> Classification | None:
    """Idle on a lock (LOCK_WAIT), where the main thread waits in threading or a queue
    (Thread.join, an event, a condition, a queue's get: `wait`) and other threads of the user's
    code wait on locks (`_on_a_lock`) while none of them runs: the main thread waits for
    threads that wait for whoever holds their locks, as a main thread blocked on a lock itself
    does (rules/idle.py looks first either way). Where every thread of the user's code besides
    the main one waits on a lock, nothing of it can release one: a deadlock? The line shown is
    the first lock wait's, in its thread. None where no thread waits on a lock, or one runs."""
    if main is None or not fnmatchcase(wait[1].filename.replace("\\", "/"),
                                       "*/threading.py") and not fnmatchcase(
            wait[1].filename.replace("\\", "/"), "*/queue.py"):
        return None
    locked: list[tuple[ThreadStack, Frame]] = []
    others = 0
    for other in islice((t for t in threads if t is not main), MAX_THREADS_LOOKED_AT):
        if user_frame(other.frames) is None:
            continue  # a library's own thread (a telemetry client, a pin-memory thread)
        if other.active:
            return None  # a thread at work: it may release what the others wait for
        others += 1
        line = _on_a_lock(other, source_line)
        if line is not None:
            locked.append((other, line))
    if not locked:
        return None
    shown = ", ".join(
        f"{t.thread_name[:40] if t.thread_name else f'tid {t.thread_id}'!r} at {_where(line)}"
        for t, line in locked[:3]) + (f" and {len(locked) - 3} more" if len(locked) > 3 else "")
    stuck = (": every other thread of its code waits on a lock, none can release one (a "
             "deadlock?)" if len(locked) == others else "")
    first, line = locked[0]
    return Classification(
        IDLE, f"{LOCK_WAIT}: its main thread {wait[0].reason} ({_where(wait[1])}) for threads "
        f"that wait on locks ({shown}){stuck}", line, first)


def _is_handoff(wait: tuple[FrameRule, Frame]) -> bool:
    """A waiting frame (not a lock's) in which a thread waits for another to hand it
    something: a queue, a condition, an event."""
    return wait[0].kind == WAIT and is_handoff_wait(wait[1])


def _fed_by(threads: Sequence[ThreadStack], main: ThreadStack | None, waiting: str,
            source_line: SourceLine | None) -> Classification | None:
    """Data wait, where the main thread waits on a queue, a condition or an event (`waiting`
    says which, and where) while another thread of its process works on input
    (`_input_work`): a reader thread that reads or decodes the batches the loop takes. Its line
    is the one responsible: the first that works, or the one holding the GIL where one does
    (py-spy calls a thread waiting for the GIL active too: of two producers decoding in Python,
    the one that runs holds it). None where no other thread works: a process waiting for
    nothing (a server between requests) is idle. Threads that run the loop's optimizer step
    (`optimizer_step` frames: a CPU Adam over its shards, as ZeRO-offload's) make no input:
    they update the parameters after the step. Where only such threads work, the loop waits
    for host compute of its own step: host_preprocess, named so (RUNS_OPTIMIZER_STEP), never
    idle."""
    others = (t for t in threads if t is not main)
    found: tuple[ThreadStack, Frame, str] | None = None
    optimizing: tuple[ThreadStack, Frame, str] | None = None
    for other in islice(others, MAX_THREADS_LOOKED_AT):
        line = user_frame(other.frames)
        if line is None:
            continue  # a library's own thread (a logger, a progress bar): no input of the loop's
        work = _input_work(other, line, source_line)
        if work is None:
            continue
        if any(optimizer_step(f.filename, f.name) for f in other.frames):
            if optimizing is None or work == PYTHON_ON_CPU and optimizing[2] != PYTHON_ON_CPU:
                optimizing = other, line, work
            continue
        if found is None or work == PYTHON_ON_CPU:
            found = other, line, work
        if work == PYTHON_ON_CPU:
            break
    if found is None and optimizing is not None:
        other, line, work = optimizing
        name = other.thread_name[:40] if other.thread_name else f"tid {other.thread_id}"
        return Classification(
            HOST_PREPROCESS, f"main thread {waiting} while thread {name!r}{RUNS_OPTIMIZER_STEP}"
            f"{work} ({_where(line)})", line, other)
    if found is None:
        return None
    other, line, work = found
    name = other.thread_name[:40] if other.thread_name else f"tid {other.thread_id}"
    return Classification(
        DATA_WAIT, f"main thread {waiting} while thread {name!r}{WORKS_ON_INPUT}"
        f"{work} ({_where(line)})", line, other)


def _input_work(thread: ThreadStack, line: Frame, source_line: SourceLine | None) -> str | None:
    """What `thread` (whose innermost user frame is `line`) does for the loop's input: reading
    (a file, a client library's download, a DataLoader) or running on a CPU (decoding:
    PYTHON_ON_CPU where it holds the GIL, Python code, or C code that keeps the GIL). None
    where it waits, sleeps, reads a bare socket (a server's handler may wait for its client
    there), handles a server's request, or does work of another phase (a checkpoint, output,
    evaluation, a collective)."""
    frames = thread.frames
    if first_match(frames, CONTEXT) is not None:
        return None  # a checkpoint, evaluation or import in that thread: not the loop's input
    if any(is_serving_frame(f) for f in frames):
        return None  # handling a server's request: serving a client, not reading input
    library = first_match(frames, LIBRARY)
    if library is not None:
        return library[0].reason if library[0].phase in (DATA_WAIT, HOST_PREPROCESS) else None
    called = frames[: frames.index(line)]
    io = first_match(called, IO)
    if io is not None:
        if io[0].phase != DATA_WAIT:
            return None  # writing output or a checkpoint
        # a file, or a client library's read (http.client, urllib3, botocore above the socket)
        return f"{io[0].reason} ({_where(io[1])})" if _client_read(called) else None
    if first_match(called, LOCK) is not None or first_match(called, WAIT) is not None:
        return None
    if not called and source_line is not None:
        text = source_line(line)
        if text and SOCKET_READ_CALL.search(text.split("#", 1)[0]):
            return None
        line_call = _source_call(line, source_line)
        if line_call is not None:
            return line_call[1] if line_call[0] == DATA_WAIT else None
    if not thread.active:
        return None
    # Without the GIL it runs C code that released it (zlib, a large numpy op), or it just
    # gave the GIL up: other threads run meanwhile.
    return PYTHON_ON_CPU if thread.owns_gil else C_ON_CPU


def _fed_by_network(threads: Sequence[ThreadStack], main: ThreadStack | None,
                    called: Sequence[Frame], waiting: str, responsible: Frame | None,
                    signals: HostSignals | None,
                    source_line: SourceLine | None) -> Classification | None:
    """Idle, waiting for its next job, where the main thread waits on a queue, a condition or
    an event (`waiting` says which, and where; not a concurrent.futures result: a request's
    answer) that a thread of its own code fills from the network: blocked (py-spy: not active)
    reading a bare socket (`_reads_network`: a job dispatcher's or a broker's connection read
    in a thread, `for line in sock.makefile()`), while nothing came to the process over the
    tick (`_nothing_arriving`: the main thread slept through it, a hand-over would have woken
    it; no reads, no child at work). A timed wait (`jobs.get(timeout=1)` in a loop that looks
    at a stop flag: `_timed_wait`) wakes when its timeout runs out: woken, but on a CPU under
    TIMED_WAKES_CPU_MAX of the time, nothing came to it either. The same worker as one whose
    main thread reads the socket itself. None where no such thread waits, or something
    arrived, or it was not measured: a wait like any other (a stalled job's threads
    deadlocked on locks read so)."""
    if future_wait(called) is not None:
        return None  # a request's answer (a remote call in a thread pool): no stream of jobs
    for other in islice((t for t in threads if t is not main), MAX_THREADS_LOOKED_AT):
        line = user_frame(other.frames)
        if line is None or other.active:
            continue  # a library's own thread (a telemetry client's socket), or one at work
        read = _reads_network(other, line, source_line)
        if read is None:
            continue
        name = other.thread_name[:40] if other.thread_name else f"tid {other.thread_id}"
        peer = _waits_for_peer(signals, f"its main thread {waiting} for what thread {name!r} "
                               f"reads from a socket, {read}", responsible)
        if peer is not None:
            return peer
        return _nothing_arriving(
            signals, f"its main thread {waiting} for what thread {name!r} reads from a "
            f"socket, {read}", responsible, "a job dispatcher or a broker with no work for it, "
            "or a peer with nothing to send",
            timed=_timed_wait(called, responsible, source_line))
    return None


def _timed_wait(called: Sequence[Frame], responsible: Frame | None,
                source_line: SourceLine | None) -> bool:
    """Whether a hand-over wait passes a timeout (TIMED_WAIT_CALL): on the line of its
    innermost waiting frame (threading's Condition.wait: `waiter.acquire(True, timeout)`), or
    on the user's line (a SimpleQueue's get in C, or a waiting frame whose source is not read)."""
    wait = next((f for f in called if is_handoff_wait(f)), None)
    return any(_calls(frame, TIMED_WAIT_CALL, source_line)
               for frame in (wait, responsible) if frame is not None)


def _reads_network(thread: ThreadStack, line: Frame,
                   source_line: SourceLine | None) -> str | None:
    """Where `thread` (whose innermost user frame is `line`) blocks reading a bare socket: a
    socket's frame below its line with no client library's read above it (http.client,
    botocore: a download), or a recv in C on its line; None where it does not, or it handles a
    server's request (a server's handler waits for its client there: a server, told apart by
    its port)."""
    frames = thread.frames
    if any(is_serving_frame(f) for f in frames):
        return None
    called = frames[: frames.index(line)]
    io = first_match(called, IO)
    if io is not None:
        if io[0].phase == DATA_WAIT and is_socket_frame(io[1]) and not _client_read(called):
            return _where(io[1])
        return None
    if not called and _calls(line, SOCKET_READ_CALL, source_line):
        return f"`{_code(line, source_line)}` ({_where(line)})"
    return None


def _client_read(called: Sequence[Frame]) -> bool:
    """Whether the frames below the user's line read a file or through a client library
    (http.client, urllib3, botocore above the socket): not a bare socket's read."""
    return any((rule := rule_for(f, IO)) is not None and rule.phase == DATA_WAIT
               and not is_socket_frame(f) for f in called)


def _code(frame: Frame | None, source_line: SourceLine | None) -> str:
    """The source of `frame`'s line, without its comment ("" where it cannot be read)."""
    if frame is None or source_line is None:
        return ""
    return (source_line(frame) or "").split("#", 1)[0].strip()[:80]


def _calls(frame: Frame | None, call: re.Pattern[str], source_line: SourceLine | None) -> bool:
    """Whether `frame`'s line makes the call `call` matches."""
    return bool(call.search(_code(frame, source_line)))


def _children_at_work(signals: HostSignals | None) -> str | None:
    """How its child processes work, where they do: CHILDREN_CPU_MIN of a core between them (the
    tree's CPU less its own), or one runnable at the last tick; None where they do not or that
    was not measured."""
    if signals is None or signals.tree_cpu is None:
        return None
    cpu = max(signals.tree_cpu - (signals.process_cpu or 0.0), 0.0)
    if cpu < CHILDREN_CPU_MIN and not signals.children_running:
        return None
    running = (f"{signals.children_running} on a CPU or waiting for one, "
               if signals.children_running else "")
    return f"{running}{cpu:.0%} of a core"


def _waits_for_peer(signals: HostSignals | None, what: str,
                    responsible: Frame | None) -> Classification | None:
    """Comm, where the main thread blocks on a bare socket (`what`) and the process's TCP
    connections all go to GPU processes of its own job (its parent, children or sibling ranks)
    or to itself (`signals.job_peers_only`, from its kind's socket reads): a rank waiting for
    its peer in a hand-written all-reduce or exchange (the straggler is the one it waits for),
    not a worker waiting for a job server's next job. None otherwise."""
    if signals is None or not signals.job_peers_only:
        return None
    return Classification(
        COMM, f"{PEER_WAIT} on a socket ({what}): its TCP connections all go to its own job's "
        "GPU processes (its parent, children or sibling ranks), not to a job server",
        responsible)


def _nothing_arriving(signals: HostSignals | None, what: str, responsible: Frame | None,
                      who: str = "a job server or a broker with no work for it, or a peer "
                                 "with nothing to send",
                      on: str = "a socket", timed: bool = False) -> Classification | None:
    """Idle, waiting for its next job, where the main thread blocks on a bare socket (`what`:
    no client library above it), or on a request whose answer has not begun (an HTTP long
    poll; `who` says what it waits for), and nothing came to it: the thread slept through the last
    tick (`signals.main_thread_woke` False: not once on a CPU; a stream's every packet wakes
    it), no child process of it at work (a feeder that computes its input), no reads or D
    state. That is a worker's connection to a job server or a broker with no work for it, or a
    peer with nothing to send: no input pipeline that a read-ahead would speed up. (Bytes a
    recv brings are in no /proc counter: rchar counts read(), not recv().) `timed`: the main
    thread waits with a timeout (a hand-over's `get(timeout=1)` in a loop), which wakes it
    each time it runs out: woken, it had nothing come to it where it ran under
    TIMED_WAKES_CPU_MAX of the time (`signals.main_thread_cpu`: a wake-up to look again
    costs microseconds). None, data wait, where it woke otherwise or that was not measured.
    Its GPU may have worked in the seconds the signals cover: it ran the last job."""
    if signals is None or signals.main_thread_woke is None:
        return None
    cpu = signals.main_thread_cpu
    timed_out = (signals.main_thread_woke and timed and cpu is not None
                 and cpu < TIMED_WAKES_CPU_MAX)
    if signals.main_thread_woke and not timed_out:
        return None
    if signals.d_state or signals.iowait_growing or signals.read_per_s >= READ_MIN_PER_S:
        return None
    if signals.tree_cpu is None or _children_at_work(signals) is not None:
        return None
    # (one text whatever the figure: a stack's reason in the balance is its most frequent)
    slept = (f"its main thread woke only as its wait's timeout ran out, on a CPU under "
             f"{TIMED_WAKES_CPU_MAX:.0%} of the time" if timed_out
             else "its main thread slept through the last tick")
    return Classification(
        IDLE, f"{JOB_WAIT} on {on} nothing came to ({what}; {slept}): {who}", responsible)


def _reads_pipe(pipe: str, responsible: Frame | None, signals: HostSignals,
               source_line: SourceLine | None) -> Classification:
    """A main thread blocked reading a pipe in C (`for line in fifo`, `sys.stdin.readline()`,
    no Python frame below its line; `pipe` says which kind, from /proc; not input(): a prompt):
    a worker waiting for its next job where nothing came to it over the tick
    (`_nothing_arriving`: whoever writes the pipe has no work for it), else reading its input
    from the pipe. Never a host sync, whatever its GPU did around it: the thread waits on the
    pipe's writer, not on the GPU."""
    code = _code(responsible, source_line)
    what = f"`{code}`" if code else (_where(responsible) if responsible else "no Python frame")
    nothing = _nothing_arriving(signals, what, responsible, "a scheduler, a parent or a feeder "
                                "with no work for it", on=pipe)
    if nothing is not None:
        return nothing
    return Classification(DATA_WAIT, f"reading {pipe} ({what})", responsible)


def _stream_read(stream: Frame, io: tuple[FrameRule, Frame], responsible: Frame | None,
                 signals: HostSignals | None, source_line: SourceLine | None) -> Classification:
    """A redis stream read (XREAD, XREADGROUP; `stream` its command's frame, `io` redis-py's
    read below it): a consumer waiting for its next job where the user's line passes `block=`
    (the command waits in the server for new entries, as BLPOP does) or, where the line does
    not say, nothing came to it over the tick (`_nothing_arriving`); else reading input."""
    command = stream.name.rsplit(".", 1)[-1].upper()
    if _calls(responsible, STREAM_BLOCK_CALL, source_line):
        return Classification(
            IDLE, f"{JOB_WAIT} from a redis stream ({command} BLOCK: "
            f"`{_code(responsible, source_line)}`, {_where(stream)})", responsible)
    nothing = _nothing_arriving(signals, f"a redis stream read, {_where(stream)}", responsible,
                                f"a redis stream with no new entries ({command} BLOCK)")
    return nothing if nothing is not None else _said(io, responsible)


def _polls_broker(frame: Frame | None, caller: Frame | None,
                  source_line: SourceLine | None) -> Classification | None:
    """Idle, waiting for its next job, where `frame`'s line sleeps and its function takes from a
    redis queue without blocking (POLLING_TAKE), receives from an SQS queue
    (SQS_RECEIVE_CALL) or lists a folder (FOLDER_LISTING: a watch-folder worker), within
    POLL_LINES_LOOKED_AT lines before or after it, or its caller's line (`caller`: the frame
    right outside it, in a function of the user's) does: a worker polling its queue or its
    inbox, asleep because the last look found nothing. None for any other sleep (a loop
    stalled in its sleep, a wait for one path to appear, a take in another function)."""
    if frame is None or source_line is None or not _calls(frame, SLEEP_CALL, source_line):
        return None
    sleep = _code(frame, source_line)
    looked_at = [frame]
    if caller is not None and is_user_code(caller) and caller.name != "<module>":
        looked_at.append(caller)  # a module's lines run across its functions' bodies
    for where in looked_at:
        found = _takes_near(where, source_line)
        if found is not None:
            at, code, what = found
            whose = "" if where is frame else f" in its caller {where.name}"
            if what == "a folder":
                return Classification(
                    IDLE, f"{JOB_WAIT} from a folder it polls: sleeping (`{sleep}`) between "
                    f"looks at the folder (`{code}`, line {at}{whose}) that found no new file",
                    frame)
            return Classification(
                IDLE, f"{JOB_WAIT} from {what} it polls: sleeping (`{sleep}`) between "
                f"non-blocking takes (`{code}`, line {at}{whose}) that found it empty", frame)
    return None


def _takes_near(frame: Frame, source_line: SourceLine) -> tuple[int, str, str] | None:
    """The line (its number, its code and what it takes from) within POLL_LINES_LOOKED_AT
    lines of `frame`'s, before or after it and in its function, that takes from a redis or an
    SQS queue or lists a folder; None where none does."""
    for at, _, code in _lines_near(frame, source_line):
        for pattern, what in ((POLLING_TAKE, "a redis queue"),
                              (SQS_RECEIVE_CALL, "an SQS queue"),
                              (FOLDER_LISTING, "a folder")):
            if pattern.search(code):
                return at, code.strip()[:80], what
    return None


def _lines_near(frame: Frame, source_line: SourceLine) -> Iterator[tuple[int, str, str]]:
    """The lines within POLL_LINES_LOOKED_AT of `frame`'s and in its function, the nearest
    first, above it up to the function's first line, then below it up to the next function's:
    (the line's number, its text, its code without a comment)."""
    for step in (-1, 1):
        for lines in range(1, POLL_LINES_LOOKED_AT + 1):
            at = frame.line + step * lines
            if at < 1:
                break
            text = source_line(Frame(frame.name, frame.filename, at))
            if text is None:
                break
            code = text.split("#", 1)[0]
            starts_one = code.lstrip().startswith(("def ", "async def ", "class "))
            if step > 0 and starts_one:
                break  # the next function: no line of this one
            yield at, text, code
            if step < 0 and starts_one:
                break  # the function's first line: nothing above it is this function's


def _retries_remote(frame: Frame | None, caller: Frame | None,
                    source_line: SourceLine | None) -> Classification | None:
    """Idle, waiting on a remote service, where `frame`'s line sleeps in a loop that fetches
    from one (REMOTE_FETCHES: urllib, requests/httpx, a session's or a client's request, S3,
    GCS and Azure blob reads, fsspec, the Hugging Face Hub, a remote URL) within
    POLL_LINES_LOOKED_AT lines of the sleep and inside the same loop, or its caller's line
    (`caller`: the frame right outside it, in a function of the user's) does so: a retry with
    backoff of a store that throttles or fails, or a poll of one not ready, that goes on when
    it answers. None for any other sleep (a fetch before the loop, a stalled job's sleep)."""
    if frame is None or source_line is None or not _calls(frame, SLEEP_CALL, source_line):
        return None
    sleep = _code(frame, source_line)
    found = _in_loop_here_or_caller(frame, caller, source_line, _fetches)
    if found is None:
        return None
    (at, code, what), whose = found
    return Classification(
        IDLE, f"{REMOTE_WAIT}: sleeping (`{sleep}`) in a loop that requests from "
        f"{what} (`{code}`, line {at}{whose}): a retry with backoff of a service that "
        "throttled or failed, or a poll of one not ready; it goes on when the service "
        "answers", frame)


def _in_loop_here_or_caller(frame: Frame, caller: Frame | None, source_line: SourceLine,
                            find: Callable[[str], str | None]
                            ) -> tuple[tuple[int, str, str], str] | None:
    """`_in_loop` at `frame`'s line, else at its caller's (`caller`, the frame right outside
    it, where it is the user's and not the module's top level: a sleep in a helper the loop
    calls): what it found, and "" or " in its caller NAME" for a reason; None where neither."""
    looked_at = [frame]
    if caller is not None and is_user_code(caller) and caller.name != "<module>":
        looked_at.append(caller)
    for where in looked_at:
        found = _in_loop(where, source_line, find)
        if found is not None:
            return found, "" if where is frame else f" in its caller {where.name}"
    return None


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


def _loop_header(frame: Frame, source_line: SourceLine) -> tuple[int, int] | None:
    """The line number and indentation of the `for`/`while` loop `frame`'s line is in, looked
    for up to LOOP_LINES_LOOKED_AT lines above it and not past its function's `def`; None where
    its line is in no loop of its function."""
    text = source_line(frame)
    if text is None:
        return None
    inner = _indent(text)
    for lines in range(1, LOOP_LINES_LOOKED_AT + 1):
        at = frame.line - lines
        if at < 1:
            return None
        above = source_line(Frame(frame.name, frame.filename, at))
        if above is None:
            return None
        code = above.split("#", 1)[0]
        if not code.strip() or _indent(above) >= inner:
            continue  # a blank line, a comment, or a line of the same block or deeper
        inner = _indent(above)
        head = code.lstrip()
        if head.startswith(("for ", "while ", "async for ")):
            return at, inner
        if head.startswith(("def ", "async def ", "class ")):
            return None
    return None


def _waits_for_file(frame: Frame | None, caller: Frame | None,
                    source_line: SourceLine | None) -> Classification | None:
    """Idle, waiting for a file another process writes, where `frame`'s line sleeps in a loop
    that checks whether a path exists (PATH_CHECK: os.path.exists, isfile, a Path's exists())
    within POLL_LINES_LOOKED_AT lines of the sleep and inside the same loop (its header
    included: `while not os.path.exists(marker):`), or its caller's line (`caller`: the frame
    right outside it, in a function of the user's) does so: a done-marker, a go-file or a resume
    file that another job or a person writes; it goes on when the file appears. None for any
    other sleep (a check before the loop, a stalled job's bare sleep)."""
    if frame is None or source_line is None or not _calls(frame, SLEEP_CALL, source_line):
        return None
    sleep = _code(frame, source_line)
    own = (source_line(frame) or "").split("#", 1)[0]
    if own.lstrip().startswith("while ") and PATH_CHECK.search(own):
        # (`while not os.path.exists(marker): time.sleep(10)` on one line)
        return Classification(
            IDLE, f"{FILE_WAIT}: sleeping in a loop that checks for a path (`{sleep}`): a "
            "done-marker, a go-file or a resume file that another job or a person writes; it "
            "goes on when the file appears", frame)
    found = _in_loop_here_or_caller(frame, caller, source_line, _checks_path)
    if found is None:
        return None
    (at, code, _), whose = found
    return Classification(
        IDLE, f"{FILE_WAIT}: sleeping (`{sleep}`) in a loop that checks for a path "
        f"(`{code}`, line {at}{whose}): a done-marker, a go-file or a resume file that "
        "another job or a person writes; it goes on when the file appears", frame)


def _checks_path(code: str) -> str | None:
    return "a path" if PATH_CHECK.search(code) else None


def _fetches(code: str) -> str | None:
    """Whom `code` requests from (REMOTE_FETCHES: a remote service), None where it does not."""
    return next((what for pattern, what in REMOTE_FETCHES if pattern.search(code)), None)


def _in_loop(frame: Frame, source_line: SourceLine,
             find: Callable[[str], str | None]) -> tuple[int, str, str] | None:
    """The line (its number, its code and what `find` says of it) within POLL_LINES_LOOKED_AT
    lines of `frame`'s, before or after it, inside the loop `frame`'s line is in (its header
    included), whose code `find` names something in; None where none does. The lines around it
    are read first, the loop's header only where one of them matches (a stalled job's sleep
    costs no more reads than a poller's look)."""
    found: list[tuple[int, str, str]] = []  # (line, code, what)
    for at, _, code in _lines_near(frame, source_line):
        what = find(code)
        if what is not None:
            found.append((at, code.strip()[:80], what))
    if not found:
        return None
    header = _loop_header(frame, source_line)
    if header is None:
        return None
    top, indent = header
    for at, code, what in sorted(found, key=lambda f: abs(f[0] - frame.line)):
        if at == top or (at > top and _within(frame, at, indent, source_line)):
            return at, code, what
    return None


def _within(frame: Frame, at: int, indent: int, source_line: SourceLine) -> bool:
    """Whether every line from the loop's body down or up to `at` (from `frame`'s line, `at`
    included) is deeper than the loop's header (`indent`): `at` is in that loop."""
    step = 1 if at > frame.line else -1
    for line in range(frame.line + step, at + step, step):
        text = source_line(Frame(frame.name, frame.filename, line))
        if text is None:
            return False
        if text.split("#", 1)[0].strip() and _indent(text) <= indent:
            return False
    return True


def _receives_from_sqs(called: Sequence[Frame], responsible: Frame | None,
                       source_line: SourceLine | None) -> Classification | None:
    """Idle, waiting for its next job, where the user's line receives from an AWS SQS queue
    (SQS_RECEIVE_CALL) and the HTTP read below it is botocore's request (BOTOCORE_FILES): a
    long poll waiting in SQS for a message, or a short poll's take. None for any other
    request (an S3 download reads input)."""
    if not _calls(responsible, SQS_RECEIVE_CALL, source_line):
        return None
    botocore = next((f for f in called
                     if fnmatchcase(f.filename.replace("\\", "/"), BOTOCORE_FILES)), None)
    if botocore is None:
        return None
    return Classification(
        IDLE, f"{JOB_WAIT} from an SQS queue it receives from "
        f"(`{_code(responsible, source_line)}`, {_where(botocore)}): a long poll held until a "
        "message comes, or a short poll's take", responsible)


def _event_loop_client(called: Sequence[Frame], wait: tuple[FrameRule, Frame],
                       responsible: Frame | None,
                       signals: HostSignals | None) -> Classification | None:
    """Idle, waiting for its next job, where the main thread waits in an asyncio event loop
    (no notebook kernel's: event_loop_wait) while the process holds TCP connections it opened
    (`signals.connections_opened`): its coroutines await what those bring, a broker's next
    message (redis.asyncio's BLPOP), a job server's answer. None where it holds none, or that
    was not read (a loop for a timer alone: a stalled job's `await asyncio.sleep`)."""
    loop = event_loop_wait(called)
    if loop is None or signals is None or not signals.connections_opened:
        return None
    count = signals.connections_opened
    return Classification(
        IDLE, f"{JOB_WAIT} in its asyncio event loop ({_where(wait[1])} under "
        f"{_where(loop)}) on {count} TCP connection{'s' if count != 1 else ''} it opened: a "
        "broker's or a job server's next message (its awaiting coroutine is in no stack)",
        responsible)


def _watches_folder(responsible: Frame | None, called: Sequence[Frame],
                    source_line: SourceLine | None) -> Classification:
    """Idle, waiting for its next job, where the main thread is blocked on an inotify
    descriptor (`signals.main_thread_blocked_on` is INOTIFY: a read of it, or an epoll wait
    whose epoll holds it, read from /proc): the kernel wakes it when a file lands in a folder it
    watches, its next job. Its line, or the select it waits in, says where."""
    code = _code(responsible, source_line)
    where = (f"`{code}`, {_where(responsible)}" if code and responsible is not None
             else _where(called[0]) if called
             else _where(responsible) if responsible is not None else "no Python frame")
    return Classification(
        IDLE, f"{JOB_WAIT} from a folder it watches: blocked on {INOTIFY} ({where}) until a "
        "file lands", responsible)


def _watched_by_observer(threads: Sequence[ThreadStack], main: ThreadStack,
                         responsible: Frame | None) -> Classification | None:
    """Idle, waiting for its next job, where the main thread only waits (a join, a sleep: it
    keeps the program alive) while a watchdog observer's thread of the process
    (FOLDER_WATCHER_THREADS) waits for a file to land in a folder it watches, whose handler runs
    the job. None where no thread is a watchdog observer's."""
    for other in islice((t for t in threads if t is not main), MAX_THREADS_LOOKED_AT):
        frame = folder_watcher(other.frames)
        if frame is None:
            continue
        name = other.thread_name[:40] if other.thread_name else f"tid {other.thread_id}"
        # the thread's name (the process's text) inside the parentheses: kinds reads the head
        return Classification(
            IDLE, f"{JOB_WAIT} from a folder it watches with watchdog (its observer's thread "
            f"{name!r}, {_where(frame)}, waits for a file to land while the main thread waits"
            + (f" at {_where(responsible)})" if responsible is not None else ")"), responsible)
    return None


def _event_loop_timer(called: Sequence[Frame], wait: tuple[FrameRule, Frame],
                      responsible: Frame | None,
                      signals: HostSignals | None) -> Classification | None:
    """Idle, waiting in its asyncio event loop (no notebook kernel's: event_loop_wait) for a
    timer due within a minute (`signals.main_thread_blocked_on` is TIMER_WAKES: its epoll
    wait's timeout, read from /proc): a coroutine that awaits asyncio.sleep between looks at
    something (a folder, a file, a queue through a thread) wakes it, or a stalled job's
    heartbeat does. TIMER_WAIT, which rules/idle.py looks at first rather than stop. None for
    a loop that waits with no timer or a longer one (a stalled `await event.wait()`, `await
    asyncio.sleep(3600)`)."""
    loop = event_loop_wait(called)
    if loop is None or signals is None or signals.main_thread_blocked_on != TIMER_WAKES:
        return None
    return Classification(
        IDLE, f"{TIMER_WAIT} ({_where(wait[1])} under {_where(loop)}: {TIMER_WAKES}, read "
        "from /proc): a coroutine that sleeps between looks at something (a folder, a file, a "
        "queue), or a stalled job's heartbeat; its awaiting coroutine is in no stack",
        responsible)


# How a wait for a child in C is known (the `how` of _waits_for_child).
CHILD_EXIT_HOW = f"blocked until {CHILD_EXIT}, read from /proc"


def _waits_for_child(frame: Frame, responsible: Frame | None,
                     signals: HostSignals | None, how: str = "") -> Classification:
    """Idle for its GPU, waiting for a child process it started (`frame`: the outermost
    subprocess call below its line; subprocess.run with captured output waits in a select
    inside it), where the tool's own reads, writes or CPU named no other phase (`_from_signals`
    comes first: a compressor writing is a checkpoint). Its reason says so (CHILD_WAIT), so the
    rules look at the child before anyone stops it, and whether the child runs on a CPU."""
    # No figure in the text: a stack's most frequent reason is the one shown, and a share that
    # differs in every sample would lose to any steady text.
    doing = ("its child processes run on a CPU" if _children_at_work(signals) is not None
             else "no child of it seen on a CPU (one may wait itself: a transfer, a timer)")
    where = f"{_where(frame)}, {how}" if how else _where(frame)
    return Classification(IDLE, f"{CHILD_WAIT} ({where}): {doing}", responsible)


# input() prompts a person, whatever its stdin is (a notebook kernel's is a pipe from Jupyter):
# a read of a pipe on such a line is a prompt waiting for its user, not a worker's next job.
PROMPT_CALL = re.compile(r"\binput\(")


def _through_multiprocessing(frame: Frame) -> bool:
    """A wait inside multiprocessing: a pipe, a queue, a manager's proxy."""
    return fnmatchcase(frame.filename.replace("\\", "/"), "*/multiprocessing/*")


def _process_feeds_it(called: Sequence[Frame], frames: Sequence[Frame],
                      responsible: Frame | None) -> Classification | None:
    """Idle, waiting for its next job, where the user's line waits in a multiprocessing queue's
    get or a pipe's read (`process_read`: Queue.get, SimpleQueue.get, a Connection's recv or
    poll; not under a torch DataLoader) and no child process of it works meanwhile
    (`_fed_by_children` came first): another process hands it its work (its parent, a sibling,
    a coordinator it dialled), as a Pool's worker waits on its task queue. It read "waiting in
    a multiprocessing pipe", and between jobs idle_gpu_held offered the SIGTERM to a worker
    that works on demand. None where there is no such read."""
    read = process_read(called, frames)
    if read is None:
        return None
    return Classification(
        IDLE, f"{JOB_WAIT} from a multiprocessing queue or pipe ({_where(read)}): another "
        "process hands it its work (its parent, a sibling or a coordinator), none of its "
        "children at work", responsible)


def _fed_by_children(waiting: str, responsible: Frame | None,
                     signals: HostSignals | None) -> Classification | None:
    """Data wait, where the main thread waits (`waiting` says on what, and where) on what its
    child processes make while they run on a CPU: decoder processes that put batches on a
    multiprocessing.Queue, workers that compute what it takes. None where its children do not
    run (a worker waiting for its broker's next job, a loop for nothing)."""
    children = _children_at_work(signals)
    if children is None:
        return None
    return Classification(
        DATA_WAIT, f"main thread waiting {waiting} while its child processes run ({children}): "
        f"{WORKER_PROCESSES_FEED_IT}", responsible)


def _fed_by_process_pool(threads: Sequence[ThreadStack], main: ThreadStack | None,
                         called: Sequence[Frame], responsible: Frame | None,
                         signals: HostSignals | None) -> Classification | None:
    """Data wait, where the main thread waits for concurrent.futures results (`called`: the
    frames below its user line) beside a ProcessPoolExecutor's thread while its child
    processes run: the pool's workers make what it waits for. None where it waits on no
    future, has no such pool, or its children do not run (a future nothing works on)."""
    future = future_wait(called)
    if future is None or not _has_process_pool(threads, main):
        return None
    return _fed_by_children(
        f"for results of its concurrent.futures ProcessPoolExecutor ({_where(future)})",
        responsible, signals)


def _has_process_pool(threads: Sequence[ThreadStack], main: ThreadStack | None) -> bool:
    others = islice((t for t in threads if t is not main), MAX_THREADS_LOOKED_AT)
    return any(is_process_pool_thread(t.frames) for t in others)


# A line that saves or writes something, whatever else it calls (`np.save(f, x.cpu().numpy())`,
# `pickle.dump(t.cpu(), f)`): the writes the signals see may be its own.
SAVE_CALL = re.compile(r"\b\w*(save|dump|write|fsync|flush)\w*\(")


def _from_signals(frames: Sequence[Frame], signals: HostSignals, responsible: Frame | None,
                  *, in_python: bool = False, caught_on_cpu: bool = False,
                  writes_elsewhere: bool = False) -> Classification | None:
    """What the signals say when the frames named no library: see classify(). `in_python`:
    the stack shows the main thread running Python (a comprehension of the user's, on a CPU):
    host compute, whatever its I/O and on-CPU share over the seconds the signals cover.
    `caught_on_cpu`: it shows the main thread on a CPU at a line of its own that calls no
    I/O (a C call such as `out.sort()`): host compute where its process reads too little per
    CPU-second for the reading to be where its time goes (HostSignals.input_read).
    `writes_elsewhere`: its line is a sync that writes nothing, so the writes the signals saw
    are no verdict on it."""
    if in_python:  # (no figure in the text: a stack's reasons are counted by their text)
        if _under_no_grad(frames):
            return Classification(
                EVAL, "main thread running Python under torch.no_grad/inference_mode while the "
                "GPU idles (evaluation)", responsible)
        return Classification(
            HOST_PREPROCESS, f"main thread running Python (a comprehension, {_where(frames[0])}) "
            "while the GPU idles (host-side compute)", responsible)
    writing = signals.streams(signals.write_per_s, WRITE_MIN_PER_S)
    if writing is not None and not writes_elsewhere:
        return Classification(
            CHECKPOINT, f"writing {writing} while the GPU idles (a checkpoint or output write)",
            responsible)
    reading = signals.input_read(caught_on_cpu)
    if reading is not None:
        return Classification(DATA_WAIT, f"reading {reading} while the GPU idles", responsible)
    computes = (caught_on_cpu and not signals.d_state and not signals.iowait_growing
                and signals.streams(signals.read_per_s, READ_MIN_PER_S) is not None)
    if computes and not _under_no_grad(frames):  # (it reads, little for its CPU: input_read)
        return Classification(
            HOST_PREPROCESS, f"main thread on a CPU at its own line ({_where(frames[0])}), "
            "its process reading little for the CPU it gets, while the GPU idles (host-side "
            "compute)", responsible)
    if signals.d_state:
        return Classification(DATA_WAIT, "blocked on I/O (a thread in D state) while the GPU "
                              "idles", responsible)
    if signals.iowait_growing:
        return Classification(DATA_WAIT, "block I/O wait growing (delay accounting) while the "
                              "GPU idles", responsible)
    cpu = signals.on_cpu
    if cpu is not None and cpu >= ON_CPU_MIN:
        who = "main thread" if signals.main_thread_cpu is not None else "process"
        if _under_no_grad(frames):
            return Classification(
                EVAL, f"{who} on-CPU {cpu:.0%} under torch.no_grad/inference_mode while the GPU "
                "idles (evaluation)", responsible)
        return Classification(
            HOST_PREPROCESS, f"{who} on-CPU {cpu:.0%} with no I/O while the GPU idles "
            f"(host-side compute){_slowed_text(signals)}", responsible)
    return None


def _slowed_text(signals: HostSignals) -> str:
    """Where host compute's main thread also waited for a core: a loaded host slows it more."""
    queued = signals.main_thread_queued
    if queued is None or queued < QUEUED_MIN:
        return ""
    return (f", its main thread also waiting for a CPU core {min(queued, 1.0):.0%} of the time "
            "(a loaded host slows it further)")


def _queued_text(signals: HostSignals | None) -> str:
    """Why host code that is no host compute kept the GPU waiting on a loaded host."""
    queued = None if signals is None else signals.main_thread_queued
    if queued is None or queued < QUEUED_MIN:
        return ""
    return (f", its main thread waiting for a CPU core {min(queued, 1.0):.0%} of the time (a loaded "
            "host: it needs a core, not less work)")


def _cpu_text(signals: HostSignals) -> str:
    cpu = signals.on_cpu
    return "" if cpu is None else f", on-CPU {cpu:.0%}"


def _busy_text(signals: HostSignals | None) -> str:
    if signals is None or signals.gpu_busy is None:
        return ""
    return ", its GPU busy meanwhile"


def _under_no_grad(frames: Sequence[Frame]) -> bool:
    """A @torch.no_grad() / @torch.inference_mode() decorator frame is on the stack."""
    return any(
        any(fnmatchcase(f.filename, glob) for glob in _NO_GRAD_FILES)
        and name_matches(f.name, "*decorate_context")
        for f in frames
    )


def _eval_by_name(frames: Sequence[Frame]) -> tuple[FrameRule, Frame] | None:
    """A user function named like evaluation (evaluate, validation_step, test_epoch...)."""
    frame = next((f for f in frames if _is_eval_function(f)), None)
    if frame is None:
        return None
    reason = ("evaluation function under torch.no_grad" if _under_no_grad(frames)
              else "evaluation function")
    return FrameRule(CONTEXT, frame.filename, frame.name, EVAL, reason), frame


def _source_call(frame: Frame | None, source_line: SourceLine | None) -> tuple[str, str] | None:
    if frame is None or source_line is None:
        return None
    text = source_line(frame)
    if not text:
        return None
    code = text.split("#", 1)[0]
    looked_at = (_comprehensions_in(code)
                 if is_comprehension(frame) and not WRITE_CALL.search(code) else code)
    for pattern, phase, reason in SOURCE_CALLS:
        if pattern.search(looked_at):
            if phase == CHECKPOINT and _writes_records_before(frame, source_line):
                return OUTPUT, f"writing output (a flush/fsync after text records): " \
                    f"`{code.strip()[:80]}`"
            return phase, f"{reason}: `{code.strip()[:80]}`"
    return None


# A line longer than this is not parsed for its comprehensions (its whole text is matched).
COMPREHENSION_LINE_MAX = 2000


def _comprehensions_in(code: str) -> str:
    """The comprehensions' text of a source line (what a comprehension's own frame runs), or
    the whole line where it does not parse alone (a line of a longer statement) or is long."""
    if len(code) > COMPREHENSION_LINE_MAX:
        return code
    try:
        tree = ast.parse(code.strip())
    except (SyntaxError, ValueError):
        return code
    source = code.strip()
    found = [ast.get_source_segment(source, node) or "" for node in ast.walk(tree)
             if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))]
    return " ".join(found) if found else code


# How far up a function a bare write/flush/fsync line looks for the records it writes.
RECORD_LINES_LOOKED_AT = 8


def _writes_records_before(frame: Frame, source_line: SourceLine) -> bool:
    """A bare write, flush or fsync whose function serialized text records just above it (a
    JSON-lines log, a CSV of metrics) writes output, not a checkpoint."""
    for back in range(1, min(RECORD_LINES_LOOKED_AT, frame.line - 1) + 1):
        text = source_line(Frame(frame.name, frame.filename, frame.line - back))
        if text is None:
            return False
        code = text.split("#", 1)[0]
        if any(pattern.search(code) for pattern, phase, _ in SOURCE_CALLS if phase == OUTPUT):
            return True
        if code.lstrip().startswith(("def ", "async def ", "class ")):
            return False  # the function's first line: nothing above it is this function's
    return False


def _said(match: tuple[FrameRule, Frame], responsible: Frame | None, prefix: str = "",
          phase: str | None = None) -> Classification:
    rule, frame = match
    reason = f"{rule.reason} ({_where(frame)})"
    return Classification(phase or rule.phase, f"{prefix}: {reason}" if prefix else reason,
                          responsible)


def waits_on_data_queue(threads: Sequence[ThreadStack]) -> bool:
    """The main thread waits for batches from worker processes: DataLoader workers, on the
    DataLoader itself or on a queue that a thread iterating the DataLoader fills; a
    multiprocessing Pool's; a ProcessPoolExecutor's futures; children filling a multiprocessing
    queue or pipe (not a manager's queue: its child is the manager, no worker): dump the workers too, where the prefetch
    advice names the line they spend their time on. Not for a reader thread that reads for
    itself: it is in this same dump, and the process's children are then no workers of its
    loop (a helper, a compressor)."""
    thread = main_thread(threads)
    if thread is None:
        return False
    match = first_match(thread.frames, LIBRARY)
    if match is not None:
        return match[0].phase == DATA_WAIT
    line = user_frame(thread.frames)
    called = thread.frames[: thread.frames.index(line)] if line is not None else thread.frames
    wait = first_match(called, LOCK) or first_match(called, WAIT)
    if wait is not None and wait[0].kind == WAIT and _through_multiprocessing(wait[1]):
        return first_match(called, JOB) is None
    if wait is None or not _is_handoff(wait):
        return False
    if future_wait(called) is not None and _has_process_pool(threads, thread):
        return True  # a ProcessPoolExecutor's results
    others = islice((t for t in threads if t is not thread), MAX_THREADS_LOOKED_AT)
    return any(match[0].phase == DATA_WAIT for other in others
               if (match := first_match(other.frames, LIBRARY)) is not None)
