"""Cost of one full NVML read of a simulated host, through pynvml, as the daemon does it.

    python bench/sim_read.py [--gpus 8] [--processes 64] [--rounds 200]

Starts PROCESSES real processes, each attached to every GPU and running short kernels, then
times rounds of: per GPU, memory, utilization, power, temperature, SM clock, running processes
(v3) and process utilization. Every round forces a fresh read of all records (as at a 1 s tick);
the directory rescan for dead processes runs every other round (it runs every 0.5 s).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time
from multiprocessing.synchronize import Event as EventType

import pynvml

from daemon.sim import nvml as sim_nvml
from daemon.sim import scenario
from daemon.sim.device import Device


def hold_gpus(state_dir: str, gpus: int, ready: EventType, stop: EventType,
               alloc: int = 64 << 20, sm: float = 0.5, period_s: float = 0.2) -> None:
    """A process attached to every GPU (`alloc` bytes each), running a 20 ms kernel at `sm`
    on the next GPU every `period_s` until `stop`."""
    devices = [Device(gpu_index=g, state_dir=state_dir) for g in range(gpus)]
    for d in devices:
        d.alloc(alloc)
    ready.set()
    k = 0
    while not stop.is_set():
        devices[k % gpus].kernel(0.02, sm=sm)
        k += 1
        stop.wait(period_s)
    for d in devices:
        d.close()


def share_of(sc: scenario.Scenario, per_gpu: int, most: int = 2 << 30) -> int:
    """Each holder's bytes on each GPU: `most`, or its share of the GPU where `per_gpu` holders
    would together hold more (the simulated GPU refuses an alloc past its memory, as CUDA
    does: 32 holders of 2 GiB on a 40 GiB A100 died at their alloc)."""
    return min(most, int(sc.gpu.memory_gib * (1 << 30)) // per_gpu)


def full_read(handles: list, since_us: int) -> int:
    n = 0
    for h in handles:
        pynvml.nvmlDeviceGetMemoryInfo(h)
        pynvml.nvmlDeviceGetUtilizationRates(h)
        pynvml.nvmlDeviceGetPowerUsage(h)
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        n += len(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h))
        try:
            pynvml.nvmlDeviceGetProcessUtilization(h, since_us)
        except pynvml.NVMLError_NotFound:
            pass
    return n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--processes", type=int, default=64)
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args()
    sc = scenario.loads(
        f'[instance]\nprovider="aws"\ntype="p4d.24xlarge"\nregion="us-east-1"\n'
        f'[gpu]\nmodel="NVIDIA A100-SXM4-40GB"\ncount={args.gpus}\n', default_name="bench")
    with tempfile.TemporaryDirectory() as d, scenario.start(sc, d) as running:
        ctx = mp.get_context("fork")
        stop = ctx.Event()
        holders = []
        for _ in range(args.processes):
            ready = ctx.Event()
            proc = ctx.Process(target=hold_gpus, args=(str(running.state_dir), args.gpus, ready, stop),
                               kwargs={"alloc": share_of(sc, args.processes, most=64 << 20)})
            proc.start()
            ready.wait(30)
            holders.append(proc)
        lib = sim_nvml.install(running.state_dir)
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(args.gpus)]
        since = int(time.time() * 1e6) - 1_000_000
        assert full_read(handles, since) == args.gpus * args.processes
        wall, cpu, refresh = [], [], []
        for r in range(args.rounds):
            lib.reader.snapshot_ns = 0  # as if a second had passed
            if r % 2:
                lib.reader.scanned_ns = 0
            t0, c0 = time.perf_counter_ns(), time.process_time_ns()
            full_read(handles, since)
            wall.append(time.perf_counter_ns() - t0)
            cpu.append(time.process_time_ns() - c0)
            lib.reader.snapshot_ns = 0
            t0 = time.perf_counter_ns()
            lib.reader.snapshot()
            refresh.append(time.perf_counter_ns() - t0)
        stop.set()
        for proc in holders:
            proc.join(10)
        pynvml.nvmlShutdown()
        sim_nvml.uninstall()
    us = lambda xs: f"median {statistics.median(xs) / 1000:.0f} us, p90 {sorted(xs)[int(len(xs) * 0.9)] / 1000:.0f} us"  # noqa: E731
    print(f"{args.gpus} GPUs x {args.processes} processes, {args.rounds} rounds (pid {os.getpid()})")
    print(f"full read through pynvml: wall {us(wall)}; cpu {us(cpu)}")
    print(f"  of which the sim's record refresh: {us(refresh)}")
    print(f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")


if __name__ == "__main__":
    main()
