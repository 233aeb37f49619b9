"""Samples random rows of a feature table through mmap; the table is far larger than what stays
cached (we evict it each epoch, as memory pressure would), so most rows fault in from disk."""

import mmap
import os
import random
import signal
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
ROW = 4096


def make_table(path: str, mib: int) -> None:
    with open(path, "wb") as fh:
        for _ in range(mib):
            fh.write(os.urandom(1 << 20))
        fh.flush()
        os.fsync(fh.fileno())


def gather_rows(table: mmap.mmap, rows: list[int]) -> int:
    total = 0
    for r in rows:
        total += table[r * ROW]
    return total


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    folder = tempfile.mkdtemp(prefix="features-", dir=os.environ.get("MLCOST_SIM_DIR"))
    path = os.path.join(folder, "table.bin")
    try:
        make_table(path, 256)
        fd = os.open(path, os.O_RDONLY)
        table = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        table.madvise(mmap.MADV_RANDOM)
        n_rows = len(table) // ROW
        rng = random.Random(1)
        with Device(gpu_index=GPU) as gpu:
            gpu.alloc(12 << 30)
            while True:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                table.madvise(mmap.MADV_DONTNEED)
                for _ in range(4):
                    gather_rows(table, [rng.randrange(n_rows) for _ in range(6000)])
                    gpu.kernel(0.04, sm=0.8)
    finally:
        os.unlink(path)
        os.rmdir(folder)


if __name__ == "__main__":
    main()
