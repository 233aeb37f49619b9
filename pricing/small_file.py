"""A small file someone names on the command line or in a config (a config file, a simulated
host's scenario, a key file), read whole: only a regular file, and at most `max_bytes` of it.
A FIFO there would hang the command, /dev/zero would fill its memory, and a directory or a
device is not such a file. The errors say what is wrong with the file, never what it holds.
"""

from __future__ import annotations

import os
import stat

MISSING = "missing"  # nothing at the path
UNREADABLE = "unreadable"  # not ours to read, or a read that failed
NOT_REGULAR = "not regular"  # a directory, FIFO, device or socket
NOT_PRIVATE = "not private"  # group or others may read it (the fix is in the message)
TOO_LARGE = "too large"


class SmallFileError(ValueError):
    """What is wrong with the file, worded to follow its path ("... is not a regular file"),
    and which of the kinds above it is (`kind`: the caller's fix)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def read_small_file(path: str | os.PathLike[str], max_bytes: int, *,
                    private: bool = False) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes`. `private`: refuse a file
    its group or others may read (a secret's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: not waited on
    except FileNotFoundError:
        raise SmallFileError(MISSING, " does not exist") from None
    except OSError as exc:
        raise SmallFileError(UNREADABLE, f": {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    problem = None
    if not stat.S_ISREG(mode):  # (a directory opens too)
        problem = SmallFileError(NOT_REGULAR, " is not a regular file")
    elif private and mode & (stat.S_IRWXG | stat.S_IRWXO):
        problem = SmallFileError(NOT_PRIVATE, f" has mode {stat.S_IMODE(mode):04o}, readable "
                                 f"by others; run `chmod 600 {os.fspath(path)}`")
    if problem is not None:
        os.close(fd)
        raise problem
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise SmallFileError(UNREADABLE, f": {exc.strerror}") from None
    if len(data) > max_bytes:
        raise SmallFileError(TOO_LARGE, f" is larger than {_size(max_bytes)}")
    return data


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"
