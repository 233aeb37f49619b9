"""What a GPU process is doing while its GPU is quiet, from its Python stack: the phase.

The rules are data (FRAME_RULES, SOURCE_CALLS): frames of the real libraries (torch DataLoader,
torch.save and distributed checkpoint, Hugging Face Trainer, Lightning loops, torch.cuda
synchronize, c10d collectives, vLLM's engine loop) and generic signals (I/O and waiting frames of
the standard library, what the innermost user line calls, the process in D state, iowait
growth, the same user line repeating). `classify` applies them in a fixed order of precedence.
Nothing here knows the names of mlcost's own demo workloads.

A blocking call into C (pickle.dump, array.tofile, a read inside a C extension) leaves no Python
frame, so frames alone cannot tell a checkpoint from a host sync. `HostSignals` are what such a
call looks like from outside, measured by the attribution between dumps: the main thread's
on-CPU time, the process's read and write bytes, D state and iowait, and whether its GPU was
busy while the host waited. A host waiting while its GPU is idle is not a sync (a sync waits on
a busy GPU); writing a lot is a checkpoint; reading or blocking on a read is
data wait; the main thread on-CPU with no I/O is host compute (eval where the frames say so).
Every Classification carries its reason: the rule or signal that decided it.

Writing output (logs, metrics, predictions, embeddings as JSON lines, CSV or text) is its own
phase, `output`, told from the frames (json, csv, logging) and the user's line (a write of a
formatted record, or a flush/fsync just after one), never from a write rate: a JSON-lines
appender writes less per second on a loaded host, and must not turn into host preprocessing
there. Checkpoints (pickle, torch.save, zip, raw arrays) stay `checkpoint`, whose cadence feeds
the spot advice; output does not.

`phase_balance` turns classified stack samples of one process over a window into seconds and
shares per phase, with the top stacks of each and the reason they were classified so.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import threading
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from daemon.sources.frames import Frame, ThreadStack, main_thread
from daemon.wire import (
    CHECKPOINT,
    COMM,
    COMPUTE,
    DATA_WAIT,
    EVAL,
    HIGH_CONFIDENCE,
    HOST_PREPROCESS,
    IDLE,
    LOW_CONFIDENCE,
    OUTPUT,
    PHASES,
    SYNC,
    UNKNOWN,
)

# The phase names and confidences are the wire's (daemon.wire); imported from here too. "low":
# from /proc alone where py-spy may not read the process (daemon.analysis.proc_phases).
# A fallback sample's reason starts with this, and its one pseudo-frame is in this file.
NO_STACKS_EVIDENCE = "from /proc, no stacks"
NO_STACK_FILE = "<proc>"

# Frame rule kinds, in the order classify() tries them (see its docstring).
CONTEXT = "context"  # anywhere in the stack: the whole stack is spent in this phase
LIBRARY = "library"  # the innermost matching library frame decides
IO = "io"  # a stdlib/library I/O frame below the innermost user frame
WAIT = "wait"  # a stdlib waiting frame below the innermost user frame


@dataclass(frozen=True, slots=True)
class FrameRule:
    """A frame pattern: `file` and `name` are fnmatch globs on the path and qualified name."""

    kind: str
    file: str
    name: str
    phase: str
    reason: str


@dataclass(frozen=True, slots=True)
class Classification:
    phase: str
    reason: str
    frame: Frame | None  # the innermost frame in user code: the line responsible


_DL = "*/torch/utils/data/dataloader.py"
_C10D = "*/torch/distributed/distributed_c10d.py"
_HF = "*/transformers/trainer.py"
_PL = "*/lightning/pytorch/*"
_PL_OLD = "*/pytorch_lightning/*"

# Function names are 3.11+ qualified names; on older Pythons py-spy gives the bare name, which
# _name_matches accepts for a pattern's last component.
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
            ("subprocess.py", "*", "a subprocess"),
            ("socketserver.py", "*serve_forever", "a server loop"),
            ("code.py", "*", "an interactive prompt"),
            ("zmq/*", "*", "ZeroMQ (a Jupyter kernel waiting)"),
            ("tornado/*", "*", "the tornado event loop"),
        )
    ),
)

# What the innermost user line calls, for calls that leave no Python frame (C functions):
# (regex on the source line, phase, reason). The first match wins.
SOURCE_CALLS: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern), phase, reason)
    for pattern, phase, reason in (
        (r"\.(item|tolist|cpu|numpy)\(\s*\)|\bsynchronize\(|\.to\(\s*['\"]cpu", SYNC,
         "copying a result to the host (waits for the GPU)"),
        (r"\bjson\.dumps?\(|\.writerows?\(|\bprint\(.*\bfile\s*=|"
         r"\b(log|logger|logging)\.(debug|info|warning|error|exception|critical|log)\(",
         OUTPUT, "writing output (serializing records)"),
        (r"\.(write|writelines)\(.*(\bf['\"]|\.join\(|\\n|\bstr\(|\.format\(|%)",
         OUTPUT, "writing output (text records)"),
        (r"\bos\.(fsync|fdatasync|sync)\(|\.(write|writelines|flush)\(|\bos\.(write|pwrite)\(",
         CHECKPOINT, "writing to a file"),
        (r"\.(read|readinto|readline|readlines|recv|recv_into|recvfrom|read_bytes|read_text)\(|"
         r"\bos\.(read|pread|readv|preadv)\(|\bnp\.(load|fromfile)\(|\burlopen\(|"
         r"\bImage\.open\(|\bopen\([^)]*['\"]r?b?['\"]|\bopen\([^,)]*\)",
         DATA_WAIT, "reading a file or socket"),
        (r"\b(time\.)?sleep\(|\binput\(|\.(wait|join|acquire)\(|\bselect\(|\.get\(\s*(block|timeout|\))",
         IDLE, "sleeping or waiting"),
    )
)

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


# A main thread waiting for a core at least a quarter of the time is slowed by the host's load.
QUEUED_MIN = 0.25


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
    read_per_s: float = 0.0
    write_per_s: float = 0.0
    # CPU-seconds a second of the process and its children (waited-for ones included): the
    # time it got to run, which a loaded host shares out. None: not measured.
    tree_cpu: float | None = None
    d_state: bool = False  # a thread of it was in uninterruptible (disk) sleep
    iowait_growing: bool = False  # its block I/O delay grew (delay accounting)
    gpu_busy: bool | None = None  # its GPUs busy on average (daemon.analysis.busy.gpu_is_busy)

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

    @property
    def on_cpu(self) -> float | None:
        """The main thread's on-CPU share, or the whole process's where that is not known."""
        return self.main_thread_cpu if self.main_thread_cpu is not None else self.process_cpu


_EVAL_NAME = re.compile(r"(^|_)(eval|evaluate|evaluation|valid|validate|validation|test)(_|$)",
                        re.IGNORECASE)
# Where @torch.no_grad() leaves its decorate_context frame (torch >= 2.0, then older torch).
_NO_GRAD_FILES = ("*/torch/utils/_contextlib.py", "*/torch/autograd/grad_mode.py")

SourceLine = Callable[[Frame], "str | None"]


def read_source_line(frame: Frame, reader_uid: int | None = None) -> str | None:
    """The text of a frame's line from its file, or None where it cannot be read or where the
    process whose frame it is could not read it either.

    mlcostd runs as root and a frame's file name comes from the process: a user whose code
    names /etc/shadow in a frame must not get a line of it back in the evidence. So the file is
    opened once, checked on its descriptor (a regular file of at most 4 MiB, and readable by
    `reader_uid`: that user's own file, or one anyone may read; `None` means anyone) and read
    from that same descriptor.

    Not linecache: it keeps every file it read for good, and the daemon reads through
    /proc/PID/root, a new path for every process, so a host whose jobs come and go grew it
    without end (a whole file, up to 4 MiB, per process). Here one line is read and the last
    few hundred lines read are kept, each by its file's identity, size and mtime."""
    if frame.filename.startswith("<") or frame.line < 1:
        return None
    try:
        # O_PATH first: opening a device for reading can act (a watchdog arms, a tape rewinds),
        # so the file is looked at before it is opened, and then opened as that same file.
        handle = os.open(frame.filename, os.O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        found = os.fstat(handle)
        if not stat.S_ISREG(found.st_mode) or found.st_size > 4 << 20:
            return None  # not a source file anyone wrote by hand
        if not _may_read(found, reader_uid):
            return None
        key = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, frame.line)
        with _SOURCE_LINES_LOCK:
            if key in _SOURCE_LINES:
                _SOURCE_LINES.move_to_end(key)
                return _SOURCE_LINES[key]
        with open(f"/proc/self/fd/{handle}", encoding="utf-8", errors="replace") as source:
            text = next(itertools.islice(source, frame.line - 1, None), "") or None
    except OSError:
        return None
    finally:
        os.close(handle)
    with _SOURCE_LINES_LOCK:
        _SOURCE_LINES[key] = text
        if len(_SOURCE_LINES) > SOURCE_LINES_KEPT:
            _SOURCE_LINES.popitem(last=False)
    return text


SOURCE_LINES_KEPT = 512
_SOURCE_LINES: OrderedDict[tuple[int, int, int, int, int], str | None] = OrderedDict()
_SOURCE_LINES_LOCK = threading.Lock()  # the classifier may run on more than one thread


def source_lines_kept() -> int:
    """How many source lines the reader keeps now (never more than SOURCE_LINES_KEPT)."""
    return len(_SOURCE_LINES)


def _may_read(found: os.stat_result, uid: int | None) -> bool:
    """Whether user `uid` could read the file: root, its owner with the owner's read bit, or
    anyone where the file is world-readable. Group bits are not trusted: the process's groups
    are not known here, and a line less in the evidence is the safe side."""
    if found.st_mode & stat.S_IROTH:
        return True
    if uid is None:
        return False
    return uid == 0 or (found.st_uid == uid and bool(found.st_mode & stat.S_IRUSR))


def source_reader(pid: int) -> SourceLine:
    """Reads a frame's line through /proc/PID/root, so paths inside a container resolve, and
    only where the process's own user could read the file."""
    root = f"/proc/{pid}/root"
    try:
        uid: int | None = os.stat(f"/proc/{pid}").st_uid  # the process's effective user
    except OSError:
        uid = None  # gone: only files anyone may read

    def read(frame: Frame) -> str | None:
        if frame.filename.startswith("<"):
            return None
        return read_source_line(Frame(frame.name, root + frame.filename, frame.line), uid)

    return read


def is_user_code(frame: Frame) -> bool:
    """Not the standard library, not an installed package, not an interpreter-made frame."""
    path = frame.filename.replace("\\", "/")
    if path.startswith("<frozen") or "/site-packages/" in path or "/dist-packages/" in path:
        return False
    if any(fnmatchcase(path, rule.file) for rule in _RUNTIME_FRAME_RULES):
        return False  # a GPU runtime's own code, like torch.cuda: not the user's
    return not re.search(r"/lib/python3(\.\d+)?/", path)


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame in user code."""
    return next((f for f in frames if is_user_code(f)), None)


def _name_matches(name: str, pattern: str) -> bool:
    if fnmatchcase(name, pattern):
        return True
    # pre-3.11 py-spy names are bare ("get"); a qualified pattern still matches its last part
    return "." not in name and fnmatchcase(name, pattern.rsplit(".", 1)[-1])


# Frames of GPU runtimes that declare themselves at run time (register_runtime).
_RUNTIME_FRAME_RULES: list[FrameRule] = []


def register_runtime(file_glob: str, name_glob: str, phase: str, reason: str) -> None:
    """Declare a GPU runtime's blocking call (e.g. a kernel launch that waits for the GPU):
    its frames are not user code, and a stack inside it is in `phase`."""
    rule = FrameRule(LIBRARY, file_glob, name_glob, phase, reason)
    if rule not in _RUNTIME_FRAME_RULES:
        _RUNTIME_FRAME_RULES.append(rule)


def _rule_for(frame: Frame, kind: str) -> FrameRule | None:
    path = frame.filename.replace("\\", "/")
    for rule in (*FRAME_RULES, *_RUNTIME_FRAME_RULES):
        if rule.kind == kind and fnmatchcase(path, rule.file) and _name_matches(frame.name, rule.name):
            return rule
    return None


def _first(frames: Iterable[Frame], kind: str) -> tuple[FrameRule, Frame] | None:
    for frame in frames:
        rule = _rule_for(frame, kind)
        if rule is not None:
            return rule, frame
    return None


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
) -> Classification:
    """The phase of a process from its main thread's stack and process-level signals.

    Precedence, GPU quiet: context frames anywhere (checkpoint, eval: a library's checkpoint or
    evaluation frames, or a user function named eval/validate/test...) > comm/sync library
    frames > I/O frames or an I/O call on the innermost user line > the innermost data-loading
    or serving library frame > waiting frames or a sleep/wait call on the user line (idle) > D
    state or iowait growth (data_wait) > the same user line repeating (sync) > a blocked main
    thread (idle) > unknown. GPU busy: comm and eval still count as themselves (collectives and
    evaluation keep a GPU busy too); everything else is compute.

    With `signals` (HostSignals), after the library frames and before the waiting frames: a
    process writing >= WRITE_MIN_PER_S (a second, or a CPU-second it got: HostSignals.streams)
    is checkpointing, one reading >= READ_MIN_PER_S (likewise) or in
    D state or with iowait growing waits for data, a main thread on-CPU >= ON_CPU_MIN is host
    compute (eval under a torch.no_grad/inference_mode decorator); and the same line repeating,
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
        return Classification(UNKNOWN, "no Python stack for the main thread", None)

    context = _first(frames, CONTEXT)
    if context is None:
        context = _eval_by_name(frames)
    library = _first(frames, LIBRARY)

    if gpu_busy:
        if library is not None and library[0].phase == COMM:
            return _said(library, responsible, "GPU busy in a collective")
        if context is not None and context[0].phase == EVAL:
            return _said(context, responsible, "GPU busy")
        return Classification(COMPUTE, "GPU busy", responsible)

    if context is not None:
        return _said(context, responsible)
    if library is not None and library[0].phase in (COMM, SYNC):
        return _said(library, responsible)

    # Frames below (inner to) the innermost user frame: what the user's line called.
    called = frames[: frames.index(responsible)] if responsible is not None else frames
    io = _first(called, IO)
    if io is not None:
        return _said(io, responsible)
    line_call = _source_call(responsible, source_line) if not called else None
    if line_call is not None and line_call[0] in (DATA_WAIT, CHECKPOINT, OUTPUT):
        return Classification(line_call[0], line_call[1], responsible)
    if library is not None:
        return _said(library, responsible)
    if signals is not None:
        measured = _from_signals(frames, signals, responsible)
        if measured is not None:
            return measured
    wait = _first(called, WAIT)
    if wait is not None:
        return _said(wait, responsible)
    if line_call is not None and line_call[0] == IDLE:
        return Classification(IDLE, line_call[1] + " with the GPU idle", responsible)
    if proc_state == "D":
        return Classification(DATA_WAIT, "process in uninterruptible I/O sleep (D state)", responsible)
    if iowait_growing:
        return Classification(DATA_WAIT, "block I/O wait growing (delay accounting)", responsible)
    if (line_call is not None and line_call[0] == SYNC) or repeated_leaf:
        if signals is not None and signals.gpu_busy is False:
            cpu = signals.on_cpu
            if cpu is None or cpu < ON_CPU_MIN:
                return Classification(
                    IDLE, "waiting with its GPU idle and no I/O: not a sync (a sync waits on a "
                    f"busy GPU){_cpu_text(signals)}", responsible)
        elif line_call is not None and line_call[0] == SYNC:
            return Classification(SYNC, line_call[1] + _busy_text(signals), responsible)
        elif _queued_text(signals) and thread is not None and thread.active:
            # The line repeats because the thread is runnable and waits for a core, not for its
            # GPU: the step's GPU work (busy meanwhile) is what runs, a loaded host its delay.
            return Classification(
                COMPUTE if signals is not None and signals.gpu_busy else UNKNOWN,
                "the same user line repeats while the main thread is runnable"
                + _queued_text(signals) + _busy_text(signals), responsible)
        else:
            return Classification(
                SYNC, "the same user line repeats while the host waits (a host sync such as "
                f".item()/.cpu() leaves no Python frame){_busy_text(signals)}", responsible,
            )
    if thread is not None and not thread.active:
        return Classification(IDLE, "main thread blocked with the GPU idle", responsible)
    return Classification(UNKNOWN, "host code running while the GPU idles"
                          + _queued_text(signals), responsible)


def _from_signals(frames: Sequence[Frame], signals: HostSignals,
                  responsible: Frame | None) -> Classification | None:
    """What the signals say when the frames named no library: see classify()."""
    writing = signals.streams(signals.write_per_s, WRITE_MIN_PER_S)
    if writing is not None:
        return Classification(
            CHECKPOINT, f"writing {writing} while the GPU idles (a checkpoint or output write)",
            responsible)
    reading = signals.streams(signals.read_per_s, READ_MIN_PER_S)
    if reading is not None:
        return Classification(DATA_WAIT, f"reading {reading} while the GPU idles", responsible)
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
            "(host-side compute)", responsible)
    return None


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
        and _name_matches(f.name, "*decorate_context")
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
    for pattern, phase, reason in SOURCE_CALLS:
        if pattern.search(code):
            if phase == CHECKPOINT and _writes_records_before(frame, source_line):
                return OUTPUT, f"writing output (a flush/fsync after text records): " \
                    f"`{code.strip()[:80]}`"
            return phase, f"{reason}: `{code.strip()[:80]}`"
    return None


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


def _said(match: tuple[FrameRule, Frame], responsible: Frame | None, prefix: str = "") -> Classification:
    rule, frame = match
    reason = f"{rule.reason} ({_where(frame)})"
    return Classification(rule.phase, f"{prefix}: {reason}" if prefix else reason, responsible)


def waits_on_data_queue(threads: Sequence[ThreadStack]) -> bool:
    """The main thread waits for batches from DataLoader workers: dump the workers too."""
    thread = main_thread(threads)
    if thread is None:
        return False
    match = _first(thread.frames, LIBRARY)
    return match is not None and match[0].phase == DATA_WAIT


# -- phase balance ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StackSample:
    """One classified stack of one process: what the store keeps per dump."""

    ts: float
    pid: int
    thread_id: int
    stack_hash: str
    frames: tuple[Frame, ...]
    phase: str
    gpu_util: float  # percent (0-100) of the process's GPU(s) when the stack was taken
    reason: str = ""  # the rule or signal that decided the phase (Classification.reason)

    @property
    def from_proc(self) -> bool:
        """Classified from /proc alone, without a Python stack (daemon.analysis.proc_phases)."""
        return bool(self.frames) and self.frames[0].filename == NO_STACK_FILE


def phase_balance(
    samples: Sequence[StackSample], window_s: float, busy_seconds: float, *, top: int = 5
) -> dict[str, dict[str, Any]]:
    """Seconds and shares of `window_s` per phase, for one process.

    The GPU's busy time that stacks did not sample (stacks are taken in low-utilization
    windows) counts as compute; the rest of the window is split by the share of samples in
    each phase (no samples: unknown). Each phase carries its GPU-idle seconds (its time times
    one minus its samples' mean utilization; compute's busy time is not idle) and its top
    stacks by sample count, with the innermost user frame's file and line and the reason the
    stack was put in this phase (its most frequent one), and its confidence: LOW_CONFIDENCE
    when most of its samples came from /proc without a stack, else HIGH_CONFIDENCE.
    Phases with no time are left out; shares add up to 1 when window_s > 0.
    """
    return balance_of(sample_split(samples, top=top), window_s, busy_seconds)


@dataclass(frozen=True, slots=True)
class SampleSplit:
    """What one process's stack samples say, apart from how long it ran (phase_balance in two
    steps: a caller that keeps the samples computes this once per new sample, the time
    arithmetic once per tick). Per phase: its share of the samples, its samples' mean GPU
    utilization (0-1), its top stacks (to be read, never changed), its confidence."""

    parts: tuple[tuple[str, float, float, list[dict[str, Any]], str], ...] = ()


def sample_split(samples: Sequence[StackSample], *, top: int = 5) -> SampleSplit:
    by_phase: dict[str, list[StackSample]] = defaultdict(list)
    for s in samples:
        by_phase[s.phase if s.phase in PHASES else UNKNOWN].append(s)
    return SampleSplit(tuple(
        (phase, len(group) / len(samples),
         sum(min(max(s.gpu_util, 0.0), 100.0) for s in group) / len(group) / 100.0,
         _top_stacks(group, top), _confidence(group)) for phase, group in by_phase.items()))


def balance_of(split: SampleSplit, window_s: float,
               busy_seconds: float) -> dict[str, dict[str, Any]]:
    """phase_balance from the samples' split, the window and the GPU's busy seconds in it."""
    if window_s <= 0:
        return {}
    busy = min(max(busy_seconds, 0.0), window_s)
    quiet = window_s - busy
    if not split.parts:  # no stacks (most processes, most of the time): compute and unknown
        parts = [(COMPUTE, busy, 0.0), (UNKNOWN, quiet, quiet)]
        if quiet > busy:
            parts.reverse()
        return {phase: {"seconds": spent, "share": spent / window_s, "gpu_idle_seconds": idle,
                        "top_stacks": [], "confidence": HIGH_CONFIDENCE}
                for phase, spent, idle in parts if spent > 0}
    seconds: dict[str, float] = defaultdict(float)
    idle: dict[str, float] = defaultdict(float)
    stacks: dict[str, list[dict[str, Any]]] = {}
    confidence: dict[str, str] = {}
    seconds[COMPUTE] += busy
    for phase, share, mean_util, top_stacks, sure in split.parts:
        seconds[phase] += quiet * share
        idle[phase] += quiet * share * (1.0 - mean_util)
        stacks[phase] = top_stacks
        confidence[phase] = sure
    if not split.parts and quiet > 0:
        seconds[UNKNOWN] += quiet
        idle[UNKNOWN] += quiet
    result: dict[str, dict[str, Any]] = {}
    for phase in sorted(seconds, key=lambda p: (-seconds[p], PHASES.index(p))):
        if seconds[phase] <= 0:
            continue
        result[phase] = {
            "seconds": seconds[phase],
            "share": seconds[phase] / window_s,
            "gpu_idle_seconds": idle[phase],
            "top_stacks": stacks.get(phase, []),
            "confidence": confidence.get(phase, HIGH_CONFIDENCE),
        }
    return result


def _confidence(group: Sequence[StackSample]) -> str:
    from_proc = sum(1 for s in group if s.from_proc)
    return LOW_CONFIDENCE if group and from_proc * 2 > len(group) else HIGH_CONFIDENCE


def _responsible_function(frames: Sequence[Frame]) -> tuple[str, str] | None:
    """The user function a stack is spent in: a comprehension or nested function counts as
    the function that holds it."""
    where = user_frame(frames) or (frames[0] if frames else None)
    return None if where is None else (where.filename, where.name.split(".<locals>.", 1)[0])


def _top_stacks(group: Sequence[StackSample], top: int) -> list[dict[str, Any]]:
    """The stacks of one phase, those of the user function with the most samples first.

    By function before stack: work spread over a function's lines (a decode loop's
    decompress, slice and comprehension are three stacks) outweighs one cheaper stack that
    always looks the same (freeing the last result on the caller's line)."""
    counts = Counter(s.stack_hash for s in group)
    first: dict[str, StackSample] = {}
    for s in group:
        first.setdefault(s.stack_hash, s)
    by_function: Counter[tuple[str, str] | None] = Counter()
    for stack_hash, n in counts.items():
        by_function[_responsible_function(first[stack_hash].frames)] += n
    stacks = []
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    for s in group:
        if s.reason:
            reasons[s.stack_hash][s.reason] += 1
    order = sorted(counts.items(), key=lambda kv: (
        -by_function[_responsible_function(first[kv[0]].frames)], -kv[1], kv[0]))
    for stack_hash, n in order[:top]:
        frames = first[stack_hash].frames
        said = reasons.get(stack_hash)
        where = user_frame(frames) or (frames[0] if frames else None)
        stacks.append({
            "stack_hash": stack_hash,
            "frames": [f"{f.filename}:{f.line} {f.name}" for f in frames],
            "file": where.filename if where else None,
            "line": where.line if where else None,
            "function": where.name if where else None,
            "samples": n,
            "reason": said.most_common(1)[0][0] if said else None,
        })
    return stacks
