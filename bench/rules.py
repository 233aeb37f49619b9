"""Cost + idle + budget time per tick, and rules evaluation time, at 8 GPUs x 64 processes.

    .venv/bin/python bench/rules.py [--ticks 2000] [--procs 64]

Target: Analyzer.update <= 2 ms per tick. Synthetic samples; prints figures, asserts nothing.
CPU time of this thread (time.thread_time: a loaded host does not move it much). The rules'
evaluation runs every [cost].evaluate_every (30 s by default) over the whole window, so its
cost is also printed spread over the ticks between two evaluations: what a daemon that has run
for the window's length pays a tick, which bench/collector.py's short runs (a window of a few
ticks) do not see.
Also the combining of savings that every /v1/now document does (savings_document) over 64
recommendations of every stage.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.rules.combine import STAGE_OF_RULE, savings_document
from daemon.config.sections import CostConfig
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from pricing.catalog import Catalog

GIB = 2**30
EVALUATE_EVERY_S = CostConfig().evaluate_every  # the default: one evaluation per 30 ticks of 1 s


def make_samples(n: int, gpus: int = 8, procs: int = 64, seed: int = 1) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for t in range(n):
        gs = tuple(GpuSample(g, f"GPU-{g}", "A100-SXM4-40GB", "ok", rng.uniform(0, 100),
                             rng.uniform(0, 100), rng.randint(1, 40) * GIB, 40 * GIB)
                   for g in range(gpus))
        ps = []
        for p in range(procs):
            # half hold a GPU (some two), half are DataLoader workers
            uses = () if p % 2 else tuple(GpuUse((p // 2 + k) % gpus, GIB, rng.uniform(0, 50))
                                          for k in range(1 + (p % 4 == 0)))
            ps.append(ProcessSample(1000 + p, 1.0e9 + p, 1000 if p % 2 else 1, f"user{p % 5}",
                                    f"python job{p % 7}.py", uses, cpu_seconds=t * 0.5,
                                    read_bytes=t * 10**6, write_bytes=t * 10**5,
                                    iowait_seconds=t * 0.01))
        out.append(Sample(1.7e9 + t, t, gs, tuple(ps)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=2000)
    parser.add_argument("--procs", type=int, default=64,
                        help="processes on the 8 GPUs (half of them hold a GPU; default 64)")
    args = parser.parse_args()
    samples = make_samples(args.ticks, procs=args.procs)
    catalog = Catalog.load()
    price = HostPrice(32.7726, 8, "on-demand", "p4d.24xlarge", "aws", "us-east-1", "bench", None)
    analyzer = Analyzer(price, catalog, jobs={"job0": r"job0\.py"},
                        budgets={"host": {"daily": 1e9}, "user": {"user1": {"daily": 1e9}}})
    burn_times, tick_times = [], []
    for s in samples:
        t0 = time.thread_time()
        burn(s, price)
        t1 = time.thread_time()
        analyzer.update(s)
        t2 = time.thread_time()
        burn_times.append(t1 - t0)
        tick_times.append(t2 - t1)
    eval_times = []
    for _ in range(5):
        t0 = time.thread_time()
        found = analyzer.evaluate({})
        eval_times.append(time.thread_time() - t0)

    rng = random.Random(2)
    rules = [*STAGE_OF_RULE, "dataloader_starvation", "host_sync"]
    recs = [{"id": f"r{i}", "rule": rules[i % len(rules)], "savings_per_month": rng.uniform(0, 9e3),
             "savings_scope": rng.choice([{"gpus": [i % 8]}, {"frees": [i % 8]},
                                          {"whole_host": True},
                                          {"frees": [1, 2, 3], "gpus": [0]}])}
            for i in range(64)]
    combine_times = []
    for _ in range(200):
        t0 = time.thread_time()
        savings_document(recs, price.per_hour, list(range(8)))
        combine_times.append(time.thread_time() - t0)

    def fmt(xs: list[float]) -> str:
        xs = sorted(xs)
        return (f"median {statistics.median(xs) * 1e3:.3f} ms, "
                f"p99 {xs[int(0.99 * (len(xs) - 1))] * 1e3:.3f} ms, max {xs[-1] * 1e3:.3f} ms")

    print(f"8 GPUs x {args.procs} processes, {args.ticks} ticks")
    print(f"burn only            : {fmt(burn_times)}")
    print(f"Analyzer.update      : {fmt(tick_times)}   (target <= 2 ms)")
    print(f"Analyzer.evaluate    : {fmt(eval_times)} over {len(analyzer.window)} window samples, "
          f"{len(found)} recommendations (every {EVALUATE_EVERY_S:.0f} s, not per tick: "
          f"{statistics.median(eval_times) * 1e3 / EVALUATE_EVERY_S:.2f} ms a 1 s tick spread)")
    print(f"savings_document     : {fmt(combine_times)} over {len(recs)} recommendations "
          "(each /v1/now)")


if __name__ == "__main__":
    main()
