"""The host's price over time, as the daemons that recorded a store charged it.

A store outlives the price it was recorded at: a daemon started again after `mlcostd prices
--refresh`, after a new `[instance].price_per_hour`, or on a resized instance (the same volume,
another instance type) charges another price, and the store's meta "host" holds only the last.
Each start records the price it charges with as a meter reading of kind PRICE_READING
(daemon.runtime.resume.record_price; a reading only when the price changed), so a report or a
replay of a past range prices each tick at the price then, as the live ledger charged it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.analysis.cost import HostPrice
from daemon.store import queries

PRICE_READING = "price"  # meter_readings.kind
PRICE_NAME = "host"  # meter_readings.name
# What makes two prices charge differently (their source text and warning carry ages that
# change every day without the price changing).
CHARGED_AS = ("per_hour", "gpu_count", "lifecycle", "instance_type", "provider", "region",
              "electricity_per_kwh")


# What a tick is charged by: the electricity price prices the GPUs' measured power beside the
# burn (the report's energy), never a tick's charge.
BURNED_AS = tuple(field for field in CHARGED_AS if field != "electricity_per_kwh")


def charged_as(price: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a recorded price (HostPrice.as_dict) the ledger charges by: equal for a daemon
    started again at the same price."""
    return tuple(price.get(field) for field in CHARGED_AS)


def _burned_as(price: HostPrice) -> tuple[Any, ...]:
    recorded = price.as_dict()
    return tuple(recorded.get(field) for field in BURNED_AS)


def _valid(recorded: object) -> HostPrice | None:
    """A recorded price a hostile or damaged store cannot turn into an exception or a nonsense
    charge: a finite, non-negative price per hour and an integer GPU count."""
    price = HostPrice.from_dict(recorded)
    if price is None or not math.isfinite(price.per_hour) or price.per_hour < 0:
        return None
    if not isinstance(price.gpu_count, int) or isinstance(price.gpu_count, bool) \
            or price.gpu_count < 0:
        return None
    return price


@dataclass(frozen=True)
class PriceHistory:
    """The prices a store was charged at: `changes` (since when, the price), oldest first;
    before the first of them, the first (the ticks of runs from before prices were kept: its
    price is the nearest known; a bucket of a chart that starts before it), and `fallback` for
    a store that recorded none (the price of its meta "host", as reports read it then)."""

    changes: tuple[tuple[float, HostPrice], ...]
    fallback: HostPrice | None

    @classmethod
    def fixed(cls, price: HostPrice | None) -> PriceHistory:
        """One price for every tick."""
        return cls((), price)

    @classmethod
    def from_readings(cls, readings: Mapping[tuple[str, str],
                                             Sequence[tuple[float, float, dict[str, Any]]]],
                      fallback: HostPrice | None) -> PriceHistory:
        """From a store's meter readings (daemon.store.queries.meter_readings: those of a range
        and the last before it)."""
        changes: list[tuple[float, HostPrice]] = []
        for ts, _, detail in readings.get((PRICE_READING, PRICE_NAME), ()):
            price = _valid(detail)
            if price is not None and (not changes or changes[-1][0] < ts):
                changes.append((ts, price))
        return cls(tuple(changes), fallback)

    def at(self, ts: float) -> HostPrice | None:
        """The price charged at `ts`."""
        if not self.changes:
            return self.fallback
        index = bisect.bisect_right([since for since, _ in self.changes], ts) - 1
        return self.changes[max(index, 0)][1]

    def within(self, start: float, end: float) -> list[tuple[float, HostPrice]]:
        """The prices charged in [start, end], each from when it was (`start` for the first),
        oldest first; a price recorded again that charges a tick as the one before did (the
        same $/h for the same instance and GPUs: a daemon started again with an electricity
        price added, probe 126 F7) is not a change."""
        found: list[tuple[float, HostPrice]] = []
        first = self.at(start)
        if first is not None:
            found.append((start, first))
        for since, price in self.changes:
            if start < since <= end and (not found or _burned_as(found[-1][1])
                                         != _burned_as(price)):
                found.append((since, price))
        return found

    def changes_within(self, start: float, end: float) -> list[tuple[float, HostPrice]]:
        """`within(start, end)` where the price changed in the range; [] where one price held
        throughout (what a report says)."""
        found = self.within(start, end)
        return found if len(found) > 1 else []


def instance_then(price: HostPrice, recorded: object) -> dict[str, Any]:
    """The host meta's `instance` (`recorded`) as it was when `price` was charged: the type,
    provider, region and lifecycle the price was for (a resized host keeps its store, and the
    meta holds the last run's)."""
    instance = dict(recorded) if isinstance(recorded, dict) else {}
    if price.instance_type:
        instance.update(type=price.instance_type, provider=price.provider,
                        region=price.region, lifecycle=price.lifecycle)
    return instance


def as_then(host: dict[str, Any], gpus: list[dict[str, Any]],
            readings: Mapping[tuple[str, str], list[tuple[float, float, dict[str, Any]]]],
            prices: PriceHistory, end: float) -> HostPrice | None:
    """Set a report's `host` (its price and instance) and each of its `gpus` (model, UUID,
    memory) to what was in force at `end`: a later run may charge another price on other
    GPUs, and the store's meta and `gpus` table hold the last. Returns the price then, None
    where the store recorded no price (the host's own stands)."""
    facts = queries.gpus_then(readings, end)
    for gpu in gpus:
        gpu.update(facts.get(gpu["index"], {}))
    then = prices.at(end)
    if not prices.changes or then is None:
        return None
    host["price"] = then.as_dict()
    host["instance"] = instance_then(then, host.get("instance"))
    return then

