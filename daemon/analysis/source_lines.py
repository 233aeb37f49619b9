"""The text of the user's line a stack frame points at, read only where its owner could read it.

The classifier reads it to see what a line calls into C (SOURCE_CALLS in
daemon.analysis.stack_rules); the daemon runs as root and the file name comes from the process,
so the read is guarded here.
"""

from __future__ import annotations

import itertools
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable

from daemon.sources.frames import Frame

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
