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
       python bench/collector.py --procs 8,64,256 [--ticks 40] [--json] [--detail]
       python bench/collector.py --procs 64 --ticks 600 --every 50

`--procs` runs the daemon at each size in turn and prints, per size, the whole process's CPU per
tick in steady state, split by thread (named) and by part (NVML read, /proc read, discovery,
analysis, rules + phase balances, store write, API: one /v1/now per tick, as a connected client
asks, split into the document and its JSON body), the floor measured in the same process
while the workloads run (the same NVML calls + pread of /proc/PID/{stat,io} of every process),
and the ratio; the floor's two halves measured apart beside the daemon's own NVML read and /proc
read, and what of twice the floor their reading leaves for everything else; what a rules round costs over a full 30-minute window at that size (the daemon's
own run holds only its first minute, and the rules run every [cost].evaluate_every over the
whole window: a daemon that has run for 30 minutes pays it spread over its ticks), and the
whole process and ratio with it; then a table of all sizes.
The bench itself plays the connected client (`Daemon.now_body()` once per tick: the document a
TUI asks for every second and its JSON body, which each connected client costs; only aiohttp's
HTTP handling is not counted): the ratio is printed with that client and without it (the whole
process less the two API parts), the recorder on its own.
`--real` runs the same measurement on this host's own NVML (a GPU host): no simulated host and
no workloads are started; it records whatever GPU processes run (start them first, and say how
many with --processes), and its floor is the same NVML calls and /proc reads on them.
`--every N` also prints each stretch of N ticks as it ends, whole and by part: with a long run,
what grows as the daemon ages (a rules round's window fills over its first 30 minutes). Each
stretch also says how many low-utilization windows were open at its end and how many phase
samples were kept in it: the workloads dip into windows at a different tick in each run, and
sampling the processes in them (8 /proc samples a second) adds ~2 ms a tick to "tick (rest)"
at 64 processes, so two runs compare only where these match.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import dataclasses
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pynvml

from daemon import config as config_module
from daemon.analysis.analyzer import Analyzer
from daemon.analysis.cost import burn
from daemon.analysis.kinds import Kind
from daemon.analysis.window_ticks import WINDOW_S, WindowTick, window_tick
from daemon.runtime.daemon import Daemon
from daemon.sources import nvml as nvml_module
from daemon.sources.host import HostReader
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import PAGE_CACHE_KIB, Store

WORKLOAD = (
    "import time\nfrom daemon.sim.device import Device\n"
    "dev = Device(gpu_index={gpu})\ndev.alloc({alloc})\n"
    "while True:\n    dev.kernel(0.05, sm=0.6)\n    time.sleep(0.05)\n"
)
# Each workload's device memory: 2 GiB, or its share of a 40 GiB A100 where more share one (the
# simulated GPU refuses what its processes together would hold past its memory, as CUDA does:
# at 256 processes on 8 GPUs a third of them died at their alloc, and the run measured fewer).
WORKLOAD_ALLOC = 2 << 30
GPU_MEMORY = 40 << 30


def scenario_text(gpus: int, processes: int) -> str:
    text = ('name = "bench"\n[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\n'
            f'region = "us-east-1"\n[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = {gpus}\n')
    alloc = min(WORKLOAD_ALLOC, GPU_MEMORY // -(-processes // gpus))
    for i in range(processes):
        argv = [sys.executable, "-c", WORKLOAD.format(gpu=i % gpus, alloc=alloc)]
        text += (f'[[workloads]]\nname = "w{i}"\ngpus = [{i % gpus}]\n'
                 f"command = {json.dumps(argv)}\n")
    return text


class Parts:
    """CPU seconds spent in each part of the daemon, in whichever thread runs it: each part's
    functions are wrapped to add the calling thread's CPU time (time.thread_time) they took,
    less what parts called inside them took (each second is counted in one part)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._lock = threading.Lock()
        self._local = threading.local()  # this thread's stack of [inner seconds] per open part

    def run(self, part: str, fn: Callable[..., object], *args: object,
            **kwargs: object) -> object:
        stack = self._local.__dict__.setdefault("stack", [])
        stack.append(0.0)
        began = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = time.thread_time() - began
            inner = stack.pop()
            if stack:
                stack[-1] += elapsed
            with self._lock:
                self.spent[part] = self.spent.get(part, 0.0) + elapsed - inner

    def wrap(self, owner: object, name: str, part: str) -> None:
        original = getattr(owner, name)

        def measured(*args: object, **kwargs: object) -> object:
            return self.run(part, original, *args, **kwargs)

        setattr(owner, name, measured)

    def copy(self) -> dict[str, float]:
        with self._lock:
            return dict(self.spent)


PARTS_NOW: list[Parts] = [Parts()]  # the size being measured

# The parts, as the issue names them, and what the tick does besides (its own CPU, less the
# parts inside it); "other" is what no part covers (the event loop, kinds' documents, GC ...).
PART_NAMES = ("NVML read", "/proc read", "discovery", "kinds", "analysis",
              "rules + phase balances", "store write", "API", "API body", "tick (rest)")
# With --detail, parts taken out of "tick (rest)": attribution's per-process update of windows
# and signals, its /proc samples of processes in windows (read_facts, signals, classify and
# the row kept; with stacks off, as here, these take py-spy's place), and the host's CPU,
# memory and PSI reads.
DETAIL_PARTS = ("attribution", "attribution /proc samples", "host reads")


def floor_round(handles: list, pids_fds: list[tuple[int, int]], since_us: int,
                lib: object, liveness: bool = True) -> None:
    """The floor: the same NVML calls the daemon's readers make per GPU (daemon/sources/nvml.py
    _Device.read), then a pread of /proc/PID/stat and /proc/PID/io of every process, on fds
    kept open. The simulated NVML is told a second has passed, as at a 1 s tick: its snapshot
    is stale and its check of which attached processes are alive (every 0.5 s) is due, both of
    which the daemon's readers pay at every tick (`liveness=False`: the check is not made, as
    this bench's floor was measured before 2026-12-03)."""
    reader = getattr(lib, "reader", None)
    if reader is not None:
        reader.snapshot_ns = 0
        if liveness:
            reader.scanned_ns = 0
    for h in handles:
        pynvml.nvmlDeviceGetUtilizationRates(h)
        try:
            pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        except TypeError:
            pynvml.nvmlDeviceGetMemoryInfo(h)
        pynvml.nvmlDeviceGetPowerUsage(h)
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h)
        try:
            pynvml.nvmlDeviceGetProcessUtilization(h, since_us)
        except pynvml.NVMLError:
            pass
    for stat_fd, io_fd in pids_fds:
        os.pread(stat_fd, 4096, 0)
        os.pread(io_fd, 4096, 0)


def measure_floor(pids: list[int], gpus: int, rounds: int = 20,
                  liveness: bool = True) -> tuple[float, float, float]:
    """CPU seconds of one floor round (median of `rounds`), in this thread, on this host; then
    the medians of its two halves measured apart: the NVML calls, the /proc reads."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
    fds = []
    for pid in pids:
        try:
            fds.append((os.open(f"/proc/{pid}/stat", os.O_RDONLY),
                        os.open(f"/proc/{pid}/io", os.O_RDONLY)))
        except OSError:
            continue  # it exited
    try:
        spent: dict[str, list[float]] = {"whole": [], "nvml": [], "proc": []}
        for _ in range(rounds):
            for part, (part_handles, part_fds) in (("whole", (handles, fds)),
                                                   ("nvml", (handles, [])),
                                                   ("proc", ([], fds))):
                began = time.thread_time()
                floor_round(part_handles, part_fds, int((time.time() - 1.0) * 1e6),
                            pynvml.nvmlLib, liveness)
                spent[part].append(time.thread_time() - began)
        whole, nvml, proc = (statistics.median(spent[p]) for p in ("whole", "nvml", "proc"))
        return whole, nvml, proc
    finally:
        for pair in fds:
            for fd in pair:
                os.close(fd)


def full_window_round(analyzer: Analyzer, sample: Sample, kinds: dict[str, Kind],
                      rounds: int = 3) -> float:
    """CPU seconds of one rules round (Analyzer.analyze, median of `rounds`, this thread) over
    a full window: `sample` as a steady host shows it at every window step for WINDOW_S, what a
    daemon that has run for 30 minutes evaluates every [cost].evaluate_every. The daemon's own
    run above holds only its first minute of ticks in the window."""
    window: list[WindowTick] = []
    for step in range(int(WINDOW_S / analyzer.window_step_s) + 1):
        at = dataclasses.replace(sample, ts=sample.ts + step * analyzer.window_step_s)
        window.append(window_tick(at, burn(at, analyzer.price, analyzer.thresholds),
                                  window[-1] if window else None))
    spent = []
    for _ in range(rounds):
        began = time.thread_time()
        analyzer.analyze((window, []), {}, {}, kinds)
        spent.append(time.thread_time() - began)
    return statistics.median(spent)


def parts_per_tick(before: dict[str, float], after: dict[str, float],
                   ticks: int) -> dict[str, float]:
    """Each part's CPU seconds per tick between two of Parts' copies `ticks` ticks apart (the
    detail parts where they were measured)."""
    names = PART_NAMES + tuple(part for part in DETAIL_PARTS if part in after)
    return {part: (after.get(part, 0.0) - before.get(part, 0.0)) / ticks for part in names}


def stretch_line(ticks: int, spent: tuple[float, float], parts: tuple[dict[str, float],
                 dict[str, float]], count: int, windows: int, samples: int) -> str:
    """One stretch of `count` ticks ending at tick `ticks`: the whole process's CPU per tick
    (`spent`, process CPU at its start and end) and the parts' (their totals at both ends);
    the low-utilization windows open at its end and the phase samples kept in it (why: the
    module's docstring, on --every)."""
    whole = (spent[1] - spent[0]) / count * 1000
    by_part = ", ".join(f"{part} {spent_s * 1000:.2f}"
                        for part, spent_s in parts_per_tick(*parts, count).items())
    return (f"  ticks {ticks - count + 1}-{ticks}: whole {whole:.2f} ms a tick; {by_part}; "
            f"{windows} windows open, {samples} phase samples kept")


def tick_cost(ticks: int, gpus: int, processes: int, work: Path,
              every: int = 0, real: bool = False, detail: bool = False) -> dict[str, object]:
    """Run the daemon for `ticks` ticks over `processes` workload processes; print and return
    the whole process's CPU per tick in steady state, by thread and by part, and the floor.
    `every` > 0: also print the CPU per tick, whole and by part, of each stretch of that many
    ticks as it ends (what grows with the daemon's age shows). `detail`: also the
    DETAIL_PARTS, out of "tick (rest)"."""
    scenario = None if real else work / f"bench-{processes}.toml"
    if scenario is not None:
        scenario.write_text(scenario_text(gpus, processes))
    config = config_module.from_dict({
        "daemon": {"interval": 1.0, "db": str(work / f"tick-{processes}.db")},
        "attribution": {"stacks": False},  # bench/stack_overhead.py measures stacks
        "api": {"socket": str(work / f"api-{processes}.sock")},
    }, where="bench")
    daemon = Daemon(config, simulate=str(scenario) if scenario else None, max_ticks=ticks)
    parts = Parts()
    PARTS_NOW[0] = parts  # the NVML readers' class is wrapped once, for every size
    if not getattr(nvml_module._Device.read, "measured", False):
        original_read = nvml_module._Device.read

        def read(device: nvml_module._Device) -> object:
            return PARTS_NOW[0].run("NVML read", original_read, device)

        read.measured = True  # type: ignore[attr-defined]
        nvml_module._Device.read = read  # type: ignore[method-assign,assignment]
    parts.wrap(daemon.procs, "read", "/proc read")
    parts.wrap(daemon.procs, "discover", "discovery")
    parts.wrap(daemon, "_read_attribution", "rules + phase balances")
    parts.wrap(daemon.kinds, "refresh", "kinds")
    if detail:
        parts.wrap(daemon.host_usage, "read", "host reads")
        parts.wrap(daemon.pressure, "read", "host reads")
    tick_cpu: list[float] = []
    threads_at: list[dict[int, float]] = []
    parts_at: list[dict[str, float]] = []
    counts: list[tuple[int, int]] = []
    floor: list[float] = []
    floor_parts: list[tuple[float, float]] = []  # the floor's NVML calls, its /proc reads
    original = daemon._tick
    steady_cpu: list[float] = []
    wrapped: list[bool] = []
    names: dict[int, str] = {}  # thread id -> name, while the threads run

    def wrap_late() -> None:  # the store and the analyzer exist once the daemon runs
        assert daemon.store is not None
        parts.wrap(daemon.store, "write", "store write")
        parts.wrap(daemon.store, "maintain", "store write")
        if daemon.analyzer is not None:
            parts.wrap(daemon.analyzer, "update", "analysis")
            for name in ("poll_slow", "analyze", "record"):
                parts.wrap(daemon.analyzer, name, "rules + phase balances")
        parts.wrap(daemon, "now", "API")
        parts.wrap(daemon, "now_body", "API body")  # less the document it builds inside
        if detail and daemon.attribution is not None:
            parts.wrap(daemon.attribution, "on_tick", "attribution")
            parts.wrap(daemon.attribution, "_sample_due_from_proc", "attribution /proc samples")
        wrapped.append(True)

    stretch: list[tuple[float, dict[str, float], int]] = []  # at the last stretch's end

    def measured_tick() -> None:
        if not wrapped:
            wrap_late()
        if every and len(tick_cpu) % every == 0:
            attribution = daemon.attribution
            kept = attribution.samples_kept if attribution is not None else 0
            stretch.append((time.process_time(), parts.copy(), kept))
            if len(stretch) > 1:
                (cpu0, parts0, kept0), (cpu1, parts1, kept1) = stretch[-2], stretch[-1]
                windows = len(attribution.active_windows()) if attribution is not None else 0
                print(stretch_line(len(tick_cpu), (cpu0, cpu1), (parts0, parts1), every,
                                   windows, kept1 - kept0), flush=True)
        start = time.thread_time()
        if len(tick_cpu) in (10, ticks - 1):
            steady_cpu.append(time.process_time())
            threads_at.append({t.id: t.user_time + t.system_time
                               for t in psutil.Process().threads()})
            parts_at.append(parts.copy())
            names.update({t.native_id: t.name for t in threading.enumerate()
                          if t.native_id is not None})
        parts.run("tick (rest)", original)
        daemon.now_body()  # a connected client's /v1/now each tick (the two API parts)
        tick_cpu.append(time.thread_time() - start)
        sample = daemon.last_sample
        assert sample is not None
        counts.append((len(sample.gpus), sum(1 for p in sample.processes if p.gpus)))
        if len(tick_cpu) == ticks:  # after the measured window, the workloads still running
            pids = [p.pid for p in sample.processes]
            whole_floor, nvml_floor, proc_floor = measure_floor(pids, len(sample.gpus))
            floor.append(whole_floor)
            floor_parts.append((nvml_floor, proc_floor))
            floor.append(measure_floor(pids, len(sample.gpus), liveness=False)[0])

    daemon._tick = measured_tick  # type: ignore[method-assign]
    print(f"recording this host's GPUs, {processes} GPU processes expected ..." if real else
          f"starting {processes} workload processes on {gpus} simulated GPUs ...", flush=True)
    load = os.getloadavg()[0]
    cpu0, wall0 = time.process_time(), time.time()
    asyncio.run(daemon.run())
    cpu, wall = time.process_time() - cpu0, time.time() - wall0
    load = max(load, os.getloadavg()[0])
    seen = max(p for _, p in counts)
    # Steady state: skip the first ticks (processes still being discovered).
    gpus = max(g for g, _ in counts) if real else gpus
    steady = [c for c, (g, p) in zip(tick_cpu, counts, strict=True) if p == processes][5:]
    if not steady:
        print(f"  only saw {seen} of {processes} GPU processes; figures below are for what "
              f"was seen")
        steady = tick_cpu[10:]
    ms = sorted(c * 1000 for c in steady)
    print(f"ticks recorded: {len(tick_cpu)}, at full size ({gpus} GPUs, {processes} processes): "
          f"{len(steady)}")
    print(f"tick CPU (collect + write + analyzer + one /v1/now), main thread: median "
          f"{statistics.median(ms):.2f} ms, p90 {ms[int(0.9 * (len(ms) - 1))]:.2f} ms, "
          f"max {ms[-1]:.2f} ms")
    steady_ticks = ticks - 1 - 10
    whole = (steady_cpu[1] - steady_cpu[0]) / steady_ticks
    print(f"whole daemon process CPU per tick in steady state (ticks 10-{ticks - 1}: the tick, "
          f"the NVML reader threads, discovery, maintenance, rules): "
          f"{whole * 1000:.2f} ms (with start-up: {cpu / max(1, len(tick_cpu)) * 1000:.2f} ms "
          f"over {wall:.0f} s)")
    by_thread: dict[str, float] = {}
    for tid in threads_at[1]:
        name = names.get(tid) or "exited thread"
        by_thread[name] = by_thread.get(name, 0.0) + (
            threads_at[1][tid] - threads_at[0].get(tid, 0.0)) / steady_ticks
    by_part = parts_per_tick(parts_at[0], parts_at[1], steady_ticks)
    by_part["other"] = max(0.0, whole - sum(by_part.values()))
    top = sorted(by_thread.items(), key=lambda kv: kv[1], reverse=True)
    groups: dict[str, float] = {}  # threads of one kind together: psutil counts 10 ms steps
    for name, spent in top:
        group = name.rstrip("0123456789") + "*" if name[-1:].isdigit() else name
        groups[group] = groups.get(group, 0.0) + spent
    print("  per thread, ms per tick: " + ", ".join(
        f"{name} {spent * 1000:.2f}"
        for name, spent in sorted(groups.items(), key=lambda kv: kv[1], reverse=True)))
    print("  per part, ms per tick: " + ", ".join(f"{part} {spent * 1000:.2f}"
                                                  for part, spent in by_part.items()))
    alone = whole - by_part["API"] - by_part["API body"]  # no client asking for /v1/now
    print(f"  floor (the same NVML calls + pread of /proc/PID/{{stat,io}}, this process): "
          f"{floor[0] * 1000:.2f} ms; whole process / floor: {whole / floor[0]:.1f}x with one "
          f"/v1/now a tick, {alone / floor[0]:.1f}x without a client ({alone * 1000:.2f} ms) "
          f"(load average {load:.1f})" + ("" if real else
          f"; without the simulated NVML's check of which processes "
          f"are alive, which the daemon pays each tick: floor {floor[1] * 1000:.2f} ms, "
          f"{whole / floor[1]:.1f}x"))
    # The daemon's own reading of the same things against the floor's two halves: what is
    # left of twice the floor for everything else (analysis, store, API) is what they leave.
    (nvml_floor, proc_floor), reading = floor_parts[0], by_part["NVML read"] + by_part["/proc read"]
    print(f"  of the floor, the NVML calls {nvml_floor * 1000:.2f} ms and the /proc reads "
          f"{proc_floor * 1000:.2f} ms; the daemon's own NVML read {by_part['NVML read'] * 1000:.2f} "
          f"ms ({by_part['NVML read'] / nvml_floor:.1f}x) and /proc read "
          f"{by_part['/proc read'] * 1000:.2f} ms ({by_part['/proc read'] / proc_floor:.1f}x): "
          f"reading alone is {reading / floor[0]:.1f}x the floor, leaving "
          f"{max(0.0, 2 * floor[0] - reading) * 1000:.2f} ms a tick within 2x for all the rest "
          f"({(whole - reading) * 1000:.2f} ms now)")
    assert daemon.analyzer is not None and daemon.last_sample is not None
    rules_round = full_window_round(daemon.analyzer, daemon.last_sample, dict(daemon.kinds.kinds))
    spread = rules_round / config.cost.evaluate_every  # per 1 s tick
    print(f"  a rules round over a full {WINDOW_S / 60:.0f}-minute window (this host's last "
          f"sample at every window step; the run above held only its first minute): "
          f"{rules_round * 1000:.1f} ms every {config.cost.evaluate_every:g} s, "
          f"{spread * 1000:.2f} ms a tick; whole process with it: {(whole + spread) * 1000:.2f} "
          f"ms, {(whole + spread) / floor[0]:.1f}x the floor")
    reads, host, began = 2000, HostReader(), time.thread_time()
    for _ in range(reads):  # (in a loop: warm, as the tick does not find it; --detail does)
        host.read()
    print(f"  of the tick, reading the host's CPU, memory and load (sources/host.py): "
          f"{(time.thread_time() - began) / reads * 1000:.3f} ms")
    host.close()
    return {"procs": processes, "gpus": gpus, "procs_seen": seen, "ticks": ticks,
            "whole_ms": whole * 1000, "tick_main_thread_ms": statistics.median(ms),
            "floor_ms": floor[0] * 1000, "ratio": whole / floor[0],
            "floor_without_liveness_ms": floor[1] * 1000,
            "floor_nvml_ms": nvml_floor * 1000, "floor_proc_ms": proc_floor * 1000,
            "whole_without_client_ms": alone * 1000, "ratio_without_client": alone / floor[0],
            "rules_full_window_round_ms": rules_round * 1000,
            "whole_with_full_window_ms": (whole + spread) * 1000,
            "threads_ms": {name: spent * 1000 for name, spent in
                           sorted(groups.items(), key=lambda kv: kv[1], reverse=True)},
            "each_thread_ms": {name: spent * 1000 for name, spent in top},
            "parts_ms": {part: spent * 1000 for part, spent in by_part.items()},
            "load_average": load}


def table(rows: list[dict[str, object]]) -> None:
    """The sizes side by side, as the issue compares them."""
    print()
    print(f"{'GPUs x procs':>13} | {'whole ms/tick':>13} | {'floor ms':>8} | {'ratio':>6} | "
          f"{'no client':>9} | {'30-min window':>13} | {'load':>5} | top threads")
    for row in rows:
        threads, with_window, floor = (row["threads_ms"], row["whole_with_full_window_ms"],
                                       row["floor_ms"])
        assert isinstance(threads, dict)
        assert isinstance(with_window, float) and isinstance(floor, float)
        tops = ", ".join(f"{n} {v:.1f}" for n, v in list(threads.items())[:3])
        print(f"{row['gpus']:>5} x {row['procs']:<5} | {row['whole_ms']:>13.2f} | "
              f"{row['floor_ms']:>8.2f} | {row['ratio']:>5.1f}x | "
              f"{row['ratio_without_client']:>8.1f}x | "
              f"{with_window / floor:>12.1f}x | "
              f"{row['load_average']:>5.1f} | "
              f"{tops}")


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
    parser.add_argument("--procs", default=None, metavar="N,N,...",
                        help="process counts to run the daemon at, one after the other (e.g. "
                             "8,64,256): prints the CPU per tick, by thread and by part, the "
                             "floor and the ratio for each, and skips the store figures")
    parser.add_argument("--every", type=int, default=0, metavar="N",
                        help="also print the CPU per tick, whole and by part, of every N "
                             "ticks as they end: with a long --ticks, what grows as the daemon "
                             "ages (its window fills over 30 min), with the windows open and "
                             "the phase samples kept")
    parser.add_argument("--real", action="store_true",
                        help="on this host's own NVML (a GPU host): record the GPU processes "
                             "already running, --processes of them; CPU per tick and floor only")
    parser.add_argument("--detail", action="store_true",
                        help="also split out of \"tick (rest)\" attribution's per-process "
                             "update, its /proc samples and the host's CPU, memory and PSI "
                             "reads")
    parser.add_argument("--json", action="store_true",
                        help="with --procs: also print one JSON line of the figures, for "
                             "tracking")
    parser.add_argument("--page-cache-kib", type=int, default=None,
                        help="the writer's page cache for the full-store figure (default: "
                             "daemon.store.writer.PAGE_CACHE_KIB), to compare sizes")
    args = parser.parse_args()
    if args.ticks < 20:
        parser.error("--ticks must be at least 20 (the first 10 are start-up)")
    with tempfile.TemporaryDirectory(prefix="mlcost-bench-") as tmp:
        work = Path(tmp)
        if args.procs is not None:
            try:
                sizes = [int(n) for n in args.procs.split(",") if n.strip()]
            except ValueError:
                parser.error(f"--procs {args.procs!r}: give process counts like 8,64,256")
            rows = [tick_cost(args.ticks, args.gpus, n, work, args.every, detail=args.detail)
                    for n in sizes]
            table(rows)
            if args.json:
                print(json.dumps({"bench": "collector", "sizes": rows}))
            return 0
        tick_cost(args.ticks, args.gpus, args.processes, work, args.every, args.real,
                  detail=args.detail)
        if args.real:
            return 0
        bytes_per_row(args.gpus, args.processes, work)
        history_read(args.gpus, work)
        full_store_writes(args.gpus, args.processes, work, args.page_cache_kib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
