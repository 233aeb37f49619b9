"""Serving latency beside cost: p50 and p99 of a server's Prometheus latency histogram (vLLM's
`vllm:e2e_request_latency_seconds`, TGI's `tgi_request_duration`, Triton's ...), configured like
the unit-cost counters ([[cost.latency]]: target, url, metric, labels).

Quantiles are estimated from the cumulative buckets as Prometheus's histogram_quantile does
(linear inside the bucket the rank falls in), over the requests served between two polls, so a
p99 that swings shows up instead of being averaged away since the server started.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.meters import UNIT_COST_TIMEOUT_S, read_exposition

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

    def observe(self, buckets: dict[float, float]) -> None:
        """A new reading of the cumulative buckets; after a reset (the server restarted) the
        window waits for the next reading."""
        previous = self.cumulative
        reset = any(buckets.get(b, 0.0) < c for b, c in previous.items())
        self.window = {} if reset or not previous else {
            b: c - previous.get(b, 0.0) for b, c in buckets.items()}
        self.cumulative = dict(buckets)
        self.error = None

    def poll(self, timeout_s: float = UNIT_COST_TIMEOUT_S) -> None:
        try:
            self.observe(read_histogram(self.url, self.metric, self.labels, timeout_s))
        except (OSError, ValueError) as exc:
            self.error = f"{self.url}: {exc}"

    def as_dict(self) -> dict[str, Any]:
        """p50/p99 over the last poll's requests, or (before two polls, or none since) over
        all the server counted; both sets with their request counts."""
        recent = self.window if max(self.window.values(), default=0.0) > 0 else self.cumulative
        return {"target": self.target, "url": self.url, "metric": self.metric,
                "p50_seconds": quantile(0.5, recent), "p99_seconds": quantile(0.99, recent),
                "requests": max(recent.values(), default=0.0),
                "p50_seconds_since_server_start": quantile(0.5, self.cumulative),
                "p99_seconds_since_server_start": quantile(0.99, self.cumulative),
                "requests_since_server_start": max(self.cumulative.values(), default=0.0),
                "error": self.error,
                "method": ("histogram_quantile over the requests between mlcostd's last two "
                           "polls" if recent is self.window else
                           "histogram_quantile over all requests the server counted")}
