"""The rules the phase classifier applies to a Python stack, as data.

FRAME_RULES: frames of the real libraries (torch DataLoader, torch.save and distributed
checkpoint, Hugging Face Trainer, Lightning loops, torch.cuda synchronize, c10d collectives,
vLLM's engine loop) and the I/O and waiting frames of the standard library. SOURCE_CALLS: what
the innermost user line calls, for calls into C that leave no Python frame. Which frame is the
user's (is_user_code, user_frame) is decided here too, since a GPU runtime that declares its
blocking call (register_runtime) is not user code. The order in which the rules are applied is
daemon.analysis.phases.classify's. Nothing here knows the names of mlcost's own demo workloads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from itertools import islice
from typing import Any

from daemon.sources.frames import Frame
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

# Frame rule kinds, in the order classify() tries them (see its docstring).
CONTEXT = "context"  # anywhere in the stack: the whole stack is spent in this phase
LIBRARY = "library"  # the innermost matching library frame decides
IO = "io"  # a stdlib/library I/O frame below the innermost user frame
WAIT = "wait"  # a stdlib waiting frame below the innermost user frame
LOCK = "lock"  # a lock's acquire below the innermost user frame: before WAIT (a semaphore
# waits in Condition.wait, a WAIT frame inside it)
JOB = "job"  # a broker's queue read below the innermost user frame: before LOCK and WAIT (a
# manager's proxy waits in a multiprocessing pipe, a WAIT frame inside it)


@dataclass(frozen=True, slots=True)
class FrameRule:
    """A frame pattern: `file` and `name` are fnmatch globs on the path and qualified name;
    with `within` (file, name globs) the rule matches only below (inside) such a frame."""

    kind: str
    file: str
    name: str
    phase: str
    reason: str
    within: tuple[str, str] | None = None


_DL = "*/torch/utils/data/dataloader.py"
# multiprocessing's proxies run methods it generates with exec (managers.MakeProxyType), whose
# frames are in this file: "get (<string>:2)" above BaseProxy._callmethod.
PROXY_FILE = "<string>"
_MANAGERS = "*/multiprocessing/managers.py"
_POOL = "*/multiprocessing/pool.py"
_FUTURES = "*/concurrent/futures/_base.py"
_PROCESS_POOL = "*/concurrent/futures/process.py"
_C10D = "*/torch/distributed/distributed_c10d.py"
_HF = "*/transformers/trainer.py"
_PL = "*/lightning/pytorch/*"
_PL_OLD = "*/pytorch_lightning/*"

# Function names are 3.11+ qualified names; on older Pythons py-spy gives the bare name, which
# name_matches accepts for a pattern's last component.
# A process blocked on a lock waits for whoever holds it (another job, a peer): idle for its
# GPU, but never a process to stop on sight (rules/idle.py looks first).
LOCK_WAIT = "waiting on a lock"
# A worker waiting for its next job from whoever hands out the work (a multiprocessing manager's
# queue, a job server's socket that nothing comes to): idle for its GPU, but a queue consumer
# between jobs, as a server between requests: never a process to stop (rules/idle.py gives it
# idle_server's advice), and no input pipeline to prefetch (no dataloader_starvation).
JOB_WAIT = "waiting for its next job"
# A rank waiting on a socket for a peer of its own job (its TCP connections all go to its
# parent, children or sibling ranks: a hand-written all-reduce): comm, the peer it waits for
# the straggler, never a job wait (daemon.analysis.phases._waits_for_peer).
PEER_WAIT = "waiting for a peer of its own job"
# A lock's acquire on a user line: a file lock (flock, lockf), an acquire, or a `with` of a
# lock held in a name or an attribute (`with self._lock:`, `with stats_lock, model_lock:`), whose
# __enter__ is C (threading.Lock, RLock) and leaves no Python frame.
LOCK_CALL = re.compile(r"\b(fcntl\.)?(flock|lockf)\(|\.acquire\(|"
                       r"^\s*with\s+[A-Za-z_][\w.]*(\s*,\s*[A-Za-z_][\w.]*)*\s*:")
# An interactive Python prompt (a REPL in a terminal: Kind.interactive_prompt) whose main thread
# shows no Python frame: the interpreter reads its user's next line in C (PyOS_Readline). Idle,
# its user away or thinking: rules/idle.py looks first (close it when done), never the SIGTERM
# that would lose what the user loaded.
PROMPT_WAIT = "waiting at its interactive prompt"
# A script's input() on its user's line, no Python frame below it (C), its main thread not
# reading a pipe (a terminal's, or /proc would not say): a person is asked ("Start the fine-tune
# now? [y/N]"), as at a REPL's prompt, and read so (PROMPT_WAIT, this after it): look first,
# never the SIGTERM that would lose what the script has done. A notebook kernel's input() reads
# its pipe from Jupyter: a sleep as before, the notebook's SIGTERM ("save the notebook ...").
SCRIPT_PROMPT = "an input() prompt of its script"
# A main thread waiting on file descriptors: a select() or poll() on its line (C), the
# selectors module, an asyncio loop. With TCP connections it opened (Kind.peer_connections: to
# a job server, a coordinator) it may wait for whoever is at the other end: rules/idle.py looks
# first (a server waiting so is a server, and never reaches that rule).
FD_WAIT = "waiting on its sockets or pipes (select/poll)"
FD_WAITS = (FD_WAIT, "waiting in select", "waiting in the asyncio event loop")
# A main thread waiting in an asyncio event loop that a timer wakes within a minute (its epoll
# wait's timeout, daemon.sources.proc_state.TIMER_WAKES), with no connection it opened: a
# coroutine polls for something between `await asyncio.sleep(...)`s (a folder, a file, a queue
# through a thread), or keeps a heartbeat in a stalled job; py-spy shows no coroutine to tell
# which. Never a process to stop on sight (rules/idle.py looks first); not a job wait either.
TIMER_WAIT = "waiting in its asyncio event loop for a timer due within a minute"
# A process stopped by a signal (state T: Ctrl-Z, SIGSTOP), as the phase reason says it: nothing
# of it runs until it is continued, whatever it did before the stop (rules/idle.py: no "between
# batches" look for it; its SIGTERM is followed by SIGCONT, daemon.api.actions).
STOPPED = "stopped (state T: Ctrl-Z or SIGSTOP)"
# A process waiting for a child process it started (subprocess.run, Popen.wait or communicate:
# an encoder such as ffmpeg, a download tool, a compressor; multiprocessing.Process.join: an
# index built in a child process): the child works for it, or itself
# waits for a transfer. Idle for its GPU, but never a process to stop on sight (rules/idle.py
# looks at the child first), and while the child runs its host is not idle.
CHILD_WAIT = "waiting for a child process it started"
# A sleep, a prompt's input, an Event's or a thread's wait (the reason of the last line rule).
SLEEP_WAIT = "sleeping or waiting"
# `signal.pause()` and its kin: woken by a signal another process sends (SOURCE_CALLS).
SIGNAL_WAIT = "waiting for a signal"
# How a data wait's reason says that worker processes make the loop's input (a multiprocessing
# Pool's results, a multiprocessing.Queue or pipe its running children fill): the prefetch patch
# (rules/phases.py) then offers more of them, a deeper queue or faster ones, not a thread pool.
WORKER_PROCESSES_FEED_IT = "worker processes feed it"
# Its stacks wait so for at least this share of the window: a queue consumer (for the rules,
# rules/idle.py's waits_for_jobs, and for /v1/idle, analysis/idleness.py); one stack sample in
# fifty, as a phase of work (rules/idle.py's WORK_PHASE_MIN_SHARE).
JOB_WAIT_MIN_SHARE = 0.02


def waiting_stacks(phases: Mapping[str, Any], prefix: str) -> list[Mapping[str, Any]]:
    """The top stacks of a phase balance's idle phase whose reasons start with `prefix`
    (JOB_WAIT, CHILD_WAIT), where its stacks wait so for at least JOB_WAIT_MIN_SHARE of the
    window (the idle phase's share, times those stacks' part of its samples); [] otherwise. The
    one test of rules/idle.py's waits_for_jobs and of the kinds' job consumer."""
    waiting = phases.get(IDLE) if isinstance(phases, Mapping) else None
    if not isinstance(waiting, Mapping):
        return []
    stacks = [st for st in waiting.get("top_stacks") or [] if isinstance(st, Mapping)]
    found = [st for st in stacks if str(st.get("reason") or "").startswith(prefix)]
    if not found:
        return []
    sampled = sum(int(st.get("samples") or 0) for st in stacks)
    share = float(waiting.get("share", 0.0) or 0.0) * (
        sum(int(st.get("samples") or 0) for st in found) / sampled if sampled else 1.0)
    return found if share >= JOB_WAIT_MIN_SHARE else []

FRAME_RULES: tuple[FrameRule, ...] = (
    # -- checkpoint (context) --
    FrameRule(CONTEXT, "*/torch/serialization.py", "save", CHECKPOINT, "torch.save"),
    FrameRule(CONTEXT, "*/torch/serialization.py", "_save", CHECKPOINT, "torch.save"),
    FrameRule(CONTEXT, "*/torch/serialization.py", "_legacy_save", CHECKPOINT, "torch.save"),
    FrameRule(CONTEXT, "*/torch/distributed/checkpoint/*", "*save*", CHECKPOINT,
         "torch.distributed.checkpoint save"),
    FrameRule(CONTEXT, "*/torch/distributed/checkpoint/filesystem.py", "*_write_*", CHECKPOINT,
         "torch.distributed.checkpoint writing files"),
    FrameRule(CONTEXT, _HF, "Trainer._save_checkpoint", CHECKPOINT, "Hugging Face Trainer checkpoint"),
    FrameRule(CONTEXT, _HF, "Trainer.save_model", CHECKPOINT, "Hugging Face Trainer save_model"),
    FrameRule(CONTEXT, "*/lightning/*", "*save_checkpoint", CHECKPOINT, "Lightning save_checkpoint"),
    FrameRule(CONTEXT, _PL_OLD, "*save_checkpoint", CHECKPOINT, "Lightning save_checkpoint"),
    FrameRule(CONTEXT, "*/safetensors/torch.py", "save*", CHECKPOINT, "safetensors save"),
    FrameRule(CONTEXT, "*/orbax/checkpoint/*", "*save*", CHECKPOINT, "Orbax checkpoint save"),
    # -- start-up (context): importing modules reads .py/.pyc files, which the I/O signals
    # would take for input; it is neither data wait nor preprocessing (mlcostd profile samples
    # a command from its first second, imports included) --
    FrameRule(CONTEXT, "<frozen importlib._bootstrap>", "_find_and_load", UNKNOWN,
              "importing modules (start-up)"),
    # a path hook reading a zip archive on sys.path (seen as a D-state sample of a profiled
    # command's first second, whose stack had no importlib frame left above it)
    FrameRule(CONTEXT, "<frozen zipimport>", "*", UNKNOWN, "importing modules (start-up)"),
    FrameRule(CONTEXT, "<frozen importlib._bootstrap_external>", "*", UNKNOWN,
              "importing modules (start-up)"),
    # -- eval (context) --
    FrameRule(CONTEXT, _HF, "Trainer.evaluate", EVAL, "Hugging Face Trainer.evaluate"),
    FrameRule(CONTEXT, _HF, "Trainer.evaluation_loop", EVAL, "Hugging Face Trainer evaluation loop"),
    FrameRule(CONTEXT, _HF, "Trainer.prediction_step", EVAL, "Hugging Face Trainer prediction step"),
    FrameRule(CONTEXT, _HF, "Trainer.predict", EVAL, "Hugging Face Trainer.predict"),
    FrameRule(CONTEXT, "*/lightning/pytorch/loops/evaluation_loop.py", "*", EVAL,
         "Lightning evaluation loop"),
    FrameRule(CONTEXT, "*/pytorch_lightning/loops/evaluation_loop.py", "*", EVAL,
         "Lightning evaluation loop"),
    FrameRule(CONTEXT, "*/lightning/pytorch/loops/prediction_loop.py", "*", EVAL,
         "Lightning prediction loop"),
    # -- communication (library) --
    *(
        FrameRule(LIBRARY, _C10D, fn, COMM, f"torch.distributed {fn}")
        for fn in (
            "all_reduce", "all_reduce_coalesced", "broadcast", "barrier", "monitored_barrier",
            "all_gather", "all_gather_into_tensor", "all_gather_object", "all_gather_coalesced",
            "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
            "all_to_all_single", "gather", "gather_object", "scatter", "scatter_object_list",
            "broadcast_object_list", "send", "recv", "isend", "irecv", "batch_isend_irecv",
        )
    ),
    FrameRule(LIBRARY, "*/torch/distributed/c10d_logger.py", "*", COMM, "torch.distributed collective"),
    # Processes that wait for each other through multiprocessing (a Barrier, or a pipe to a
    # peer or the parent): ranks of one job waiting for the slowest (see rules/stragglers.py).
    FrameRule(LIBRARY, "*/multiprocessing/synchronize.py", "*", COMM,
              "waiting for other processes at a multiprocessing barrier/lock"),
    FrameRule(LIBRARY, "*/threading.py", "Barrier.wait", COMM, "waiting at a barrier"),
    # -- host/GPU sync (library) --
    FrameRule(LIBRARY, "*/torch/cuda/__init__.py", "synchronize", SYNC, "torch.cuda.synchronize"),
    FrameRule(LIBRARY, "*/torch/cuda/streams.py", "*.synchronize", SYNC, "CUDA stream/event synchronize"),
    FrameRule(LIBRARY, "*/torch/cuda/streams.py", "Event.wait", SYNC, "CUDA event wait"),
    # -- data loading (library) --
    FrameRule(LIBRARY, _DL, "_MultiProcessingDataLoaderIter._try_get_data", DATA_WAIT,
         "DataLoader waiting for a batch from its workers"),
    FrameRule(LIBRARY, _DL, "_MultiProcessingDataLoaderIter._get_data", DATA_WAIT,
         "DataLoader waiting for a batch from its workers"),
    FrameRule(LIBRARY, _DL, "_MultiProcessingDataLoaderIter._next_data", DATA_WAIT,
         "DataLoader waiting for a batch from its workers"),
    # A hand-made loader: results of a multiprocessing Pool (imap, map, apply_async().get())
    # that its worker processes compute; waiting for them is waiting for input, not idling.
    # Only where the Pool's owner waits: the Pool's own workers run in pool.py too (`worker`,
    # `mapstar`, and a forked worker's copy of its parent's frames that made the Pool).
    *(
        FrameRule(LIBRARY, _POOL, name, DATA_WAIT,
                  f"waiting for results of its multiprocessing Pool: {WORKER_PROCESSES_FEED_IT}")
        for name in ("IMapIterator.next", "ApplyResult.get", "ApplyResult.wait", "Pool.join")
    ),
    FrameRule(LIBRARY, "*/torch/utils/data/_utils/fetch.py", "*", HOST_PREPROCESS,
         "a DataLoader worker process loading samples",
         within=("*/torch/utils/data/_utils/worker.py", "_worker_loop")),
    FrameRule(LIBRARY, "*/torch/utils/data/_utils/fetch.py", "*", HOST_PREPROCESS,
         "DataLoader loading samples in the main process (num_workers=0)"),
    FrameRule(LIBRARY, "*/torch/utils/data/_utils/collate.py", "*", HOST_PREPROCESS,
         "DataLoader collating a batch in the main process"),
    FrameRule(LIBRARY, _DL, "_SingleProcessDataLoaderIter._next_data", HOST_PREPROCESS,
         "DataLoader loading samples in the main process (num_workers=0)"),
    FrameRule(LIBRARY, _DL, "_BaseDataLoaderIter.__next__", DATA_WAIT, "waiting on the DataLoader"),
    FrameRule(LIBRARY, "*/lightning/pytorch/loops/fetchers.py", "*.__next__", DATA_WAIT,
         "Lightning waiting on the next batch"),
    FrameRule(LIBRARY, "*/pytorch_lightning/loops/fetchers.py", "*.__next__", DATA_WAIT,
         "Lightning waiting on the next batch"),
    FrameRule(LIBRARY, "*/torchvision/transforms/*", "*", HOST_PREPROCESS, "torchvision transforms"),
    FrameRule(LIBRARY, "*/PIL/*", "*", HOST_PREPROCESS, "PIL image decoding"),
    FrameRule(LIBRARY, "*/transformers/tokenization_utils*", "*", HOST_PREPROCESS, "tokenization"),
    # json.loads parses on a CPU, in the decoder's frames (a JSON-lines dataset's records);
    # json.load's read of its file is in json/__init__.py, below them.
    FrameRule(LIBRARY, "*/json/decoder.py", "*", HOST_PREPROCESS, "parsing JSON"),
    # -- serving (library): vLLM v1 engine core --
    FrameRule(LIBRARY, "*/vllm/v1/engine/core.py", "*._process_input_queue", IDLE,
         "vLLM engine waiting for requests (no traffic)"),
    FrameRule(LIBRARY, "*/vllm/v1/engine/core.py", "*._process_engine_step", COMPUTE,
         "vLLM engine step"),
    # -- I/O called from user code (io) --
    *(
        FrameRule(IO, f"*/{file}", name, DATA_WAIT, f"reading ({what})")
        for file, name, what in (
            ("socket.py", "*readinto", "socket"),
            ("socket.py", "*recv*", "socket"),
            ("ssl.py", "*read", "TLS socket"),
            ("ssl.py", "*recv*", "TLS socket"),
            ("http/client.py", "*read*", "HTTP"),
            ("_compression.py", "*read*", "compressed file"),
            ("gzip.py", "*read*", "gzip file"),
            ("zipfile.py", "ZipExtFile.*", "zip member"),
            ("tarfile.py", "*", "tar file"),
            ("numpy/lib/*npyio*.py", "load*", "numpy.load"),
            ("numpy/lib/format.py", "read_array", "numpy.load"),
            ("torch/serialization.py", "load", "torch.load"),
            ("urllib3/*", "*read*", "HTTP"),
            ("botocore/response.py", "*read*", "S3 object"),
            ("fsspec/*", "*read*", "fsspec file"),
            ("pyarrow/*", "*read*", "Arrow/Parquet"),
            # redis-py sending a command and parsing its answer (its socket reads are C: no
            # socket.py frame), with hiredis too: a GET, MGET, HGET, LRANGE or a pipeline's
            # execute reads input. A blocking pop or a PubSub's wait for a message above it is a
            # JOB frame, which comes first (classify), and a stream read is told apart there
            # (REDIS_STREAM_READS).
            ("redis/_parsers/*", "*", "redis"),
            ("redis/connection.py", "*", "redis"),
        )
    ),
    # Writing output (logs, metrics, predictions, embeddings): serializing text records and
    # writing them. Told by the frames, never by how fast the bytes go, which falls with load.
    *(
        FrameRule(IO, f"*/{file}", name, OUTPUT, f"writing output ({what})")
        for file, name, what in (
            ("json/__init__.py", "dump", "json.dump"),
            ("json/__init__.py", "dumps", "json.dumps"),
            ("json/encoder.py", "*", "JSON encoding"),
            ("csv.py", "*", "csv writer"),
            ("logging/__init__.py", "*", "logging"),
            ("logging/handlers.py", "*", "logging"),
        )
    ),
    *(
        FrameRule(IO, f"*/{file}", name, CHECKPOINT, f"writing ({what})")
        for file, name, what in (
            ("zipfile.py", "*write*", "zip file"),
            ("numpy/lib/*npyio*.py", "save*", "numpy.save"),
            ("shutil.py", "copy*", "file copy"),
            ("pickle.py", "*dump*", "pickle"),
        )
    ),
    # -- waiting for the next job from a broker (job; rules/idle.py: a queue consumer) --
    # A multiprocessing manager's queue (Manager().Queue(), a BaseManager's registered queue):
    # its proxy's get waits for the manager's answer in a pipe or a socket. Only a get: a put
    # that waits is a full queue (its consumer is slow), a proxied lock a lock.
    FrameRule(JOB, _MANAGERS, "BaseProxy._callmethod", IDLE,
              f"{JOB_WAIT} from a multiprocessing manager's queue", within=(PROXY_FILE, "get")),
    # redis-py's blocking pops (BLPOP, BRPOP, BLMOVE... on a list or a sorted set): the
    # command waits in the server until an element is pushed or its timeout runs out, which is
    # what a worker on a redis job queue (its own loop, RQ) does between jobs. The frame is the
    # command's method, above redis-py's socket reads (redis/_parsers/...); redis-py 4+ keeps
    # them in redis/commands/core.py, 3.x in redis/client.py. Not the non-blocking reads.
    *(
        FrameRule(JOB, f"*/redis/{file}", f"*.{command}", IDLE,
                  f"{JOB_WAIT} from a redis {what} ({command.upper()})")
        for file in ("commands/core.py", "client.py")
        for command, what in (("blpop", "list"), ("brpop", "list"), ("blmove", "list"),
                              ("brpoplpush", "list"), ("blmpop", "list"),
                              ("bzpopmin", "sorted set"), ("bzpopmax", "sorted set"),
                              ("bzmpop", "sorted set"))
    ),
    # A subscriber of a redis channel (redis-py's PubSub: `listen()`, `get_message(timeout=)`,
    # `parse_response()`) waiting for the next published message. The frame is PubSub's read
    # under its parse_response (SUBSCRIBE and PING send through the same _execute, never under
    # parse_response); on Pythons before 3.11 py-spy names them bare, and redis/client.py has no
    # other `_execute`, while a command's reply (a GET) goes through Redis.parse_response alone.
    FrameRule(JOB, "*/redis/client.py", "PubSub._execute", IDLE,
              f"{JOB_WAIT} from a redis channel (PubSub: SUBSCRIBE)",
              within=("*/redis/client.py", "PubSub.parse_response")),
    # A Celery worker between tasks: its consumer's event loop (celery.worker.loops.asynloop,
    # what the solo and prefork pools run in the worker process) waits in kombu's poll for the
    # broker's next message. Only the poll under asynloop: a task the solo pool runs is below
    # the loop's frames too, and its own frames (the user's task) are then the innermost.
    FrameRule(JOB, "*/kombu/utils/eventio.py", "*.poll", IDLE,
              f"{JOB_WAIT} from a Celery broker (its worker's event loop, kombu)",
              within=("*/celery/worker/loops.py", "asynloop")),
    # A process of a Celery prefork pool (billiard, multiprocessing's fork) between tasks: it
    # reads its next one from the pipe its worker writes (Worker.workloop's receive).
    FrameRule(JOB, "*/billiard/queues.py", "_SimpleQueue.get*", IDLE,
              f"{JOB_WAIT} from its Celery prefork pool (billiard)",
              within=("*/billiard/pool.py", "Worker.workloop")),
    # A worker process of a multiprocessing Pool or a ProcessPoolExecutor between tasks: it
    # reads its next one from the queue its pool's owner fills.
    FrameRule(JOB, "*/multiprocessing/queues.py", "SimpleQueue.get", IDLE,
              f"{JOB_WAIT} from its multiprocessing Pool's task queue", within=(_POOL, "worker")),
    FrameRule(JOB, "*/multiprocessing/queues.py", "Queue.get", IDLE,
              f"{JOB_WAIT} from its ProcessPoolExecutor's call queue",
              within=(_PROCESS_POOL, "_process_worker")),
    # -- waiting on a lock someone holds (wait; rules/idle.py looks first) --
    *(
        FrameRule(LOCK, f"*/{file}", name, IDLE, f"{LOCK_WAIT} ({what})")
        for file, name, what in (
            ("filelock/*", "*acquire", "filelock"),
            ("threading.py", "Semaphore.acquire", "a semaphore"),
            ("threading.py", "BoundedSemaphore.acquire", "a semaphore"),
        )
    ),
    # -- waiting with nothing to do (wait) --
    *(
        FrameRule(WAIT, f"*/{file}", name, IDLE, f"waiting in {what}")
        for file, name, what in (
            ("queue.py", "*.get", "queue.get"),
            ("threading.py", "Condition.wait", "Condition.wait"),
            ("threading.py", "Event.wait", "Event.wait"),
            ("threading.py", "Thread.join", "Thread.join"),
            ("threading.py", "*._wait_for_tstate_lock", "Thread.join"),
            ("selectors.py", "*.select", "select"),
            ("asyncio/base_events.py", "*._run_once", "the asyncio event loop"),
            ("multiprocessing/connection.py", "*", "a multiprocessing pipe"),
            ("multiprocessing/queues.py", "*.get", "multiprocessing queue.get"),
            ("socketserver.py", "*serve_forever", "a server loop"),
            ("code.py", "*", "an interactive prompt"),
            ("zmq/*", "*", "ZeroMQ (a Jupyter kernel waiting)"),
            ("tornado/*", "*", "the tornado event loop"),
        )
    ),
    FrameRule(WAIT, "*/subprocess.py", "*", IDLE, f"{CHILD_WAIT} (subprocess)"),
)

# A request waiting for the first line of its answer (http.client reads the status line;
# urllib.request, requests and urllib3 all call it): an HTTP long poll, where a job server holds
# the request until it has a job for the worker. A download waits there only until its server
# starts to answer, then reads the body (HTTPResponse.read: input). Waiting for the next job
# only where nothing came to the socket over a tick (phases._nothing_arriving): a server slow
# to start its answer to a read of input is still data wait.
ANSWER_WAITS: tuple[tuple[str, str], ...] = (("*/http/client.py", "HTTPResponse._read_status"),)

# redis-py's stream reads (XREAD, XREADGROUP): with `block=` the command waits in the server for
# new entries, as a blocking pop does (a consumer of a redis stream between jobs); without, it
# reads what is there. The frame cannot say which: the user's line can (STREAM_BLOCK_CALL),
# else the main thread slept through the tick (phases._nothing_arriving) says nothing came.
# redis-py 4+ keeps them in redis/commands/core.py, 3.x in redis/client.py.
REDIS_STREAM_READS: tuple[tuple[str, str], ...] = tuple(
    (f"*/redis/{file}", f"*.{command}") for file in ("commands/core.py", "client.py")
    for command in ("xread", "xreadgroup"))
STREAM_BLOCK_CALL = re.compile(r"\bblock\s*=\s*(?!None\b)[\w.(]")

# A worker that polls a redis queue: a non-blocking take (LPOP, RPOP, LMOVE, ZPOPMIN...) that
# answers at once, and a sleep when it came back empty. Its stacks show the sleep alone (a
# take over a socket lasts a fraction of a millisecond, no dump catches it), so the sleep's
# function is read: a take within POLL_LINES_LOOKED_AT lines of the sleep, before or after it,
# makes the sleep a wait for the next job (phases._polls_broker). Not a GET (a loop reading
# its samples), nor a `.pop(` of a list or a dict.
POLLING_TAKE = re.compile(
    r"\.(lpop|rpop|lmove|rpoplpush|lmpop|zpopmin|zpopmax|zmpop)\(")
SLEEP_CALL = re.compile(r"\b(time\.)?sleep\(")
POLL_LINES_LOOKED_AT = 6

# An AWS SQS consumer's take: boto3's ReceiveMessage (a client's receive_message, a Queue
# resource's receive_messages). Its frames are botocore's request (BOTOCORE_FILES) above an
# HTTP read, whichever the operation (the name is an argument, in no frame): the user's line
# says it is a receive. A long poll (WaitTimeSeconds) waits there in the server for a message,
# a short poll answers at once and its worker sleeps when it came back empty (its sleep's
# function is read as a redis poller's, phases._polls_broker): both wait for the next job.
SQS_RECEIVE_CALL = re.compile(r"\.receive_messages?\(")
BOTOCORE_FILES = "*/botocore/*"

# A worker that watches a folder: it lists its inbox (os.listdir, os.scandir, os.walk, a Path's
# iterdir/glob/rglob, glob.glob), runs each new file, and sleeps when none came. Its stacks
# show the sleep alone (a listing lasts microseconds), so the sleep's function, or its caller's,
# is read as a redis poller's (phases._polls_broker): a listing near the sleep makes it a wait
# for the next file. Not a check of one path (os.path.exists, isfile): a go-flag or a resume
# file that a job waits for before it goes on (the corpus's await_trigger.py, a stalled loop)
# is no stream of jobs (PATH_CHECK: FILE_WAIT).
FOLDER_LISTING = re.compile(r"\b(listdir|scandir|iterdir|glob|iglob|rglob)\(|\bos\.walk\(")

# A job that sleeps in a loop until one path appears: a done-marker (`_SUCCESS`) that a
# preprocessing job on this host writes when it is done, a go-file, a resume file
# (`while not os.path.exists(marker): time.sleep(10)`). Its stacks show the sleep alone (a
# stat() lasts microseconds) and a check every 10 s moves less CPU than POLL_MIN_CORES, so it
# read as a plain sleep: the SIGTERM, and a host stop that killed the job it waited for (probe
# 152 H2). Whoever writes the file (another job, a person) is in no stack: idle for its GPU,
# never a process to stop on sight (rules/idle.py looks first), and its host is not idle. The
# check must be in the loop the sleep is in (its header counts, as REMOTE_FETCHES' do), or
# around its caller's line for a sleep in a helper (phases._waits_for_file): a check before
# the loop says nothing of what the sleep waits for. os.path's exists/lexists/isfile/isdir
# (as `os.path.`, `path.`, `osp.` or the names imported bare) and a Path's `.exists()`, `.is_file()`, `.is_dir()` with no
# argument (a redis client's `.exists(key)` takes one: no file).
FILE_WAIT = "waiting for a file another process writes"
PATH_CHECK = re.compile(r"(?<![\w.])((os\.)?path\.|osp\.)?(exists|lexists|isfile|isdir)\(|"
                        r"\.(exists|is_file|is_dir)\(\s*\)")

# A job that fetches from a remote service (an object store, an HTTP API) and sleeps between
# tries: a retry with backoff of a store that throttles or fails (S3's 503 SlowDown, a 429), or
# a poll of one that is not ready. Its stacks show the sleep alone (the request that failed
# lasts milliseconds, no dump catches it) and its CPU moves less than a poller's, so the sleep's
# function is read as a redis poller's (phases._retries_remote): one of these calls within
# POLL_LINES_LOOKED_AT lines of the sleep, in the loop the sleep is in (the loop's header
# counts: `while requests.get(u).status_code != 200:`), or around its caller's line for a sleep
# in a helper. It goes on by itself when the service answers: never a process to stop on sight
# (rules/idle.py looks first, naming the wait). A named list of what these clients' calls look
# like, not every `.get(`: urllib's urlopen and urlretrieve; requests and httpx (module calls,
# a session's or a client's); boto3 and botocore's S3 reads; google-cloud-storage's and
# azure-storage-blob's downloads; fsspec, s3fs, gcsfs and adlfs calls; huggingface_hub's
# downloads; any call on a line that names a remote URL (`"s3://…"`, `f"https://…"`).
REMOTE_WAIT = "waiting on a remote service it retries or polls"
REMOTE_FETCHES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), what) for pattern, what in (
        (r"\b(urlopen|urlretrieve)\(", "an HTTP server (urllib)"),
        (r"\b(requests|httpx)\.(get|post|put|patch|head|request|stream)\(",
         "an HTTP server (requests/httpx)"),
        (r"\b\w*(session|client|sess)\.(get|post|put|patch|head|request|stream)\(",
         "a remote service (a session's or a client's request)"),
        (r"\.(get_object|download_file|download_fileobj|head_object)\(", "an object store (S3)"),
        (r"\.download_(to_filename|to_file|as_bytes|as_string|as_text)\(",
         "an object store (Google Cloud Storage)"),
        (r"\.download_blob\(", "an object store (Azure Blob Storage)"),
        (r"\b(fsspec|s3fs|gcsfs|adlfs)\.\w+\(", "a remote filesystem (fsspec)"),
        (r"\b(hf_hub_download|snapshot_download)\(", "the Hugging Face Hub"),
        (r"\w\(.*['\"](s3a?|gs|gcs|az|abfss?|https?)://", "a remote URL"),
    ))
# Client libraries that retry a request themselves and sleep between tries (their backoff), the
# sleep in C right below their frame: urllib3's Retry (requests' HTTPAdapter(max_retries=...)),
# botocore's retries (boto3: legacy and standard modes sleep in Endpoint._needs_retry),
# tenacity, backoff's on_exception, google-api-core's Retry, huggingface_hub's http_backoff
# (urllib3 2.8's and botocore 1.44's frames read from their code; the others' from their
# sources: tenacity's nap.sleep, backoff's _sync.retry_exception, api_core's retry_target, each
# a time.sleep in C below it). The innermost
# frame is theirs, asleep: the user's line made a request that failed and is being retried
# (phases._retried_by_library; REMOTE_WAIT, never the SIGTERM).
RETRY_SLEEPS: tuple[tuple[str, str, str], ...] = (
    ("*/urllib3/util/retry.py", "Retry.*sleep*", "urllib3's Retry"),
    ("*/botocore/endpoint.py", "Endpoint._needs_retry", "botocore's retries"),
    ("*/tenacity/nap.py", "sleep", "tenacity"),
    ("*/backoff/_sync.py", "retry_exception.<locals>.retry", "backoff's on_exception"),
    ("*/google/api_core/retry*.py", "retry_target", "google-api-core's Retry"),
    ("*/huggingface_hub/utils/_http.py", "*http_backoff*", "huggingface_hub's http_backoff"),
)


def retry_sleep(frame: Frame) -> str | None:
    """Which client library's retry backoff `frame` is (RETRY_SLEEPS), else None."""
    return next((what for file, name, what in RETRY_SLEEPS if _is(frame, file, name)), None)


# How far above the sleep its loop's header is looked for (a retry loop's body is short; a
# `for`/`while` further up is some other loop).
LOOP_LINES_LOOKED_AT = 30

# An asyncio program's main thread waits in its event loop's select while its coroutines wait
# (redis.asyncio's `await r.blpop(...)`, an aiohttp client's long poll): py-spy shows the loop,
# never the awaiting coroutine. Where the process holds TCP connections it opened (to a broker,
# a job server; HostSignals.connections_opened), it waits on what they bring: its next job.
# Not under a notebook kernel's loop (tornado, ZeroMQ, ipykernel: a kernel waits for its user).
EVENT_LOOP_WAITS: tuple[tuple[str, str], ...] = (("*/asyncio/base_events.py", "*._run_once"),)
KERNEL_LOOP_FILES = ("*/tornado/*", "*/zmq/*", "*/ipykernel/*", "*/jupyter_client/*")

# Waits for another thread of the same process to hand something over: a queue.Queue, a
# Condition, an Event (a Future's result waits in Condition.wait too). A loop fed by a reader
# thread waits here for its next batch. Not Thread.join (a main thread that only starts the
# thread running the loop joins it), nor a select or an event loop (a server waits for clients).
HANDOFF_WAITS: tuple[tuple[str, str], ...] = (
    ("*/queue.py", "*.get"),
    ("*/threading.py", "Condition.wait"),
    ("*/threading.py", "Event.wait"),
)
# Where a thread waits for concurrent.futures results (a Future's result, as_completed, wait,
# the iterator Executor.map returns): they wait in Condition.wait or Event.wait inside these.
# Whose results they are is told by the pool that computes them (phases._fed_by_process_pool,
# phases._fed_by for a thread pool's threads): a future from a request or a remote call that
# nothing in the process works on is a wait like any other.
FUTURE_WAITS: tuple[tuple[str, str], ...] = (
    (_FUTURES, "Future.result"),
    (_FUTURES, "Future.exception"),
    (_FUTURES, "as_completed"),
    (_FUTURES, "wait"),
    (_FUTURES, "*result_iterator"),  # Executor.map's, a closure: Executor.map.<locals>.result_...
)
# The thread a ProcessPoolExecutor runs in its owner's process once it has worker processes
# (_queue_management_worker before Python 3.9): a process waiting on a future beside it waits
# for its worker processes.
PROCESS_POOL_THREADS: tuple[tuple[str, str], ...] = (
    (_PROCESS_POOL, "_ExecutorManagerThread.*"),
    (_PROCESS_POOL, "_queue_management_worker"),
)
# What the innermost user line calls to take what another thread hands over, where that call
# leaves no Python frame (a queue.SimpleQueue's get is C): a HANDOFF_WAITS wait all the same.
HANDOFF_CALL = re.compile(r"\.get\(\s*(\)|block\b|timeout\b|True\b)")
# A wait that passes a timeout, on its waiting frame's line (threading's Condition.wait under a
# queue.Queue.get(timeout=...) or an Event.wait(timeout): `gotit = waiter.acquire(True,
# timeout)`, not `waiter.acquire()`) or, where no Python frame is below it, on the user's line
# (a SimpleQueue's `jobs.get(timeout=1)` in C): in a loop, it wakes each time the timeout runs
# out, finds nothing, and waits again.
TIMED_WAIT_CALL = re.compile(r"\btimeout\b")
# How a data wait's reason joins the thread that feeds the waiting loop to what that thread does
# (daemon.analysis.phases._fed_by), and what it does when py-spy saw it on a CPU holding the GIL:
# Python code (decoding, augmenting in Python), which more threads cannot run in parallel (they
# take turns on the GIL) and worker processes can (rules/phases.py's prefetch patch).
WORKS_ON_INPUT = " works on its input: "
PYTHON_ON_CPU = "running Python on a CPU, holding the GIL (py-spy)"
# ... and when py-spy saw it on a CPU without the GIL: C code that released it (a large numpy
# op, zlib), or Python that just gave it up. Input computed on a CPU, not read.
C_ON_CPU = "running on a CPU (py-spy: active)"
# How a host-compute reason says that threads of its own run the loop's optimizer step
# (phases._fed_by, OPTIMIZER_STEP_FILES/NAMES): parameters updated after the step, no input.
RUNS_OPTIMIZER_STEP = " runs the optimizer step on a CPU: "

# Frames of an optimizer step (`optimizer_step`): a library's optimizers (PyTorch's, DeepSpeed's
# CPU Adam and LAMB, apex's, bitsandbytes'), and functions named after one. Bounded on purpose:
# a loop's own `step` or `train_step` (a forward, a backward, input) is no optimizer step; a
# method is one where it is `step` of a class named like an optimizer (Optimizer.step,
# DeepSpeedCPUAdam.step, DeepSpeedZeroOptimizer.step), and a function where its name is an
# update rule's (`adam`, `_single_tensor_adamw`, `sgd`, `lamb`, `optimizer_step`).
OPTIMIZER_STEP_FILES = ("*/torch/optim/*", "*/deepspeed/ops/adam/*", "*/deepspeed/ops/lamb/*",
                        "*/deepspeed/ops/lion/*", "*/apex/optimizers/*",
                        "*/bitsandbytes/optim/*")
_UPDATE_RULES = (r"adam|adamw|adamax|nadam|radam|sgd|lamb|lars|lion|adagrad|adadelta|adafactor"
                 r"|rmsprop")
OPTIMIZER_STEP_FUNCTION = re.compile(
    rf"_?(?:(?:single|multi)_tensor_|fused_|cpu_|foreach_)?(?:{_UPDATE_RULES})(?:_step|_update)?"
    r"|_?(?:optimizer|optim)_step|step_optimizer", re.IGNORECASE)
OPTIMIZER_CLASS = re.compile(rf".*optim.*|.*(?:{_UPDATE_RULES})", re.IGNORECASE)


def optimizer_step(filename: str, name: str) -> bool:
    """Whether a frame (its file, its function's name as py-spy gives it: `Class.method`,
    `f.<locals>.g`) is in an optimizer step (OPTIMIZER_STEP_FILES, OPTIMIZER_STEP_FUNCTION, a
    `step` method of an OPTIMIZER_CLASS)."""
    path = filename.replace("\\", "/")
    if any(fnmatchcase(path, glob) for glob in OPTIMIZER_STEP_FILES):
        return True
    qualified = name.split(".<locals>.", 1)[0]
    owner, _, function = qualified.rpartition(".")
    if OPTIMIZER_STEP_FUNCTION.fullmatch(function):
        return True
    return function in ("step", "_step") and bool(owner) and bool(
        OPTIMIZER_CLASS.fullmatch(owner.rpartition(".")[2]))


# Reading a bare socket: a handler thread blocked there may be a server waiting for its client's
# next request, not a reader fetching input (a client library's frames above it say that).
SOCKET_FILES = ("*/socket.py", "*/ssl.py")
SOCKET_READ_CALL = re.compile(r"\.(recv|recv_into|recvfrom|recvmsg)\(")  # on a user line
# A thread under a server's request handling: whatever it does (reads a request body, parses
# it on a CPU), it serves a client, and feeds no loop with input.
SERVING_FILES = ("*/socketserver.py", "*/http/server.py", "*/wsgiref/*",
                 "*/werkzeug/serving.py", "*/grpc/_server.py")

# Calls that write records out, on a source line: a print to a file and a logging call.
_PRINT_OR_LOG = (r"\bprint\(.*\bfile\s*=|"
                 r"\b(log|logger|logging)\.(debug|info|warning|error|exception|critical|log)\(")

# What the innermost user line calls, for calls that leave no Python frame (C functions):
# (regex on the source line, phase, reason). The first match wins.
SOURCE_CALLS: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern), phase, reason)
    for pattern, phase, reason in (
        (r"\.(item|tolist|cpu|numpy)\(\s*\)|\bsynchronize\(|\.to\(\s*['\"]cpu", SYNC,
         "copying a result to the host (waits for the GPU)"),
        (r"\bjson\.dumps?\(|\.writerows?\(|" + _PRINT_OR_LOG,
         OUTPUT, "writing output (serializing records)"),
        (r"\.(write|writelines)\(.*(\bf['\"]|\.join\(|\\n|\bstr\(|\.format\(|%)",
         OUTPUT, "writing output (text records)"),
        (r"\bos\.(fsync|fdatasync|sync)\(|\.(write|writelines|flush)\(|\bos\.(write|pwrite)\(",
         CHECKPOINT, "writing to a file"),
        (r"\.(read|readinto|readline|readlines|recv|recv_into|recvfrom|read_bytes|read_text)\(|"
         r"\bos\.(read|pread|readv|preadv)\(|\bnp\.(load|fromfile)\(|\burlopen\(|"
         r"\bImage\.open\(|\bopen\([^)]*['\"]r?b?['\"]|\bopen\([^,)]*\)",
         DATA_WAIT, "reading a file or socket"),
        # (a `with` of a bare name or attribute, no call, and no Python frame below it: an
        # __enter__ in C that blocks, a threading.Lock's or RLock's; a context manager of
        # Python code leaves its __enter__'s frame)
        (LOCK_CALL.pattern, IDLE, LOCK_WAIT),
        (r"\b(select|poll|epoll_wait)\(", IDLE, FD_WAIT),
        # a hand-rolled server's `conn, addr = sock.accept()` (C): waiting for its next client
        (r"\.accept\(\s*\)", IDLE, "waiting for a client to connect (accept)"),
        # `signal.pause()` and its kin (C): woken by a signal another process sends, to work
        # (a reload, a re-scoring) or to stop; which one no stack says (probe 143 F8)
        (r"\bsignal\.(pause|sigwait|sigwaitinfo|sigtimedwait)\(", IDLE,
         f"{SIGNAL_WAIT} (another process may poke it to work, or it waits to be stopped)"),
        # (a thread's or a process's join takes no argument but a timeout: `os.path.join(d,
        # "model.pt")` and `" ".join(words)` join strings)
        (r"\b(time\.)?sleep\(|\binput\(|\.wait\(|\.join\(\s*(\)|[\w.]*timeout|[\d.])|"
         r"\.get\(\s*(block|timeout|\))",
         IDLE, SLEEP_WAIT),
    )
)


# A comprehension's own frame (Python 3.11 and before; 3.12 inlines them): the frame runs the
# comprehension's expression, so of a line that writes nothing only the comprehension's text is
# what it calls (in `raw = json.dumps([random() for _ in range(n)])` the list is being built).
COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})


# A line that writes what it makes: a comprehension that is an argument of such a call formats
# what is written (`out.write(" ".join(f"{x:.6f}" for x in vector))`), so its whole line counts.
WRITE_CALL = re.compile(r"\.(write|writelines|writerows?)\(|" + _PRINT_OR_LOG)


def is_comprehension(frame: Frame) -> bool:
    return frame.name.rsplit(".", 1)[-1] in COMPREHENSIONS


def is_user_code(frame: Frame) -> bool:
    """Not the standard library, not an installed package, not an interpreter-made frame."""
    path = frame.filename.replace("\\", "/")
    if path.startswith("<frozen") or "/site-packages/" in path or "/dist-packages/" in path:
        return False
    if any(fnmatchcase(path, rule.file) for rule in _RUNTIME_FRAME_RULES):
        return False  # a GPU runtime's own code, like torch.cuda: not the user's
    return not re.search(r"/lib/python3(\.\d+)?/", path)


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame in user code (not a multiprocessing proxy's generated method: its
    caller's line, `job = jobs.get()`, is the user's)."""
    return next((f for i, f in enumerate(frames)
                 if is_user_code(f) and not (i and _is_proxy_method(f, frames[i - 1]))), None)


def _is_proxy_method(frame: Frame, callee: Frame) -> bool:
    """A method multiprocessing generated for a proxy (in PROXY_FILE), calling into it."""
    return frame.filename == PROXY_FILE and fnmatchcase(callee.filename.replace("\\", "/"),
                                                         _MANAGERS)


def name_matches(name: str, pattern: str) -> bool:
    """A frame's function name matches a rule's glob (a qualified glob matches a bare name by
    its last part)."""
    if fnmatchcase(name, pattern):
        return True
    # pre-3.11 py-spy names are bare ("get"); a qualified pattern still matches its last part
    return "." not in name and fnmatchcase(name, pattern.rsplit(".", 1)[-1])


# Frames of GPU runtimes that declare themselves at run time (register_runtime).
_RUNTIME_FRAME_RULES: list[FrameRule] = []


def runtime_rules_count() -> int:
    """How many runtimes declared themselves so far (the list only grows): what `user_frame`
    decided of a stack holds while this count stays."""
    return len(_RUNTIME_FRAME_RULES)


def register_runtime(file_glob: str, name_glob: str, phase: str, reason: str) -> None:
    """Declare a GPU runtime's blocking call (e.g. a kernel launch that waits for the GPU):
    its frames are not user code, and a stack inside it is in `phase`."""
    rule = FrameRule(LIBRARY, file_glob, name_glob, phase, reason)
    if rule not in _RUNTIME_FRAME_RULES:
        _RUNTIME_FRAME_RULES.append(rule)


def is_handoff_wait(frame: Frame) -> bool:
    """A waiting frame in which one thread waits for another to hand something over
    (HANDOFF_WAITS)."""
    return any(_is(frame, file, name) for file, name in HANDOFF_WAITS)


def awaited_answer(frames: Iterable[Frame]) -> Frame | None:
    """The frame of `frames` that waits for a request's answer to begin (ANSWER_WAITS)."""
    return next((f for f in frames if any(_is(f, file, name) for file, name in ANSWER_WAITS)),
                None)


def event_loop_wait(frames: Iterable[Frame]) -> Frame | None:
    """The asyncio event loop's frame of `frames` (EVENT_LOOP_WAITS), where none of them is a
    notebook kernel's (KERNEL_LOOP_FILES)."""
    loop = None
    for frame in frames:
        path = frame.filename.replace("\\", "/")
        if any(fnmatchcase(path, glob) for glob in KERNEL_LOOP_FILES):
            return None
        if loop is None and any(_is(frame, file, name) for file, name in EVENT_LOOP_WAITS):
            loop = frame
    return loop


def stream_read(frames: Iterable[Frame]) -> Frame | None:
    """The frame of `frames` that reads a redis stream (REDIS_STREAM_READS)."""
    return next((f for f in frames
                 if any(_is(f, file, name) for file, name in REDIS_STREAM_READS)), None)


def future_wait(frames: Sequence[Frame]) -> Frame | None:
    """The outermost FUTURE_WAITS frame of `frames` (innermost first): the concurrent.futures
    call the user's code made (as_completed, Executor.map's iterator, Future.result)."""
    return next((f for f in reversed(frames)
                 if any(_is(f, file, name) for file, name in FUTURE_WAITS)), None)


def is_process_pool_thread(frames: Sequence[Frame]) -> bool:
    """A ProcessPoolExecutor's own thread in its owner's process (PROCESS_POOL_THREADS)."""
    return any(_is(f, file, name) for f in frames for file, name in PROCESS_POOL_THREADS)


# A folder watched with the watchdog library: its observer's threads (the emitter, for every
# backend: inotify, polling, kqueue, FSEvents; and the dispatcher that runs the handlers) wait
# for a file to land while the main thread only keeps the program alive (observer.join(1), a
# sleep loop), as watchdog's documentation shows.
FOLDER_WATCHER_THREADS: tuple[tuple[str, str], ...] = (
    ("*/watchdog/observers/api.py", "EventEmitter.run"),
    ("*/watchdog/observers/api.py", "*.dispatch_events"),
)


def folder_watcher(frames: Sequence[Frame]) -> Frame | None:
    """The frame of `frames` that says a thread is a watchdog observer's
    (FOLDER_WATCHER_THREADS); None where none does."""
    return next((f for f in frames
                 if any(_is(f, file, name) for file, name in FOLDER_WATCHER_THREADS)), None)


# Where a process waits for a child process it started: the subprocess module, os.spawn*, pty's
# spawn, or through multiprocessing: its Process.join (BaseProcess.join), and the wait for the child's exit below it in each start
# method's Popen (fork, spawn and forkserver: Popen.wait, Popen.poll, os.waitpid in C or a wait
# on the child's sentinel). Only these: a forked child's stack holds its parent's copy of the
# frames that started it (Popen._launch), never a wait. A Pool's results and a
# ProcessPoolExecutor's futures are their own rules (data wait: worker processes feed it).
CHILD_WAITS: tuple[tuple[str, str], ...] = (
    ("*/subprocess.py", "*"),
    ("*/os.py", "_spawnvef"),  # os.spawnv, spawnl, spawnvp...: os.waitpid below, in C
    ("*/pty.py", "spawn"),  # a child on a pseudo-terminal, its output copied until it exits
    ("*/multiprocessing/process.py", "BaseProcess.join"),
    ("*/multiprocessing/popen_*.py", "Popen.wait"),
    ("*/multiprocessing/popen_*.py", "Popen.poll"),
)


# A read of a multiprocessing queue or pipe that another process fills (its parent, a sibling,
# a coordinator it dialled with multiprocessing.connection.Client): Queue.get (JoinableQueue's
# too), SimpleQueue.get, a Connection's recv, recv_bytes, recv_bytes_into or poll. Where no child
# process of it works meanwhile (phases._fed_by_children comes first: decoder processes feeding a
# loop are its input), it waits for its next job (phases._process_feeds_it), as a Pool's worker
# does. Not under a torch DataLoader (DATA_LOADER_FILES): its main process waits on its workers'
# queue (data wait, its LIBRARY rules), and its workers on their index queue are its own.
PROCESS_READS: tuple[tuple[str, str], ...] = (
    ("*/multiprocessing/queues.py", "*Queue.get"),
    *(("*/multiprocessing/connection.py", f"*.{name}")
      for name in ("recv", "recv_bytes", "recv_bytes_into", "poll")),
)
DATA_LOADER_FILES = "*/torch/utils/data/*"


def process_read(frames: Sequence[Frame], stack: Sequence[Frame]) -> Frame | None:
    """The outermost PROCESS_READS frame of `frames` (innermost first: what the user's line
    called): the multiprocessing queue's get or pipe's read it made; None where there is none,
    or where a torch DataLoader's frame is anywhere on its thread's `stack`, or where the read
    is a multiprocessing manager's proxy waiting for the manager's answer (a proxied lock's
    acquire is a lock; its queue's get is a JOB rule of its own)."""
    if any(fnmatchcase(f.filename.replace("\\", "/"), DATA_LOADER_FILES) for f in stack):
        return None
    if any(fnmatchcase(f.filename.replace("\\", "/"), _MANAGERS) for f in frames):
        return None
    return next((f for f in reversed(frames)
                 if any(_is(f, file, name) for file, name in PROCESS_READS)), None)


def is_child_wait(frame: Frame) -> bool:
    """A frame of the subprocess module, or of multiprocessing's wait for a Process to end
    (CHILD_WAITS): its caller waits for a child process it started."""
    return any(_is(frame, file, name) for file, name in CHILD_WAITS)


def is_socket_frame(frame: Frame) -> bool:
    path = frame.filename.replace("\\", "/")
    return any(fnmatchcase(path, glob) for glob in SOCKET_FILES)


def is_serving_frame(frame: Frame) -> bool:
    path = frame.filename.replace("\\", "/")
    return any(fnmatchcase(path, glob) for glob in SERVING_FILES)


def _is(frame: Frame, file: str, name: str) -> bool:
    return fnmatchcase(frame.filename.replace("\\", "/"), file) and name_matches(frame.name, name)


def rule_for(frame: Frame, kind: str, stack: Sequence[Frame] = (),
             callers_from: int = 0) -> FrameRule | None:
    """The first rule of `kind` (built in, then declared runtimes) that matches `frame`, whose
    callers are `stack[callers_from:]` (innermost first)."""
    path = frame.filename.replace("\\", "/")
    for rule in (*FRAME_RULES, *_RUNTIME_FRAME_RULES):
        if rule.kind == kind and fnmatchcase(path, rule.file) and name_matches(frame.name, rule.name):
            if rule.within is None or any(_is(caller, *rule.within)
                                          for caller in islice(stack, callers_from, None)):
                return rule
    return None


def first_match(frames: Iterable[Frame], kind: str) -> tuple[FrameRule, Frame] | None:
    """The first of `frames` (innermost first) that a rule of `kind` matches, with that rule."""
    stack = tuple(frames)
    for depth, frame in enumerate(stack):
        rule = rule_for(frame, kind, stack, depth + 1)
        if rule is not None:
            return rule, frame
    return None
