"""The cost model: host $/h -> GPU $/h -> process $/h, at one tick.

A GPU host is bought for its GPUs, so the whole host price is charged to them: price per GPU =
host price / GPU count. On each GPU the price goes to the processes that hold it:

- busy GPU (`daemon.analysis.busy.gpu_is_busy` at [idle].utilization): split by SM share (what
  NVML's per-process utilization says each process kept busy); if no process has an SM sample,
  by memory held;
- idle GPU (or utilization unknown): split by memory held (whoever holds the memory holds it);
- a GPU no process holds: its whole price is the host's idle burn (OpenCost's `__idle__`);
- a GPU not read this tick (timed out, lost, failing: not ok, no memory reading): split by the
  memory its holders held at its last reading (NvmlSource keeps them in the sample), basis
  "unread"; held by no one then, it is idle burn, basis "unread" all the same.

So `total_per_hour == sum(process burn) + idle_per_hour`, by construction. Wasted burn is a
different view, computed by `gpu_wasted_per_hour` alone: price x (1 - utilization) per GPU, and
an idle or lost GPU counts whole. Every figure carries its inputs (`as_dict()`), so any dollar
can be explained.

GPUs the price counts but NVML does not list (a p4d's 8 in the catalog, 4 seen: GPUs that
failed to enumerate, a partial passthrough) are charged too, `unseen_gpus` of them: each is
idle burn, held by no process, and wasted whole, so the burn's parts add up to the host price
whether NVML sees fewer GPUs than the type has, as many, or more (`host_price` then splits
the price over the GPUs seen).

A tick that reads no GPU while the host has GPUs to bill (NVML not started: the driver missing
or mismatched; or started and its GPUs not read yet) charges the host's price all the same, as
that many lost GPUs (`unread_gpus`, the GPU count of the price, at least 1): each is idle burn,
held by no process, and wasted whole. The machine is billed while its GPUs cannot be read; a
tick at $0 would drop those hours from the ledger, spend today and the budgets.

Dollars over time are the ledger's (daemon.analysis.ledger); storage and unit cost are the
meters' (daemon.analysis.meters).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, IdleThresholds, gpu_is_busy
from daemon.sources.sample import GPU_OK, NVML_OK, ProcessSample, Sample
from daemon.wire import process_key

NO_PRICE_SOURCE = "no price: set [instance].price_per_hour"

ProcessKey = tuple[int, float]
# (key, memory held, SM share) of the processes on each GPU, in the sample's order; and the
# processes that hold a GPU, by key, in that order (gpu_holders)
Holders = tuple[dict[int, list[tuple[ProcessKey, int | None, float]]],
                dict[ProcessKey, ProcessSample]]


# -- host price ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostPrice:
    """The host's price per hour and where it came from."""

    per_hour: float
    gpu_count: int
    lifecycle: str
    instance_type: str | None
    provider: str | None
    region: str | None
    source: str
    as_of: str | None  # ISO date-time of the price; None when the catalog has no date
    live: bool = False
    warning: str = ""  # why the price may be wrong (stale, pre-cut, estimate) and the fix
    electricity_per_kwh: float | None = None  # off-cloud: the GPUs' measured power is priced

    @classmethod
    def from_dict(cls, recorded: object) -> HostPrice | None:
        """The price as the daemon recorded it (`as_dict()` in the store's host facts), or None
        when there is none."""
        if not isinstance(recorded, dict) or not isinstance(recorded.get("per_hour"), int | float):
            return None
        values = {k: recorded[k] for k in cls.__dataclass_fields__ if k in recorded}
        values.setdefault("gpu_count", 0)
        values.setdefault("lifecycle", "")
        values.setdefault("source", "recorded price")
        for optional in ("instance_type", "provider", "region", "as_of"):
            values.setdefault(optional, None)
        return cls(**values)

    @property
    def per_gpu(self) -> float:
        """Host price / GPU count (a GPU host is bought for its GPUs); 0 without GPUs."""
        return self.per_hour / self.gpu_count if self.gpu_count > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_hour": self.per_hour,
            "per_gpu_per_hour": self.per_gpu,
            "gpu_count": self.gpu_count,
            "lifecycle": self.lifecycle,
            "instance_type": self.instance_type,
            "provider": self.provider,
            "region": self.region,
            "source": self.source,
            "as_of": self.as_of,
            "live": self.live,
            "warning": self.warning,
            "electricity_per_kwh": self.electricity_per_kwh,
        }


def host_price(
    instance: Any,
    catalog: Any,
    override_price_per_hour: float = 0.0,
    override_lifecycle: str = "",
    gpu_count_seen: int | None = None,
) -> HostPrice:
    """The host price: the configured price wins; else the catalog's price for the detected
    provider, instance type, region and lifecycle; else (off-cloud, unknown type) 0 with a
    source that says how to set one. `instance` is a `pricing.Instance` (or None)."""
    provider = getattr(instance, "provider", None)
    instance_type = getattr(instance, "instance_type", None)
    region = getattr(instance, "region", None)
    lifecycle = override_lifecycle or getattr(instance, "lifecycle", None) or "on-demand"
    offer = None
    region_note = ""
    if provider and instance_type and catalog is not None:
        offer = catalog.by_instance(provider, instance_type, region=region) if region else None
        if offer is None:
            offer = catalog.by_instance(provider, instance_type)
            if offer is not None and region and offer.region.lower() != region.lower():
                region_note = f" (price of {offer.region}; no {region} price in the catalog)"
    gpu_count = offer.accelerator_count if offer is not None else (gpu_count_seen or 0)
    gpu_note = ""
    if offer is not None and gpu_count_seen and gpu_count_seen > gpu_count:
        # More GPUs than the type has (a wrong type in the config or a scenario): the price is
        # split over the GPUs there are, so the GPUs together never cost more than the host.
        gpu_note = (f" (NVML sees {gpu_count_seen} GPUs where the catalog lists {gpu_count} "
                    f"for {offer.instance_type}: check [instance].type; the price is split "
                    f"over {gpu_count_seen})")
        region_note += gpu_note
        gpu_count = gpu_count_seen

    def make(per_hour: float, source: str, as_of: str | None = None, live: bool = False,
             kind: str = lifecycle) -> HostPrice:
        return HostPrice(per_hour, gpu_count, kind, instance_type, provider, region, source,
                         as_of, live)

    if override_price_per_hour > 0:
        return make(override_price_per_hour, "config [instance].price_per_hour" + gpu_note)
    if offer is None:
        if provider and instance_type:
            return make(0.0, f"{NO_PRICE_SOURCE} ({provider}/{instance_type} is not in the "
                             "catalog)")
        return make(0.0, NO_PRICE_SOURCE)
    price = offer.price(lifecycle)
    note = region_note
    if price is None and lifecycle != "on-demand":
        # No spot/commitment price known: on-demand is the upper bound of what this host costs.
        price = offer.price("on-demand")
        note += f"; no {lifecycle} price in the catalog, on-demand used (an upper bound)"
    if price is None:
        return make(0.0, f"{NO_PRICE_SOURCE} (the catalog has no {lifecycle} price for "
                         f"{offer.instance_type})")
    as_of = price.as_of.isoformat() if price.as_of is not None else None
    label = "live" if price.live else "catalog"
    return make(price.per_hour, f"{label}: {price.source} ({price.describe()}){note}", as_of,
                price.live, kind=price.kind)

# -- burn ------------------------------------------------------------------------------------


# ProcessShare and ProcessBurn are named tuples: `burn` builds one of each per process per
# tick, and a frozen dataclass's init (a setattr per field) costs ~5x as much.
class ProcessShare(NamedTuple):
    """One process's share of one GPU and why."""

    gpu_index: int
    share: float  # 0..1 of the GPU's price
    basis: str  # "sm" | "memory" | "equal" | "unread" (by memory at the GPU's last reading)
    per_hour: float

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu_index, "share": self.share, "basis": self.basis,
                "burn_per_hour": self.per_hour}


class ProcessBurn(NamedTuple):
    key: ProcessKey
    user: str
    command: str
    burn_per_hour: float
    shares: tuple[ProcessShare, ...]
    owner: Mapping[str, str]  # daemon.sources.owners

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.key[0], "start_time": self.key[1], "user": self.user,
                "burn_per_hour": self.burn_per_hour,
                "shares": [s.as_dict() for s in self.shares]}


@dataclass(frozen=True, slots=True)
class GpuBurn:
    index: int
    price_per_hour: float
    utilization: float | None
    busy: bool | None  # gpu_is_busy's verdict; None: utilization unknown or the GPU not ok
    # how the price was split: "sm" | "memory" | "equal" | "unheld" | "unread" (not read this
    # tick: by the memory its holders held at its last reading)
    basis: str
    allocated_per_hour: float
    idle_per_hour: float
    wasted_per_hour: float

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "price_per_hour": self.price_per_hour,
                "utilization": self.utilization, "busy": self.busy, "basis": self.basis,
                "allocated_per_hour": self.allocated_per_hour,
                "idle_per_hour": self.idle_per_hour, "wasted_per_hour": self.wasted_per_hour}


@dataclass(frozen=True, slots=True)
class Burn:
    """What the host burns at one tick, in dollars per hour, with every input."""

    ts: float
    price: HostPrice
    price_per_gpu: float
    total_per_hour: float  # == sum(process burn) + idle_per_hour, exactly
    idle_per_hour: float
    wasted_per_hour: float
    gpus: tuple[GpuBurn, ...]
    processes: Mapping[ProcessKey, ProcessBurn]
    idle_utilization_pct: float = DEFAULT_IDLE_UTILIZATION_PCT  # the busy/idle line used
    # GPUs charged with no reading this tick (unread_gpus): the host's price idle and wasted
    unread_gpus: int = 0
    # GPUs the price counts that NVML does not list: each at price_per_gpu, in idle_per_hour
    # and wasted_per_hour (unseen_per_hour)
    unseen_gpus: int = 0

    @property
    def unseen_per_hour(self) -> float:
        return self.price_per_gpu * self.unseen_gpus

    @property
    def warning(self) -> str:
        """What the burn charges that no GPU reading shows, in words; "" when nothing."""
        return unseen_warning(self.price, self.unseen_gpus, self.unseen_per_hour)

    @property
    def process_per_hour(self) -> float:
        return math.fsum(p.burn_per_hour for p in self.processes.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "total_per_hour": self.total_per_hour,
            "idle_per_hour": self.idle_per_hour,
            "wasted_per_hour": self.wasted_per_hour,
            "price_per_gpu": self.price_per_gpu,
            "price_source": self.price.source,
            "price": self.price.as_dict(),
            "busy_threshold_pct": self.idle_utilization_pct,
            "unread_gpus": self.unread_gpus,
            "unseen_gpus": self.unseen_gpus,
            "unseen_per_hour": self.unseen_per_hour,
            "warning": self.warning,
            "method": ("price per GPU = host price / GPU count; a busy GPU is split by SM share, "
                       "an idle one by memory held; GPUs no process holds are idle burn; wasted "
                       "= price x (1 - utilization), idle GPUs whole; with no GPU read (NVML "
                       "not started), the host's price is idle burn, wasted whole; GPUs the price "
                       "counts that NVML does not list are idle burn, wasted whole"),
            "gpus": [g.as_dict() for g in self.gpus],
            "processes": {process_key(*k): p.as_dict() for k, p in self.processes.items()},
        }


def gpu_wasted_per_hour(price_per_gpu: float, utilization_pct: float | None, ok: bool = True,
                        idle_utilization_pct: float = DEFAULT_IDLE_UTILIZATION_PCT) -> float:
    """The dollars per hour one GPU wastes: price x (1 - utilization); an idle GPU (below
    `idle_utilization_pct`) or one not ok (lost, failing) counts whole; unknown utilization
    claims no waste we cannot show. The one wasted-$/h formula: burn and the history use it."""
    if not ok:
        return price_per_gpu  # a lost or failing GPU does no work
    busy = gpu_is_busy(utilization_pct, idle_utilization_pct)
    if busy is None:
        return 0.0
    if not busy:
        return price_per_gpu
    return price_per_gpu * (1.0 - min(utilization_pct or 0.0, 100.0) / 100.0)


def unseen_warning(price: HostPrice, unseen: int, per_hour: float) -> str:
    """Why the burn charges `unseen` GPUs that NVML does not list, and what to check."""
    if unseen <= 0:
        return ""
    of = f" of {price.instance_type}'s {price.gpu_count}" if price.instance_type else (
        f" of the {price.gpu_count} the price counts")
    return (f"{unseen} GPU{'s' if unseen != 1 else ''}{of} not seen by NVML: "
            f"${per_hour:.2f}/h charged as idle and wasted (a GPU that failed to enumerate "
            "or is not passed through is still billed; check nvidia-smi, or [instance].type "
            "if the type is wrong)")


def unseen_gpus(price: HostPrice | None, seen: int) -> int:
    """How many GPUs the price counts that NVML does not list, of a host it lists `seen` of:
    the one definition `burn`, the report (`unseen_json`) and /metrics' usage split
    (daemon.analysis.usage_cost, through `Burn.unseen_gpus`) charge them by. Each costs the
    price per GPU, as idle burn held by no process, wasted whole. 0 without a price, and with
    no GPU listed (that tick charges the whole price as `unread_gpus`)."""
    if price is None or price.per_hour <= 0 or not price.gpu_count > seen > 0:
        return 0
    return price.gpu_count - seen


def unseen_json(price: HostPrice | None, seen: int) -> dict[str, Any]:
    """A window's `unseen_gpus`, `unseen_per_hour` and `warning` (the report's burn) for a host
    whose GPUs NVML listed `seen` of: as `burn` charges them."""
    unseen = unseen_gpus(price, seen)
    per_hour = price.per_gpu * unseen if price is not None else 0.0
    return {"unseen_gpus": unseen, "unseen_per_hour": per_hour,
            "warning": unseen_warning(price, unseen, per_hour) if price is not None else ""}


def unread_gpus(sample: Sample, price: HostPrice) -> int:
    """How many GPUs `sample` charges without a reading: none where it read a GPU (a lost one
    included: `burn` charges it as such) or the host has no price; else the price's GPU count
    (at least 1: a host priced before NVML counted its GPUs has 0) while NVML has not started,
    or while it has and the price names GPUs it has not read yet. A host NVML started on that
    counts no GPU and whose price names none has nothing to charge to GPUs."""
    if sample.gpus or price.per_hour <= 0:
        return 0
    if sample.nvml_status == NVML_OK and price.gpu_count <= 0:
        return 0
    return max(price.gpu_count, 1)


def unread_burn(sample: Sample, price: HostPrice, count: int,
                idle_pct: float = DEFAULT_IDLE_UTILIZATION_PCT) -> Burn:
    """The burn of a tick that read none of the host's `count` GPUs: each as a lost GPU
    (`gpu_wasted_per_hour` not ok) no process holds, at host price / count: the whole price is
    idle burn and wasted."""
    per_gpu = price.per_hour / count
    idle = math.fsum([per_gpu] * count)
    wasted = math.fsum([gpu_wasted_per_hour(per_gpu, None, False, idle_pct)] * count)
    return Burn(sample.ts, price, per_gpu, idle, idle, wasted, (), {}, idle_pct, count)


def gpu_holders(sample: Sample) -> Holders:
    """(key, memory, SM share) of the processes on each GPU, in the sample's order, and the
    processes that hold a GPU by key: one pass over the sample."""
    users: dict[int, list[tuple[ProcessKey, int | None, float]]] = {}
    procs: dict[ProcessKey, ProcessSample] = {}
    for proc in sample.processes:
        uses = proc.gpus
        if not uses:
            continue
        key = proc.key
        procs[key] = proc
        for use in uses:
            held = users.get(use.gpu_index)
            if held is None:
                users[use.gpu_index] = [(key, use.memory_bytes, use.sm_share)]
            else:
                held.append((key, use.memory_bytes, use.sm_share))
    return users, procs


class BurnMemo:
    """The last tick's split of each GPU with the inputs it was made from, for `burn`: a GPU
    whose inputs did not change since (an idle GPU split by the memory its holders keep, most
    ticks) keeps its split instead of one built again per holder."""

    def __init__(self) -> None:
        # GPU index -> (inputs, its GpuBurn, (holder, its ProcessShare) in the holders' order)
        self.gpus: dict[int, tuple[tuple[Any, ...], GpuBurn,
                                   list[tuple[ProcessKey, ProcessShare]]]] = {}


def burn(sample: Sample, price: HostPrice, thresholds: IdleThresholds | None = None,
         holders: Holders | None = None, memo: BurnMemo | None = None) -> Burn:
    """Split the host price over GPUs and the processes holding them, for one sample; busy and
    idle as `thresholds` (the [idle] settings) say. `holders`: gpu_holders(sample), where the
    caller has it already (the analyzer shares it with the energy meter); `memo`: the splits
    of the caller's last call, reused for the GPUs whose inputs are the same (and updated)."""
    # Runs per process per tick: the per-process named tuples are built with tuple.__new__
    # (their generated __new__ is a Python call each).
    idle_pct = (thresholds.idle_utilization_pct if thresholds is not None
                else DEFAULT_IDLE_UTILIZATION_PCT)
    if not sample.gpus:
        unread = unread_gpus(sample, price)
        if unread:
            if memo is not None:
                memo.gpus = {}
            return unread_burn(sample, price, unread, idle_pct)
    # A price made before NVML counted the GPUs names none (a whole-host price from the config):
    # split over the GPUs read until the daemon prices the host again for them.
    per_gpu = price.per_gpu if price.gpu_count > 0 else price.per_hour / max(len(sample.gpus), 1)
    users_by_gpu, holding = holders if holders is not None else gpu_holders(sample)
    shares: dict[ProcessKey, list[ProcessShare]] = {}
    new_share = tuple.__new__
    gpus = []
    last_splits = memo.gpus if memo is not None else {}
    splits: dict[int, tuple[tuple[Any, ...], GpuBurn, list[tuple[ProcessKey, ProcessShare]]]] = {}
    for gpu in sample.gpus:
        util = gpu.utilization
        users = users_by_gpu.get(gpu.index, ())
        inputs = (per_gpu, idle_pct, gpu.status, util, users)
        last = last_splits.get(gpu.index)
        if last is not None and last[0] == inputs:  # (NaN never equals: split again)
            for key, one in last[2]:
                own = shares.get(key)
                if own is None:
                    shares[key] = [one]
                else:
                    own.append(one)
            gpus.append(last[1])
            splits[gpu.index] = last
            continue
        ok = gpu.status == GPU_OK
        busy = gpu_is_busy(util, idle_pct) if ok else None
        weights: list[float] = []
        # not read this tick: its holders (if any) are those of its last reading
        unread = not ok and gpu.memory_used_bytes is None
        basis = "unread" if unread else "unheld"
        if users:
            if busy:
                weights = [max(sm, 0.0) for _, _, sm in users]
                basis = "sm"
            if not busy or sum(weights) <= 0:
                weights = [float(max(mem or 0, 0)) for _, mem, _ in users]
                basis = "memory"
            if sum(weights) <= 0:
                weights = [1.0] * len(users)
                basis = "equal"
            if unread:
                basis = "unread"
        total_weight = math.fsum(weights)
        allocated = []
        index = gpu.index
        given = []
        for (key, _, _), weight in zip(users, weights, strict=False):
            share = weight / total_weight
            amount = per_gpu * share
            allocated.append(amount)
            one = new_share(ProcessShare, (index, share, basis, amount))
            given.append((key, one))
            own = shares.get(key)
            if own is None:
                shares[key] = [one]
            else:
                own.append(one)
        allocated_sum = math.fsum(allocated)
        idle = per_gpu - allocated_sum if users else per_gpu
        split = GpuBurn(index, per_gpu, util, busy, basis, allocated_sum, max(idle, 0.0),
                        gpu_wasted_per_hour(per_gpu, util, ok, idle_pct))
        gpus.append(split)
        splits[index] = (inputs, split, given)
    if memo is not None:
        memo.gpus = splits
    processes = {}
    for key, proc in holding.items():
        own = shares.get(key)
        if own:
            processes[key] = new_share(ProcessBurn, (
                key, proc.user, proc.command,
                own[0].per_hour if len(own) == 1 else math.fsum(s.per_hour for s in own),
                tuple(own), proc.owner))
    # GPUs the price counts that NVML does not list: paid for, held by no process, wasted whole
    unseen = unseen_gpus(price, len(gpus))
    idle_per_hour = math.fsum(g.idle_per_hour for g in gpus)
    wasted = math.fsum(g.wasted_per_hour for g in gpus)
    if unseen:
        idle_per_hour = math.fsum([idle_per_hour, *([per_gpu] * unseen)])
        wasted = math.fsum([wasted, *([per_gpu] * unseen)])
    total = math.fsum(p.burn_per_hour for p in processes.values()) + idle_per_hour
    return Burn(sample.ts, price, per_gpu, total, idle_per_hour, wasted, tuple(gpus), processes,
                idle_pct, 0, unseen)



# Moved to daemon.analysis.ledger and daemon.analysis.meters; importers outside the analysis
# package still reach them here until they import from their new homes.
