"""Memory the rules' 30-minute window holds, at 8 GPUs x 64 and x 256 processes.

Fills an Analyzer's window (one tick per 5 s for 30 min: 361 ticks) with the collector bench's
synthetic samples and prints, by tracemalloc, what it holds: the compact ticks it keeps
(daemon.analysis.window_ticks) beside the whole Samples and Burns it kept before, and the most a
rules round over that full window allocates above what it started with (freed when it ends). The
synthetic host changes every counter and SM share each tick and builds a fresh command string per
process per tick, so this is the costly case; a real host's steady processes share more.

usage: python bench/window_memory.py [--procs 64,256] [--gpus 8]
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tracemalloc
from collections.abc import Callable, Iterator

from collector import synthetic_sample  # bench/ is sys.path[0] when run as a script

from daemon.analysis.analyzer import WINDOW_STEP_S, Analyzer
from daemon.analysis.cost import HostPrice, burn, host_price
from daemon.analysis.window_ticks import WINDOW_S
from daemon.sources.sample import Sample
from pricing.catalog import Catalog
from pricing.detect import Instance


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def window_bytes(price: HostPrice, catalog: Catalog, samples: Callable[[], Iterator[Sample]]
                 ) -> tuple[int, int, int]:
    """Bytes the window holds: the Analyzer's compact ticks (the samples dropped after each
    tick, as the daemon drops them), the peak of a rules round over it above its start, and the
    whole (Sample, Burn) pairs it kept before."""
    analyzer = Analyzer(price, catalog)
    for s in samples():
        analyzer.update(s)
    full = traced()
    analyzer.evaluate({})  # (a first round: what stays between rounds is the window's)
    start = traced()
    tracemalloc.reset_peak()
    analyzer.evaluate({})
    round_peak = tracemalloc.get_traced_memory()[1] - start
    analyzer.window.clear()
    now = full - traced()
    empty = traced()
    pairs = [(s, burn(s, price)) for s in samples()]
    before = traced() - empty
    del pairs
    return now, round_peak, before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", default="64,256", metavar="N,N,...")
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    try:
        sizes = [int(n) for n in args.procs.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--procs {args.procs!r}: give process counts like 64,256")
    catalog = Catalog.load()
    price = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", None, "bench"), catalog)
    ticks = int(WINDOW_S / WINDOW_STEP_S) + 1
    print(f"{'GPUs x procs':>13} | {'ticks':>5} | {'compact window MB':>17} | "
          f"{'rules round peak MB':>19} | {'whole Samples+Burns MB':>22} | {'kB/tick now':>11} | "
          f"{'kB/tick before':>14}")
    for processes in sizes:
        start = 1_800_000_000.0

        def samples(processes: int = processes, start: float = start) -> Iterator[Sample]:
            return (synthetic_sample(t, start + t * WINDOW_STEP_S, args.gpus, processes,
                                     random.Random(t)) for t in range(ticks))

        tracemalloc.start()
        now, round_peak, before = window_bytes(price, catalog, samples)
        tracemalloc.stop()
        print(f"{args.gpus:>5} x {processes:<5} | {ticks:>5} | {now / 1e6:>17.1f} | "
              f"{round_peak / 1e6:>19.1f} | {before / 1e6:>22.1f} | {now / ticks / 1e3:>11.1f} | "
              f"{before / ticks / 1e3:>14.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
