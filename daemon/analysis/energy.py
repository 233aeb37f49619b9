"""Per-process energy and carbon: each GPU's measured power apportioned to the processes on it.

At each tick a GPU's power P (NVML power usage) is split in two:

- **idle power**: the least power this GPU has drawn since mlcostd started (its floor, learnt
  tick by tick; the report uses the least of its window), at most P. It is what the GPU draws
  for being on and held. It goes to the processes holding memory on the GPU, by memory held
  (equally when NVML gives no memory figure), or to the host's idle line when no process holds
  the GPU;
- **active power**: P less the idle power, what running kernels add. It goes to the processes
  by their SM share (NVML per-process utilization); when no process has an SM sample, it goes
  with the idle power to the memory holders (nobody can be seen running, so whoever holds it).

So per GPU the processes' watts plus the host's idle watts equal P, and joules (watts x the
seconds the cost ledger charged) sum to the GPU's energy in daemon.analysis.totals. A GPU
without a power reading (unsupported, lost) adds nothing. kWh = J / 3.6e6; grams CO2e = kWh x
the grid intensity (pricing.grid: config, else the region's annual average, else unknown).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.analysis.cost import Holders, gpu_holders
from daemon.analysis.ledger import MAX_TICK_GAP_S, tick_seconds
from daemon.sources.safe_text import one_line
from daemon.sources.sample import GPU_OK, ProcessSample, Sample
from daemon.wire import process_key
from pricing.grid import JOULES_PER_KWH, GridIntensity, grid_intensity

ProcessKey = tuple[int, float]
Labeler = Callable[[str, Mapping[str, str]], str]  # (command, owner) -> job label
OTHER = "other"  # the rest of a bounded breakdown
MAX_GROUPS = 50  # jobs or namespaces listed in a document; the rest fold into OTHER
METHOD = ("each GPU's measured power: the part above its idle floor (least power seen) by SM "
          "share, the idle floor by memory held, or to the host's idle line when no process "
          "holds the GPU; grams CO2e = kWh x grid intensity")


@dataclass(frozen=True, slots=True)
class PowerSplit:
    """One GPU's power at one tick, split: watts per process and the host's idle line's."""

    gpu_index: int
    uuid: str
    watts: float
    idle_watts: float  # the floor used for this tick (at most `watts`)
    by_process: Mapping[ProcessKey, float]
    host_idle_watts: float


def split_power(sample: Sample, floors: Mapping[str, float],
                by_gpu: Mapping[int, list[tuple[ProcessKey, int | None, float]]] | None = None
                ) -> list[PowerSplit]:
    """Every GPU's power at this tick split as the module says; `floors`: idle watts by GPU
    UUID (a GPU not in it is all idle power). GPUs without a power reading are left out.
    `by_gpu`: (key, memory, SM share) of each process on each GPU, in the sample's order,
    where the caller grouped them already (cost.gpu_holders)."""
    users = by_gpu if by_gpu is not None else gpu_holders(sample)[0]
    splits = []
    for gpu in sample.gpus:
        watts = gpu.power_watts
        if watts is None or not math.isfinite(watts) or watts < 0:
            continue
        key = gpu.uuid or f"gpu{gpu.index}"
        idle = min(max(floors.get(key, watts), 0.0), watts)
        holders = users.get(gpu.index, [])
        if not holders:
            splits.append(PowerSplit(gpu.index, key, watts, idle, {}, watts))
            continue
        by_process: dict[ProcessKey, float] = {}
        sm = [s if gpu.status == GPU_OK and math.isfinite(s) and s > 0 else 0.0
              for _, _, s in holders]
        sm_total = math.fsum(sm)
        held = idle if sm_total > 0 else watts  # no SM sample: all of it to the holders
        if sm_total > 0:
            for (proc_key, _, _), share in zip(holders, sm, strict=True):
                if share > 0:
                    by_process[proc_key] = (by_process.get(proc_key, 0.0)
                                            + (watts - idle) * share / sm_total)
        memory = [float(max(m or 0, 0)) for _, m, _ in holders]
        weights = memory if math.fsum(memory) > 0 else [1.0] * len(holders)
        weight_total = math.fsum(weights)
        for (proc_key, _, _), weight in zip(holders, weights, strict=True):
            if weight > 0:
                by_process[proc_key] = (by_process.get(proc_key, 0.0)
                                        + held * weight / weight_total)
        splits.append(PowerSplit(gpu.index, key, watts, idle, by_process, 0.0))
    return splits


@dataclass(frozen=True, slots=True)
class EnergyTotal:
    """Joules so far of one process, job or namespace, with kWh and grams CO2e."""

    joules: float
    watts: float | None = None  # its power at the latest tick (processes only)

    def as_dict(self, grid: GridIntensity) -> dict[str, Any]:
        return energy_document(self.joules, self.watts, grid)


def energy_document(joules: float, watts: float | None, grid: GridIntensity) -> dict[str, Any]:
    """EnergyTotal.as_dict of (joules, watts): its kWh and grams CO2e under `grid`; "watts"
    only where it is known."""
    out = {"joules": joules, "kwh": joules / JOULES_PER_KWH, "co2e_grams": grid.grams(joules)}
    if watts is not None:
        out["watts"] = watts
    return out


def bounded(totals: Mapping[str, float], most: int = MAX_GROUPS) -> dict[str, float]:
    """The `most` largest entries, the rest summed under OTHER."""
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    kept = dict(ranked[:most])
    rest = math.fsum(v for _, v in ranked[most:])
    if rest > 0 or len(ranked) > most:
        kept[OTHER] = kept.get(OTHER, 0.0) + rest
    return kept


class EnergyMeter:
    """Joules per process, job, namespace, GPU and the host's idle line, tick by tick.

    `add` runs on the tick; `snapshot` and the getters may run in other threads (the lock).
    Exited processes are forgotten after a while; their jobs and namespaces keep their joules.
    """

    def __init__(self, label: Labeler, floors: Mapping[str, float] | None = None,
                 learn_floors: bool = True) -> None:
        self._label = label
        self.floors: dict[str, float] = dict(floors or {})
        self._learn = learn_floors
        self.by_process: dict[ProcessKey, float] = {}
        self.watts_now: dict[ProcessKey, float] = {}
        self.job_of: dict[ProcessKey, str] = {}
        self.by_job: dict[str, float] = {}
        self.by_namespace: dict[str, float] = {}
        self.by_workload: dict[tuple[str, str], float] = {}  # (job, namespace) -> joules
        self.by_gpu: dict[str, float] = {}
        self.gpu_index: dict[str, int] = {}
        self.gpu_watts: dict[str, tuple[float, float]] = {}  # uuid -> (watts, idle watts) now
        self.host_idle_joules = 0.0
        self.host_idle_watts = 0.0
        # process -> (owner, job, namespace, (job, namespace)): what `add` charges it under
        self._groups: dict[ProcessKey, tuple[Mapping[str, str], str, str, tuple[str, str]]] = {}
        self.lock = threading.Lock()

    def add(self, sample: Sample, seconds: float, holders: Holders | None = None
            ) -> list[PowerSplit]:
        """Charge one tick of `seconds` (what the ledger charged); returns the split.
        `holders`: gpu_holders(sample), where the caller has it already."""
        seconds = max(seconds, 0.0)
        with self.lock:
            if self._learn:
                for gpu in sample.gpus:
                    watts = gpu.power_watts
                    if watts is not None and math.isfinite(watts) and watts >= 0:
                        uuid = gpu.uuid or f"gpu{gpu.index}"
                        self.floors[uuid] = min(self.floors.get(uuid, watts), watts)
            users, procs = holders if holders is not None else gpu_holders(sample)
            splits = split_power(sample, self.floors, users)
            watts_now: dict[ProcessKey, float] = {}
            self.host_idle_watts = 0.0
            for split in splits:
                self.gpu_index[split.uuid] = split.gpu_index
                self.gpu_watts[split.uuid] = (split.watts, split.idle_watts)
                self.by_gpu[split.uuid] = self.by_gpu.get(split.uuid, 0.0) + split.watts * seconds
                self.host_idle_watts += split.host_idle_watts
                self.host_idle_joules += split.host_idle_watts * seconds
                for key, watts in split.by_process.items():
                    watts_now[key] = watts_now.get(key, 0.0) + watts
            by_process, by_job, by_workload = self.by_process, self.by_job, self.by_workload
            by_namespace, job_of, groups = self.by_namespace, self.job_of, self._groups
            for key, watts in watts_now.items():
                joules = watts * seconds
                by_process[key] = by_process.get(key, 0.0) + joules
                proc = procs[key]
                group = groups.get(key)
                if group is None or group[0] is not proc.owner or group[1] is not job_of.get(key):
                    group = self._group(key, proc)
                _, job, namespace, workload = group
                by_job[job] = by_job.get(job, 0.0) + joules
                by_workload[workload] = by_workload.get(workload, 0.0) + joules
                if namespace:
                    by_namespace[namespace] = by_namespace.get(namespace, 0.0) + joules
            self.watts_now = watts_now
            if len(self.by_process) > 4 * max(len(sample.processes), 64):  # exited: forgotten
                live = {p.key for p in sample.processes}
                self.by_process = {k: v for k, v in self.by_process.items() if k in live}
                self.job_of = {k: v for k, v in self.job_of.items() if k in live}
                self._groups = {k: v for k, v in self._groups.items() if k in live}
            return splits

    def _group(self, key: ProcessKey, proc: ProcessSample
               ) -> tuple[Mapping[str, str], str, str, tuple[str, str]]:
        """(its owner, job, namespace, (job, namespace)) of a process, kept while its owner
        is the same object (a process's owner is read once): not looked up per tick."""
        job = self.job_of.get(key)
        if job is None:
            job = self.job_of[key] = self._label(proc.command, proc.owner)
        namespace = proc.owner.get("namespace") or ""
        group = self._groups[key] = (proc.owner, job, namespace, (job, namespace))
        return group

    def workloads(self) -> tuple[dict[tuple[str, str], float], float]:
        """Joules so far per (job, namespace) ("" outside a namespace), and the host's idle
        line's: together they are all the GPUs' energy (the /metrics counters)."""
        with self.lock:
            return dict(self.by_workload), self.host_idle_joules

    def process(self, key: ProcessKey) -> EnergyTotal | None:
        """A process's joules so far and its watts now; None if it never drew any."""
        with self.lock:
            joules = self.by_process.get(key)
            return None if joules is None else EnergyTotal(joules, self.watts_now.get(key, 0.0))

    def processes(self) -> dict[ProcessKey, EnergyTotal]:
        with self.lock:
            return {k: EnergyTotal(v, self.watts_now.get(k, 0.0))
                    for k, v in self.by_process.items()}

    def process_documents(self, keys: Iterable[ProcessKey], grid: GridIntensity
                          ) -> dict[ProcessKey, dict[str, Any]]:
        """`processes()[key].as_dict(grid)` of each of `keys` that drew any, under one hold
        of the lock, without an EnergyTotal per process (a /v1/now asks for every process
        each tick)."""
        documents: dict[ProcessKey, dict[str, Any]] = {}
        with self.lock:
            by_process, watts_now = self.by_process, self.watts_now
            for key in keys:
                joules = by_process.get(key)
                if joules is not None:
                    documents[key] = energy_document(joules, watts_now.get(key, 0.0), grid)
        return documents

    def snapshot(self, grid: GridIntensity) -> dict[str, Any]:
        """JSON-ready totals: the host, each GPU, jobs and namespaces (bounded), the grid used."""
        with self.lock:
            gpus: list[dict[str, Any]] = [
                {"index": self.gpu_index[uuid], "uuid": uuid, "joules": joules,
                 "watts": self.gpu_watts[uuid][0], "idle_watts": self.gpu_watts[uuid][1]}
                for uuid, joules in self.by_gpu.items()]
            by_job, by_namespace = bounded(self.by_job), bounded(self.by_namespace)
            host_idle, host_idle_watts = self.host_idle_joules, self.host_idle_watts
        total = math.fsum(float(g["joules"]) for g in gpus)
        return {
            **EnergyTotal(total).as_dict(grid),
            "grid": grid.as_dict(),
            "host_idle": {**EnergyTotal(host_idle).as_dict(grid), "watts": host_idle_watts},
            "gpus": sorted(gpus, key=lambda g: g["index"]),
            "by_job": {k: EnergyTotal(v).as_dict(grid) for k, v in by_job.items()},
            "by_namespace": {k: EnergyTotal(v).as_dict(grid) for k, v in by_namespace.items()},
            "method": METHOD,
        }


def window_floors(samples: Iterable[Sample]) -> dict[str, float]:
    """The least power each GPU drew over `samples` (the report's idle floors)."""
    floors: dict[str, float] = {}
    for sample in samples:
        for gpu in sample.gpus:
            watts = gpu.power_watts
            if watts is not None and math.isfinite(watts) and watts >= 0:
                key = gpu.uuid or f"gpu{gpu.index}"
                floors[key] = min(floors.get(key, watts), watts)
    return floors


def process_entries(meter: EnergyMeter, grid: GridIntensity) -> dict[str, dict[str, Any]]:
    """Each process's energy document by 'pid:start_time'."""
    return {process_key(*key): total.as_dict(grid) for key, total in meter.processes().items()}


def window_meter(samples: Sequence[Sample], label: Labeler, max_gap_s: float,
                 run_starts: Sequence[float] = (), gap_ends: frozenset[int] = frozenset(),
                 before: float | None = None) -> tuple[EnergyMeter, float]:
    """The meter of a recorded window (the report): its samples in order, each charged the
    time since the one before (at most `max_gap_s`: a gap longer than that, the daemon
    stopped, counts nothing; the first tick after a daemon start, daemon.analysis.ledger's
    run_starts, nothing), with the window's own idle floors, as the spend charges them: where
    the samples are an even spread (`max_gap_s` widened to its step), a tick in `gap_ends`
    (ms: one that ends a recording gap inside a run, range_ticks.recording_gaps) counts at
    most MAX_TICK_GAP_S, as the ledger charged it; `before`, the tick before the window, from
    which its first sample counts. Returns it and the seconds it covered."""
    meter = EnergyMeter(label, window_floors(samples), learn_floors=False)
    covered, previous = 0.0, before
    for sample in samples:
        cap = max_gap_s
        if gap_ends and cap > MAX_TICK_GAP_S and round(sample.ts * 1000) in gap_ends:
            cap = MAX_TICK_GAP_S
        seconds = tick_seconds(previous, sample.ts, cap, run_starts)
        meter.add(sample, seconds)
        covered += seconds
        previous = sample.ts
    return meter, covered


def recorded_grid(host: Mapping[str, Any], override_g_per_kwh: float = 0.0,
                  override_region: str = "") -> GridIntensity:
    """The grid intensity for a recorded window: the override given (a config's [energy]),
    else the one the daemon recorded in the host facts, else the recorded price's region's."""
    recorded = GridIntensity.from_dict(host.get("grid"))
    if recorded is not None and not (override_g_per_kwh > 0 or override_region):
        return recorded
    price = host.get("price") or {}
    provider, region = price.get("provider"), price.get("region")
    return grid_intensity(provider if isinstance(provider, str) else None,
                          region if isinstance(region, str) else None,
                          override_g_per_kwh=override_g_per_kwh, override_region=override_region)


def window_summary(meter: EnergyMeter, grid: GridIntensity, covered_s: float,
                   span_s: float) -> dict[str, Any]:
    """A recorded window's totals (EnergyMeter.snapshot without the "now" watts), with the
    seconds its samples covered of the window's."""
    snapshot = meter.snapshot(grid)
    for gpu in snapshot["gpus"]:  # a window's figures: no "now"
        gpu.pop("watts", None)
    snapshot["host_idle"].pop("watts", None)
    snapshot["covered_s"] = covered_s
    snapshot["span_s"] = span_s
    return snapshot


def amount_text(kwh: float, grams: float | None) -> str:
    """An amount of energy as the report prints it: kWh, and its carbon where known."""
    if 0 < kwh < 0.01:  # a short run's figures: two significant digits, not "0.001"
        energy = f"{kwh:.{1 - math.floor(math.log10(kwh))}f} kWh"
    else:
        energy = f"{kwh:,.3f} kWh" if kwh < 10 else f"{kwh:,.1f} kWh"
    if grams is None:
        return energy
    carbon = (f"{grams / 1000:,.2f} kg" if grams >= 1000 else f"{grams:,.1f} g" if grams >= 10
              else f"{grams:.2f} g")
    return f"{energy} {carbon} CO2e"


def grid_text(grid: dict[str, Any]) -> str:
    """How carbon was figured, in a line: the intensity and its source, or why it is unknown."""
    source = one_line(str(grid.get("source") or ""))[:200]
    if grid.get("g_per_kwh") is None:
        return source
    return f"at {grid['g_per_kwh']:g} g CO2e/kWh ({source})"
