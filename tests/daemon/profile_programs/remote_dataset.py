"""A dataset shard on slow remote storage (a network mount, an object store): bytes arrive at
`bytes_per_second`, and a read blocks until they are there, as a read() on NFS does."""

from __future__ import annotations

import os
import threading
import time

CHUNK = 64 << 10


class RemoteShard:
    def __init__(self, bytes_per_second: float) -> None:
        self._fd, write_fd = os.pipe()
        threading.Thread(target=self._serve, args=(write_fd, bytes_per_second),
                         name="storage", daemon=True).start()

    @staticmethod
    def _serve(write_fd: int, bytes_per_second: float) -> None:
        block = bytes(range(256)) * (CHUNK // 256)
        while True:
            os.write(write_fd, block)
            time.sleep(CHUNK / bytes_per_second)

    def read(self, nbytes: int) -> bytes:
        """One batch's bytes; blocks on the storage."""
        chunks, done = [], 0
        while done < nbytes:
            chunk = os.read(self._fd, min(CHUNK, nbytes - done))
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)
