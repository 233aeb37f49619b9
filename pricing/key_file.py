"""A secret kept in a file of its own: a cloud API key (`prices --gcp-key-file`), mlcostd's API
token (`--token-file`). Read as one line from a regular file, at most `max_bytes` of it: a FIFO
there would hang the command, /dev/zero fill its memory, a directory or a device is no key
file, and a second line or a control character is no key (it would break the request it goes
in). The errors say what is wrong with the file, never what it holds.
"""

from __future__ import annotations

import os
import stat

UNREADABLE = "unreadable"  # not there, or not ours to read
NOT_PRIVATE = "not private"  # group or others may read it (the fix is in the message)
NOT_A_KEY = "not a key"  # not a regular file, or not one line


class KeyFileError(ValueError):
    """What is wrong with a key file, worded to follow its path ("... is not a regular file"),
    and which of UNREADABLE, NOT_PRIVATE and NOT_A_KEY it is (`kind`: the caller's fix)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def read_key_file(path: str | os.PathLike[str], *, max_bytes: int = 4096, min_chars: int = 1,
                  private: bool = False) -> str:
    """The one line in `path`, stripped. `private`: refuse a file its group or others may
    read (the fix is in the message)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: not waited on
    except OSError as exc:
        raise KeyFileError(UNREADABLE, f": {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    problem = None
    if not stat.S_ISREG(mode):  # (a directory opens too)
        problem = KeyFileError(NOT_A_KEY, " is not a regular file")
    elif private and mode & (stat.S_IRWXG | stat.S_IRWXO):
        problem = KeyFileError(NOT_PRIVATE, f" has mode {stat.S_IMODE(mode):04o}, readable by "
                               f"others; run `chmod 600 {os.fspath(path)}`")
    if problem is not None:
        os.close(fd)
        raise problem
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(max_bytes + 1)
        except OSError as exc:
            raise KeyFileError(UNREADABLE, f": {exc.strerror}") from None
    if len(raw) > max_bytes:
        raise KeyFileError(NOT_A_KEY, f" is larger than {max_bytes} bytes: not a key file")
    key = raw.decode("utf-8", errors="replace").strip()
    if not key:
        raise KeyFileError(NOT_A_KEY, " is empty")
    if not key.isprintable():
        raise KeyFileError(NOT_A_KEY, " holds more than one line, or control characters")
    if len(key) < min_chars:
        raise KeyFileError(NOT_A_KEY, f" holds fewer than {min_chars} characters")
    return key
