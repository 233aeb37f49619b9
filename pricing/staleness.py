"""Whether a price can be trusted today, and the command that makes it current.

The surfaces (the TUI header badge, `mlcostd report`, `mlcostd check`) call `price_staleness`
and show its `message` when `stale`; they decide nothing themselves.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from pricing.catalog import Catalog, Price
from pricing.offer import SECONDS_PER_DAY, age_days

# Cloud list prices move a few times a year (AWS cut P4/P5 by up to 45 % in June 2025);
# a quarter is as old as a price may get before we say so.
STALE_AFTER_DAYS = 90


@dataclass(frozen=True)
class Staleness:
    """The verdict on one price. `message` is one line for a user; empty when not stale."""

    stale: bool
    reason: str  # "" | "date-unknown" | "older-than-threshold" | "predates-cut" | "estimate"
    age_days: float | None
    refresh_command: str
    message: str


def refresh_command(provider: str, region: str | None = None,
                    instance_type: str | None = None) -> str:
    """The `mlcostd prices` command that refreshes this provider's prices without guesswork."""
    provider = provider.strip().lower()
    parts = ["mlcostd", "prices"]
    if provider == "aws":
        parts += ["--refresh", "aws"]
    elif provider == "azure":
        parts += ["--refresh", "azure"]
    elif provider == "gcp":
        parts += ["--refresh", "gcp"]  # needs [pricing].gcp_api_key_file; else --refresh catalog
    else:
        parts += ["--refresh", "catalog", "--provider", provider]
    if region:
        parts += ["--region", region]
    if instance_type:
        parts += ["--instance", instance_type]
    return shlex.join(parts)


def price_staleness(price: Price | None, provider: str, region: str | None = None,
                    instance_type: str | None = None, *, now: float | None = None,
                    stale_after_days: float = STALE_AFTER_DAYS) -> Staleness:
    """Is `price` stale: no date, older than `stale_after_days`, from before a known price cut,
    or an estimate? Always returns the refresh command; `message` says what, the value, the fix.

    A missing price (None) is stale with reason "date-unknown" and says there is no price.
    """
    command = refresh_command(provider, region, instance_type)
    what = "/".join(p for p in (provider, region, instance_type) if p)
    if price is None:
        return Staleness(True, "date-unknown", None, command,
                         f"no price for {what}; run `{command}`")
    now = time.time() if now is None else now
    age_s = None if price.as_of is None else max(0.0, now - price.as_of.timestamp())
    days = None if age_s is None else age_s / SECONDS_PER_DAY
    value = f"${price.per_hour:g}/h"
    if price.status == "pre-cut":
        reason = "predates-cut"
        detail = f"{price.note or 'it predates a known price cut'}"
    elif price.status == "estimate":
        reason = "estimate"
        detail = f"it is an estimate ({price.note})" if price.note else "it is an estimate"
    elif age_s is None or days is None:
        reason = "date-unknown"
        detail = "its date is unknown"
    elif days > stale_after_days:
        reason = "older-than-threshold"
        # said as the PRICES column says it (pricing.offer.age_days: whole days gone by)
        detail = (f"it is {age_days(age_s)} days old (as of {price.as_of.date().isoformat()}), "  # type: ignore[union-attr]
                  f"older than {stale_after_days:g} days")
    else:
        return Staleness(False, "", days, command, "")
    message = f"{what} {price.kind} price {value} may be wrong: {detail}; run `{command}`"
    return Staleness(True, reason, days, command, message)


def offer_staleness(catalog: Catalog, provider: str, instance_type: str,
                    region: str | None = None, lifecycle: str = "on-demand", *,
                    now: float | None = None) -> Staleness:
    """`price_staleness` of the catalog's `lifecycle` price for this instance (the region's
    offer, else the catalog's reference region, as the cost model picks it)."""
    offer = (catalog.by_instance(provider, instance_type, region) if region else None) or \
        catalog.by_instance(provider, instance_type)
    price = None
    if offer is not None:
        price = offer.price(lifecycle) or offer.on_demand
    return price_staleness(price, provider, region or (offer.region if offer else None),
                           instance_type, now=now)
