"""The store's files are private whatever the umask: its folder 0700 when mlcostd creates it,
the database, its WAL and SHM and the writer lock 0600.

The store holds every command line, stack and cost of the host, and mlcostd runs as root, so a
0644 database in a 0755 folder (SQLite's default under the usual umask 022) lets any local user
read all of it. SQLite creates `-wal` and `-shm` with the mode of the database file, so a
database created 0600 keeps them 0600 too. A folder that already exists is used as it is (a
`--db` in a shared folder must not change that folder); the files inside are ours and are
narrowed to 0600 when they are wider.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600
DB_SUFFIXES = ("", "-wal", "-shm")  # the database and the files SQLite keeps beside it


def private_folder(folder: Path) -> None:
    """Create `folder` 0700 (the folders above it as the umask says) unless it exists; an
    existing folder is left as it is. Raises OSError when it cannot be created."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, PRIVATE_FOLDER)
    except FileExistsError:
        return
    os.chmod(folder, PRIVATE_FOLDER)  # just made by us: 0700 even under a umask like 0777


def open_private(path: str | os.PathLike[str], flags: int = os.O_RDWR) -> int:
    """Open (creating if missing) a file of the store's with mode 0600; an existing file wider
    than 0600 is narrowed. Returns the descriptor. Raises OSError."""
    fd = os.open(path, flags | os.O_CREAT, PRIVATE_FILE)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & ~PRIVATE_FILE:
            os.fchmod(fd, mode & PRIVATE_FILE)
    except OSError:
        os.close(fd)
        raise
    return fd


def private_database(path: str | os.PathLike[str]) -> None:
    """Before SQLite opens `path`: the database file exists with mode 0600 (SQLite then creates
    its WAL and SHM 0600 too), and a WAL or SHM left wider by an older mlcostd is narrowed.
    Raises OSError."""
    if os.fspath(path) in ("", ":memory:"):
        return  # no file
    os.close(open_private(path))
    for suffix in DB_SUFFIXES[1:]:
        extra = os.fspath(path) + suffix
        try:
            mode = stat.S_IMODE(os.stat(extra).st_mode)
        except FileNotFoundError:
            continue
        if mode & ~PRIVATE_FILE:
            os.chmod(extra, mode & PRIVATE_FILE)
