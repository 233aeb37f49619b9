"""What a price and an instance offer are: the types the catalog holds and its sanity rules
(pricing.sanity) check. Kept apart from the catalog, which loads and looks them up, so that the
rules and the catalog need not import each other. `pricing.catalog` re-exports the offer, the
price and the lifecycles, as before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

Lifecycle = Literal["on-demand", "spot", "commit-1y", "commit-3y"]
LIFECYCLES: tuple[Lifecycle, ...] = ("on-demand", "spot", "commit-1y", "commit-3y")
COMMITMENTS: tuple[Lifecycle, ...] = ("commit-1y", "commit-3y")
# The clouds' billing year and month: a price per hour times these is a price per year or month
# (a 1- or 3-year term spread over its hours; "x 730 h" in every monthly savings estimate).
HOURS_PER_YEAR = 8760.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12  # 730
# Accelerators that are not CUDA GPUs: a GPU workload cannot simply move onto them.
NON_GPU_PREFIXES = ("inferentia", "trainium", "tpu")


@dataclass(frozen=True)
class Price:
    """A host price per hour and where it came from.

    `live` prices were fetched from a cloud API (`as_of` is the fetch time); bundled prices come
    from the packaged catalog (`as_of` None when the catalog has no date). Spot prices carry the
    `low`/`high` range seen across availability zones; `per_hour` is its midpoint.
    """

    per_hour: float
    kind: Lifecycle
    source: str
    as_of: datetime | None
    live: bool
    low: float | None = None
    high: float | None = None
    status: str = "current"  # see ROW_STATUSES; live prices are "current"
    note: str = ""  # why the status, e.g. the cut this price predates
    url: str = ""  # where a live price was fetched from (never with a key in it)

    @property
    def age_s(self) -> float | None:
        """Seconds since the price was fetched or dated; None when the date is unknown."""
        if self.as_of is None:
            return None
        return max(0.0, time.time() - self.as_of.timestamp())

    def describe(self) -> str:
        """'live, 3 s old', 'bundled, catalog date unknown' or 'bundled, as of 2025-01-31, 40 d
        old', plus ', predates a price cut' or ', estimate' where the row says so."""
        if self.live:
            age = self.age_s
            return f"live, {format_age(age)} old" if age is not None else "live"
        text = ("bundled, catalog date unknown" if self.as_of is None
                else f"bundled, as of {self.as_of.date().isoformat()}, "
                     f"{format_age(self.age_s)} old")
        if self.status == "pre-cut":
            text += ", predates a price cut"
        elif self.status == "estimate":
            text += ", estimate"
        return text


SECONDS_PER_DAY = 86400.0


def age_days(seconds: float) -> int:
    """A price's age in days as every output says it (the PRICES column, the stale warning,
    `--json`'s `age_days`): the whole days gone by, as an age is said: 460.6 days is 460 days
    old, not 461."""
    return int(max(0.0, seconds) // SECONDS_PER_DAY)


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown age"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{age_days(seconds)} d"


def nominal_gib(mib: float) -> float:
    """Per-accelerator memory as the vendor sells it, read as GiB (an "80GB" H100 holds 80, a
    "24GB" L4 24): what every figure of the catalog is. Sources state it in MiB two ways,
    80 GiB as 81920 but 24 GB as 22888 (24e9 bytes); whichever reading is a whole number is
    the nominal figure (22888 -> 24, not 22.4), else GiB to a tenth."""
    gib, gb = mib / 1024, mib * 2**20 / 1e9
    whole = min((gib, gb), key=lambda v: abs(v - round(v)))
    return float(round(whole)) if abs(whole - round(whole)) < 0.05 else round(gib, 1)


@dataclass(frozen=True)
class InstanceOffer:
    """One instance type in one region: its hardware and its prices (None where unknown)."""

    provider: str
    region: str
    instance_type: str
    accelerator: str
    accelerator_count: int
    accelerator_memory_gib: float  # per accelerator
    vcpus: int | None
    memory_gib: float | None
    on_demand: Price | None
    spot: Price | None
    commit_1y: Price | None
    commit_3y: Price | None = None
    price_unit: str = "host-hour"  # how the source stated it (PRICE_UNITS); prices here are host $/h

    def price(self, lifecycle: str = "on-demand") -> Price | None:
        """The host price for a lifecycle (one of LIFECYCLES); None if unknown."""
        if lifecycle == "on-demand":
            return self.on_demand
        if lifecycle == "spot":
            return self.spot
        if lifecycle == "commit-1y":
            return self.commit_1y
        if lifecycle == "commit-3y":
            return self.commit_3y
        raise ValueError(f"unknown lifecycle {lifecycle!r}; use one of {', '.join(LIFECYCLES)}")

    def with_price(self, lifecycle: str, price: Price | None) -> InstanceOffer:
        """This offer with the `lifecycle` price replaced (None: unknown)."""
        if lifecycle == "on-demand":
            return replace(self, on_demand=price)
        if lifecycle == "spot":
            return replace(self, spot=price)
        if lifecycle == "commit-1y":
            return replace(self, commit_1y=price)
        if lifecycle == "commit-3y":
            return replace(self, commit_3y=price)
        raise ValueError(f"unknown lifecycle {lifecycle!r}; use one of {', '.join(LIFECYCLES)}")

    def commitment(self, years: int) -> Price | None:
        """The 1- or 3-year commitment price (Savings Plan / reserved / committed use /
        reservation, whichever the source lists), as host $/h; None where no source lists one."""
        if years not in (1, 3):
            raise ValueError(f"commitment terms are 1 or 3 years, not {years}")
        return self.commit_1y if years == 1 else self.commit_3y

    def best_commitment(self) -> tuple[int, Price] | None:
        """(term years, price) of the cheapest commitment listed; None when none is."""
        known = self.commitments()
        if not known:
            return None
        years = min(known, key=lambda y: known[y].per_hour)
        return years, known[years]

    def commitments(self) -> dict[int, Price]:
        """{term in years: price} of the commitment prices known for this offer."""
        return {years: price for years, price in ((1, self.commit_1y), (3, self.commit_3y))
                if price is not None}

    def price_per_accelerator(self, lifecycle: str = "on-demand") -> float | None:
        """Host $/h divided by the accelerator count (a GPU host is bought for its GPUs)."""
        price = self.price(lifecycle)
        if price is None or self.accelerator_count <= 0:
            return None
        return price.per_hour / self.accelerator_count

    @property
    def is_gpu(self) -> bool:
        return not self.accelerator.lower().startswith(NON_GPU_PREFIXES)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.provider, self.region, normalize_instance_type(self.instance_type))


def normalize_instance_type(instance_type: str) -> str:
    """Case-insensitive key; Azure sizes match with or without their 'Standard_' prefix."""
    key = instance_type.strip().lower()
    return key.removeprefix("standard_")
