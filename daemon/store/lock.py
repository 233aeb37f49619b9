"""One writer per store: a second mlcostd on the same database refuses to start."""

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
        fd = open_private(self.path)  # 0600 whatever the umask
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = self.path.read_text().strip() or "another process"
            raise StoreLocked(
                f"another mlcostd (pid {owner}) is already recording into {self.path.parent}; "
                f"stop it or pass a different --db") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
