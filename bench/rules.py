"""Cost + idle + budget time per tick, and rules evaluation time, at 8 GPUs x 64 processes.

    .venv/bin/python bench/rules.py [--ticks 2000]

Target: Analyzer.update <= 2 ms per tick. Synthetic samples; prints figures, asserts nothing.
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
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from pricing.catalog import Catalog

GIB = 2**30


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
    args = parser.parse_args()
    samples = make_samples(args.ticks)
    catalog = Catalog.load()
    price = HostPrice(32.7726, 8, "on-demand", "p4d.24xlarge", "aws", "us-east-1", "bench", None)
    analyzer = Analyzer(price, catalog, jobs={"job0": r"job0\.py"},
                        budgets={"host": {"daily": 1e9}, "user": {"user1": {"daily": 1e9}}})
    burn_times, tick_times = [], []
    for s in samples:
        t0 = time.perf_counter()
        burn(s, price)
        t1 = time.perf_counter()
        analyzer.update(s)
        t2 = time.perf_counter()
        burn_times.append(t1 - t0)
        tick_times.append(t2 - t1)
    eval_times = []
    for _ in range(5):
        t0 = time.perf_counter()
        found = analyzer.evaluate({})
        eval_times.append(time.perf_counter() - t0)

    rng = random.Random(2)
    rules = [*STAGE_OF_RULE, "dataloader_starvation", "host_sync"]
    recs = [{"id": f"r{i}", "rule": rules[i % len(rules)], "savings_per_month": rng.uniform(0, 9e3),
             "savings_scope": rng.choice([{"gpus": [i % 8]}, {"frees": [i % 8]},
                                          {"whole_host": True},
                                          {"frees": [1, 2, 3], "gpus": [0]}])}
            for i in range(64)]
    combine_times = []
    for _ in range(200):
        t0 = time.perf_counter()
        savings_document(recs, price.per_hour, list(range(8)))
        combine_times.append(time.perf_counter() - t0)

    def fmt(xs: list[float]) -> str:
        xs = sorted(xs)
        return (f"median {statistics.median(xs) * 1e3:.3f} ms, "
                f"p99 {xs[int(0.99 * (len(xs) - 1))] * 1e3:.3f} ms, max {xs[-1] * 1e3:.3f} ms")

    print(f"8 GPUs x 64 processes, {args.ticks} ticks")
    print(f"burn only            : {fmt(burn_times)}")
    print(f"Analyzer.update      : {fmt(tick_times)}   (target <= 2 ms)")
    print(f"Analyzer.evaluate    : {fmt(eval_times)} over {len(analyzer.window)} window samples, "
          f"{len(found)} recommendations (every ~30 s, not per tick)")
    print(f"savings_document     : {fmt(combine_times)} over {len(recs)} recommendations "
          "(each /v1/now)")


if __name__ == "__main__":
    main()
