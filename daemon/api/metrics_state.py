"""What `/metrics` shows of one tick, typed: built from the daemon's own typed state.

The daemon builds a `MetricsState` from the objects it already holds for the tick (the raw
`Sample`, the analyzer's `Burn` and cost ledger, the phase balances, the workload kinds, the
active recommendations), without building the /v1/now document and parsing it back (issue 23:
that round trip was most of a scrape's cost). A daemon-shaped object that only offers `now()`
(a test's stand-in) is read through `from_document`, the same facts taken from /v1/now through
`daemon.wire`; tests/daemon/test_metrics.py checks that both give the same exposition.

Text is made safe to print as `daemon.wire` makes it (`one_line`, `lines`), so a label reads
the same whichever way it came.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from daemon.analysis.rules.combine import savings_document
from daemon.api.document import gpu_busy
from daemon.sources.safe_text import lines, one_line
from daemon.wire import Gpu, GpuShare, Now, process_key

if TYPE_CHECKING:
    from daemon.analysis.analyzer import Analyzer
    from daemon.sources.sample import GpuUse, Sample


@lru_cache(maxsize=8192)
def _line(text: str) -> str:
    """daemon.wire's one-line text (cached: the same users, owners and jobs every tick)."""
    return one_line(text)


@lru_cache(maxsize=8192)
def _identity(pid: int, start_time: float, user: str,
              owner: tuple[tuple[str, Any], ...]) -> tuple[str, str, Mapping[str, str]]:
    """A process's key, user and owner as daemon.wire has them (cached: they stay for the
    process's life; the owner is shared, never changed)."""
    return (process_key(pid, start_time), _line(user),
            {_line(k): _line(v) for k, v in owner if isinstance(v, str)})


def _phase_shares(balance: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """{phase: share} of a phase balance ({phase: {share, seconds, top_stacks}})."""
    shares = {}
    for phase, part in balance.items():
        share = part.get("share")
        if isinstance(share, int | float) and not isinstance(share, bool):
            shares[phase] = float(share)
    return shares


def _indices(uses: tuple[GpuUse, ...]) -> tuple[int, ...]:
    if len(uses) == 1:  # most processes hold one GPU
        return (uses[0].gpu_index,)
    return tuple(sorted({u.gpu_index for u in uses}))


def _shares(uses: tuple[GpuUse, ...]) -> tuple[GpuShare, ...]:
    return tuple(sorted((GpuShare(u.gpu_index, u.memory_bytes, float(u.sm_share)) for u in uses),
                        key=lambda share: share.index))


class ProcessState(NamedTuple):
    """One process as /metrics counts it (never by pid: `key` only keeps its totals apart). A
    NamedTuple: made for every process every tick, at a third of a frozen dataclass's cost."""

    key: str  # daemon.wire.process_key
    user: str
    owner: Mapping[str, str]  # pod, namespace, container, slurm_job, ... (daemon.sources.owners)
    gpus: tuple[int, ...]  # the GPUs it holds, by index
    per_gpu: tuple[GpuShare, ...]  # its memory and SM share on each
    kind: str | None  # daemon.analysis.kinds; None: not classified yet
    burn_per_hour: float | None  # None until the analyzer prices it
    cost: float | None  # dollars the ledger charged it so far
    job: str | None  # its job label in the ledger; None until first charged
    phases: Mapping[str, float]  # phase -> share of its recent time
    start_time: float | None = None  # seconds since the epoch (psutil's create_time)


@dataclass(frozen=True, slots=True)
class MetricsState:
    """The host at one tick, as the `/metrics` families read it."""

    ts: float | None  # the sample's time
    hostname: str
    host: Mapping[str, Any]  # the daemon's host facts (instance, simulated)
    price: Mapping[str, Any]  # HostPrice.as_dict(); {} before the host is priced
    nvml_status: str
    gpus: tuple[Gpu, ...]
    processes: tuple[ProcessState, ...]
    burn_per_hour: float | None
    wasted_per_hour: float | None
    idle_per_hour: float | None
    ledger: Mapping[str, float]  # total, wasted, idle dollars since the daemon started
    recommendations: tuple[tuple[str, float | None], ...]  # (rule, shown savings $/month)
    potential_savings_per_month: float | None
    latency: tuple[Mapping[str, Any], ...]  # [[cost.latency]] meters (LatencyMeter.as_dict)
    # When the daemon started (the counters count from it); None: not known (a document)
    started_at: float | None = None
    # GPUs the price counts that NVML does not list (the burn's unseen GPUs; every GPU of the
    # price while NVML lists none, its unread GPUs) and their $/h together, as the burn
    # charges them: idle, held by no one (daemon.analysis.cost.unseen_gpus)
    unseen_gpus: int = 0
    unseen_per_hour: float | None = None

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> MetricsState:
        """From a /v1/now document, read through daemon.wire."""
        now = Now.from_dict(document)
        ledger = document.get("cost") or {}
        burn = document.get("burn") or {}
        unread = _number(burn.get("unread_gpus")) if isinstance(burn, Mapping) else None
        per_gpu = _number(burn.get("price_per_gpu")) if isinstance(burn, Mapping) else None
        unseen = now.unseen_gpus + int(unread or 0)
        return cls(
            ts=now.ts, hostname=now.hostname, host=document.get("host") or {},
            price=document.get("price") or {}, nvml_status=now.nvml_status, gpus=now.gpus,
            processes=tuple(ProcessState(
                key=p.key, user=p.user, owner=p.owner, gpus=p.gpus, per_gpu=p.per_gpu,
                kind=p.kind, burn_per_hour=p.burn_per_hour, cost=p.cost, job=p.job,
                phases={phase: float(share) for phase, share in p.phases.items()
                        if isinstance(share, int | float) and not isinstance(share, bool)},
                start_time=p.start_time)
                for p in now.processes),
            burn_per_hour=now.burn_per_hour, wasted_per_hour=now.wasted_per_hour,
            idle_per_hour=now.idle_per_hour,
            ledger={name: ledger[name] for name in ("total", "wasted", "idle")
                    if name in ledger},
            recommendations=tuple((r.rule, r.shown_savings_per_month)
                                  for r in now.recommendations),
            potential_savings_per_month=now.potential_savings_per_month,
            latency=tuple(m for m in ledger.get("latency") or [] if isinstance(m, Mapping)),
            unseen_gpus=unseen if per_gpu is not None else 0,
            unseen_per_hour=per_gpu * unseen if per_gpu is not None and unseen else None)


def metrics_state(*, host: Mapping[str, Any], nvml_status: str, sample: Sample | None,
                  idle_utilization_pct: float, analyzer: Analyzer | None,
                  phases: Mapping[str, Mapping[str, Mapping[str, Any]]],
                  kinds: Mapping[str, Mapping[str, Any]],
                  recommendations: list[dict[str, Any]],
                  started_at: float | None = None) -> MetricsState:
    """The live daemon's state of this tick: `sample` (the latest), `analyzer` (its latest burn,
    ledger and price), the phase balances and kind documents by process key, and the active
    recommendations (after snoozes) as /v1/now lists them."""
    burn = analyzer.latest if analyzer is not None else None
    price = (burn.price if burn is not None else analyzer.price) if analyzer is not None \
        else None
    gpu_burn = {g.index: g for g in burn.gpus} if burn is not None else {}
    gpus: list[Gpu] = []
    processes: list[ProcessState] = []
    if sample is not None:
        for g in sample.gpus:
            priced = gpu_burn.get(g.index)
            gpus.append(Gpu(
                index=g.index, uuid=lines(g.uuid), name=_line(g.name), status=g.status,
                error=None, utilization=g.utilization, sm_activity=g.sm_activity,
                memory_used_bytes=g.memory_used_bytes, memory_total_bytes=g.memory_total_bytes,
                power_watts=g.power_watts, temperature_c=g.temperature_c,
                price_per_hour=priced.price_per_hour if priced is not None else None,
                wasted_per_hour=priced.wasted_per_hour if priced is not None else None,
                busy=gpu_busy(g, idle_utilization_pct)))
        priced_processes = burn.processes if burn is not None else {}
        ledger = analyzer.ledger if analyzer is not None else None
        for proc in sample.processes:
            key, user, owner = _identity(proc.pid, proc.start_time, proc.user,
                                         tuple(proc.owner.items()))
            balance = phases.get(key)
            kind = (kinds.get(key) or {}).get("kind")
            priced_proc = priced_processes.get(proc.key)
            cost = job = None
            if priced_proc is not None and ledger is not None:
                cost, job = ledger.process_cost(proc.key)
            processes.append(ProcessState(
                key=key, user=user, owner=owner, gpus=_indices(proc.gpus),
                per_gpu=_shares(proc.gpus),
                kind=_line(kind) or None if isinstance(kind, str) else None,
                burn_per_hour=priced_proc.burn_per_hour if priced_proc is not None else None,
                cost=cost, job=_line(job) or None if job is not None else None,
                phases=_phase_shares(balance) if balance else {}, start_time=proc.start_time))
    ledger_totals: dict[str, float] = {}
    latency: tuple[Mapping[str, Any], ...] = ()
    if analyzer is not None:
        with analyzer.ledger.lock:
            ledger_totals = {"total": analyzer.ledger.total, "wasted": analyzer.ledger.wasted,
                             "idle": analyzer.ledger.idle}
            latency = tuple(m.as_dict() for m in analyzer.ledger.latency)
    shown: tuple[tuple[str, float | None], ...] = ()
    potential = None
    if price is not None:
        combined, savings = savings_document(
            recommendations, price.per_hour,
            [g.index for g in sample.gpus] if sample is not None else [])
        shown = tuple((lines(r["rule"]) if isinstance(r.get("rule"), str) else "",
                       _number(r.get("combined_savings_per_month"))
                       if r.get("combined_savings_per_month") is not None
                       else _number(r.get("savings_per_month"))) for r in combined)
        potential = _number(savings.get("potential_per_month"))
    return MetricsState(
        ts=sample.ts if sample is not None else None,
        hostname=_line(host["hostname"]) if isinstance(host.get("hostname"), str) else "",
        host=host, price=price.as_dict() if price is not None else {},
        nvml_status=nvml_status, gpus=tuple(gpus), processes=tuple(processes),
        # None until the first tick is priced: the host gauges are absent then (a gap in
        # Prometheus), not a $0 burn of a host that is billing (probe 154 H1)
        burn_per_hour=burn.total_per_hour if burn is not None else None,
        wasted_per_hour=burn.wasted_per_hour if burn is not None else None,
        idle_per_hour=burn.idle_per_hour if burn is not None else None,
        ledger=ledger_totals, recommendations=shown, potential_savings_per_month=potential,
        latency=latency, started_at=started_at, **_unseen(burn))


def _unseen(burn: Any) -> dict[str, Any]:
    """MetricsState's `unseen_gpus` and `unseen_per_hour` of a tick's Burn (or None): the GPUs
    it charged without NVML listing them, at its price per GPU."""
    count = burn.unseen_gpus + burn.unread_gpus if burn is not None else 0
    if count <= 0:
        return {}
    return {"unseen_gpus": count, "unseen_per_hour": burn.price_per_gpu * count}


def _number(value: Any) -> float | None:
    """A number as daemon.wire reads one (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
