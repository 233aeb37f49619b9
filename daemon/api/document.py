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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.busy import gpu_is_busy
from daemon.analysis.cost_state import CostState, ProcessCost
from daemon.analysis.derive import GpuModel, HostUsageModel, ProcessModel, TickModel
from daemon.analysis.inference_audit import with_savings
from daemon.analysis.rules.combine import savings_document
from daemon.config.sections import AttributionConfig
from daemon.sources.owners import workload_label
from daemon.sources.sample import GPU_FIELDS, GPU_OK, GpuSample, Sample
from daemon.wire import COMPUTE, HIGH_CONFIDENCE, IDLE
from pricing.offcloud import gpus_energy_per_hour

DOCUMENT_VERSION = 1


@dataclass(frozen=True)
class CostView:
    """What the cost model says at this tick, JSON-ready.

    `burn` is the host's burn (total/wasted/idle per hour, price per GPU, per-GPU split),
    `ledger` the cumulative spend (CostLedger.as_dict without by_process), `processes` maps a
    process key to its ProcessCost; events and recommendations are the active ones.
    """

    price: dict[str, Any]
    burn: dict[str, Any]
    ledger: dict[str, Any]
    processes: Mapping[str, ProcessCost] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    recommendations: list[dict[str, Any]] = field(default_factory=list)
    energy: Mapping[str, Any] | None = None  # daemon.analysis.energy: joules, kWh, CO2e so far
    spend_today: float | None = None  # the UTC day's, runs before this start included
    # where spend_today counts from after the day's start: a replay of a store that holds the
    # day from then on only (a snapshot, a store begun mid-day); None: the whole day
    spend_today_since: float | None = None
    budgets: Sequence[dict[str, Any]] = ()  # BudgetWatch.status

    @classmethod
    def from_state(cls, state: CostState, recommendations: list[dict[str, Any]]) -> CostView:
        """From Analyzer.cost_state(), with the recommendations the caller lets through."""
        return cls(price=state.price, burn=state.burn, ledger=state.ledger,
                   processes=state.processes, events=state.events,
                   recommendations=recommendations, energy=state.energy,
                   spend_today=state.spend_today, budgets=state.budgets)

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any],
                      recommendations: list[dict[str, Any]]) -> CostView:
        """From Analyzer.snapshot() (tools that hold its dict), as `from_state` reads it."""
        burn = dict(snapshot["burn"])
        price = burn.pop("price")
        processes = {key: ProcessCost(p.get("burn_per_hour"), p.get("cost"), p.get("job"),
                                      p.get("energy"))
                     for key, p in snapshot["processes"].items()}
        return cls(price=price, burn=burn, ledger=dict(snapshot["cost"]),
                   processes=processes, events=list(snapshot["events"]),
                   recommendations=recommendations, energy=snapshot.get("energy"))


def gpu_busy(gpu: GpuSample, idle_utilization_pct: float) -> bool | None:
    """Busy or idle under the idle threshold; None when the GPU's utilization is unknown."""
    if gpu.status != GPU_OK or gpu.utilization is None:
        return None
    return gpu_is_busy(gpu.utilization, idle_utilization_pct)


def gpu_entry(gpu: GpuModel) -> dict[str, Any]:
    """One GPU: its fields (daemon.sources.sample.GPU_FIELDS), its busy verdict and its
    energy's price."""
    entry = {name: getattr(gpu, name) for name in GPU_FIELDS}
    entry["busy"] = gpu.busy
    entry["energy_per_hour"] = None  # priced in now_document where [instance] $/kWh is set
    return entry


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


# A process working on its GPU at this SM share (its mean over its GPUs) or more, outside a
# low-utilization window, is computing now ([attribution].low_sm_share's default: below it a
# dip starts and stacks are sampled again).
WORKING_SM_SHARE = AttributionConfig().low_sm_share


def phase_now(entry: Mapping[str, Any], proc: ProcessModel, in_window: bool,
              working_sm_share: float = WORKING_SM_SHARE, latest: str | None = None
              ) -> str | None:
    """The phase a process is in now (/v1/now's `phase_now`, the TUI's phase column): in an
    open low-utilization window, what most of the stacks sampled lately in it say (`latest`,
    daemon.analysis.live_phases.LivePhases.latest_phase: a job that computes most of the time
    is writing a checkpoint now, a starved job caught in its kernel in one dump in six is
    waiting for data); `compute` while it holds a GPU at `working_sm_share` or more outside any
    window; else, its GPU quiet with no stack sampled in this quiet stretch yet (the first
    seconds, before a window opens), what its stacks said while its GPU was quiet before:
    `quiet_phase`. Stacks are sampled only in those windows, so when it is back at work every
    stack its balance rests on was taken before: an `idle` or `data_wait` from them says what
    it did then, and the GPU says what it does now. None while its phase is not known yet (as
    `phase`). (now_document then reads `compute` for an `idle` on a busy GPU of its own:
    `works_on_busy_gpu`.)"""
    top = entry["phase"]
    if top is None:
        return None
    if in_window:
        return latest if latest is not None else quiet_phase(entry)
    share, gpus = proc.sm_share, proc.gpus
    if share is None or not gpus or not proc.gpu_memory_bytes:
        return top
    return COMPUTE if share / len(gpus) >= working_sm_share else quiet_phase(entry)


def works_on_busy_gpu(proc: ProcessModel, busy: Mapping[int, bool | None],
                      holders: Mapping[int, int]) -> bool:
    """Whether a GPU `proc` holds reads busy (utilization at the idle threshold or more:
    `busy`, by index) with its work: its own SM share there is above 0, or nothing else holds
    it (`holders`: how many processes hold each GPU; a host whose NVML gives no per-process
    shares reads 0 for all). A process holding memory idle on a GPU another keeps busy works
    on none; one that holds no memory there (0 bytes) is not on it."""
    for use in proc.gpus:
        if busy.get(use.gpu_index) and use.memory_bytes != 0 and (
                use.sm_share > 0 or holders.get(use.gpu_index) == 1):
            return True
    return False


def not_idle_on_busy_gpus(processes: Sequence[ProcessModel], entries: Sequence[dict[str, Any]],
                          busy: Mapping[int, bool | None]) -> None:
    """`phase_now` `compute`, not `idle`, for each process that works on a busy GPU
    (`works_on_busy_gpu`), in its entry (`entries`, in the order of `processes`): a server
    between requests on a GPU its own kernels keep 89% busy, whose last stacks say idle, is not
    idle (probe 148 M3); its balance (`phase`, the rules') keeps those stacks. Only the entries
    that read `idle` are looked at; who holds which GPU is counted only where one does."""
    holders: dict[int, int] | None = None
    for proc, entry in zip(processes, entries, strict=True):
        if entry["phase_now"] != IDLE or not proc.gpus:
            continue
        if holders is None:
            holders = {}
            for other in processes:
                for use in other.gpus:
                    holders[use.gpu_index] = holders.get(use.gpu_index, 0) + 1
        if works_on_busy_gpu(proc, busy, holders):
            entry["phase_now"] = COMPUTE


def quiet_phase(entry: Mapping[str, Any]) -> str | None:
    """What a process whose GPU is quiet is taken to do before a stack says: its balance's top
    phase, or, where that is compute (the GPU's own busy time), the largest of the rest, what
    its stacks said in its earlier quiet stretches (a job that saves a checkpoint every few
    minutes is saving one again). Its top where nothing else was seen."""
    top = entry["phase"]
    if top != COMPUTE:
        return top
    waits = [(share, phase) for phase, share in entry["phases"].items()
             if phase != COMPUTE and share]
    return max(waits)[1] if waits else top


def phase_known(balance: Mapping[str, Mapping[str, Any]] | None) -> bool:
    """Whether a stack was sampled, or the process watched PHASE_KNOWN_AFTER_S."""
    return _phase_fields(balance)[1] is not None


def _phase_fields(balance: Mapping[str, Mapping[str, Any]] | None
                  ) -> tuple[dict[str, Any], str | None, str | None, dict[str, Any]]:
    """A balance's shares by phase, its top phase (None until `phase_known`), that phase's
    confidence and each phase's reason (its top stack's), in one pass over the balance."""
    if not balance:
        return {}, None, None, {}
    phases: dict[str, Any] = {}
    reasons: dict[str, Any] = {}
    sampled = False
    for phase, part in balance.items():
        phases[phase] = part["share"]
        stacks = part.get("top_stacks")
        if stacks:
            sampled = True
            reasons[phase] = stacks[0].get("reason")
        else:
            reasons[phase] = None
    if not sampled:  # known once watched long enough (its seconds summed in order, as sum())
        seconds: float = 0
        for part in balance.values():
            seconds += float(part.get("seconds") or 0.0)
        if not seconds >= PHASE_KNOWN_AFTER_S:  # its phase is not known yet
            return phases, None, None, reasons
    top = max(phases, key=phases.__getitem__)
    return phases, top, balance[top].get("confidence", HIGH_CONFIDENCE), reasons


def process_entry(proc: ProcessModel, cost: ProcessCost | None,
                  balance: Mapping[str, Mapping[str, Any]] | None,
                  stack_status: Mapping[str, Any] | None,
                  kind: Mapping[str, Any] | None = None, *, in_window: bool = False,
                  working_sm_share: float = WORKING_SM_SHARE,
                  latest: str | None = None) -> dict[str, Any]:
    """One process: what it is, its rates, its burn and cost, its phase balance, its kind.
    `in_window`: it is in an open low-utilization window now, `latest` the phase the stacks
    sampled lately in it say (see `phase_now`)."""
    entry = _entry(proc, cost, balance, stack_status, kind)
    entry["phase_now"] = phase_now(entry, proc, in_window, working_sm_share, latest)
    return entry


def _entry(proc: ProcessModel, cost: ProcessCost | None,
           balance: Mapping[str, Mapping[str, Any]] | None,
           stack_status: Mapping[str, Any] | None,
           kind: Mapping[str, Any] | None) -> dict[str, Any]:
    """A process entry, its keys in their order: its identity, what changes every tick (its
    GPUs and rates, its burn, cost and energy), its phase and kind fields, its inference
    audit's savings."""
    entry: dict[str, Any] = {"key": proc.key, "pid": proc.pid, "start_time": proc.start_time,
                             "ppid": proc.ppid, "user": proc.user, "command": proc.command}
    _put_tick_fields(entry, proc, cost)
    _put_phase_fields(entry, balance, stack_status)
    entry.update(_kind_fields(proc.owner, kind))
    entry["inference"] = _inference(kind, entry["burn_per_hour"])
    return entry


def _put_tick_fields(entry: dict[str, Any], proc: ProcessModel,
                     cost: ProcessCost | None) -> None:
    """What changes every tick, written into `entry`: its GPUs and rates, its burn, cost and
    energy. (Into a kept entry's copy, where the keys are in place already: a store per key
    costs half of a new dict merged in.)"""
    burn_per_hour: float | None
    spent: float | None
    job: str | None
    energy: dict[str, Any] | None
    if cost is not None:
        burn_per_hour, spent, job, energy = cost
    else:
        burn_per_hour = spent = job = energy = None
    entry["gpus"] = [{"index": u.gpu_index, "memory_bytes": u.memory_bytes,
                      "sm_share": u.sm_share} for u in proc.gpus]
    entry["gpu_memory_bytes"] = proc.gpu_memory_bytes
    entry["sm_share"] = proc.sm_share
    entry["cpu_percent"] = proc.cpu_percent
    entry["rss_bytes"] = proc.rss_bytes
    entry["read_bytes_per_s"] = proc.read_bytes_per_s
    entry["write_bytes_per_s"] = proc.write_bytes_per_s
    entry["io_wait_percent"] = proc.io_wait_percent
    entry["state"] = proc.state
    entry["threads"] = proc.threads
    entry["threads_in_d"] = proc.threads_in_d
    entry["burn_per_hour"] = burn_per_hour
    entry["cost"] = spent
    entry["job"] = job
    entry["energy"] = energy  # daemon.analysis.energy: its watts now, joules, kWh, CO2e so far


def _inference(kind: Mapping[str, Any] | None, burn_per_hour: float | None
               ) -> dict[str, Any] | None:
    """daemon.analysis.inference_audit: runtime, quantization, batching and advice with
    savings in $/month from this burn; None for a process that is not inference."""
    audit = kind.get("inference") if kind else None
    return with_savings(audit, burn_per_hour) if audit is not None else None


def _put_phase_fields(entry: dict[str, Any], balance: Mapping[str, Mapping[str, Any]] | None,
                      stack_status: Mapping[str, Any] | None) -> None:
    """Its phase fields, written into `entry`."""
    phases, top_phase, confidence, reasons = _phase_fields(balance)
    entry["phases"] = phases
    entry["phase"] = top_phase
    # the phase it is in now: `phase`, or compute while it works outside a window (phase_now);
    # set per tick, from its SM share
    entry["phase_now"] = top_phase
    # "high" from stacks, "low" from /proc alone (ptrace denied or stacks off); None: no phase
    entry["phase_confidence"] = confidence
    entry["stack_status"] = stack_status["status"] if stack_status else None
    # Why each phase was decided, from its top stack's classification.
    entry["phase_reasons"] = reasons


def _kind_fields(owner: Mapping[str, str], kind: Mapping[str, Any] | None) -> dict[str, Any]:
    kind = kind or {}
    return {
        "owner": dict(owner),
        "workload": workload_label(owner),
        # daemon.analysis.kinds: what it is (training, serving...), how sure, and why.
        "kind": kind.get("kind"), "kind_confidence": kind.get("kind_confidence"),
        "kind_evidence": list(kind.get("kind_evidence") or []),
        "serves": bool(kind.get("serves")),
        # "observed" (classified) or "config" ([kinds.jobs]); None where no kind is known
        "kind_source": kind.get("kind_source"),
    }


class _KeptEntry:
    """One process's entry as ProcessEntries keeps it between documents: what its slowly
    changing fields were built from, and a template holding them in the entry's key order."""

    __slots__ = ("identity", "phase_inputs", "kind_inputs", "template")

    def __init__(self, identity: tuple[Any, ...], phase_inputs: tuple[Any, ...],
                 kind_inputs: tuple[Any, ...], template: dict[str, Any]) -> None:
        self.identity = identity
        self.phase_inputs = phase_inputs
        self.kind_inputs = kind_inputs
        self.template = template


class ProcessEntries:
    """Builds process entries as `process_entry` does, keeping the parts that change only
    when a process's identity, phase balance, stack status, owner or kind does: a live daemon
    builds a document every tick, and most processes' balances and kinds stay the same objects
    from one to the next (daemon.analysis.live_phases, runtime/kinds.py). Parts are reused
    while their inputs are the same objects (or equal), so an entry is the same as
    `process_entry` builds; the documents share them, to be read, never changed.

    Each process's entry starts as a copy of a template kept for it (its identity, phase and
    kind fields in place, in the entry's key order), the fields that change every tick stored
    into it: a dict copy and a store per key cost a third of a dict display that unpacks three
    dicts and a new dict of the tick's fields (measured: 1.2 against 3.4 us). (Their JSON is
    not kept: json.dumps of the whole document in C is quicker than joining kept pieces in
    Python, measured at 256 processes: the entries' kept parts as JSON, joined with each
    tick's fields encoded, saved 12% of the body's 6.3 ms when the phases are kept too,
    nothing when they are not.)"""

    def __init__(self) -> None:
        self._kept: dict[str, _KeptEntry] = {}  # process key -> its kept parts

    def entry(self, proc: ProcessModel, cost: ProcessCost | None,
              balance: Mapping[str, Mapping[str, Any]] | None,
              stack_status: Mapping[str, Any] | None,
              kind: Mapping[str, Any] | None, *, in_window: bool = False,
              working_sm_share: float = WORKING_SM_SHARE,
              latest: str | None = None) -> dict[str, Any]:
        kept = self._kept.get(proc.key)
        identity = (proc.ppid, proc.user, proc.command)
        owner = proc.owner
        if kept is None or kept.identity != identity or not (
                kept.kind_inputs[0] is owner or kept.kind_inputs[0] == owner) or not (
                kept.kind_inputs[1] is kind or kept.kind_inputs[1] == kind):
            kept = self._kept[proc.key] = _KeptEntry(
                identity, (balance, stack_status), (owner, kind),
                _entry(proc, cost, balance, stack_status, kind))
        # a balance is rebuilt (a new object) when it changed: the same object is the same
        elif kept.phase_inputs[0] is not balance or kept.phase_inputs[1] is not stack_status:
            kept.phase_inputs = (balance, stack_status)
            _put_phase_fields(kept.template, balance, stack_status)
        entry = kept.template.copy()
        _put_tick_fields(entry, proc, cost)
        entry["inference"] = _inference(kind, entry["burn_per_hour"])
        entry["phase_now"] = phase_now(entry, proc, in_window, working_sm_share, latest)
        return entry

    def keep_only(self, keys: set[str]) -> None:
        """Forget the processes not in `keys` (those that exited)."""
        if len(self._kept) == len(keys):  # each of `keys` was just built: no other
            return
        for key in [k for k in self._kept if k not in keys]:
            del self._kept[key]


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
    entries: ProcessEntries | None = None,
    working_sm_share: float = WORKING_SM_SHARE,
    window_phases: Mapping[str, str] | None = None,
    daemon_id: str | None = None,
) -> dict[str, Any]:
    """The /v1/now document. Phases, stack statuses and per-process costs are keyed by
    daemon.wire.process_key; a missing input reads as None or empty in the document.
    `entries`: the process entries' parts kept from the document before (a live daemon's).
    `working_sm_share`: [attribution].low_sm_share (a process's `phase_now`); `window_phases`:
    the phase the stacks sampled lately in each open low-utilization window say, by process key
    (LivePhases.latest_phase);
    `daemon_id`: the live daemon's (Daemon.daemon_id), None in a replay."""
    doc: dict[str, Any] = {"version": DOCUMENT_VERSION, "host": dict(host),
                           "daemon_id": daemon_id,
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
        phases, stack_statuses, kinds = phases or {}, stack_statuses or {}, kinds or {}
        build = entries.entry if entries is not None else process_entry
        # the processes in an open low-utilization window (their stacks are being sampled)
        sampled = {w.get("target") for w in windows or ()}
        latest = window_phases or {}
        doc["processes"] = [
            build(p, costs.get(p.key), phases.get(p.key), stack_statuses.get(p.key),
                  kinds.get(p.key), in_window=p.key in sampled,
                  working_sm_share=working_sm_share, latest=latest.get(p.key))
            for p in model.processes]
        not_idle_on_busy_gpus(model.processes, doc["processes"], busy)
        if entries is not None:
            entries.keep_only({p.key for p in model.processes})
    if cost is not None:
        doc["price"] = cost.price
        doc["burn"] = cost.burn
        per_kwh = cost.price.get("electricity_per_kwh")
        by_gpu: dict[int, float] = {}
        total: float | None = None
        if per_kwh and sample is not None:  # the GPUs' measured power, priced beside the burn
            by_gpu, total = gpus_energy_per_hour(
                {g.index: g.power_watts for g in sample.gpus}, float(per_kwh))
        # null without an electricity price: a key of the document is never left out
        doc["burn"] = dict(cost.burn, energy_per_hour=total)
        for entry in doc["gpus"]:
            entry["energy_per_hour"] = by_gpu.get(entry["index"])
        doc["cost"] = cost.ledger
        if cost.spend_today is not None:  # else a client reads cost.by_day (daemon.wire)
            doc["spend_today"] = cost.spend_today
        # null live (the whole day as the store recorded it); a time in a replay of a file
        # that holds the day from then on only
        doc["spend_today_since"] = cost.spend_today_since
        doc["budgets"] = list(cost.budgets)
        doc["energy"] = dict(cost.energy) if cost.energy is not None else None
        doc["events"] = cost.events
        gpus = [g.index for g in sample.gpus] if sample is not None else []
        doc["recommendations"], doc["savings"] = savings_document(
            cost.recommendations, cost.price.get("per_hour"), gpus)
    doc["windows"] = list(windows or [])
    return doc
