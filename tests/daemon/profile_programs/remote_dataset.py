"""A dataset shard on slow remote storage (a network mount, an object store): bytes arrive at
`bytes_per_second`, and a read blocks until they are there, as a read() on NFS does.

The rate holds on a loaded host: each chunk is due at a time of its own, so a sleep that
overslept is made up by the next (a sleep per chunk alone lost what each overslept, and the
prefetching loop's four loaders fell behind its GPU). Time blocked on a full pipe, when no one
reads, is not banked: storage does not serve faster for having been idle."""

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
        every = CHUNK / bytes_per_second
        due = time.monotonic()
        while True:
            os.write(write_fd, block)  # blocks while the pipe is full
            due = max(due + every, time.monotonic() - every)
            time.sleep(max(0.0, due - time.monotonic()))

    def read(self, nbytes: int) -> bytes:
        """One batch's bytes; blocks on the storage."""
        chunks, done = [], 0
        while done < nbytes:
            chunk = os.read(self._fd, min(CHUNK, nbytes - done))
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)
