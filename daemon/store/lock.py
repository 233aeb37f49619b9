"""One writer per store: a second mlcostd on the same database refuses to start.

The `.lock` file beside the database holds the writer's pid, for the refusal's message; it is
removed on a clean stop. The guarantee itself is the Store's flock on the database file."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from daemon.store.files import open_private


class StoreLocked(RuntimeError):
    """Another mlcostd holds the store's writer lock; the message says which and what to do."""


class WriterLock:
    def __init__(self, db: Path) -> None:
        self.path = db.with_name(db.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid into it. Raises StoreLocked when another mlcostd
        holds it, daemon.store.files.RefusedFile for a link or a file that is not ours at the
        lock's path, OSError otherwise."""
        while True:
            # 0600 whatever the umask; a planted link or someone else's file is refused
            # (RefusedFile), never written into
            fd = open_private(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:  # the pid, read from the file we checked, not through the path again
                    owner = os.pread(fd, 32, 0).decode(errors="replace").strip()
                except OSError:
                    owner = ""
                os.close(fd)
                owner = owner or "another process"
                raise StoreLocked(
                    f"another mlcostd (pid {owner}) holds the writer lock {self.path}; stop it "
                    f"or pass a different --db") from None
            try:
                same = os.lstat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # a stopping writer removed the file we opened: take the new one
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
