"""How the store tells SQLite's failures apart, and the error it raises when it cannot open.

A failure that says "not now" (busy, locked, disk full, I/O error: TRANSIENT) keeps the sample
and is retried; a file that is not a database or is malformed (`is_corruption`) is moved aside
at open; anything else is this sample's or this fact's own and drops it (daemon.store.writer).
`damaged_store` is the one line every command says of a damaged store file, and what to do.
"""

from __future__ import annotations

import os
import shlex
import sqlite3

# Primary SQLite result codes (extended code & 0xff).
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
SQLITE_FULL = 13
# Errors that say "not now" rather than "never": keep the sample and retry.
TRANSIENT = {
    5,  # BUSY
    6,  # LOCKED
    8,  # READONLY (e.g. remounted read-only)
    10,  # IOERR
    13,  # FULL
    14,  # CANTOPEN
    15,  # PROTOCOL
}


class StoreError(Exception):
    """The store cannot be opened (permission, newer schema, ...). Says what to do."""


def error_code(error: BaseException) -> int | None:
    """SQLite's primary result code of `error`; None when it carries none."""
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def free_bytes(path: str) -> int | None:
    """Bytes free to this user on the filesystem holding `path` (None: cannot tell)."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def is_corruption(error: sqlite3.DatabaseError) -> bool:
    """The file is not a database or is malformed (not a passing condition)."""
    code = error_code(error)
    if code is not None:
        return code in (SQLITE_CORRUPT, SQLITE_NOTADB)
    text = str(error)
    return "not a database" in text or "malformed" in text


def is_damaged(error: sqlite3.DatabaseError) -> bool:
    """SQLite's word for a database file whose pages are damaged ("database disk image is
    malformed"). Not "file is not a database": a file handed to a reader may be any file."""
    code = error_code(error)
    return code == SQLITE_CORRUPT if code is not None else "malformed" in str(error)


def store_damage(path: object, error: BaseException | str) -> str:
    """"PATH cannot be read: the file is damaged (SQLite: its words)"; `error` is SQLite's
    error, or a quick_check's answer."""
    said = " ".join(str(error).split())
    if isinstance(error, BaseException) and error_code(error) == SQLITE_CORRUPT and (
            "malformed" not in said):  # an ATTACH says "unable to open database: URI"
        said = "database disk image is malformed"
    return f"{path} cannot be read: the file is damaged (SQLite: {said[:160]})"


def damaged_store_advice(path: object) -> str:
    """What to do with a damaged store file: salvage it, and where a daemon records since."""
    return (f"salvage what it holds with `sqlite3 {shlex.quote(str(path))} .recover > "
            "dump.sql`; a running mlcostd that finds its store damaged moves it aside to "
            "<db>.corrupt-<time> and records on into a new store at <db>: pass --db <db> "
            "(the new one) for what came after")


def damaged_store(path: object, error: BaseException | str) -> str:
    """The one line every command says of a damaged store file: what SQLite said of it and
    what to do (`store_damage`, `damaged_store_advice`)."""
    return f"{store_damage(path, error)}; {damaged_store_advice(path)}"
