"""A training loop fed by a multiprocessing Pool, as people write one without torch: the pool's
workers decode each batch (CPU-bound), the loop takes them with imap. The workers are slower
than the loop, so the main thread waits in the pool's iterator. Prints READY when the pool is
working, then runs until killed."""

from __future__ import annotations

import multiprocessing as mp
import sys
import zlib


def decode(seed: int) -> int:
    data = bytes(range(256)) * 4096
    for _ in range(200):  # CPU-bound: far slower than the loop below
        data = zlib.compress(data, 9)[:1 << 20] or data
    return len(data) + seed


def main() -> None:
    with mp.Pool(2) as pool:
        batches = pool.imap(decode, iter(int, 1))  # an endless stream of batches
        print("READY", flush=True)
        for batch in batches:
            sum(range(batch % 1000))  # the "step": short


if __name__ == "__main__":
    sys.exit(main())
