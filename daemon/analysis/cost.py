"""The cost model: host $/h -> GPU $/h -> process $/h, and the dollars that adds up to.

A GPU host is bought for its GPUs, so the whole host price is charged to them: price per GPU =
host price / GPU count. On each GPU the price goes to the processes that hold it:

- busy GPU (utilization >= BUSY_UTILIZATION_PCT): split by SM share (what NVML's per-process
  utilization says each process kept busy); if no process has an SM sample, by memory held;
- idle GPU: split by memory held (whoever holds the memory holds the GPU);
- a GPU no process holds: its whole price is the host's idle burn (OpenCost's `__idle__`).

So `total_per_hour == sum(process burn) + idle_per_hour`, by construction. Wasted burn is a
different view: price x (1 - utilization) per GPU, and a GPU below the busy threshold (or lost)
counts whole. Every figure carries its inputs (`as_dict()`), so any dollar can be explained.

`CostLedger` integrates burn over ticks into dollars per process, user, job label and UTC day,
adds the storage cost of configured paths and, where a Prometheus counter is configured, the unit
cost (dollars per 1M tokens, per 1k requests).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from daemon.sources.sample import GPU_OK, Sample
from daemon.wire import process_key

# A GPU whose device utilization is at least this is "busy": its price is split by SM share.
# Below it the GPU is "idle": split by memory held, and counted whole as wasted. 5% is where
# nvidia-smi readings of an idle GPU with a CUDA context open stop (periodic housekeeping).
BUSY_UTILIZATION_PCT = 5.0
# Longest interval between two ticks that the ledger charges; a longer gap (daemon stopped,
# host suspended) is counted as unaccounted time instead of being charged to whoever runs now.
MAX_TICK_GAP_S = 60.0
HOURS_PER_MONTH = 730.0  # the clouds' billing month (365 * 24 / 12)
# EBS gp3 in us-east-1 is $0.08 per GB-month (GB = 2^30 bytes, as the clouds bill).
DEFAULT_STORAGE_PRICE_PER_GB_MONTH = 0.08
STORAGE_WALK_BUDGET_S = 2.0  # one storage walk stops after this and says it is partial
UNIT_COST_TIMEOUT_S = 1.0
NO_PRICE_SOURCE = "no price: set [instance].price_per_hour"

ProcessKey = tuple[int, float]


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

    def make(per_hour: float, source: str, as_of: str | None = None, live: bool = False,
             kind: str = lifecycle) -> HostPrice:
        return HostPrice(per_hour, gpu_count, kind, instance_type, provider, region, source,
                         as_of, live)

    if override_price_per_hour > 0:
        return make(override_price_per_hour, "config [instance].price_per_hour")
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


@dataclass(frozen=True, slots=True)
class ProcessShare:
    """One process's share of one GPU and why."""

    gpu_index: int
    share: float  # 0..1 of the GPU's price
    basis: str  # "sm" | "memory" | "equal"
    per_hour: float

    def as_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu_index, "share": self.share, "basis": self.basis,
                "burn_per_hour": self.per_hour}


@dataclass(frozen=True, slots=True)
class ProcessBurn:
    key: ProcessKey
    user: str
    command: str
    burn_per_hour: float
    shares: tuple[ProcessShare, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.key[0], "start_time": self.key[1], "user": self.user,
                "burn_per_hour": self.burn_per_hour,
                "shares": [s.as_dict() for s in self.shares]}


@dataclass(frozen=True, slots=True)
class GpuBurn:
    index: int
    price_per_hour: float
    utilization: float | None
    busy: bool
    basis: str  # how the price was split: "sm" | "memory" | "equal" | "unheld"
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
            "busy_threshold_pct": BUSY_UTILIZATION_PCT,
            "method": ("price per GPU = host price / GPU count; a busy GPU is split by SM share, "
                       "an idle one by memory held; GPUs no process holds are idle burn; wasted "
                       "= price x (1 - utilization), idle GPUs whole"),
            "gpus": [g.as_dict() for g in self.gpus],
            "processes": {process_key(*k): p.as_dict() for k, p in self.processes.items()},
        }


def _wasted(price: float, status: str, utilization: float | None) -> float:
    if status != GPU_OK:
        return price  # a lost or failing GPU does no work
    if utilization is None:
        return 0.0  # unknown: claim no waste we cannot show
    if utilization < BUSY_UTILIZATION_PCT:
        return price
    return price * (1.0 - min(utilization, 100.0) / 100.0)


def burn(sample: Sample, price: HostPrice) -> Burn:
    """Split the host price over GPUs and the processes holding them, for one sample."""
    per_gpu = price.per_gpu
    holders: dict[int, list[tuple[ProcessKey, float | None, float]]] = defaultdict(list)
    for proc in sample.processes:
        for use in proc.gpus:
            holders[use.gpu_index].append((proc.key, use.memory_bytes, use.sm_share))
    shares: dict[ProcessKey, list[ProcessShare]] = defaultdict(list)
    gpus = []
    for gpu in sample.gpus:
        util = gpu.utilization
        busy = gpu.status == GPU_OK and util is not None and util >= BUSY_UTILIZATION_PCT
        users = holders.get(gpu.index, ())
        weights: list[float] = []
        basis = "unheld"
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
        total_weight = math.fsum(weights)
        allocated = []
        for (key, _, _), weight in zip(users, weights, strict=False):
            share = weight / total_weight
            amount = per_gpu * share
            allocated.append(amount)
            shares[key].append(ProcessShare(gpu.index, share, basis, amount))
        allocated_sum = math.fsum(allocated)
        idle = per_gpu - allocated_sum if users else per_gpu
        gpus.append(GpuBurn(gpu.index, per_gpu, util, busy, basis, allocated_sum, max(idle, 0.0),
                            _wasted(per_gpu, gpu.status, util)))
    processes = {}
    for proc in sample.processes:
        own = shares.get(proc.key)
        if own:
            processes[proc.key] = ProcessBurn(proc.key, proc.user, proc.command,
                                              math.fsum(s.per_hour for s in own), tuple(own))
    idle_per_hour = math.fsum(g.idle_per_hour for g in gpus)
    total = math.fsum(p.burn_per_hour for p in processes.values()) + idle_per_hour
    return Burn(sample.ts, price, per_gpu, total, idle_per_hour,
                math.fsum(g.wasted_per_hour for g in gpus), tuple(gpus), processes)


# -- job labels ------------------------------------------------------------------------------


class JobLabeler:
    """A job label per command line: the first configured `{name: regex}` that matches
    (re.search), else the script or module the command runs ('train.py', '-m vllm...')."""

    def __init__(self, jobs: Mapping[str, str] | None = None) -> None:
        self.patterns: list[tuple[str, re.Pattern[str]]] = []
        for name, pattern in (jobs or {}).items():
            try:
                self.patterns.append((name, re.compile(pattern)))
            except re.error as exc:
                raise ValueError(f"[jobs] {name!r} = {pattern!r} is not a regular expression: "
                                 f"{exc}") from None
        self._cache: dict[str, str] = {}

    def label(self, command: str) -> str:
        found = self._cache.get(command)
        if found is None:
            found = self._label(command)
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[command] = found
        return found

    def _label(self, command: str) -> str:
        for name, pattern in self.patterns:
            if pattern.search(command):
                return name
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = command.split()
        if not argv:
            return "unknown"
        for i, arg in enumerate(argv):
            if arg == "-m" and i + 1 < len(argv):
                return argv[i + 1]
            if arg.endswith(".py"):
                return os.path.basename(arg)
        return os.path.basename(argv[0]) or "unknown"


# -- storage ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StorageCost:
    path: str
    bytes: int
    files: int
    complete: bool  # False: the walk ran out of time (or a directory was unreadable)
    price_per_gb_month: float
    per_month: float
    error: str | None = None

    @property
    def per_hour(self) -> float:
        return self.per_month / HOURS_PER_MONTH

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "files": self.files,
                "complete": self.complete, "price_per_gb_month": self.price_per_gb_month,
                "per_month": self.per_month, "per_hour": self.per_hour, "error": self.error,
                "method": f"{self.bytes / 2**30:.2f} GB x ${self.price_per_gb_month}/GB-month"
                          + ("" if self.complete else " (partial walk: at least this)")}


def storage_cost(
    paths: Mapping[str, float] | Sequence[str],
    price_per_gb_month: float = DEFAULT_STORAGE_PRICE_PER_GB_MONTH,
    time_budget_s: float = STORAGE_WALK_BUDGET_S,
    clock: Any = time.monotonic,
) -> list[StorageCost]:
    """Size x $/GB-month for each path (a mapping gives each path its own price). Walks with
    os.scandir, not following symlinks, and stops when the shared time budget is spent: the
    figure is then a lower bound and `complete` is False. Run it rarely, never in the tick."""
    items = list(paths.items()) if isinstance(paths, Mapping) else [
        (p, price_per_gb_month) for p in paths]
    deadline = clock() + time_budget_s
    results = []
    for path, price in items:
        total, files, complete, error = 0, 0, True, None
        stack = [path]
        try:
            st = os.stat(path, follow_symlinks=False)
            if not os.path.isdir(path):
                total, files, stack = st.st_size, 1, []
        except OSError as exc:
            results.append(StorageCost(path, 0, 0, False, price, 0.0, exc.strerror or str(exc)))
            continue
        while stack:
            if clock() > deadline:
                complete = False
                break
            current = stack.pop()
            try:
                with os.scandir(current) as entries:
                    for entry in entries:
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(entry.path)
                            elif entry.is_file(follow_symlinks=False):
                                total += entry.stat(follow_symlinks=False).st_size
                                files += 1
                        except OSError:
                            continue  # vanished while walking
            except OSError as exc:
                complete, error = False, f"{current}: {exc.strerror or exc}"
        per_month = total / 2**30 * price
        results.append(StorageCost(path, total, files, complete, price, per_month, error))
    return results


# -- unit cost (Prometheus counters) ---------------------------------------------------------


def read_counter(url: str, metric: str, labels: Mapping[str, str] | None = None,
                 timeout_s: float = UNIT_COST_TIMEOUT_S) -> float:
    """The value of a Prometheus counter from a text exposition endpoint, summed over the
    series that carry `labels`. `metric` may be given with or without `_total`.
    Raises OSError (unreachable, timeout) or ValueError (not there / not parseable)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
        text = response.read(4 << 20).decode("utf-8", errors="replace")
    base = metric.removesuffix("_total")
    wanted = {metric, base, base + "_total"}
    found = False
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name not in wanted:
            continue
        for sample in family.samples:
            if sample.name not in wanted:
                continue  # _created and the like
            if labels and any(sample.labels.get(k) != v for k, v in labels.items()):
                continue
            total += float(sample.value)
            found = True
    if not found:
        raise ValueError(f"{url} exposes no counter {metric!r}"
                         + (f" with labels {dict(labels)}" if labels else ""))
    return total


@dataclass
class UnitCostMeter:
    """Dollars per `per` units of a counter (tokens, requests) for one process or job.

    `target` is a job label or a process id ('pid:start_time'). Cost and counter are taken
    as increases since the first reading; a counter reset starts a new baseline.
    """

    target: str
    url: str
    metric: str
    unit: str = "tokens"  # "tokens" | "requests" | anything countable
    per: float = 1_000_000.0  # 1M tokens; use 1000 for requests
    labels: Mapping[str, str] = field(default_factory=dict)
    base_cost: float | None = None
    base_count: float | None = None
    last_cost: float = 0.0
    last_count: float = 0.0
    error: str | None = None

    def observe(self, cost: float, count: float) -> None:
        if self.base_count is None or self.base_cost is None or count < self.last_count:
            self.base_cost, self.base_count = cost, count
        self.last_cost, self.last_count = cost, count
        self.error = None

    @property
    def unit_cost(self) -> float | None:
        if self.base_count is None or self.base_cost is None:
            return None
        units = self.last_count - self.base_count
        return None if units <= 0 else (self.last_cost - self.base_cost) / units * self.per

    def as_dict(self) -> dict[str, Any]:
        per = f"{self.per:g}".replace("1e+06", "1M").replace("1000", "1k")
        cost = None if self.base_cost is None else self.last_cost - self.base_cost
        units = None if self.base_count is None else self.last_count - self.base_count
        return {"target": self.target, "unit": self.unit, "per": self.per,
                "unit_cost": self.unit_cost, "spend": cost, "units": units,
                "metric": self.metric, "url": self.url, "error": self.error,
                "method": (f"spend ${cost:.4f} / {units:g} {self.unit} x {per}"
                           if cost is not None and units else "waiting for a counter increase")}


# -- the ledger ------------------------------------------------------------------------------


def _utc_day(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).date().isoformat()


class CostLedger:
    """Cumulative dollars per process, user, job label and UTC day, integrated tick by tick:
    each tick charges its burn rate over the time since the previous tick (at most
    MAX_TICK_GAP_S; the rest is counted in `unaccounted_seconds`)."""

    def __init__(self, jobs: Mapping[str, str] | None = None,
                 max_gap_s: float = MAX_TICK_GAP_S) -> None:
        self.labeler = JobLabeler(jobs)
        self.max_gap_s = max_gap_s
        self.last_ts: float | None = None
        self.total = 0.0
        self.idle = 0.0
        self.wasted = 0.0
        self.storage = 0.0
        self.seconds = 0.0
        self.unaccounted_seconds = 0.0
        self.by_process: dict[ProcessKey, float] = defaultdict(float)
        self.by_user: dict[str, float] = defaultdict(float)
        self.by_job: dict[str, float] = defaultdict(float)
        self.by_day: dict[str, float] = defaultdict(float)
        self.by_user_day: dict[tuple[str, str], float] = defaultdict(float)
        self.by_job_day: dict[tuple[str, str], float] = defaultdict(float)
        self.by_month: dict[str, float] = defaultdict(float)
        self.by_user_month: dict[tuple[str, str], float] = defaultdict(float)
        self.by_job_month: dict[tuple[str, str], float] = defaultdict(float)
        self.job_of: dict[ProcessKey, str] = {}
        self.user_of: dict[ProcessKey, str] = {}
        self.storage_items: list[StorageCost] = []
        self.meters: list[UnitCostMeter] = []

    def add(self, burn: Burn) -> float:
        """Charge one tick; returns the seconds charged (0 for the first tick)."""
        ts = burn.ts
        last, self.last_ts = self.last_ts, ts
        if last is None or ts <= last:
            return 0.0
        dt = ts - last
        if dt > self.max_gap_s:
            self.unaccounted_seconds += dt - self.max_gap_s
            dt = self.max_gap_s
        hours = dt / 3600.0
        day = _utc_day(ts - dt / 2)  # the interval's midpoint decides its day
        month = day[:7]
        storage = math.fsum(s.per_hour for s in self.storage_items) * hours
        charged = burn.total_per_hour * hours + storage
        self.total += charged
        self.storage += storage
        self.idle += burn.idle_per_hour * hours
        self.wasted += burn.wasted_per_hour * hours
        self.seconds += dt
        self.by_day[day] += charged
        self.by_month[month] += charged
        for key, proc in burn.processes.items():
            cost = proc.burn_per_hour * hours
            job = self.job_of.get(key)
            if job is None:
                job = self.job_of[key] = self.labeler.label(proc.command)
                self.user_of[key] = proc.user
            self.by_process[key] += cost
            self.by_user[proc.user] += cost
            self.by_job[job] += cost
            self.by_user_day[(proc.user, day)] += cost
            self.by_job_day[(job, day)] += cost
            self.by_user_month[(proc.user, month)] += cost
            self.by_job_month[(job, month)] += cost
        return dt

    def set_storage(self, items: Iterable[StorageCost]) -> None:
        """The latest storage walk; charged per hour from the next tick on."""
        self.storage_items = list(items)

    def add_meter(self, meter: UnitCostMeter) -> None:
        self.meters.append(meter)

    def cost_of(self, target: str) -> float:
        """Cumulative dollars of a job label, or of a process id 'pid:start_time'."""
        if target in self.by_job:
            return self.by_job[target]
        for key, cost in self.by_process.items():
            if process_key(*key) == target:
                return cost
        return 0.0

    def poll_unit_costs(self, timeout_s: float = UNIT_COST_TIMEOUT_S) -> list[UnitCostMeter]:
        """Read each configured counter (blocking, `timeout_s` each): run beside the tick."""
        for meter in self.meters:
            try:
                count = read_counter(meter.url, meter.metric, meter.labels, timeout_s)
            except (OSError, ValueError) as exc:
                meter.error = f"{meter.url}: {exc}"
                continue
            meter.observe(self.cost_of(meter.target), count)
        return self.meters

    def forget(self, keys: Iterable[ProcessKey]) -> None:
        """Drop per-process entries of exited processes (their user/job/day totals stay)."""
        for key in keys:
            self.by_process.pop(key, None)
            self.job_of.pop(key, None)
            self.user_of.pop(key, None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total, "idle": self.idle, "wasted": self.wasted,
            "storage": self.storage, "seconds": self.seconds,
            "unaccounted_seconds": self.unaccounted_seconds,
            "by_user": dict(self.by_user), "by_job": dict(self.by_job),
            "by_day": dict(self.by_day),
            "by_process": {process_key(*k): v for k, v in self.by_process.items()},
            "storage_items": [s.as_dict() for s in self.storage_items],
            "unit_costs": [m.as_dict() for m in self.meters],
        }
