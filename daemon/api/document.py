"""The one /v1/now document builder, used by the live daemon (Daemon.now) and by replay.

Both hand over the same inputs: the host, this sample and the one before it, what the cost model
says (a `CostView`), the phase balances, the stack sampler's statuses, the open low-utilization
windows and the store's health. The rates come from the typed derived model
(daemon.analysis.derive), each GPU's busy/idle verdict from daemon.analysis.busy.gpu_is_busy
under the configured `[idle].utilization`. So a recorded tick replays as the live daemon showed it.
The recommendations shown are combined here (daemon.analysis.rules.combine) into the one
"potential savings" figure, which never exceeds the host's monthly bill.
Keys are documented in the README; later features add keys, never rename them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.busy import gpu_is_busy
from daemon.analysis.derive import GpuModel, HostUsageModel, ProcessModel, TickModel
from daemon.analysis.inference_audit import with_savings
from daemon.analysis.rules.combine import savings_document
from daemon.sources.owners import workload_label
from daemon.sources.sample import GPU_OK, GpuSample, Sample
from daemon.wire import HIGH_CONFIDENCE
from pricing.offcloud import gpus_energy_per_hour

DOCUMENT_VERSION = 1


@dataclass(frozen=True)
class CostView:
    """What the cost model says at this tick, JSON-ready.

    `burn` is the host's burn (total/wasted/idle per hour, price per GPU, per-GPU split),
    `ledger` the cumulative spend (CostLedger.as_dict without by_process), `processes` maps a
    process key to {burn_per_hour, cost, job}; events and recommendations are the active ones.
    """

    price: dict[str, Any]
    burn: dict[str, Any]
    ledger: dict[str, Any]
    processes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    recommendations: list[dict[str, Any]] = field(default_factory=list)
    energy: Mapping[str, Any] | None = None  # daemon.analysis.energy: joules, kWh, CO2e so far

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any],
                      recommendations: list[dict[str, Any]]) -> CostView:
        """From Analyzer.snapshot(), with the recommendations the caller lets through."""
        burn = dict(snapshot["burn"])
        price = burn.pop("price")
        return cls(price=price, burn=burn, ledger=dict(snapshot["cost"]),
                   processes=snapshot["processes"], events=list(snapshot["events"]),
                   recommendations=recommendations, energy=snapshot.get("energy"))


def gpu_busy(gpu: GpuSample, idle_utilization_pct: float) -> bool | None:
    """Busy or idle under the idle threshold; None when the GPU's utilization is unknown."""
    if gpu.status != GPU_OK or gpu.utilization is None:
        return None
    return gpu_is_busy(gpu.utilization, idle_utilization_pct)


def gpu_entry(gpu: GpuModel) -> dict[str, Any]:
    return {
        "index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "status": gpu.status,
        "error": gpu.error, "utilization": gpu.utilization, "sm_activity": gpu.sm_activity,
        "memory_used_bytes": gpu.memory_used_bytes, "memory_total_bytes": gpu.memory_total_bytes,
        "memory_reserved_bytes": gpu.memory_reserved_bytes,
        "power_watts": gpu.power_watts, "temperature_c": gpu.temperature_c,
        "sm_clock_mhz": gpu.sm_clock_mhz, "memory_clock_mhz": gpu.memory_clock_mhz,
        "busy": gpu.busy,
    }


def host_usage_entry(usage: HostUsageModel) -> dict[str, Any]:
    """The GPU host's CPU busy share since the tick before, memory and load: the TUI's host
    line, wherever it runs (daemon.wire.HostUsage)."""
    return {"cpu_percent": usage.cpu_percent, "cpus": usage.cpus,
            "memory_used_bytes": usage.memory_used_bytes,
            "memory_total_bytes": usage.memory_total_bytes,
            "load": list(usage.load) if usage.load is not None else None}


# Until a process has been watched this long with no stack sampled, its balance is all compute by
# default (a dip must last [detect].min_window, 3 s by default, before a window opens and stacks
# are sampled): its phase is not known yet, and the document says so (None) rather than compute.
PHASE_KNOWN_AFTER_S = 10.0


def phase_known(balance: Mapping[str, Mapping[str, Any]] | None) -> bool:
    if not balance:
        return False
    watched = sum(float(part.get("seconds") or 0.0) for part in balance.values())
    sampled = any(part.get("top_stacks") for part in balance.values())
    return sampled or watched >= PHASE_KNOWN_AFTER_S


def process_entry(proc: ProcessModel, cost: Mapping[str, Any] | None,
                  balance: Mapping[str, Mapping[str, Any]] | None,
                  stack_status: Mapping[str, Any] | None,
                  kind: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One process: what it is, its rates, its burn and cost, its phase balance, its kind."""
    kind = kind or {}
    phases = {phase: part["share"] for phase, part in balance.items()} if balance else {}
    top_phase = (max(phases, key=lambda p: phases[p]) if phases and phase_known(balance)
                 else None)
    return {
        "key": proc.key, "pid": proc.pid, "start_time": proc.start_time, "ppid": proc.ppid,
        "user": proc.user, "command": proc.command,
        "gpus": [{"index": u.index, "memory_bytes": u.memory_bytes, "sm_share": u.sm_share}
                 for u in proc.gpus],
        "gpu_memory_bytes": proc.gpu_memory_bytes, "sm_share": proc.sm_share,
        "cpu_percent": proc.cpu_percent, "rss_bytes": proc.rss_bytes,
        "read_bytes_per_s": proc.read_bytes_per_s, "write_bytes_per_s": proc.write_bytes_per_s,
        "io_wait_percent": proc.io_wait_percent, "state": proc.state,
        "threads": proc.threads, "threads_in_d": proc.threads_in_d,
        "burn_per_hour": cost.get("burn_per_hour") if cost else None,
        "cost": cost.get("cost") if cost else None,
        "job": cost.get("job") if cost else None,
        # daemon.analysis.energy: its watts now, joules, kWh and grams CO2e so far
        "energy": cost.get("energy") if cost else None,
        "phases": phases,
        "phase": top_phase,
        # "high" from stacks, "low" from /proc alone (ptrace denied or stacks off); None: no phase
        "phase_confidence": (balance or {}).get(top_phase, {}).get("confidence", HIGH_CONFIDENCE)
        if top_phase else None,
        "stack_status": stack_status["status"] if stack_status else None,
        # Why each phase was decided, from its top stack's classification.
        "phase_reasons": {phase: (part["top_stacks"][0].get("reason")
                                  if part.get("top_stacks") else None)
                          for phase, part in balance.items()} if balance else {},
        "owner": dict(proc.owner),
        "workload": workload_label(proc.owner),
        # daemon.analysis.kinds: what it is (training, serving...), how sure, and why.
        "kind": kind.get("kind"), "kind_confidence": kind.get("kind_confidence"),
        "kind_evidence": list(kind.get("kind_evidence") or []),
        "serves": bool(kind.get("serves")),
        # "observed" (classified) or "config" ([kinds.jobs]); None where no kind is known
        "kind_source": kind.get("kind_source"),
        # daemon.analysis.inference_audit: runtime, quantization, batching and advice with
        # savings in $/month from this burn; None for a process that is not inference
        "inference": with_savings(kind.get("inference"),
                                  cost.get("burn_per_hour") if cost else None),
    }


def now_document(
    *,
    host: Mapping[str, Any],
    sample: Sample | None,
    previous: Sample | None,
    tick: int,
    idle_utilization_pct: float,
    cost: CostView | None = None,
    phases: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    stack_statuses: Mapping[str, Mapping[str, Any]] | None = None,
    windows: list[dict[str, Any]] | None = None,
    store: dict[str, Any] | None = None,
    kinds: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The /v1/now document. Phases, stack statuses and per-process costs are keyed by
    daemon.wire.process_key; a missing input reads as None or empty in the document."""
    doc: dict[str, Any] = {"version": DOCUMENT_VERSION, "host": dict(host),
                           "ts": None, "tick": tick, "gpus": [], "processes": [],
                           "host_usage": None, "store": store}
    if sample is not None:
        busy = {g.index: gpu_busy(g, idle_utilization_pct) for g in sample.gpus}
        model = TickModel.from_samples(sample, previous, busy)
        costs = cost.processes if cost is not None else {}
        doc["ts"], doc["tick"] = model.ts, model.tick
        doc["gpus"] = [gpu_entry(g) for g in model.gpus]
        if model.host_usage is not None:
            doc["host_usage"] = host_usage_entry(model.host_usage)
        doc["processes"] = [
            process_entry(p, costs.get(p.key), (phases or {}).get(p.key),
                          (stack_statuses or {}).get(p.key), (kinds or {}).get(p.key))
            for p in model.processes]
    if cost is not None:
        doc["price"] = cost.price
        doc["burn"] = cost.burn
        per_kwh = cost.price.get("electricity_per_kwh")
        if per_kwh and sample is not None:  # the GPUs' measured power, priced beside the burn
            by_gpu, total = gpus_energy_per_hour(
                {g.index: g.power_watts for g in sample.gpus}, float(per_kwh))
            doc["burn"] = dict(cost.burn, energy_per_hour=total)
            for entry in doc["gpus"]:
                entry["energy_per_hour"] = by_gpu.get(entry["index"])
        doc["cost"] = cost.ledger
        doc["energy"] = dict(cost.energy) if cost.energy is not None else None
        doc["events"] = cost.events
        gpus = [g.index for g in sample.gpus] if sample is not None else []
        doc["recommendations"], doc["savings"] = savings_document(
            cost.recommendations, cost.price.get("per_hour"), gpus)
    doc["windows"] = list(windows or [])
    return doc
