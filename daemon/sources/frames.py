"""Python stacks as data: frames, threads, one dump's result, and the parsing of py-spy's JSON.

Pure types and functions (no psutil, no subprocess), so that analysis, the store's readers and
`mlcost-top --replay` can use a stack without loading the sampler (`daemon.sources.stacks`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.sources.redact import redact_field
from daemon.sources.safe_text import one_line

# DumpResult.status values.
OK = "ok"
RATE_LIMITED = "rate_limited"
OVER_BUDGET = "over_budget"
PY_SPY_MISSING = "py_spy_missing"
PERMISSION_DENIED = "permission_denied"
NOT_PYTHON = "not_python"
UNSUPPORTED_PYTHON = "unsupported_python"
PROCESS_GONE = "process_gone"
TIMEOUT = "timeout"
OUTPUT_TOO_LARGE = "output_too_large"  # py-spy printed over MAX_DUMP_BYTES: killed, not read
ERROR = "error"

STATUSES = (
    OK, RATE_LIMITED, OVER_BUDGET, PY_SPY_MISSING, PERMISSION_DENIED, NOT_PYTHON,
    UNSUPPORTED_PYTHON, PROCESS_GONE, TIMEOUT, OUTPUT_TOO_LARGE, ERROR,
)

# What is kept of a dump. A process chooses its threads, their depth and its function and file
# names' lengths, so how much py-spy prints: 60 threads 500 frames deep in names of 1,000
# characters made it print 97 MB in 1.2 s, whose parse held the daemon's loop 5.8 s (probe
# 146, H2). The analysis reads a dump's main thread and at most 64 others
# (phases.MAX_THREADS_LOOKED_AT), each to at most 256 frames from its innermost
# (kinds.MAX_FRAMES_LOOKED_AT); a trainer's dump has a few to a few dozen threads 30-100 frames
# deep, ~200 bytes of JSON a frame: tens to hundreds of KiB. A dump keeps what the analysis
# reads, and py-spy's output is read to at most MAX_DUMP_BYTES (the whole kept part at
# ordinary name lengths: 65 x 256 frames x ~230 bytes); past that it is killed, the dump's
# status OUTPUT_TOO_LARGE.
MAX_THREADS_KEPT = 1 + 64
MAX_FRAMES_KEPT = 256
MAX_DUMP_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame: function (qualified on 3.11+, e.g. "Queue.get"), file, line."""

    name: str
    filename: str
    line: int

    def label(self) -> str:
        """"file:line name", as shown in reports."""
        return f"{self.filename}:{self.line} {self.name}"


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread's stack; frames[0] is the innermost call."""

    thread_id: int
    thread_name: str | None
    active: bool  # py-spy: the thread was running (not blocked in a syscall or waiting)
    frames: tuple[Frame, ...]
    os_thread_id: int | None = None
    owns_gil: bool = False
    pid: int | None = None  # the process (py-spy reports it per thread)


@dataclass(frozen=True, slots=True)
class DumpResult:
    """What one attempt to dump `pid` gave. `error` says why for any status but "ok"."""

    pid: int
    ts: float  # seconds since the epoch when the attempt started
    status: str
    threads: list[ThreadStack] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0  # how long py-spy ran (0 when it was not run)

    @property
    def ok(self) -> bool:
        return self.status == OK


def stack_hash(frames: Iterable[Frame]) -> str:
    """A stable id for a stack (same frames, same lines -> same hash), for dedup in the store."""
    text = "\n".join(f"{f.filename}:{f.name}:{f.line}" for f in frames)
    return hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()


def _main_item(data: list[Any]) -> int:
    """The index of the main thread in py-spy's JSON threads, as `main_thread` picks it."""
    for i, item in enumerate(data):
        if isinstance(item, dict) and item.get("thread_name") == "MainThread":
            return i
    for i, item in enumerate(data):
        if isinstance(item, dict) and item.get("pid") is not None \
                and item.get("os_thread_id") == item.get("pid"):
            return i
    return 0


def parse_dump(text: str) -> list[ThreadStack]:
    """Threads from `py-spy dump --json` output: the main thread and the first others, at most
    MAX_THREADS_KEPT, each to its innermost MAX_FRAMES_KEPT frames. ValueError if it is not
    that JSON. (Redacting each name costs: call it off the daemon's loop.)"""
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError(f"py-spy JSON: expected a list of threads, got {type(data).__name__}")
    if len(data) > MAX_THREADS_KEPT:
        main = _main_item(data)  # kept wherever py-spy listed it
        data = (data[:MAX_THREADS_KEPT] if main < MAX_THREADS_KEPT
                else [*data[:MAX_THREADS_KEPT - 1], data[main]])
    threads = []
    for item in data:
        frames = tuple(
            # A function or file name is the target's text: control bytes shown, not kept, and
            # a secret in it hidden (a function named like an AWS key, a file `password=x`).
            Frame(
                name=redact_field(one_line(str(fr.get("name") or "?"))),
                filename=redact_field(one_line(str(fr.get("filename") or fr.get("short_filename")
                                                   or "?"))),
                line=int(fr.get("line") or 0),
            )
            for fr in (item.get("frames") or ())[:MAX_FRAMES_KEPT]
        )
        os_tid = item.get("os_thread_id")
        threads.append(
            ThreadStack(
                thread_id=int(item.get("thread_id") or 0),
                thread_name=redact_field(one_line(str(item["thread_name"])))
                if item.get("thread_name") is not None else None,
                active=bool(item.get("active")),
                frames=frames,
                os_thread_id=int(os_tid) if os_tid is not None else None,
                owns_gil=bool(item.get("owns_gil")),
                pid=int(item["pid"]) if item.get("pid") is not None else None,
            )
        )
    return threads


def main_thread(threads: Sequence[ThreadStack]) -> ThreadStack | None:
    """The process's main thread: named MainThread, or whose OS tid is the pid, or the first."""
    for t in threads:
        if t.thread_name == "MainThread":
            return t
    for t in threads:
        if t.pid is not None and t.os_thread_id == t.pid:
            return t
    return threads[0] if threads else None


def to_json(result: DumpResult) -> dict[str, Any]:
    """A DumpResult as plain JSON-able data (for the API and snapshots)."""
    return {
        "pid": result.pid,
        "ts": result.ts,
        "status": result.status,
        "error": result.error,
        "threads": [
            {
                "thread_id": t.thread_id,
                "thread_name": t.thread_name,
                "active": t.active,
                "frames": [[f.name, f.filename, f.line] for f in t.frames],
            }
            for t in result.threads
        ],
    }
