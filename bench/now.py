"""What one /v1/now costs at 8 GPUs x N processes, on the same inputs each run. Prints figures.

A real Daemon (store, analyzer, attribution's live phase balances, kinds, the tick path) whose
sources are scripted (tests/daemon/scripted.py's way): N processes over 8 GPUs, every process
in a low-utilization window with a /proc stack sample now and then (8 a second over all
processes, as `[attribution] stacks = false` samples them), a kind each. Ticks run back to back;
after each, as a connected client asks: `Daemon.now()` (the document; bench/collector.py counts
this as its API part), the response body /v1/now sends (`Daemon.now_body()` where the daemon
has one, else json.dumps of the document), and a second client's /v1/now in the same tick.
CPU time of this thread, medians over the measured ticks (the first 10 are skipped).
`--busy`: every process's GPU busy the whole time instead (no window, no stack sampled: each
balance all compute), the case most processes are in most of the time.
usage: python bench/now.py [--procs 64,256] [--ticks 40] [--busy] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from daemon import config as config_module
from daemon.analysis.cost import HostPrice
from daemon.runtime.attribution import Attribution
from daemon.runtime.daemon import Daemon
from daemon.runtime.price_host import build_analyzer
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from daemon.wire import process_key

GPUS = 8
PRICE = HostPrice(per_hour=32.77, gpu_count=GPUS, lifecycle="on-demand",
                  instance_type="p4d.24xlarge", provider="aws", region="us-east-1",
                  source="bench price", as_of=None)
KIND = {"kind": "training", "kind_confidence": 0.33,
        "kind_evidence": ["steady GPU use of its own and no port it serves: a job (training "
                          "unless its runtime, frames or name say inference)"],
        "serves": False, "listening_ports": [], "gpu_use": "steady", "kind_source": "observed",
        "connections_caught": 0, "connections_over_s": None, "inference": None}
REASON = ("from /proc, no stacks: waiting (hrtimer_nanosleep), no CPU and no I/O, with the GPU "
          "idle")


def sample(tick: int, t0: float, processes: int, busy: bool = False) -> Sample:
    gpus = tuple(GpuSample(i, f"GPU-{i:08d}-bench", "NVIDIA A100-SXM4-40GB",
                           utilization=float(20 + (tick + i) % 40),
                           memory_used_bytes=20 << 30, memory_total_bytes=40 << 30,
                           power_watts=250.0 + i, temperature_c=50, sm_clock_mhz=1410,
                           memory_clock_mhz=1215)
                 for i in range(GPUS))
    procs = tuple(ProcessSample(
        20_000 + p, t0 - 5 + p / 1000, 1, "root", f"python train.py --rank {p}",
        gpus=(GpuUse(p % GPUS, 2 << 30, 90.0 if busy else 30.0 if (tick + p) % 3 else 0.0),),
        cpu_seconds=0.01 * tick * (p % 5), rss_bytes=(12 << 20) + p, read_bytes=4096 * tick,
        write_bytes=0, iowait_seconds=0.0, state="S", threads=1)
        for p in range(processes))
    return Sample(ts=t0 + tick, tick=tick, gpus=gpus, processes=procs)


def scripted_daemon(folder: Path, processes: int, busy: bool = False) -> tuple[Daemon, Any]:
    config = config_module.from_dict({"daemon": {"db": str(folder / "mlcost.db")},
                                      "attribution": {"stacks": False}}, where="bench")
    daemon = Daemon(config)
    daemon.store = Store(str(daemon.db))
    daemon.host = {"hostname": "bench", "interval_s": 1.0, "price": PRICE.as_dict(),
                   "idle_utilization_pct": 5.0}
    daemon.analyzer = build_analyzer(config, PRICE, None)
    daemon.attribution = Attribution(config.attribution, daemon.store, interval_s=1.0)
    t0 = time.time()
    ticks = iter(range(1, 1 << 30))
    daemon.collect = lambda: sample(  # type: ignore[method-assign]
        next(ticks), t0, processes, busy)
    return daemon, t0


def feed(daemon: Daemon, processes: int, tick: int, busy: bool = False) -> None:
    """What attribution's /proc sampling adds in a tick: a window per process (once), and 8
    classified samples a second over all of them (round robin); `busy`: none (a kind each)."""
    assert daemon.attribution is not None and daemon.last_sample is not None
    live, ts = daemon.attribution.phases, daemon.last_sample.ts
    procs = daemon.last_sample.processes
    if tick == 1:
        for proc in procs if not busy else ():
            live.window_opened(proc.key, ts)
        daemon.kinds._documents = {process_key(*p.key): dict(KIND) for p in procs}
    if busy:
        return
    for n in range(8):
        proc = procs[(tick * 8 + n) % processes]
        live.add_stack(proc.key, ts, proc.pid, "82ad380341d6863cc38d062881b8882e",
                       [("kernel wait hrtimer_nanosleep", "<proc>", 0)], "idle", 0.0, REASON)


def run(processes: int, ticks: int, profile: cProfile.Profile | None,
        busy: bool = False) -> dict[str, float]:
    build, body, again = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        daemon, _ = scripted_daemon(Path(folder), processes, busy)
        now_body = getattr(daemon, "now_body", None)
        for tick in range(1, ticks + 1):
            daemon.tick_now()
            feed(daemon, processes, tick, busy)
            if profile is not None and tick > 10:
                profile.enable()
            began = time.thread_time()
            document = daemon.now()
            built = time.thread_time()
            sent = now_body() if now_body is not None else json.dumps(document).encode()
            encoded = time.thread_time()
            second = now_body() if now_body is not None else json.dumps(daemon.now()).encode()
            ended = time.thread_time()
            if profile is not None:
                profile.disable()
            assert second == sent
            if tick > 10:
                build.append(built - began)
                body.append(encoded - built)
                again.append(ended - encoded)
        assert daemon.store is not None
        daemon.store.close()
    return {"now_ms": statistics.median(build) * 1000,
            "body_ms": statistics.median(body) * 1000,
            "second_client_ms": statistics.median(again) * 1000,
            "bytes": float(len(sent))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", default="64,256", help="process counts, comma-separated")
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--profile", help="write a cProfile of the measured calls here")
    parser.add_argument("--busy", action="store_true",
                        help="every GPU busy: no window, no stack sampled")
    args = parser.parse_args()
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    print(f"load average {os.getloadavg()[0]:.1f}")
    for processes in (int(n) for n in args.procs.split(",")):
        row = run(processes, args.ticks, profile, args.busy)
        print(f"{GPUS} x {processes}: Daemon.now() {row['now_ms']:.2f} ms (the bench's API "
              f"part), its body {row['body_ms']:.2f} ms ({row['bytes'] / 1024:.0f} KiB), "
              f"a second client in the same tick {row['second_client_ms']:.2f} ms; "
              f"first client's whole /v1/now {row['now_ms'] + row['body_ms']:.2f} ms")
    if profile is not None:
        profile.dump_stats(args.profile)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
