"""`mlcostd profile`'s own standard streams, when one is closed: started with `2>&-` (the fd is
not open), or a pipe whose reader exited (`2>&1 >/dev/null | head -1`, a CI step's log
collector gone). The profile's files are its result and its exit status its verdict: neither may
be lost to a line it cannot print. What it would print there goes to /dev/null instead."""

from __future__ import annotations

import io
import logging
import os
import sys
from typing import Any, BinaryIO

# (fd, sys attribute, mode) of the three standard streams
_STANDARD = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def open_standard_streams() -> None:
    """Where a standard stream was closed when the profile started (Python sets it to None:
    `sys.stderr.buffer` was an AttributeError once the command ran, and no file was
    written), /dev/null stands in, on its own fd when that is free: a file the profile opens
    later (its store) must not take fd 2 and get its log lines, nor fd 0 and be the
    command's stdin."""
    for fd, name, mode in _STANDARD:
        if getattr(sys, name) is not None:
            continue
        null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
        if null != fd and not _is_open(fd):
            os.dup2(null, fd)
            os.close(null)
            null = fd
        stream = io.TextIOWrapper(io.FileIO(null, mode), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=mode == "w")
        setattr(sys, name, stream)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def to_devnull(out: BinaryIO | Any) -> None:
    """Our output `out`, closed by its reader, replaced by /dev/null: what we write there
    later (a verdict on a closed stderr, what was left in the buffer at exit) goes nowhere
    rather than raise BrokenPipeError (or end the interpreter with status 120, where its
    flush at exit fails)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, out.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def say(text: str, end: str = "\n") -> None:
    """`text` on the profile's stderr, or nowhere where its reader has gone (the stream is
    let go to /dev/null then, once)."""
    try:
        print(text, file=sys.stderr, end=end, flush=True)
    except (BrokenPipeError, ValueError):
        to_devnull(sys.stderr)
        try:  # (what the failed write left in the buffer goes there too)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The profile's log lines on its stderr, as logging.StreamHandler writes them; where the
    stream's reader has gone, the stream is let go to /dev/null (logging's own handleError
    left the line in the buffer, whose flush at exit then failed: status 120)."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ValueError)):
            to_devnull(self.stream)
            try:
                self.stream.flush()
            except (OSError, ValueError):
                pass
            return
        super().handleError(record)
