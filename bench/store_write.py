"""The store write part of a tick on its own: `Store.write` and `Store.maintain` (the writer's
housekeeping between ticks: minute rollups, retention, checkpoints), CPU per tick of the thread
that calls them, at 8 GPUs x 64 and x 256 processes.

Writes `--ticks` 1-second ticks of bench/collector.py's synthetic samples (the samples built
beforehand, so only the store is measured) into a fresh store, maintaining after each as the
daemon does, and prints the median over `--runs` of the CPU per tick of each, with the load
average (a loaded machine inflates CPU time too: compare runs taken back to back).

`--aged`: the same on a store past its raw retention (a daemon that has run over 6 h), where
every minute of raw rows written is a minute deleted. The store is built first through the
same writer (`--raw-hours` of ticks and two minutes more: ~2-4 min at 256 processes), and
each run continues a copy of it; the first two minutes after opening it are not counted (the
writer rolls them up from the raw rows, as after any restart).

Not part of the test suite: a figure to read, not an assertion.
usage: python bench/store_write.py [--procs 64,256] [--gpus 8] [--ticks 240] [--runs 3]
                                   [--aged [--raw-hours 6]]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from collector import synthetic_sample  # bench/ is sys.path[0] when run as a script

from daemon.store.writer import Store

SKIPPED = 5  # the first ticks create the processes' rows
SKIPPED_AGED = 125  # after opening a store, its first two minutes are rolled up from raw rows
START = 1_700_000_000.0


def one_run(gpus: int, procs: int, ticks: int, folder: Path,
            aged: Path | None = None) -> tuple[float, float]:
    """CPU seconds per tick of write and of maintain, on a fresh store or a copy of `aged`."""
    path = folder / f"store-{procs}-{time.monotonic_ns()}.db"
    if aged is not None:
        shutil.copyfile(aged, path)
    skipped = SKIPPED if aged is None else SKIPPED_AGED
    write = maintain = 0.0
    with Store(path, max_bytes=1 << 34) as store:
        rng = random.Random(1)
        first = store.last_tick + 1
        samples = [synthetic_sample(t, START + t, gpus, procs, rng)
                   for t in range(first, first + ticks)]
        for i, sample in enumerate(samples):
            began = time.thread_time()
            store.write(sample)
            written = time.thread_time()
            store.maintain(budget_s=0.5)
            if i >= skipped:
                write += written - began
                maintain += time.thread_time() - written
    if aged is not None:
        path.unlink()
    measured = ticks - skipped
    return write / measured, maintain / measured


def build_aged(gpus: int, procs: int, raw_hours: float, path: Path) -> None:
    """A store past its raw retention of `raw_hours`, written tick by tick as the daemon does."""
    rng = random.Random(3)
    with Store(path, raw_retention_s=raw_hours * 3600, max_bytes=1 << 34) as store:
        for t in range(1, round(raw_hours * 3600) + 121):
            store.write(synthetic_sample(t, START + t, gpus, procs, rng))
            store.maintain(budget_s=1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="64,256", help="sizes, comma-separated")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=240,
                        help="ticks a run writes (default: 240, four minute rollups)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--aged", action="store_true",
                        help="also on a store past its raw retention (built first)")
    parser.add_argument("--raw-hours", type=float, default=6.0,
                        help="the aged store's raw retention (default: 6, the daemon's)")
    args = parser.parse_args()
    try:
        sizes = [int(n) for n in args.procs.split(",")]
    except ValueError:
        parser.error(f"--procs {args.procs!r}: give sizes like 64,256")
    skipped = SKIPPED_AGED if args.aged else SKIPPED
    if args.ticks <= skipped + 60:
        parser.error(f"--ticks {args.ticks}: give more than {skipped + 60} (a minute rollup)")
    with tempfile.TemporaryDirectory(prefix="mlcost-store-write-") as folder:
        for procs in sizes:
            stores: list[tuple[str, Path | None]] = [("fresh store", None)]
            if args.aged:
                aged = Path(folder) / f"aged-{procs}.db"
                build_aged(args.gpus, procs, args.raw_hours, aged)
                stores.append(("store past its raw retention", aged))
            for store, source in stores:
                runs = [one_run(args.gpus, procs, args.ticks, Path(folder), source)
                        for _ in range(args.runs)]
                write = statistics.median(w for w, _ in runs) * 1000
                maintain = statistics.median(m for _, m in runs) * 1000
                print(f"{args.gpus} x {procs}, {store}: write {write:.3f} ms/tick, maintain "
                      f"{maintain:.3f} ms/tick, together {write + maintain:.3f} (median of "
                      f"{args.runs}; load average {os.getloadavg()[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
