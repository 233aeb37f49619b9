"""Serving latency beside cost: p50 and p99 of a server's Prometheus latency histogram (vLLM's
`vllm:e2e_request_latency_seconds`, TGI's `tgi_request_duration`, Triton's ...), configured like
the unit-cost counters ([[cost.latency]]: target, url, metric, labels).

Quantiles are estimated from the cumulative buckets as Prometheus's histogram_quantile does
(linear inside the bucket the rank falls in), over the requests served between two polls, so a
p99 that swings shows up instead of being averaged away since the server started.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.meters import UNIT_COST_TIMEOUT_S, read_exposition, reading_name
from daemon.sources.redact import redact_text

QUANTILES = (0.5, 0.99)


def read_histogram(url: str, metric: str, labels: Mapping[str, str] | None = None,
                   timeout_s: float = UNIT_COST_TIMEOUT_S) -> dict[float, float]:
    """The cumulative bucket counts {upper bound: count} of histogram `metric` (its base name,
    or with `_bucket`) at `url`, summed over the series that carry `labels`. Raises OSError
    (unreachable, timeout, too large) or ValueError (no such histogram, a bad count)."""
    from prometheus_client.parser import text_string_to_metric_families

    base = metric.removesuffix("_bucket")
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(read_exposition(url, timeout_s)):
        if family.name != base:
            continue
        for sample in family.samples:
            if sample.name != base + "_bucket" or "le" not in sample.labels:
                continue
            if labels and any(sample.labels.get(k) != v for k, v in labels.items()):
                continue
            bound, value = float(sample.labels["le"]), float(sample.value)
            if not (math.isfinite(value) and value >= 0) or math.isnan(bound):
                raise ValueError(f"{url}: {sample.name}{{le={sample.labels['le']!r}}} = "
                                 f"{sample.value!r} is not a count")
            buckets[bound] = buckets.get(bound, 0.0) + value
    if not buckets:
        raise ValueError(f"{url} exposes no histogram {base!r}"
                         + (f" with labels {dict(labels)}" if labels else ""))
    return buckets


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile of cumulative `buckets` as Prometheus's histogram_quantile estimates it:
    linear inside the bucket the rank falls in (from 0 for the first); the largest finite
    bound when it falls in +Inf. None without observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank and count > below:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = (bound if math.isfinite(bound) else lower), count
    return lower


@dataclass
class LatencyMeter:
    """p50/p99 of one server's latency histogram for a job or a process (`target`): over the
    requests between the last two polls (`window`), and over all the server counted since it
    started (`cumulative`, its histogram as read)."""

    target: str
    url: str
    metric: str
    labels: Mapping[str, str] = field(default_factory=dict)
    cumulative: dict[float, float] = field(default_factory=dict)
    window: dict[float, float] = field(default_factory=dict)
    error: str | None = None
    cost: float | None = None  # the target's cumulative dollars at the last reading
    window_cost: float | None = None  # its dollars between the last two readings

    def observe(self, buckets: dict[float, float], cost: float | None = None) -> None:
        """A new reading of the cumulative buckets (and of the target's cumulative dollars,
        for the cost per request); after a reset (the server restarted) the window waits for
        the next reading."""
        previous = self.cumulative
        reset = any(buckets.get(b, 0.0) < c for b, c in previous.items())
        self.window = {} if reset or not previous else {
            b: c - previous.get(b, 0.0) for b, c in buckets.items()}
        self.window_cost = (None if reset or not previous or cost is None or self.cost is None
                            else max(cost - self.cost, 0.0))
        self.cumulative = dict(buckets)
        self.cost = cost
        self.error = None

    @property
    def shown_url(self) -> str:
        """The URL as it is shown and recorded: a token in its query (`?token=...`) hidden."""
        return redact_text(self.url)

    def poll(self, timeout_s: float = UNIT_COST_TIMEOUT_S, cost: float | None = None) -> None:
        try:
            self.observe(read_histogram(self.url, self.metric, self.labels, timeout_s), cost)
        except (OSError, ValueError) as exc:
            self.error = redact_text(f"{self.url}: {exc}")

    def as_dict(self) -> dict[str, Any]:
        """p50/p99 over the last poll's requests, or (before two polls, or none since) over
        all the server counted; both sets with their request counts."""
        recent = self.window if max(self.window.values(), default=0.0) > 0 else self.cumulative
        requests = max(recent.values(), default=0.0)
        return {"target": self.target, "url": self.shown_url, "metric": self.metric,
                "p50_seconds": quantile(0.5, recent), "p99_seconds": quantile(0.99, recent),
                "requests": requests,
                "cost_per_request": (self.window_cost / requests if recent is self.window
                                     and self.window_cost is not None and requests > 0
                                     else None),
                "p50_seconds_since_server_start": quantile(0.5, self.cumulative),
                "p99_seconds_since_server_start": quantile(0.99, self.cumulative),
                "requests_since_server_start": max(self.cumulative.values(), default=0.0),
                "error": self.error,
                "method": ("histogram_quantile over the requests between mlcostd's last two "
                           "polls" if recent is self.window else
                           "histogram_quantile over all requests the server counted")}


# The store keeps each histogram's cumulative buckets as a meter reading (daemon.store.facts.
# write_meter_readings, table meter_readings): kind LATENCY_READING, `value` the requests
# counted, `detail` the setting and the buckets, so a report of a past range takes its
# quantiles from the bucket deltas between the range's readings.
LATENCY_READING = "latency"
Reading = tuple[float, float, Mapping[str, Any]]  # (ts, requests, detail), as queries returns


def reading(meter: LatencyMeter) -> tuple[str, str, float, dict[str, Any]] | None:
    """The meter's last reading as a meter_readings row (kind, name, value, detail); None
    before a reading or after a failed one (nothing measured to record)."""
    if not meter.cumulative or meter.error is not None:
        return None
    buckets = [["+Inf" if math.isinf(b) else repr(b), c]
               for b, c in sorted(meter.cumulative.items())]
    return (LATENCY_READING, reading_name(meter.target, meter.url, meter.metric),
            max(meter.cumulative.values()),
            {"target": meter.target, "url": meter.shown_url, "metric": meter.metric,
             "labels": dict(meter.labels), "buckets": buckets})


def replayed_meters(found: Mapping[tuple[str, str], Sequence[Reading]]
                    ) -> dict[str, LatencyMeter]:
    """A LatencyMeter per recorded histogram (`found`: meter readings as
    daemon.store.queries.meter_readings returns them, by (kind, name)), by reading name, not yet
    observed: a replay feeds it the readings up to its tick (`observe_reading`), so it says
    what the live daemon's meter said then."""
    meters = {}
    for (kind, name), rows in found.items():
        if kind != LATENCY_READING or not rows:
            continue
        detail = rows[-1][2]
        meters[name] = LatencyMeter(
            target=str(detail.get("target") or "?"), url=str(detail.get("url") or ""),
            metric=str(detail.get("metric") or ""), labels=dict(detail.get("labels") or {}))
    return meters


def observe_reading(meter: LatencyMeter, detail: Mapping[str, Any],
                    cost: float | None = None) -> None:
    """Feed `meter` one recorded reading (its `detail`), with the target's dollars then."""
    meter.observe(_buckets(detail), cost)


def zero_reading(row: tuple[str, str, float, dict[str, Any]]
                 ) -> tuple[str, str, float, dict[str, Any]]:
    """A reading row (`reading`) with every bucket at 0: what a server counted before it
    started (recorded by `mlcostd profile` at its command's start for a server that was not
    there yet then)."""
    kind, name, _, detail = row
    return kind, name, 0.0, dict(detail, buckets=[[bound, 0.0] for bound, _ in detail["buckets"]])


def _buckets(detail: Mapping[str, Any]) -> dict[float, float]:
    """A reading's buckets back as {upper bound: count}; what is not a pair of numbers is
    dropped (the store is data)."""
    out: dict[float, float] = {}
    for pair in detail.get("buckets") or []:
        try:
            bound, count = float(pair[0]), float(pair[1])
        except (TypeError, ValueError, IndexError):
            continue
        if not math.isnan(bound) and math.isfinite(count) and count >= 0:
            out[bound] = count
    return out


def _delta(before: Mapping[float, float], after: Mapping[float, float]) -> dict[float, float]:
    """The requests counted between two readings; after a reset (a bucket went down: the
    server restarted) all the later reading counted."""
    if any(after.get(b, 0.0) < c for b, c in before.items()):
        return dict(after)
    return {b: c - before.get(b, 0.0) for b, c in after.items()}


def _figures(buckets: Mapping[float, float]) -> dict[str, Any]:
    return {"p50_seconds": quantile(0.5, buckets), "p99_seconds": quantile(0.99, buckets),
            "requests": max(buckets.values(), default=0.0)}


def _deltas(found: Sequence[Reading], start: float,
            end: float) -> list[tuple[float, dict[float, float]]]:
    """(ts, requests between the reading before and this one) for each reading in
    (start, end] that has one before it (the last one before `start` counts as before)."""
    out = []
    for before, after in zip(found, found[1:], strict=False):
        if start < after[0] <= end:
            out.append((after[0], _delta(_buckets(before[2]), _buckets(after[2]))))
    return out


def recorded_latency(found: Sequence[Reading], start: float, end: float) -> dict[str, Any]:
    """p50/p99 of one recorded histogram over [start, end]: from the sum of the bucket
    deltas between consecutive readings up to `end`, from the last reading at or before
    `start` (or the first in the range) on. The keys of LatencyMeter.as_dict, over the range,
    `span_s`, the seconds the readings cover in the range, and `counted`, the two readings'
    times the requests were counted between (None without two)."""
    detail = found[-1][2] if found else {}
    total: dict[float, float] = {}
    deltas = _deltas(found, start, end)
    base = next((before[0] for before, after in zip(found, found[1:], strict=False)
                 if deltas and after[0] == deltas[0][0]), start)
    for _, delta in deltas:
        for bound, count in delta.items():
            total[bound] = total.get(bound, 0.0) + count
    return {"target": str(detail.get("target") or "?"), "url": str(detail.get("url") or ""),
            "metric": str(detail.get("metric") or ""), **_figures(total),
            "readings": len(deltas) + 1 if deltas else len(found),
            # the seconds the deltas cover in the range
            "span_s": deltas[-1][0] - max(base, start) if deltas else 0.0,
            # the readings its requests were counted between (the one before the first delta,
            # the last): the target's dollars between them are what those requests cost
            "counted": (base, deltas[-1][0]) if deltas else None,
            "error": None if deltas else "fewer than two readings in the range",
            "method": "histogram_quantile over the bucket deltas between the range's "
                      "readings (mlcostd reads the histogram every [cost].evaluate_every)"}


def recorded_windows(found: Sequence[Reading], start: float, end: float,
                     size: float) -> dict[int, dict[str, Any]]:
    """p50/p99 per window of `size` seconds from `start` (the timeline's buckets, by index):
    each reading's delta goes to the window it was taken in. Windows without requests are
    left out."""
    windows: dict[int, dict[float, float]] = {}
    for ts, delta in _deltas(found, start, end):
        acc = windows.setdefault(int((ts - start) // size), {})
        for bound, count in delta.items():
            acc[bound] = acc.get(bound, 0.0) + count
    return {index: _figures(acc) for index, acc in sorted(windows.items())
            if max(acc.values(), default=0.0) > 0}
