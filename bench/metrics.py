"""/metrics render time and series per host at 8 GPUs x 64 GPU processes. Prints figures.

Builds the daemon's state the way mlcostd does (an Analyzer fed real Sample objects, phase
balances for every process) and times one scrape: `Metrics.render()`, which reads the typed
state (daemon.api.metrics_state, as Daemon.metrics_state does) and writes the families and the
exposition. The /v1/now document (daemon.api.document) is timed beside it for comparison.
Two cases: processes without owners (one workload per job label and user; ~210 series), and
every process in its own Kubernetes pod (64 pods, ~500 series: the most workload series a host
of this size makes). Each is timed for the first scrape of a tick (a full render) and for a
further scrape in the same tick (served the bytes the first rendered).

Target: <= 5 ms per render (CPU of the thread that renders; wall time is printed too).
usage: python bench/metrics.py [--gpus 8] [--processes 64] [--renders 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.cost import HostPrice
from daemon.api.document import CostView, now_document
from daemon.api.metrics import Metrics
from daemon.api.metrics_state import MetricsState, metrics_state
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.wire import process_key

GIB = 1 << 30


class BenchDaemon:
    """What the collector reads of a Daemon, built from real samples."""

    def __init__(self, gpus: int, processes: int, owners: bool) -> None:
        price = HostPrice(32.77, gpus, "on-demand", "p4d.24xlarge", "aws", "us-east-1",
                          "bench catalog", "2025-09-01")
        self.analyzer = Analyzer(price)
        self.host = {"hostname": "bench", "instance": {"provider": "aws",
                                                       "type": "p4d.24xlarge"}}
        self.owners = owners
        self.tick = 0
        self.samples: list[Sample] = []
        for tick in range(3):
            self.samples.append(self._sample(tick, gpus, processes))
            self.analyzer.update(self.samples[-1])
        self.phases = {process_key(*p.key): {"compute": {"share": 0.6, "top_stacks": []},
                               "data_wait": {"share": 0.4, "top_stacks": [{"reason": "read"}]}}
                       for p in self.samples[-1].processes}

    def _sample(self, tick: int, gpus: int, processes: int) -> Sample:
        ts = 1_800_000_000.0 + tick
        return Sample(
            ts=ts, tick=tick + 1,
            gpus=tuple(GpuSample(i, f"GPU-{i:08d}-bench", "NVIDIA A100-SXM4-40GB",
                                 utilization=float(30 + i * 8), memory_used_bytes=20 * GIB,
                                 memory_total_bytes=40 * GIB, power_watts=250.0 + i)
                       for i in range(gpus)),
            processes=tuple(ProcessSample(1000 + p, 1_700_000_000.0 + p, 1, f"user{p % 8}",
                                          f"python train_{p % 16}.py --rank {p}",
                                          gpus=(GpuUse(p % gpus, 2 * GIB, 10.0),),
                                          cpu_seconds=float(tick), owner=self._owner(p))
                            for p in range(processes)))

    def _owner(self, p: int) -> dict[str, str]:
        """What the owners work finds for each process: its pod (or nothing)."""
        if not self.owners:
            return {}
        return {"pod": f"trainer-{1000 + p}", "namespace": "ml", "container": "main"}

    def now(self) -> dict[str, Any]:
        snapshot = self.analyzer.snapshot()
        document = now_document(
            host=dict(self.host, nvml_status="ok"), sample=self.samples[-1],
            previous=self.samples[-2], tick=len(self.samples), idle_utilization_pct=5.0,
            cost=CostView.from_snapshot(snapshot, snapshot["recommendations"]),
            phases=self.phases)
        return document

    def metrics_state(self) -> MetricsState:
        return metrics_state(host=self.host, nvml_status="ok", sample=self.samples[-1],
                             idle_utilization_pct=5.0, analyzer=self.analyzer,
                             phases=self.phases, kinds={},
                             recommendations=self.analyzer.recommendations())


def measure(gpus: int, processes: int, renders: int, owners: bool) -> None:
    daemon = BenchDaemon(gpus, processes, owners)
    metrics = Metrics(daemon)
    metrics.render()  # the first scrape of each process: phase time counts from the next one
    for sample in daemon.samples:  # later ticks: every process's phase time grows
        daemon.samples.append(Sample(sample.ts + 10.0, sample.tick + 10, sample.gpus,
                                     sample.processes))
        daemon.analyzer.update(daemon.samples[-1])
        daemon.tick += 1
        break
    text = metrics.render().decode()
    timings, cpu, document_times, cached = [], [], [], []
    for _ in range(renders):
        started = time.thread_time()
        daemon.now()
        document_times.append(time.thread_time() - started)
        daemon.tick += 1  # a new tick: its first scrape renders
        started, started_cpu = time.perf_counter(), time.thread_time()
        text = metrics.render().decode()
        timings.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - started_cpu)
        started_cpu = time.thread_time()
        metrics.render()  # another scrape in the same tick: served the tick's bytes
        cached.append(time.thread_time() - started_cpu)
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    workload = [s for s in series if s.startswith("mlcost_workload_")]
    label = "every process in its own pod" if owners else "no owners (job label, user)"
    print(f"{gpus} GPUs x {processes} processes, {label}:")
    print(f"  first scrape of a tick, render CPU: median {statistics.median(cpu) * 1e3:.2f} ms, "
          f"p95 {sorted(cpu)[int(0.95 * len(cpu))] * 1e3:.2f} ms  target <= 5 ms")
    print(f"  (the /v1/now document, which a scrape no longer builds: median "
          f"{statistics.median(document_times) * 1e3:.2f} ms CPU)")
    print(f"  a further scrape in the same tick (the tick's bytes): median "
          f"{statistics.median(cached) * 1e3:.3f} ms CPU")
    print(f"  render wall: median {statistics.median(timings) * 1e3:.2f} ms (includes waiting "
          f"for a core on a loaded machine)")
    print(f"  series per host: {len(series)} ({len(workload)} workload series), "
          f"{len(text)} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--renders", type=int, default=300)
    args = parser.parse_args()
    print("load average (1, 5, 15 min): " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    for owners in (False, True):
        measure(args.gpus, args.processes, args.renders, owners)
    print("load average (1, 5, 15 min): " + " ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
