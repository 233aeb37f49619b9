"""One writer per store: a second mlcostd on the same database refuses to start. One profile per
--out folder: a second `mlcostd profile` there refuses to start (commands/profile.py).

A lock file holds its owner's pid, for the refusal's message; it is removed on a clean stop.
The writer's guarantee itself is the Store's flock on the database file; a profile's is the
flock on its lock file. flock goes with the descriptor: a holder killed with SIGKILL lets go
when the kernel closes its files."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from daemon.store.files import open_private


class LockHeld(RuntimeError):
    """Another process holds a PidLock: `owner` is the pid it wrote ("another process" before
    it wrote one)."""

    def __init__(self, path: Path, owner: str) -> None:
        super().__init__(f"pid {owner} holds {path}")
        self.path = path
        self.owner = owner


class StoreLocked(RuntimeError):
    """Another mlcostd holds the store's writer lock; the message says which and what to do."""


class PidLock:
    """An exclusive flock on the file `path`, which holds the holder's pid."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        # Whether acquire found the file left with a pid in it: its holder did not stop cleanly
        # (release removes it); a kill, a lost host. None: not acquired yet.
        self.found_left: bool | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid into it. Raises LockHeld when another process holds
        it, daemon.store.files.RefusedFile for a link or a file that is not ours at the
        lock's path, OSError otherwise."""
        while True:
            # 0600 whatever the umask, O_NOFOLLOW, O_CLOEXEC (a command started meanwhile
            # holds no copy); a planted link or someone else's file is refused (RefusedFile),
            # never written into
            fd = open_private(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:  # the pid, read from the file we checked, not through the path again
                    owner = os.pread(fd, 32, 0).decode(errors="replace").strip()
                except OSError:
                    owner = ""
                os.close(fd)
                raise LockHeld(self.path, owner if owner.isdigit() else "another process"
                               ) from None
            try:
                same = os.lstat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # a stopping holder removed the file we opened: take the new one
        try:
            self.found_left = os.fstat(fd).st_size > 0
        except OSError:
            self.found_left = None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file (still holding it, so no one takes a file about to go), then
        let go."""
        if self._fd is not None:
            try:
                if os.lstat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    os.unlink(self.path)
            except OSError:
                pass  # already gone, or a read-only folder now: the next start takes it over
            os.close(self._fd)
            self._fd = None


class WriterLock(PidLock):
    """The store's: `.lock` beside the database."""

    def __init__(self, db: Path) -> None:
        super().__init__(db.with_name(db.name + ".lock"))

    def acquire(self) -> None:
        """PidLock's; StoreLocked when another mlcostd holds it."""
        try:
            super().acquire()
        except LockHeld as held:
            raise StoreLocked(
                f"another mlcostd (pid {held.owner}) holds the writer lock {self.path}; stop "
                f"it or pass a different --db") from None
