"""How the store tells SQLite's failures apart, and the error it raises when it cannot open.

A failure that says "not now" (busy, locked, disk full, I/O error: TRANSIENT) keeps the sample
and is retried; a file that is not a database or is malformed (`is_corruption`) is moved aside
at open; anything else is this sample's or this fact's own and drops it (daemon.store.writer).
`damaged_store` is the one line every command says of a damaged store file, and what to do.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sqlite3
import stat
import struct
import sys

# Primary SQLite result codes (extended code & 0xff).
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
SQLITE_FULL = 13
SQLITE_PERM = 3
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CANTOPEN = 14
# What SQLite says when the kernel refuses a write to a file it holds open: EPERM of an
# immutable file reads as "disk I/O error" (SQLITE_IOERR_WRITE), like a failing disk.
REFUSED_WRITE = {SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_CANTOPEN}
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


# lsattr's flags (linux/fs.h): FS_IOC_GETFLAGS is _IOR('f', 1, long)
_FS_IOC_GETFLAGS = (2 << 30) | (struct.calcsize("l") << 16) | (ord("f") << 8) | 1
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20


def file_attributes(path: str) -> int | None:
    """The file's attributes as `lsattr` reads them (FS_IOC_GETFLAGS); None when there is no
    file, it is a link, or its file system keeps none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        flags = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))
        return int.from_bytes(flags[:4], sys.byteorder)  # (the kernel writes an int)
    except OSError:
        return None
    finally:
        os.close(fd)


def unwritable_cause(path: str) -> str | None:
    """Why the store at `path` cannot be written, where a cheap look finds it: its file system
    mounted read-only, the immutable or append-only attribute on the store, its -wal or -shm
    (`chattr +i`), or a file or its folder that mlcostd's user may not write (a mode or owner
    changed). None when none of these holds. A few stat calls: for a failed write, not each
    tick (probe 155 L2: "disk I/O error" was all an immutable store said)."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return (f"the file system holding {folder} is mounted read-only now (remounted: "
                    "after disk errors the kernel does this, see `dmesg`); remount it "
                    "read-write")
    except OSError:
        pass
    files = [name for name in (path, f"{path}-wal", f"{path}-shm") if os.path.lexists(name)]
    attributes = {name: file_attributes(name) or 0 for name in files}
    for flag, letter, what in ((FS_IMMUTABLE_FL, "i", "immutable"),
                               (FS_APPEND_FL, "a", "append-only")):
        marked = [name for name in files if attributes[name] & flag]
        if marked:
            one = len(marked) == 1
            return (f"{' and '.join(marked)} {'is' if one else 'are'} {what} (`lsattr` shows "
                    f"{letter}; not even root can write {'it' if one else 'them'}): run "
                    f"`chattr -{letter} {' '.join(shlex.quote(name) for name in marked)}`")
    for name in [*files, folder]:
        if os.path.lexists(name) and not os.access(name, os.W_OK):  # (gone is said elsewhere)
            try:
                info = os.stat(name)
                said = f" (mode {stat.S_IMODE(info.st_mode):o}, owner uid {info.st_uid})"
            except OSError:
                said = ""
            return (f"mlcostd's user (uid {os.geteuid()}) may not write {name}{said}; give it "
                    "back write permission (chmod, chown)")
    return None


def refused_write_advice(path: str) -> str:
    """What to look at when a write to the store fails with a refusal or an I/O error: the
    cause found (unwritable_cause), else the likely ones to check."""
    cause = unwritable_cause(path)
    if cause is not None:
        return cause
    return ("if it lasts, check the store's and its folder's permissions and attributes "
            "(`ls -l`, `lsattr`: chmod, chattr +i), whether its file system was remounted "
            "read-only (`findmnt`), and the kernel log (`dmesg`) for a failing disk")


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
