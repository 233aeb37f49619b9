"""A secret kept in a file of its own: a cloud API key (`prices --gcp-key-file`), mlcostd's API
token (`--token-file`). One line of a regular file of at most `max_bytes` (pricing.small_file);
a second line or a control character is no key (it would break the request it goes in). The
errors say what is wrong with the file, never what it holds.
"""

from __future__ import annotations

import os

from pricing.small_file import SmallFileError, read_small_file

NOT_A_KEY = "not a key"  # a SmallFileError kind: the file is there, but holds no one-line key


def read_key_file(path: str | os.PathLike[str], *, max_bytes: int = 4096, min_chars: int = 1,
                  private: bool = False) -> str:
    """The one line in `path`, stripped. `private`: refuse a file its group or others may
    read. SmallFileError (its `kind` one of pricing.small_file's or NOT_A_KEY) otherwise."""
    return key_from_bytes(read_small_file(path, max_bytes, private=private), min_chars)


def key_from_bytes(data: bytes, min_chars: int = 1) -> str:
    """The one line in `data` (a key file's bytes), stripped; SmallFileError(NOT_A_KEY)
    otherwise. For a reader that opened the file its own way (mlcostd's token file)."""
    key = data.decode("utf-8", errors="replace").strip()
    if not key:
        raise SmallFileError(NOT_A_KEY, " is empty")
    if not key.isprintable():
        raise SmallFileError(NOT_A_KEY, " holds more than one line, or control characters")
    if len(key) < min_chars:
        raise SmallFileError(NOT_A_KEY, f" holds fewer than {min_chars} characters")
    return key
