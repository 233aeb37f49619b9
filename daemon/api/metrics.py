"""`/metrics` for Prometheus: a prometheus-client Collector over what the running daemon holds.

Each scrape builds the families from the daemon's typed state of the tick
(daemon.api.metrics_state: the sample, the analyzer's burn and ledger, the per-GPU totals), on
the event loop, where that state lives, once per tick; one function per family group.
Nothing is hand-formatted: prometheus-client writes the exposition (daemon.api.exposition keeps
the lines it wrote for a series' name and labels, and writes only the values of known series).

Conventions (Prometheus naming practice; README "On a fleet"):
- one prefix `mlcost_`, base units in the name (`_bytes`, `_watts`, `_joules`, `_seconds`,
  `_ratio` 0-1), money in `dollars` (rates `_dollars_per_hour` as gauges; cumulative
  `_dollars_total` as counters, so `increase(x[1d])` is the dollars of that day);
- GPU series carry dcgm-exporter's labels `gpu`, `UUID`, `modelName`, `Hostname`, so they join
  DCGM's series without relabelling;
- no pid labels. Workload series carry `job_name` (the cost ledger's job label: Prometheus keeps
  `job` for the scrape job), `pod`, `namespace`, `container`, `slurm_job` and `user`, each bounded:
  at most `[api].metrics_label_values` distinct values per label, the rest folded into `other`
  (counted in `mlcost_metrics_folded_values_total`);
- descriptive host facts go to one info metric, `mlcost_host_info`.

Counters only grow while mlcostd runs (a restart begins them at 0: Prometheus reads a reset). A
workload's dollars come from the ledger's per-workload dollars, charged tick by tick
(CostLedger.by_workload): a process's last ticks before it exits, and a process that lived
between two scrapes, are in them; a scrape adds what was charged since the last one to the
workload's series, which never goes down. (A daemon-shaped object without a ledger: from the
processes' costs at each scrape.)
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from aiohttp import web
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from daemon import clock as daemon_clock
from daemon.analysis.kinds import KINDS
from daemon.api.activity_metrics import activity_families
from daemon.api.energy_metrics import energy_families
from daemon.api.exposition import Exposition, Family, LabelPairs
from daemon.api.idle_metrics import idleness_families, verdict_now
from daemon.api.limits import limited_log
from daemon.api.metrics_state import MetricsState
from daemon.api.usage_metrics import usage_cost_families
from daemon.sources.safe_text import one_line
from daemon.wire import UNKNOWN as UNKNOWN_PHASE
from daemon.wire import process_key, target_pid

DEFAULT_LABEL_VALUES = 128  # dcgm-exporter's cap (PR #652): per label, per host
OTHER = "other"
MAX_LABEL_CHARS = 128  # a longer value is cut: labels are names, not documents
FORGET_AFTER_S = 3600.0  # a workload unseen this long leaves the exposition and frees its slot
# How long a label cap's answer is reused before the cap is asked again: a minute of lag in
# "last seen" against FORGET_AFTER_S, and a freed slot taken at most this much later.
ANSWERS_KEPT_S = 60.0
MAX_PHASE_GAP_S = 600.0  # phase time between two scrapes further apart is not counted
# A process's phase shares are its balance over the last 30 min (daemon.analysis.window_ticks):
# at its first scrape, its time since the daemon started (or it did) is counted by them, up to
# that much of it (probe 141 L2: the counter began at the first scrape).
FIRST_SCRAPE_PHASE_S = 1800.0
GPU_LABELS = ("gpu", "UUID", "modelName", "Hostname")
WORKLOAD_LABELS = ("job_name", "pod", "namespace", "container", "slurm_job", "user")
# Where each workload label comes from in a process's owner (daemon.wire.Process.owner).
OWNER_KEYS = {"pod": "pod", "namespace": "namespace", "container": "container",
              "slurm_job": "slurm_job"}
assert WORKLOAD_LABELS == ("job_name", *OWNER_KEYS, "user")  # the order _workloads builds

WorkloadKey = tuple[str, ...]  # the values of WORKLOAD_LABELS, in that order


def _clean(value: Any) -> str:
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return text[:MAX_LABEL_CHARS]


class LabelCap:
    """At most `limit` distinct values of one label; the rest read `other`. A value keeps its
    slot while it is seen, and frees it FORGET_AFTER_S after it was last seen. "" (no value)
    never takes a slot."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.admitted: dict[str, float] = {}  # value -> last seen (monotonic s)
        self.folded: dict[str, float] = {}  # values folded into "other" -> last seen
        self.folded_total = 0  # distinct values folded (counted again after they are forgotten)

    def value(self, raw: str, now: float) -> str:
        if not raw:
            return ""
        if raw in self.admitted or len(self.admitted) < self.limit:
            self.admitted[raw] = now
            return raw
        if raw not in self.folded:
            self.folded_total += 1
            if len(self.folded) >= 10 * self.limit:  # bounded memory under heavy churn
                self.folded.pop(next(iter(self.folded)))
        self.folded[raw] = now
        return OTHER

    def forget(self, before: float) -> None:
        self.admitted = {v: t for v, t in self.admitted.items() if t >= before}
        self.folded = {v: t for v, t in self.folded.items() if t >= before}


@dataclass
class _Seen:
    """One live process as the last scrape saw it."""

    workload: WorkloadKey
    base: tuple[float, float]  # its (dollars, wasted dollars) when it joined this workload
    dollars: float = 0.0  # charged to this workload so far
    wasted: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    ts: float | None = None  # the sample time of the last scrape that counted its phases


@dataclass
class _Retired:
    """What exited processes left in one workload's counters."""

    dollars: float = 0.0
    wasted: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    last_seen: float = 0.0


@dataclass(frozen=True)
class WorkloadTotal:
    dollars: float
    wasted: float
    phases: dict[str, float]


class WorkloadTotals:
    """Per-workload counters that never go down: the live processes' ledger costs plus what
    processes that left (exited, or moved to another workload) had been charged. Scrapes may
    come from several scrapers at once: every update is idempotent for one sample."""

    def __init__(self, limit: int) -> None:
        self.caps = {label: LabelCap(limit) for label in WORKLOAD_LABELS}
        self.seen: dict[str, _Seen] = {}
        self.retired: dict[WorkloadKey, _Retired] = {}
        # The ledger's (dollars, wasted) per raw workload at the last scrape (`update`'s spend)
        self.counted: dict[tuple[str, ...], tuple[float, float]] = {}
        # The caps' answers, kept for ANSWERS_KEPT_S (then asked again, which keeps a value
        # seen): (label, raw value) -> value shown; raw values in WORKLOAD_LABELS order ->
        # their workload.
        self._shown: dict[tuple[str, Any], str] = {}
        self._workloads: dict[tuple[Any, ...], WorkloadKey] = {}
        self._answered_at = -math.inf

    def _answers(self, now: float) -> None:
        if not 0.0 <= now - self._answered_at < ANSWERS_KEPT_S:
            self._shown, self._workloads, self._answered_at = {}, {}, now

    def shown(self, label: str, raw: Any, now: float) -> str:
        """The value of `label` as the series show it (cleaned, capped, maybe `other`). The
        caps are asked once per value per ANSWERS_KEPT_S, not for each of the hundreds of
        series of one pod or user on every scrape."""
        self._answers(now)
        value = self._shown.get((label, raw))
        if value is None:
            value = self._shown[label, raw] = self.caps[label].value(_clean(raw), now)
        return value

    def workload(self, values: tuple[Any, ...], now: float) -> WorkloadKey:
        """The workload of raw label values in WORKLOAD_LABELS order (missing: "")."""
        self._answers(now)
        workload = self._workloads.get(values)
        if workload is None:
            workload = self._workloads[values] = tuple(
                self.shown(label, raw, now)
                for label, raw in zip(WORKLOAD_LABELS, values, strict=True))
        return workload

    def workload_of(self, raw: Mapping[str, str], now: float) -> WorkloadKey:
        return self.workload(tuple(raw.get(label, "") for label in WORKLOAD_LABELS), now)

    def update(self, processes: Sequence[tuple[str, WorkloadKey, float, float,
                                               Mapping[str, float]]],
               sample_ts: float | None, now: float,
               counted_from: Mapping[str, float] | None = None,
               spend: Mapping[tuple[str, ...], tuple[float, float]] | None = None) -> None:
        """`processes`: (key, workload, dollars so far, wasted dollars so far, phase shares) of
        every live process. `counted_from`: by key, when a process's phase time counts from
        at its first scrape (the daemon's start or its own, at most FIRST_SCRAPE_PHASE_S
        back); without it, from its first scrape. `spend`: the ledger's (dollars, wasted)
        so far per raw workload (CostLedger.workload_spend): where given, the workloads'
        dollars are these (what was charged since the last scrape goes to the workload as
        the caps show it now), not the processes' dollars."""
        if spend is not None:
            self._spend(spend, now)
            processes = [(key, workload, 0.0, 0.0, shares)
                         for key, workload, _, _, shares in processes]
        live = set()
        for key, workload, dollars, wasted, shares in processes:
            live.add(key)
            seen = self.seen.get(key)
            longest = MAX_PHASE_GAP_S
            if seen is None:
                seen = self.seen[key] = _Seen(workload, base=(0.0, 0.0))
                since = counted_from.get(key) if counted_from is not None else None
                if sample_ts is not None and since is not None and since < sample_ts:
                    seen.ts = since  # counted below as the time since a scrape at `since`
                    longest = FIRST_SCRAPE_PHASE_S
            elif seen.workload != workload:  # it moved: its dollars so far stay where they were
                self._retire(seen, now)
                seen = self.seen[key] = _Seen(workload, ts=seen.ts, base=(
                    seen.base[0] + seen.dollars, seen.base[1] + seen.wasted))
            seen.dollars = max(seen.dollars, dollars - seen.base[0])
            seen.wasted = max(seen.wasted, wasted - seen.base[1])
            if sample_ts is not None:
                if seen.ts is not None and 0 < sample_ts - seen.ts <= longest:
                    elapsed = sample_ts - seen.ts
                    for phase, share in (shares.items() if shares else ((UNKNOWN_PHASE, 1.0),)):
                        seen.phases[phase] = seen.phases.get(phase, 0.0) + elapsed * share
                if seen.ts is None or sample_ts > seen.ts:
                    seen.ts = sample_ts
            self.retired.setdefault(workload, _Retired()).last_seen = now
        for key in [k for k in self.seen if k not in live]:
            self._retire(self.seen.pop(key), now)
        before = now - FORGET_AFTER_S
        self.retired = {w: r for w, r in self.retired.items() if r.last_seen >= before}
        for cap in self.caps.values():
            cap.forget(before)

    def _spend(self, spend: Mapping[tuple[str, ...], tuple[float, float]], now: float) -> None:
        counted = self.counted
        for raw, (dollars, wasted) in spend.items():
            before = counted.get(raw)
            if before is not None and before[0] >= dollars and before[1] >= wasted:
                continue  # nothing charged to it since the last scrape
            counted[raw] = (dollars, wasted)
            workload = self.workload(tuple(one_line(value) for value in raw), now)
            retired = self.retired.setdefault(workload, _Retired())
            retired.dollars += max(dollars - (before[0] if before else 0.0), 0.0)
            retired.wasted += max(wasted - (before[1] if before else 0.0), 0.0)
            retired.last_seen = now

    def _retire(self, seen: _Seen, now: float) -> None:
        retired = self.retired.setdefault(seen.workload, _Retired())
        retired.dollars += seen.dollars
        retired.wasted += seen.wasted
        for phase, seconds in seen.phases.items():
            retired.phases[phase] = retired.phases.get(phase, 0.0) + seconds
        retired.last_seen = now

    def totals(self) -> dict[WorkloadKey, WorkloadTotal]:
        """Dollars, wasted dollars and phase seconds per workload (retired plus live)."""
        out = {w: WorkloadTotal(r.dollars, r.wasted, dict(r.phases))
               for w, r in self.retired.items()}
        for seen in self.seen.values():
            before = out.get(seen.workload) or WorkloadTotal(0.0, 0.0, {})
            phases = dict(before.phases)
            for phase, seconds in seen.phases.items():
                phases[phase] = phases.get(phase, 0.0) + seconds
            out[seen.workload] = WorkloadTotal(before.dollars + seen.dollars,
                                               before.wasted + seen.wasted, phases)
        return out


@lru_cache(maxsize=4096)
def _present(workload: WorkloadKey) -> LabelPairs:
    """The labels a workload has (cached: the same few hundred workloads every scrape)."""
    return tuple((label, value) for label, value in zip(WORKLOAD_LABELS, workload, strict=True)
                 if value)


@lru_cache(maxsize=16384)
def _with_phase(labels: LabelPairs, phase: str) -> LabelPairs:
    return (*labels, ("phase", phase))


@lru_cache(maxsize=1024)
def _gpu_labels(index: int, uuid: str, name: str, hostname: str) -> LabelPairs:
    """A GPU's labels (dcgm-exporter's names), cached: the same GPUs every scrape."""
    return tuple(zip(GPU_LABELS, (str(index), _clean(uuid), _clean(name), hostname),
                     strict=True))


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _age_s(as_of: Any, now: float) -> float | None:
    if not isinstance(as_of, str) or not as_of:
        return None
    try:
        when = datetime.fromisoformat(as_of.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(now - when.timestamp(), 0.0)


class DaemonCollector(Collector):
    """The families of one scrape, from `daemon` (runtime.daemon.Daemon: its `metrics_state()`
    and `analyzer`; or anything with a `now()` document). Call it on the event loop."""

    def __init__(self, daemon: Any, label_values: int = DEFAULT_LABEL_VALUES,
                 api_port: int | None = None) -> None:
        self.daemon = daemon
        self.workloads = WorkloadTotals(label_values)
        self.api_port = api_port  # the TCP API's port, for mlcost-top --prometheus
        self._lock = threading.Lock()  # one scrape at a time updates the workload totals

    def describe(self) -> list[Metric]:
        return []  # families depend on the host: no registration-time check

    def collect(self) -> Iterator[Metric]:
        """prometheus-client's Metrics (the registry's view; Metrics.render writes `families`)."""
        for family in self.families():
            yield family.metric() if isinstance(family, Family) else family

    def families(self) -> list[Metric | Family]:
        """The families of one scrape, in the order they are written."""
        with self._lock:
            return list(self._collect())

    def state(self) -> tuple[MetricsState, Mapping[str, Any] | None]:
        """This tick's state: the daemon's typed state where it offers it (`metrics_state()`),
        else its /v1/now document read through daemon.wire (and that document)."""
        typed = getattr(self.daemon, "metrics_state", None)
        if callable(typed):
            state: MetricsState = typed()
            return state, None
        document = self.daemon.now()
        return MetricsState.from_document(document), document

    def _collect(self) -> Iterator[Metric | Family]:
        state, document = self.state()
        analyzer = getattr(self.daemon, "analyzer", None)
        wall, clock = daemon_clock.now(), time.monotonic()
        hostname = _clean(state.hostname)
        yield from self._host(state, hostname, wall)
        yield from self._store(hostname)
        yield from self._gpus(state, analyzer, hostname)
        yield from self._idleness(state, document, analyzer, hostname)
        yield from self._workloads(state, analyzer, hostname, clock)
        yield from self._usage_cost(state, hostname, clock)
        yield from self._activity(state, hostname)
        yield from self._advice(state, hostname)
        yield from self._budgets(analyzer, hostname, state.ts)
        yield self._kinds(state, hostname)
        yield from self._latency(state, hostname)
        yield from self._energy(analyzer, hostname)

    def _store(self, hostname: str) -> Iterator[Metric]:
        """The store's health (daemon.store.health: /v1/health's `store`): whether it records,
        the ticks waiting in memory while it cannot, those lost and its size, for an alert on a
        full disk; `mlcost_last_sample_timestamp_seconds` goes on moving meanwhile (the tick
        is taken, not written)."""
        store = getattr(self.daemon, "store", None)
        if store is None:
            return
        health = store.health
        families = (
            (GaugeMetricFamily, "mlcost_store_up", "1 while the store is well, 0 while a "
             "problem stands (/v1/health's store.problem says which: a full disk or an I/O "
             "error, ticks then waiting in memory; housekeeping that keeps failing; the file "
             "moved away)", 0.0 if health.problem else 1.0),
            (GaugeMetricFamily, "mlcost_store_samples_buffered", "Ticks waiting in memory "
             "for the store to take them (bounded: past the bound the oldest are dropped)",
             health.samples_buffered),
            (CounterMetricFamily, "mlcost_store_samples_dropped", "Ticks lost since mlcostd "
             "started: the memory's bound overflowed, or SQLite rejected one",
             health.samples_dropped),
            (CounterMetricFamily, "mlcost_store_write_failures", "Store writes that failed "
             "since mlcostd started (each is tried again)", health.writes_failed),
            (GaugeMetricFamily, "mlcost_store_bytes", "The store's database and WAL on disk",
             health.bytes_on_disk),
        )
        for kind, name, text, value in families:
            family = kind(name, text, labels=["Hostname"])
            family.add_metric([hostname], float(value))
            yield family

    def _energy(self, analyzer: Any, hostname: str) -> Iterator[Metric]:
        """Energy and carbon per workload (daemon.api.energy_metrics), bounded as above."""
        meter = getattr(analyzer, "energy", None)
        if meter is None:
            return
        clock, caps = time.monotonic(), self.workloads.caps

        def bound(label: str, raw: str) -> str:
            return caps[label].value(_clean(raw), clock)

        by_workload, host_idle = meter.workloads()
        yield from energy_families(by_workload, host_idle, analyzer.grid(), hostname, bound)

    def _latency(self, state: MetricsState, hostname: str) -> Iterator[Metric | Family]:
        """p50/p99 of each [[cost.latency]] histogram, and the dollars per request over the
        same requests, beside the cost. Labelled by the job it is configured for; a process
        target (PID:START) shows as `process #N` (its table's number): never a pid label."""
        meters = state.latency
        if not meters:
            return
        # A summary (quantiles over a recent window, as a client library's summary gives
        # them), with no _sum or _count: the histogram's own series hold those. As a gauge, its
        # `quantile` label failed `promtool check metrics` (probe 156 F4).
        family = Family("mlcost_latency_seconds", "Serving latency quantiles from the "
                        "server's own histogram ([[cost.latency]]), over the requests between "
                        "mlcostd's last two polls", "summary")
        per_request = GaugeMetricFamily(
            "mlcost_latency_cost_per_request_dollars", "Dollars per request of a "
            "[[cost.latency]] target: its dollars over the requests between mlcostd's last two "
            "polls, divided by those requests (beside mlcost_latency_seconds)",
            labels=["target", "Hostname"])
        for number, meter in enumerate(meters, start=1):
            target = str(meter.get("target") or "")
            shown = f"process #{number}" if target_pid(target) is not None else _clean(target)
            for quantile, key in (("0.5", "p50_seconds"), ("0.99", "p99_seconds")):
                value = meter.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    family.add((("target", shown), ("quantile", quantile),
                                ("Hostname", hostname)), float(value))
            cost = meter.get("cost_per_request")
            if isinstance(cost, int | float) and not isinstance(cost, bool):
                per_request.add_metric([shown, hostname], float(cost))
        yield family
        yield per_request

    def _kinds(self, state: MetricsState, hostname: str) -> Metric:
        """GPU processes by workload kind (daemon.analysis.kinds): a bounded label, the five
        kinds and `unknown` (not classified yet); never a pid."""
        counts = dict.fromkeys((*KINDS, "unknown"), 0)
        for proc in state.processes:
            if proc.gpus:
                kind = proc.kind if proc.kind in counts else "unknown"
                counts[kind] += 1
        family = GaugeMetricFamily("mlcost_gpu_processes_by_kind", "GPU processes on this host "
                                   "by workload kind", labels=["kind", "Hostname"])
        for kind, count in counts.items():
            family.add_metric([kind, hostname], float(count))
        return family

    # -- the host ---------------------------------------------------------------------------

    def _host(self, state: MetricsState, hostname: str, wall: float) -> Iterator[Metric]:
        host = state.host
        price = state.price
        instance = host.get("instance") or {}
        info = InfoMetricFamily("mlcost_host", "This host: its instance and where its price is "
                                "from (value 1; join on Hostname or instance)")
        info.add_metric([], {
            "Hostname": hostname,
            "provider": _clean(price.get("provider") or instance.get("provider")),
            "region": _clean(price.get("region") or instance.get("region")),
            "instance_type": _clean(price.get("instance_type") or instance.get("type")),
            "lifecycle": _clean(price.get("lifecycle") or instance.get("lifecycle")),
            "price_source": _clean(price.get("source")),
            "price_as_of": _clean(price.get("as_of")),
            "simulated": _clean(host.get("simulated")),
            "api_port": "" if self.api_port is None else str(self.api_port),
        })
        yield info
        labels = ["Hostname"]
        ledger = state.ledger

        def gauge(name: str, text: str, value: Any) -> GaugeMetricFamily | None:
            if not isinstance(value, int | float) or isinstance(value, bool):
                return None
            family = GaugeMetricFamily(name, text, labels=labels)
            family.add_metric([hostname], float(value))
            return family

        def counter(name: str, text: str, value: Any) -> CounterMetricFamily:
            family = CounterMetricFamily(name, text, labels=labels)
            family.add_metric([hostname], float(value) if isinstance(value, int | float) else 0.0)
            return family

        families = [
            gauge("mlcost_host_price_dollars_per_hour", "What the host costs an hour",
                  price.get("per_hour")),
            gauge("mlcost_price_age_seconds", "Age of the host's price (its as-of date); "
                  "absent when the price has no date (a catalog or configured price without "
                  "an as-of)", _age_s(price.get("as_of"), wall)),
            gauge("mlcost_host_burn_dollars_per_hour", "The host's burn now (all GPUs)",
                  state.burn_per_hour),
            gauge("mlcost_host_wasted_dollars_per_hour", "Dollars an hour the GPUs spend not "
                  "computing: price x (1 - utilization), idle GPUs whole", state.wasted_per_hour),
            gauge("mlcost_idle_burn_dollars_per_hour", "Burn of GPUs no process holds",
                  state.idle_per_hour),
            gauge("mlcost_nvml_up", "1 when NVML answers, 0 when it is missing or failing",
                  1.0 if state.nvml_status == "ok" else 0.0),
            gauge("mlcost_last_sample_timestamp_seconds", "When the latest sample was taken",
                  state.ts),
            counter("mlcost_host_burn_dollars", "Dollars the host burned since mlcostd started",
                    ledger.get("total")),
            counter("mlcost_host_wasted_dollars", "Wasted dollars since mlcostd started",
                    ledger.get("wasted")),
            counter("mlcost_idle_dollars", "Dollars of GPUs no process held, since mlcostd "
                    "started", ledger.get("idle")),
        ]
        yield from (f for f in families if f is not None)

    # -- GPUs -------------------------------------------------------------------------------

    def _gpus(self, state: MetricsState, analyzer: Any, hostname: str) -> Iterator[Family]:
        def family(kind: str, name: str, text: str) -> Family:
            return Family(name, text, kind)

        util = family("gauge", "mlcost_gpu_utilization_ratio",
                      "Fraction of time a kernel ran (NVML GPU utilization)")
        sm = family("gauge", "mlcost_gpu_sm_activity_ratio",
                    "SM activity (NVML GPM on Hopper and later, or dcgm-exporter when configured)")
        used = family("gauge", "mlcost_gpu_memory_used_bytes",
                      "GPU memory used, as nvidia-smi shows it")
        total = family("gauge", "mlcost_gpu_memory_total_bytes", "GPU memory in all")
        power = family("gauge", "mlcost_gpu_power_watts", "Power draw")
        up = family("gauge", "mlcost_gpu_up", "1 when the GPU reads ok, 0 when lost, "
                    "timed out or failing")
        busy = family("gauge", "mlcost_gpu_busy", "1 busy, 0 idle under [idle]."
                      "utilization (the daemon's verdict); absent when unknown")
        holders = family("gauge", "mlcost_gpu_processes", "Processes holding the GPU")
        burn = family("gauge", "mlcost_gpu_burn_dollars_per_hour",
                      "The GPU's price an hour (host price / GPU count)")
        wasted = family("gauge", "mlcost_gpu_wasted_dollars_per_hour",
                        "Wasted dollars an hour: price x (1 - utilization), idle whole")
        burn_total = family("counter", "mlcost_gpu_burn_dollars",
                            "Dollars the GPU burned since mlcostd started")
        wasted_total = family("counter", "mlcost_gpu_wasted_dollars",
                              "Wasted dollars since mlcostd started")
        energy = family("counter", "mlcost_gpu_energy_joules",
                        "Energy the GPU used since mlcostd started (measured power x time)")
        held: dict[int, int] = {}
        for proc in state.processes:
            for index in proc.gpus:
                held[index] = held.get(index, 0) + 1
        uuids: dict[str, LabelPairs] = {}
        for gpu in state.gpus:
            labels = _gpu_labels(gpu.index, gpu.uuid, gpu.name, hostname)
            uuids[gpu.uuid or f"gpu{gpu.index}"] = labels
            up.add(labels, 1.0 if gpu.status == "ok" else 0.0)
            holders.add(labels, float(held.get(gpu.index, 0)))
            for fam, value in ((util, _ratio(gpu.utilization)), (sm, _ratio(gpu.sm_activity)),
                               (used, gpu.memory_used_bytes), (total, gpu.memory_total_bytes),
                               (power, gpu.power_watts), (burn, gpu.price_per_hour),
                               (wasted, gpu.wasted_per_hour),
                               (busy, None if gpu.busy is None else float(gpu.busy))):
                if value is not None:
                    fam.add(labels, float(value))
        totals = analyzer.gpu_totals.snapshot() if hasattr(analyzer, "gpu_totals") else []
        for t in totals:
            labels = uuids.get(t.uuid) or _gpu_labels(t.index, t.uuid, t.name, hostname)
            burn_total.add(labels, t.burn_dollars, "_total")
            wasted_total.add(labels, t.wasted_dollars, "_total")
            energy.add(labels, t.energy_joules, "_total")
        unseen = Family("mlcost_unseen_gpus", "GPUs the host's price counts that NVML does "
                        "not list (all of them while it lists none): each billed at the GPU's "
                        "price as idle burn and wasted, in the host's burn; no per-GPU series",
                        "gauge")
        unseen.add((("Hostname", hostname),), float(state.unseen_gpus))
        yield from (util, sm, used, total, power, up, busy, holders, burn, wasted, burn_total,
                    wasted_total, energy, unseen)

    # -- the daemon's idleness verdict, as GET /v1/idle gives it (daemon.api.idle_metrics) ---

    def _idleness(self, state: MetricsState, document: Mapping[str, Any] | None,
                  analyzer: Any, hostname: str) -> Iterator[Family]:
        """`document`: the tick's /v1/now document where the state was read from it; else
        the daemon's `now()` is asked, only where the verdict needs it."""
        read: Callable[[], Mapping[str, Any]]
        if document is not None:
            held = document
            read = lambda: held  # noqa: E731 (a def would not see `held` narrowed)
        elif callable(getattr(self.daemon, "now", None)):
            read = self.daemon.now
        else:
            return
        config = getattr(self.daemon, "config", None)
        periodic = getattr(analyzer, "periodic", None)
        working = getattr(analyzer, "working", None)

        def verdict() -> Mapping[str, Any]:
            return verdict_now(
                read(),
                periodic() if callable(periodic) else {},
                config.idle.utilization if config is not None else 0.0,
                config.daemon.interval if config is not None else 1.0,
                working() if callable(working) else {})

        labels = {gpu.index: _gpu_labels(gpu.index, gpu.uuid, gpu.name, hostname)
                  for gpu in state.gpus}
        yield from idleness_families(state, verdict, hostname, labels)

    # -- workloads --------------------------------------------------------------------------

    def _workloads(self, state: MetricsState, analyzer: Any, hostname: str,
                   clock: float) -> Iterator[Metric | Family]:
        """`clock`: the scrape's time.monotonic() (when a label value was last seen)."""
        latest = getattr(analyzer, "latest", None)  # this tick's Burn
        gpu_wasted = {g.index: g.wasted_per_hour or 0.0 for g in state.gpus}
        wasted_of: dict[str, float] = {}  # $/h now
        for key, proc in (getattr(latest, "processes", None) or {}).items():
            wasted_of[process_key(*key)] = math.fsum(
                s.share * gpu_wasted.get(s.gpu_index, 0.0) for s in proc.shares)
        # The ledger's dollars per workload, charged tick by tick; without a ledger (a
        # daemon-shaped object), each process's dollars so far at this scrape (no waste).
        workload_spend = getattr(getattr(analyzer, "ledger", None), "workload_spend", None)
        spend = workload_spend() if callable(workload_spend) else None
        rows = []
        rates: dict[WorkloadKey, list[float]] = {}
        for proc in state.processes:
            if proc.cost is None or proc.job is None:
                continue  # the ledger has not charged it yet (its first tick): no job label
            owner = proc.owner
            workload = self.workloads.workload(
                (proc.job, *[owner.get(key, "") for key in OWNER_KEYS.values()], proc.user),
                clock)
            rows.append((proc.key, workload, proc.cost, 0.0, proc.phases))
            rate = rates.setdefault(workload, [0.0, 0.0])
            rate[0] += proc.burn_per_hour or 0.0
            rate[1] += wasted_of.get(proc.key, 0.0)
        counted_from = None
        if state.started_at is not None and state.ts is not None:  # (the daemon's own state)
            earliest = max(state.started_at, state.ts - FIRST_SCRAPE_PHASE_S)
            counted_from = {proc.key: max(earliest, proc.start_time or 0.0)
                            for proc in state.processes}
        self.workloads.update(rows, state.ts, clock, counted_from, spend)
        # Only the labels a workload has (an empty label is an absent one to PromQL), and no
        # Hostname (the scrape's instance names the host; mlcost_host_info joins it): the
        # most numerous series stay cheap to render and to store.
        burn = Family("mlcost_workload_burn_dollars_per_hour",
                      "Burn of a workload's processes (their GPU shares)", "gauge")
        wasted = Family("mlcost_workload_wasted_dollars_per_hour",
                        "Wasted dollars an hour on the GPU shares a workload holds", "gauge")
        for workload, (per_hour, wasted_per_hour) in rates.items():
            labels = _present(workload)
            burn.add(labels, per_hour)
            wasted.add(labels, wasted_per_hour)
        dollars = Family("mlcost_workload_dollars",
                         "Dollars charged to a workload since mlcostd started", "counter")
        wasted_total = Family("mlcost_workload_wasted_dollars", "Wasted dollars on the GPU "
                              "shares a workload held, since mlcostd started", "counter")
        phases = Family("mlcost_workload_phase_seconds", "Seconds a workload's processes spent "
                        "in each phase (by their phase balance)", "counter")
        for workload, total in self.workloads.totals().items():
            labels = _present(workload)
            dollars.add(labels, total.dollars, "_total")
            wasted_total.add(labels, total.wasted, "_total")
            for phase, seconds in sorted(total.phases.items()):
                phases.add(_with_phase(labels, phase), seconds, "_total")
        folded = CounterMetricFamily("mlcost_metrics_folded_values",
                                     "Distinct label values folded into \"other\" by the "
                                     "per-label limit ([api].metrics_label_values)",
                                     labels=["Hostname", "label"])
        for label, cap in self.workloads.caps.items():
            folded.add_metric([hostname, label], cap.folded_total)
        yield from (burn, wasted, dollars, wasted_total, phases, folded)

    # -- usage-based GPU cost beside OpenCost's names (daemon.api.usage_metrics) -----------

    def _usage_cost(self, state: MetricsState, hostname: str,
                    clock: float) -> Iterator[Family]:
        pod_allocations = getattr(self.daemon, "pod_allocations", None)
        allocations = pod_allocations() if callable(pod_allocations) else {}
        workloads = self.workloads  # the workload series' caps: one fold per label value

        def bound(label: str, raw: str) -> str:
            if label in workloads.caps:
                return workloads.shown(label, raw, clock)
            return _clean(raw)

        yield from usage_cost_families(state, allocations, hostname, bound)

    # -- where GPU activity comes from: DCGM or GPM (daemon.api.activity_metrics) ---------

    def _activity(self, state: MetricsState, hostname: str) -> Iterator[Metric]:
        activity_sources = getattr(getattr(self.daemon, "nvml", None), "activity_sources", None)
        if not callable(activity_sources):
            return
        labels = {g.index: [str(g.index), _clean(g.uuid), _clean(g.name), hostname]
                  for g in state.gpus}
        yield from activity_families(activity_sources(), labels)

    # -- advice and budgets -----------------------------------------------------------------

    def _advice(self, state: MetricsState, hostname: str) -> Iterator[Metric]:
        savings = GaugeMetricFamily("mlcost_recommendation_savings_dollars_per_month",
                                    "Savings of the active recommendations per rule (combined: "
                                    "never more than the bill)", labels=["Hostname", "rule"])
        count = GaugeMetricFamily("mlcost_recommendations", "Active recommendations per rule",
                                  labels=["Hostname", "rule"])
        by_rule: dict[str, list[float]] = {}
        for rule, shown_savings in state.recommendations:
            entry = by_rule.setdefault(_clean(rule), [0.0, 0.0])
            entry[0] += shown_savings or 0.0
            entry[1] += 1
        for rule, (dollars, n) in sorted(by_rule.items()):
            savings.add_metric([hostname, rule], dollars)
            count.add_metric([hostname, rule], n)
        yield savings
        yield count
        if state.potential_savings_per_month is not None:
            potential = GaugeMetricFamily("mlcost_potential_savings_dollars_per_month",
                                          "The recommendations' combined savings",
                                          labels=["Hostname"])
            potential.add_metric([hostname], state.potential_savings_per_month)
            yield potential

    def _budgets(self, analyzer: Any, hostname: str, ts: float | None) -> Iterator[Metric]:
        watch = getattr(analyzer, "budgets", None)
        budgets = getattr(watch, "budgets", None) or []
        labels = ["Hostname", "scope", "name", "period"]
        limit = GaugeMetricFamily("mlcost_budget_limit_dollars",
                                  "A configured budget ([cost.budgets])", labels=labels)
        for budget in budgets:
            limit.add_metric([hostname, budget.scope, _clean(budget.name), budget.period],
                             budget.limit)
        yield limit
        spent = GaugeMetricFamily(
            "mlcost_budget_spent_dollars",
            "Spent in the budget's current UTC day or month (the runs before this start too)",
            labels=labels)
        if watch is not None and budgets and ts is not None:
            with analyzer.ledger.lock:  # the loop writes the ledger; a scrape reads it
                found = watch.status(analyzer.ledger, ts)
            for entry in found:
                spent.add_metric([hostname, entry["scope"], _clean(entry["name"]),
                                  entry["period"]], entry["spent"])
        yield spent


class Metrics:
    """The daemon's /metrics: one collector in its own registry (no process or platform
    collectors: the series are about the GPUs), in prometheus-client's text exposition."""

    def __init__(self, daemon: Any, label_values: int = DEFAULT_LABEL_VALUES,
                 api_port: int | None = None) -> None:
        self.collector = DaemonCollector(daemon, label_values, api_port)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.exposition = Exposition()
        self._cached: tuple[Any, bytes] | None = None  # (tick, its exposition)

    def render(self) -> bytes:
        """The exposition, rendered once per tick: every scrape in the same tick (several
        Prometheus replicas, mlcost-top --prometheus, a person with curl) is served the bytes
        the first one rendered. Everything the series say changes with the tick (the sample,
        the ledger, the analyzer), so a tick's bytes are that tick's truth; a daemon-shaped
        object without a `tick` is rendered on every call."""
        tick = getattr(self.collector.daemon, "tick", None)
        cached = self._cached
        if tick is not None and cached is not None and cached[0] == tick:
            return cached[1]
        body = self.exposition.render(self.collector.families())
        self._cached = None if tick is None else (tick, body)
        return body

    # The text format every Prometheus release reads (2.x included).
    content_type = CONTENT_TYPE_PLAIN_0_0_4

    async def handle(self, request: web.Request) -> web.Response:
        """GET /metrics: rendered on the loop, where the daemon's state lives (a few ms). A
        render that fails is a 500 that says so (logged once a minute, never per scrape)."""
        try:
            body = self.render()
        except Exception as exc:
            limited_log(logging.ERROR, f"metrics:{type(exc).__name__}",
                        "rendering /metrics failed", exc_info=exc)
            return web.Response(status=500, text=f"mlcostd could not render /metrics: "
                                                 f"{type(exc).__name__}; see its log\n")
        return web.Response(body=body, headers={"Content-Type": self.content_type})


def add_metrics_route(app: web.Application, metrics: Metrics) -> None:
    app.router.add_get("/metrics", metrics.handle)


def metrics_only_app(metrics: Metrics) -> web.Application:
    """The app of `--metrics-listen`: /metrics only, no token (as exporters serve), and a JSON
    error for anything else, so nothing of the API is reachable there: 404 for another path,
    405 with the Allow header for another method on /metrics (as aiohttp answers a route
    registered for GET; a catch-all route had answered POST /metrics 404)."""

    @web.middleware
    async def json_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[
            web.StreamResponse]]) -> web.StreamResponse:
        try:
            return await handler(request)
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
            answer = web.json_response({"error": f"only GET /metrics is served here, not "
                                                 f"{request.method} {request.path[:80]}"},
                                       status=exc.status)
            if "Allow" in exc.headers:  # a 405 says what is allowed (RFC 9110)
                answer.headers["Allow"] = exc.headers["Allow"]
            return answer

    app = web.Application(middlewares=[json_errors], client_max_size=1024)
    add_metrics_route(app, metrics)
    return app
