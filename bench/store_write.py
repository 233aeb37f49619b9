"""The store write part of a tick on its own: `Store.write` and `Store.maintain` (the writer's
housekeeping between ticks: minute rollups, retention, checkpoints), CPU per tick of the thread
that calls them, at 8 GPUs x 64 and x 256 processes.

Writes `--ticks` 1-second ticks of bench/collector.py's synthetic samples (the samples built
beforehand, so only the store is measured) into a fresh store, maintaining after each as the
daemon does, and prints the median over `--runs` of the CPU per tick of each, with the load
average (a loaded machine inflates CPU time too: compare runs taken back to back).

Not part of the test suite: a figure to read, not an assertion.
usage: python bench/store_write.py [--procs 64,256] [--gpus 8] [--ticks 240] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from collector import synthetic_sample  # bench/ is sys.path[0] when run as a script

from daemon.store.writer import Store

SKIPPED = 5  # the first ticks create the processes' rows


def one_run(gpus: int, procs: int, ticks: int, folder: Path) -> tuple[float, float]:
    """CPU seconds per tick of write and of maintain."""
    rng = random.Random(1)
    start = 1_700_000_000.0
    samples = [synthetic_sample(t, start + t, gpus, procs, rng) for t in range(1, ticks + 1)]
    write = maintain = 0.0
    with Store(folder / f"store-{procs}-{time.monotonic_ns()}.db") as store:
        for i, sample in enumerate(samples):
            began = time.thread_time()
            store.write(sample)
            written = time.thread_time()
            store.maintain(budget_s=0.5)
            if i >= SKIPPED:
                write += written - began
                maintain += time.thread_time() - written
    measured = ticks - SKIPPED
    return write / measured, maintain / measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="64,256", help="sizes, comma-separated")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=240,
                        help="ticks a run writes (default: 240, four minute rollups)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    try:
        sizes = [int(n) for n in args.procs.split(",")]
    except ValueError:
        parser.error(f"--procs {args.procs!r}: give sizes like 64,256")
    if args.ticks <= SKIPPED + 60:
        parser.error(f"--ticks {args.ticks}: give more than {SKIPPED + 60} (a minute rollup)")
    with tempfile.TemporaryDirectory(prefix="mlcost-store-write-") as folder:
        for procs in sizes:
            runs = [one_run(args.gpus, procs, args.ticks, Path(folder)) for _ in range(args.runs)]
            write = statistics.median(w for w, _ in runs) * 1000
            maintain = statistics.median(m for _, m in runs) * 1000
            print(f"{args.gpus} x {procs}: write {write:.3f} ms/tick, maintain {maintain:.3f} "
                  f"ms/tick, together {write + maintain:.3f} (median of {args.runs}; load "
                  f"average {os.getloadavg()[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
