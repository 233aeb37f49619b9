"""Meters beside the burn: the storage cost of configured paths (size x $/GB-month) and unit
cost (dollars per 1M tokens, per 1k requests) from a process's Prometheus counter.

Both do blocking work (a directory walk, an HTTP read), so they run beside the tick, rarely, and
hand their latest result to the ledger.
"""

from __future__ import annotations

import math
import os
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon import clock
from daemon.sources.redact import redact_name, redact_text
from daemon.sources.safe_text import one_line
from pricing.offer import HOURS_PER_MONTH

# EBS gp3 in us-east-1 is $0.08 per GB-month (GB = 2^30 bytes, as the clouds bill).
DEFAULT_STORAGE_PRICE_PER_GB_MONTH = 0.08
STORAGE_WALK_BUDGET_S = 2.0  # one storage walk stops after this and says it is partial
UNIT_COST_TIMEOUT_S = 1.0
MAX_EXPOSITION_BYTES = 4 << 20  # a process's /metrics is kilobytes; more is not a counter page


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
            results.append(StorageCost(path, 0, 0, False, price, 0.0,
                                       redact_text(one_line(exc.strerror or str(exc)))))
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
                # (a folder a user made and named: `password=x`, a token; control bytes)
                complete, error = False, redact_text(one_line(f"{current}: {exc.strerror or exc}"))
        per_month = total / 2**30 * price
        results.append(StorageCost(path, total, files, complete, price, per_month, error))
    return results


# -- unit cost (Prometheus counters) ---------------------------------------------------------


def reading_name(target: str, url: str, metric: str) -> str:
    """The name a unit-cost or latency meter's readings are stored and shown under: its target,
    URL and metric, redacted (`redact_name`: two meters whose URLs differ only in a token keep
    two names, each with a tag of what was hidden, and their readings stay apart)."""
    return redact_name(f"{target} {url} {metric}")


def read_exposition(url: str, timeout_s: float) -> str:
    """The text of a Prometheus /metrics page, read within `timeout_s` in all and
    MAX_EXPOSITION_BYTES. Raises OSError (unreachable, timeout, too large)."""
    from pricing.http import FetchError, read_bounded_sync

    deadline = time.monotonic() + timeout_s
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
        try:
            raw = read_bounded_sync(response, max_bytes=MAX_EXPOSITION_BYTES,
                                    deadline=deadline, shown=url)
        except FetchError as exc:
            raise TimeoutError(str(exc)) from None
    return raw.decode("utf-8", errors="replace")


def read_counter(url: str, metric: str, labels: Mapping[str, str] | None = None,
                 timeout_s: float = UNIT_COST_TIMEOUT_S) -> float:
    """The value of a Prometheus counter from a text exposition endpoint, summed over the
    series that carry `labels`. `metric` may be given with or without `_total`.
    The answer is read within `timeout_s` in all and MAX_EXPOSITION_BYTES; the value is a
    finite number of at least 0. Raises OSError (unreachable, timeout, too large) or
    ValueError (not there / not parseable / not a count)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = read_exposition(url, timeout_s)
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
            value = float(sample.value)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{url}: {sample.name}={sample.value!r} is not a count (a "
                                 "finite number of at least 0)")
            total += value
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
    # When the baseline and the last reading were taken (seconds since the epoch): the span
    # its units came in over, for a rate (requests a minute).
    base_at: float | None = None
    last_at: float | None = None

    @property
    def shown_url(self) -> str:
        """The URL as it is shown and recorded: a token in its query (`?token=...`) hidden."""
        return redact_text(self.url)

    def observe(self, cost: float, count: float, at: float | None = None) -> None:
        at = clock.now() if at is None else at
        if self.base_count is None or self.base_cost is None or count < self.last_count:
            self.base_cost, self.base_count, self.base_at = cost, count, at
        self.last_cost, self.last_count, self.last_at = cost, count, at
        self.error = None

    @property
    def units_per_second(self) -> float | None:
        """Units a second between the baseline and the last reading; None before a span."""
        if self.base_count is None or self.base_at is None or self.last_at is None:
            return None
        span = self.last_at - self.base_at
        return None if span <= 0 else (self.last_count - self.base_count) / span

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
                "units_per_second": self.units_per_second,
                "seconds": (self.last_at - self.base_at if self.last_at is not None
                            and self.base_at is not None else None),
                "metric": self.metric, "url": self.shown_url, "error": self.error,
                "method": (f"spend ${cost:.4f} / {units:g} {self.unit} x {per}"
                           if cost is not None and units else "waiting for a counter increase")}
