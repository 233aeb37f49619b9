"""The NVML read part of a tick, against its floor, on the simulated NVML. Prints figures.

    python bench/nvml_read.py [--gpus 8] [--per-gpu 8,32] [--rounds 300] [--profile]
                              [--model "NVIDIA H100 80GB HBM3"]

Starts PER_GPU real processes each attached to every GPU (8 x 8 = the collector bench's 64
processes, 8 x 32 = its 256), then, in this thread, times rounds of
- the floor: bench/collector.py's floor_round without its /proc part (the same NVML calls the
  daemon makes per GPU, through pynvml);
- the daemon: `_Device.read()` of every GPU, as the NVML reader thread runs it each tick.
Every round forces a fresh read of the simulated records first (as a second passing does), so
both pay the simulation's own cost. `--profile` prints where the daemon's rounds spend it. On a
GPU with GPM (`--model "NVIDIA H100 80GB HBM3"`) the daemon also reads SM activity, which the
floor does not.

`--real` times the same two on this host's own NVML (a GPU host: nothing is simulated and no
process is started; run it beside the workloads you want counted), in CPU and in wall time,
since a driver call also waits for the driver.
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing as mp
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pynvml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector import floor_round  # noqa: E402
from sim_read import hold_gpus, share_of  # noqa: E402

from daemon.config import NvmlConfig  # noqa: E402
from daemon.sim import nvml as sim_nvml  # noqa: E402
from daemon.sim import scenario  # noqa: E402
from daemon.sources.nvml import _Device  # noqa: E402


def rounds_cpu(fn, lib: sim_nvml.SimulatedNvml, rounds: int) -> list[float]:
    """This thread's CPU seconds of each of `rounds` calls of fn, each after a fresh snapshot."""
    spent = []
    for _ in range(rounds):
        lib.reader.snapshot_ns = 0
        began = time.thread_time()
        fn()
        spent.append(time.thread_time() - began)
    return spent


def measure(gpus: int, per_gpu: int, rounds: int, profile: bool, model: str) -> None:
    sc = scenario.loads(
        f'[instance]\nprovider="aws"\ntype="p4d.24xlarge"\nregion="us-east-1"\n'
        f'[gpu]\nmodel="{model}"\ncount={gpus}\n', default_name="bench")
    with tempfile.TemporaryDirectory() as d, scenario.start(sc, d) as running:
        ctx = mp.get_context("fork")
        stop = ctx.Event()
        holders = []
        for _ in range(per_gpu):
            ready = ctx.Event()
            proc = ctx.Process(target=hold_gpus,
                               args=(str(running.state_dir), gpus, ready, stop),
                               kwargs={"alloc": share_of(sc, per_gpu), "sm": 0.6,
                                       "period_s": 0.05})
            proc.start()
            ready.wait(30)
            holders.append(proc)
        lib = sim_nvml.install(running.state_dir)
        pynvml.nvmlInit()
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
            devices = [_Device(i, h, NvmlConfig()) for i, h in enumerate(handles)]
            seen = sum(len(d.read().uses) for d in devices)

            def floor() -> None:
                floor_round(handles, [], int((time.time() - 1.0) * 1e6), lib, liveness=False)

            def daemon() -> None:
                for device in devices:
                    device.read()

            floors, reads = [], []
            for _ in range(3):  # interleaved, so both see the same load
                floors += rounds_cpu(floor, lib, rounds // 3)
                reads += rounds_cpu(daemon, lib, rounds // 3)
            f_ms, r_ms = statistics.median(floors) * 1e3, statistics.median(reads) * 1e3
            print(f"{gpus} GPUs x {per_gpu} processes each ({seen} GPU uses): floor's NVML calls "
                  f"{f_ms:.3f} ms, daemon's _Device.read of every GPU {r_ms:.3f} ms "
                  f"({r_ms / f_ms:.2f}x), median CPU of {len(reads)} rounds", flush=True)
            # What the floor's back-to-back rounds skip and a reader once a second pays: the
            # simulation's check for dead processes (every RESCAN_NS), in both.
            rescans = []
            for _ in range(rounds // 3):
                lib.reader.snapshot_ns = lib.reader.scanned_ns = 0
                began = time.thread_time()
                lib.reader.snapshot()
                rescans.append(time.thread_time() - began)
                lib.reader.snapshot_ns = 0
                began = time.thread_time()
                lib.reader.snapshot()
                rescans[-1] -= time.thread_time() - began
            print(f"  the simulation's dead-process check, paid by a reader at 1 s ticks and not "
                  f"by the floor's rounds: {statistics.median(rescans) * 1e3:.3f} ms")
            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                rounds_cpu(daemon, lib, rounds)
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        finally:
            stop.set()
            for proc in holders:
                proc.join(10)
            pynvml.nvmlShutdown()
            sim_nvml.uninstall()


def measure_real(rounds: int, profile: bool) -> None:
    """Floor and `_Device.read()` on this host's NVML: CPU and wall time, medians."""
    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        devices = [_Device(i, h, NvmlConfig()) for i, h in enumerate(handles)]
        seen = sum(len(d.read().uses) for d in devices)
        names = sorted({pynvml.nvmlDeviceGetName(h) for h in handles})

        def floor() -> None:
            floor_round(handles, [], int((time.time() - 1.0) * 1e6), None, liveness=False)

        def daemon() -> None:
            for device in devices:
                device.read()

        timed: dict[str, tuple[list[float], list[float]]] = {"floor": ([], []), "daemon": ([], [])}
        for _ in range(3):  # interleaved, so both see the same load
            for name, fn in (("floor", floor), ("daemon", daemon)):
                for _ in range(rounds // 3):
                    cpu, wall = time.thread_time(), time.perf_counter()
                    fn()
                    timed[name][0].append(time.thread_time() - cpu)
                    timed[name][1].append(time.perf_counter() - wall)
        (f_cpu, f_wall), (d_cpu, d_wall) = ((statistics.median(c) * 1e3, statistics.median(w) * 1e3)
                                            for c, w in timed.values())
        print(f"this host's NVML: {count} GPU(s) ({', '.join(map(str, names))}), {seen} GPU "
              f"uses; median of {len(timed['floor'][0])} rounds each\n"
              f"  floor's NVML calls:           CPU {f_cpu:.3f} ms, wall {f_wall:.3f} ms\n"
              f"  daemon's _Device.read of all: CPU {d_cpu:.3f} ms, wall {d_wall:.3f} ms "
              f"({d_cpu / f_cpu if f_cpu else float('nan'):.2f}x CPU, "
              f"{d_wall / f_wall:.2f}x wall)", flush=True)
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(rounds):
                daemon()
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    finally:
        pynvml.nvmlShutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-gpu", default="8,32", metavar="N,N",
                        help="processes on each GPU, one size after the other (8,32: the "
                             "collector bench's 64 and 256)")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--model", default="NVIDIA A100-SXM4-40GB",
                        help="the simulated GPU model (one with GPM: NVIDIA H100 80GB HBM3)")
    parser.add_argument("--profile", action="store_true",
                        help="also print a cProfile of the daemon's rounds, by own time")
    parser.add_argument("--real", action="store_true",
                        help="on this host's own NVML instead (a GPU host): no simulation, no "
                             "processes started; CPU and wall time")
    args = parser.parse_args()
    if args.real:
        measure_real(args.rounds, args.profile)
        return 0
    print(f"load average {' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")
    for n in (int(x) for x in args.per_gpu.split(",")):
        measure(args.gpus, n, args.rounds, args.profile, args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
