"""The recorder's cost at 8 GPUs x 64 GPU processes on the simulated NVML. Prints figures.

1. CPU per tick: runs mlcostd's Daemon against a simulated host with 64 real workload
   processes (8 per GPU) and measures
   - the tick itself (collect + write + analyzer + windows), CPU of the daemon's main thread;
   - the whole daemon process per tick (adds the NVML reader threads, process discovery,
     store maintenance). The simulated NVML's own cost is part of that figure; a real driver
     costs differently.
2. Bytes on disk per GPU-sample and per process-sample (dbstat), from 3600 ticks written.
3. Time to read 24 h of downsampled history for one GPU, from a store holding 24 h of ticks.
4. Write + maintain per tick once the store is larger than the writer's page cache, and the
   SQLite memory the writer then holds (`--page-cache-kib` compares cache sizes).

Targets: <= 5 ms CPU per tick, <= 64 bytes per GPU-sample, <= 50 ms for the 24 h read.
usage: python bench/collector.py [--ticks 60] [--gpus 8] [--processes 64] [--page-cache-kib N]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from daemon import config as config_module
from daemon.runtime.daemon import Daemon
from daemon.sources.host import read_host_usage
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import PAGE_CACHE_KIB, Store

WORKLOAD = (
    "import time\nfrom daemon.sim.device import Device\n"
    "dev = Device(gpu_index={gpu})\ndev.alloc(2 << 30)\n"
    "while True:\n    dev.kernel(0.05, sm=0.6)\n    time.sleep(0.05)\n"
)


def scenario_text(gpus: int, processes: int) -> str:
    text = ('name = "bench"\n[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\n'
            f'region = "us-east-1"\n[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = {gpus}\n')
    for i in range(processes):
        argv = [sys.executable, "-c", WORKLOAD.format(gpu=i % gpus)]
        text += (f'[[workloads]]\nname = "w{i}"\ngpus = [{i % gpus}]\n'
                 f"command = {json.dumps(argv)}\n")
    return text


def tick_cost(ticks: int, gpus: int, processes: int, work: Path) -> None:
    scenario = work / "bench.toml"
    scenario.write_text(scenario_text(gpus, processes))
    config = config_module.from_dict({
        "daemon": {"interval": 1.0, "db": str(work / "tick.db")},
        "attribution": {"stacks": False},  # bench/stack_overhead.py measures stacks
        "api": {"socket": str(work / "api.sock")},
    }, where="bench")
    daemon = Daemon(config, simulate=str(scenario), max_ticks=ticks)
    tick_cpu: list[float] = []
    threads_at: list[dict[int, float]] = []
    counts: list[tuple[int, int]] = []
    original = daemon._tick

    steady_cpu: list[float] = []

    def measured_tick() -> None:
        start = time.thread_time()
        if len(tick_cpu) in (10, ticks - 1):
            steady_cpu.append(time.process_time())
            threads_at.append({t.id: t.user_time + t.system_time
                               for t in psutil.Process().threads()})
        original()
        tick_cpu.append(time.thread_time() - start)
        sample = daemon.last_sample
        assert sample is not None
        counts.append((len(sample.gpus), sum(1 for p in sample.processes if p.gpus)))

    daemon._tick = measured_tick  # type: ignore[method-assign]
    print(f"starting {processes} workload processes on {gpus} simulated GPUs ...", flush=True)
    cpu0, wall0 = time.process_time(), time.time()
    asyncio.run(daemon.run())
    cpu, wall = time.process_time() - cpu0, time.time() - wall0
    # Steady state: skip the first 10 ticks (processes still being discovered).
    steady = [c for c, (g, p) in zip(tick_cpu, counts, strict=True) if p == processes][5:]
    if not steady:
        print(f"  only saw {max(p for _, p in counts)} of {processes} GPU processes; "
              f"figures below are for what was seen")
        steady = tick_cpu[10:]
    ms = sorted(c * 1000 for c in steady)
    print(f"ticks recorded: {len(tick_cpu)}, at full size (8 GPUs, {processes} processes): "
          f"{len(steady)}")
    print(f"tick CPU (collect + write + analyzer), main thread: median {statistics.median(ms):.2f}"
          f" ms, p90 {ms[int(0.9 * (len(ms) - 1))]:.2f} ms, max {ms[-1]:.2f} ms  (target <= 5)")
    steady_ticks = ticks - 1 - 10
    print(f"whole daemon process CPU per tick in steady state (ticks 10-{ticks - 1}: the tick, "
          f"the NVML reader threads on the simulated NVML, discovery, maintenance, rules): "
          f"{(steady_cpu[1] - steady_cpu[0]) / steady_ticks * 1000:.2f} ms "
          f"(with start-up: {cpu / max(1, len(tick_cpu)) * 1000:.2f} ms over {wall:.0f} s)")
    names = {t.native_id: t.name for t in threading.enumerate()}
    spent = sorted(((threads_at[1].get(tid, 0) - threads_at[0].get(tid, 0), tid)
                    for tid in threads_at[1]), reverse=True)[:6]
    print("  per thread, ms per tick: " + ", ".join(
        f"{names.get(tid, tid)} {cpu_s / steady_ticks * 1000:.2f}" for cpu_s, tid in spent))
    reads, began = 2000, time.thread_time()
    for _ in range(reads):
        read_host_usage()
    print(f"  of the tick, reading the host's CPU, memory and load (sources/host.py): "
          f"{(time.thread_time() - began) / reads * 1000:.3f} ms")


def synthetic_sample(tick: int, ts: float, gpus: int, processes: int,
                     rng: random.Random) -> Sample:
    gpu_samples = tuple(GpuSample(
        index=i, uuid=f"GPU-{i}", name="NVIDIA A100-SXM4-40GB",
        utilization=float(rng.randint(0, 100)), memory_used_bytes=rng.randint(0, 40 << 30),
        memory_total_bytes=40 << 30, power_watts=rng.uniform(50, 400),
        temperature_c=rng.randint(30, 80), sm_clock_mhz=1410, memory_clock_mhz=1215)
        for i in range(gpus))
    procs = tuple(ProcessSample(
        pid=10_000 + p, start_time=1_700_000_000.0 + p, ppid=1, user="alice",
        command=f"python train.py --rank {p}",
        gpus=(GpuUse(p % gpus, 2 << 30, float(rng.randint(0, 100))),),
        cpu_seconds=tick * 0.5 + p, rss_bytes=(1 << 30) + p, read_bytes=tick * 4096,
        write_bytes=tick * 512, iowait_seconds=tick * 0.01, state="S", threads=12)
        for p in range(processes))
    return Sample(ts=ts, tick=tick, gpus=gpu_samples, processes=procs)


def bytes_per_row(gpus: int, processes: int, work: Path) -> None:
    rng = random.Random(1)
    path = work / "bytes.db"
    store = Store(str(path))
    start = time.time() - 4000
    for tick in range(1, 3601):
        store.write(synthetic_sample(tick, start + tick, gpus, processes, rng))
    store.close()
    reader = Store.reader(str(path))
    sizes = reader.table_bytes()
    reader.close()
    gpu_rows, proc_rows = 3600 * gpus, 3600 * processes
    print(f"bytes on disk per GPU-sample: {sizes['gpu_samples'] / gpu_rows:.1f} (target <= 64)")
    per_proc = (sizes["proc_samples"] + sizes["proc_gpu_samples"]) / proc_rows
    print(f"bytes on disk per process-sample (host counters + per-GPU use): {per_proc:.1f} "
          f"({sizes['proc_samples'] / proc_rows:.1f} + {sizes['proc_gpu_samples'] / proc_rows:.1f})")


def history_read(gpus: int, work: Path) -> None:
    rng = random.Random(2)
    path = work / "history.db"
    store = Store(str(path), raw_retention_s=6 * 3600)
    end = time.time()
    step = 10.0
    ticks = int(86400 / step)
    for tick in range(1, ticks + 1):
        store.write(synthetic_sample(tick, end - 86400 + tick * step, gpus, 8, rng))
        if tick % 360 == 0:
            while store.maintain(budget_s=1.0):
                pass
    while store.maintain(budget_s=1.0):
        pass
    store.close()
    reader = Store.reader(str(path))
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        points = reader.gpu_history(0, "utilization", end - 86400, end, max_points=300)
        times.append((time.perf_counter() - t0) * 1000)
    reader.close()
    print(f"24 h history of one GPU ({len(points)} points from {ticks} ticks at {step:g} s, "
          f"minute rollups): median {statistics.median(times):.1f} ms, "
          f"max {max(times):.1f} ms (target <= 50)")


def _sqlite_memory_used() -> int | None:
    """SQLite's own heap in this process (the library the sqlite3 module runs on), or None."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libsqlite3" in line:
            library = ctypes.CDLL(line.split()[-1])
            library.sqlite3_memory_used.restype = ctypes.c_int64
            return int(library.sqlite3_memory_used())
    return None


def full_store_writes(gpus: int, processes: int, work: Path, cache_kib: int | None) -> None:
    """Write + maintain per tick once the store outgrows the writer's page cache (2 h of ticks,
    1 h raw retention so retention deletes run), and the SQLite memory the writer then holds."""
    rng = random.Random(3)
    path = work / "full.db"
    before = _sqlite_memory_used()
    store = Store(str(path), raw_retention_s=3600)
    cache = cache_kib if cache_kib is not None else PAGE_CACHE_KIB
    store.pragma("cache_size", -cache)
    start, spent = time.time() - 7300, []
    for tick in range(1, 7201):
        began = time.thread_time()
        store.write(synthetic_sample(tick, start + tick, gpus, processes, rng))
        store.maintain(budget_s=0.05)
        spent.append(time.thread_time() - began)
    held = _sqlite_memory_used()
    store.close()
    last = sorted(spent[-1800:])
    memory = (f"{(held - before) / 1e6:.1f} MB" if held is not None and before is not None
              else "unknown (no shared libsqlite3)")
    print(f"write + maintain per tick on a {path.stat().st_size / 1e6:.0f} MB store, page cache "
          f"{cache} KiB: median {last[len(last) // 2] * 1000:.2f} ms, p99 "
          f"{last[int(len(last) * 0.99)] * 1000:.2f} ms; SQLite memory held: {memory}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--page-cache-kib", type=int, default=None,
                        help="the writer's page cache for the full-store figure (default: "
                             "daemon.store.writer.PAGE_CACHE_KIB), to compare sizes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlcost-bench-") as tmp:
        work = Path(tmp)
        tick_cost(args.ticks, args.gpus, args.processes, work)
        bytes_per_row(args.gpus, args.processes, work)
        history_read(args.gpus, work)
        full_store_writes(args.gpus, args.processes, work, args.page_cache_kib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
