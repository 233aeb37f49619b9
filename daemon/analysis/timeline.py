"""The report's `timeline`: a range cut into fixed buckets, each with the GPUs' mean utilization
and memory, the burn in dollars per hour, and (over raw samples) each process's SM share, burn
and stack samples per phase.

One reader of the store's series for every "over time" figure: the profile's "GPU utilization
and memory over time", and `mlcostd compare`, whose noise estimate resamples these buckets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from daemon.analysis.busy import IdleThresholds
from daemon.analysis.cost import Burn, burn, gpu_wasted_per_hour
from daemon.analysis.ledger import recording_gap_s
from daemon.analysis.price_history import PriceHistory
from daemon.sources.sample import Sample
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.wire import process_key

TIMELINE_VERSION = 1
TARGET_BUCKETS = 120  # ranges are cut into at most this many buckets of a nice size
# Bucket sizes a person reads at a glance, seconds.
NICE_SIZES = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
              43200, 86400)
RAW_MAX_SPAN_S = 3600  # up to an hour: raw samples (per-process figures too); beyond: rollups
MAX_RAW_SAMPLES = 600  # as many as the report's cost pass reads: every 6th tick of 1 h at 1 s
# A raw read rebuilds every process of every tick it picks (~1 ms of CPU per tick of 64
# processes, and as much again to price it), so it is bounded in process rows, not ticks: a
# profile's few processes keep all MAX_RAW_SAMPLES ticks, a 64-process host ~64 of an hour
# (one a minute), and no host is read below MIN_RAW_SAMPLES (the noise estimate's buckets).
RAW_PROCESS_ROWS = 4096
MIN_RAW_SAMPLES = 30


def raw_sample_count(processes: int, most: int = MAX_RAW_SAMPLES) -> int:
    """How many ticks a raw read of a window with `processes` processes picks: at most `most`,
    within RAW_PROCESS_ROWS process rows, never under MIN_RAW_SAMPLES (nor over `most`)."""
    return min(most, max(MIN_RAW_SAMPLES, RAW_PROCESS_ROWS // max(processes, 1)))


COST_SAMPLES = 150  # ticks the spend of a window longer than RAW_MAX_SPAN_S is sampled at


def cost_sample_count(span_s: float, processes: int) -> int:
    """How many ticks the cost pass of a window `span_s` long with `processes` processes reads
    (raw_sample_count; at most COST_SAMPLES beyond RAW_MAX_SPAN_S): the report's and a
    snapshot page's, so each process's dollars on both are the same ticks' replay (probe 157
    H2: the page's 240-tick spread read $0.6793 where the report read $0.6782)."""
    return raw_sample_count(processes, MAX_RAW_SAMPLES if round(span_s, 3) <= RAW_MAX_SPAN_S
                            else COST_SAMPLES)


def sampled_gap_s(interval_s: float, span_s: float, ticks: int) -> float:
    """The longest interval a replay of `ticks` ticks read evenly over `span_s` charges whole
    (CostLedger max_gap_s): the recorded interval's gap, or 3 sampling steps."""
    return max(recording_gap_s(interval_s), 3 * span_s / max(ticks, 1))


@dataclass(frozen=True)
class RawWindow:
    """The ticks a report read of its window, each with its burn (None without a price): read
    and priced once, for the timeline, the cost pass and the energy alike."""

    samples: Sequence[Sample]
    costs: Sequence[Burn | None]

    @classmethod
    def read(cls, reader: StoreReader, start: float, end: float, max_samples: int,
             prices: PriceHistory, thresholds: IdleThresholds | None) -> RawWindow:
        """Each tick priced at the price charged then (PriceHistory)."""
        samples = reader.samples(start, end, max_samples=max_samples)
        return cls(samples, [burn(s, price, thresholds) if price is not None else None
                             for s in samples for price in (prices.at(s.ts),)])


def bucket_size(span_s: float, interval_s: float = 1.0) -> int:
    """The bucket width for a range `span_s` long: the smallest nice size no shorter than the
    sampling interval that cuts the range into at most TARGET_BUCKETS."""
    wanted = max(span_s / TARGET_BUCKETS, interval_s, 1.0)
    return next((size for size in NICE_SIZES if size >= wanted), math.ceil(wanted))


def build(reader: StoreReader, start: float, end: float, prices: PriceHistory,
          thresholds: IdleThresholds | None = None, interval_s: float = 1.0,
          raw: RawWindow | None = None) -> dict[str, Any]:
    """The timeline of [start, end]: `bucket_s`, `source` ("raw" or "rollups") and `buckets`,
    oldest first, only those that hold data. Each bucket: `ts` (its start), `utilization` (mean
    % over the GPUs), `memory_used_bytes` (summed over the GPUs), `burn_per_hour` and
    `wasted_per_hour` and `price_per_gpu` (at the price charged then; None without a price),
    `gpus` {index: {utilization, memory_used_bytes}};
    over raw samples also `samples` and `processes` {pid:start_time: {sm_share, burn_per_hour,
    phases: {phase: stack samples}}}. `raw`: the window's ticks as the caller read them (else
    up to MAX_RAW_SAMPLES are read here); buckets are no narrower than the ticks read are
    apart, so none in the recorded range is empty."""
    span = max(end - start, 0.0)
    if span <= RAW_MAX_SPAN_S:
        if raw is None:
            raw = RawWindow.read(reader, start, end, MAX_RAW_SAMPLES, prices, thresholds)
        picked = raw.samples
        # the ticks read are this far apart where they were recorded (a store younger than the
        # window covers only part of it: the span alone would make its buckets too wide)
        apart = ((picked[-1].ts - picked[0].ts) / (len(picked) - 1) if len(picked) > 1
                 else interval_s)
        size = bucket_size(span, max(interval_s, apart))
        buckets = _from_samples(reader, start, end, size, raw)
        source = "raw"
    else:
        size = bucket_size(span, interval_s)
        buckets = _from_rollups(reader, start, end, size, prices, thresholds)
        source = "rollups"
    return {"version": TIMELINE_VERSION, "since": start, "until": end, "bucket_s": size,
            "source": source, "buckets": buckets}


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _from_samples(reader: StoreReader, start: float, end: float, size: int,
                  raw: RawWindow) -> list[dict[str, Any]]:
    grouped: dict[int, dict[str, Any]] = {}
    for sample, costs in zip(raw.samples, raw.costs, strict=True):
        index = int((sample.ts - start) // size)
        acc = grouped.setdefault(index, {"util": [], "mem": [], "burn": [], "wasted": [],
                                         "per_gpu": [], "gpus": {}, "procs": {}, "n": 0})
        acc["n"] += 1
        utils = [g.utilization for g in sample.gpus if g.utilization is not None]
        if utils:
            acc["util"].append(math.fsum(utils) / len(utils))
        mems = [g.memory_used_bytes for g in sample.gpus if g.memory_used_bytes is not None]
        if mems:
            acc["mem"].append(float(sum(mems)))
        for gpu in sample.gpus:
            entry = acc["gpus"].setdefault(gpu.index, {"util": [], "mem": [], "power": []})
            if gpu.utilization is not None:
                entry["util"].append(gpu.utilization)
            if gpu.memory_used_bytes is not None:
                entry["mem"].append(float(gpu.memory_used_bytes))
            if gpu.power_watts is not None and math.isfinite(gpu.power_watts):
                entry["power"].append(gpu.power_watts)
        if costs is not None:
            acc["burn"].append(costs.total_per_hour)
            acc["wasted"].append(costs.wasted_per_hour)
            acc["per_gpu"].append(costs.price_per_gpu)
        for proc in sample.processes:
            if not proc.gpus:
                continue
            entry = acc["procs"].setdefault(process_key(*proc.key),
                                            {"sm": [], "burn": [], "phases": {}})
            entry["sm"].append(sum(use.sm_share or 0.0 for use in proc.gpus))
            if costs is not None and proc.key in costs.processes:
                entry["burn"].append(costs.processes[proc.key].burn_per_hour)
    for row in queries.stack_samples(reader, start, end):
        index = int((row["ts"] - start) // size)
        acc = grouped.setdefault(index, {"util": [], "mem": [], "burn": [], "wasted": [],
                                         "per_gpu": [], "gpus": {}, "procs": {}, "n": 0})
        entry = acc["procs"].setdefault(process_key(row["pid"], row["start_time"]),
                                        {"sm": [], "burn": [], "phases": {}})
        phase = str(row["phase"] or "unknown")
        entry["phases"][phase] = entry["phases"].get(phase, 0) + 1
    out = []
    for index in sorted(grouped):
        acc = grouped[index]
        out.append({
            "ts": start + index * size,
            "samples": acc["n"],
            "utilization": _mean(acc["util"]),
            "memory_used_bytes": _mean(acc["mem"]),
            "burn_per_hour": _mean(acc["burn"]),
            "wasted_per_hour": _mean(acc["wasted"]),
            "price_per_gpu": _mean(acc["per_gpu"]),
            "gpus": {str(i): {"utilization": _mean(g["util"]),
                              "memory_used_bytes": _mean(g["mem"]),
                              "power_watts": _mean(g["power"])}  # compare's energy noise
                     for i, g in sorted(acc["gpus"].items())},
            "processes": {key: {"sm_share": _mean(p["sm"]), "burn_per_hour": _mean(p["burn"]),
                                "phases": p["phases"]}
                          for key, p in sorted(acc["procs"].items())},
        })
    return out


def _from_rollups(reader: StoreReader, start: float, end: float, size: int,
                  prices: PriceHistory,
                  thresholds: IdleThresholds | None) -> list[dict[str, Any]]:
    """Per-GPU utilization and memory from the store's history (minute or hour rollups); the
    wasted $/h from each bucket's mean utilization with the one wasted-$/h formula."""
    indexes = [r["gpu"] for r in reader.query("SELECT gpu FROM gpus ORDER BY gpu")]
    points = max(1, math.ceil((end - start) / size))
    per_gpu: dict[int, dict[int, dict[str, float]]] = {}
    for gpu in indexes:
        for metric in ("utilization", "memory_used_bytes", "power_watts"):
            for ts, avg, _lo, _hi in reader.gpu_history(gpu, metric, start, end, points):
                index = int((ts - start) // size)
                per_gpu.setdefault(index, {}).setdefault(gpu, {})[metric] = avg
    idle_pct = (thresholds or IdleThresholds()).idle_utilization_pct
    out = []
    for index in sorted(per_gpu):
        gpus = per_gpu[index]
        utils = [g["utilization"] for g in gpus.values() if "utilization" in g]
        mems = [g["memory_used_bytes"] for g in gpus.values() if "memory_used_bytes" in g]
        total = wasted = None
        price = prices.at(start + index * size)
        if price is not None:
            total = price.per_hour
            wasted = math.fsum(
                gpu_wasted_per_hour(price.per_gpu, g.get("utilization"),
                                    idle_utilization_pct=idle_pct)
                for g in gpus.values())
        out.append({
            "ts": start + index * size,
            "utilization": _mean(utils),
            "memory_used_bytes": math.fsum(mems) if mems else None,
            "burn_per_hour": total,
            "wasted_per_hour": wasted,
            "price_per_gpu": None if price is None else price.per_gpu,
            "gpus": {str(i): {"utilization": g.get("utilization"),
                              "memory_used_bytes": g.get("memory_used_bytes"),
                              "power_watts": g.get("power_watts")}
                     for i, g in sorted(gpus.items())},
        })
    return out
