"""Live AWS prices: on-demand from the Price List API, spot from the spot price history.

Results go into the price cache (`pricing.cache`) with their fetch time; `Catalog.load(
cache_path=...)` overlays them. Every failure becomes a message for the instance type it
concerns, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pricing.cache import CachedPrice, write_cache
from pricing.offer import HOURS_PER_YEAR

# The Price List API lives in us-east-1 (also ap-south-1, eu-central-1); us-east-1 serves all.
PRICING_API_REGION = "us-east-1"
ON_DEMAND_SOURCE = "AWS Price List API (pricing.get_products)"
SPOT_SOURCE = "AWS EC2 spot price history (describe_spot_price_history)"

# The Price List API filters by the region's long name ("location").
AWS_REGION_NAMES = {
    "us-east-1": "US East (N. Virginia)",
    "us-east-2": "US East (Ohio)",
    "us-west-1": "US West (N. California)",
    "us-west-2": "US West (Oregon)",
    "ca-central-1": "Canada (Central)",
    "eu-west-1": "EU (Ireland)",
    "eu-west-2": "EU (London)",
    "eu-west-3": "EU (Paris)",
    "eu-central-1": "EU (Frankfurt)",
    "eu-central-2": "EU (Zurich)",
    "eu-north-1": "EU (Stockholm)",
    "eu-south-1": "EU (Milan)",
    "eu-south-2": "EU (Spain)",
    "ap-south-1": "Asia Pacific (Mumbai)",
    "ap-northeast-1": "Asia Pacific (Tokyo)",
    "ap-northeast-2": "Asia Pacific (Seoul)",
    "ap-northeast-3": "Asia Pacific (Osaka)",
    "ap-southeast-1": "Asia Pacific (Singapore)",
    "ap-southeast-2": "Asia Pacific (Sydney)",
    "ap-east-1": "Asia Pacific (Hong Kong)",
    "sa-east-1": "South America (Sao Paulo)",
    "me-central-1": "Middle East (UAE)",
    "il-central-1": "Israel (Tel Aviv)",
}

Progress = Callable[[str], None]

# No instance costs more than this per hour (the largest AWS u7in-32tb lists ~$400/h); a price
# above it is a unit slip (a monthly or per-term price) or a poisoned answer.
MAX_PER_HOUR_USD = 10_000.0


def price_problem(price: CachedPrice) -> str:
    """What is wrong with a fetched price's numbers, in words naming the field and the value;
    '' when each of per_hour, low and high is finite and within [0, MAX_PER_HOUR_USD] (a free
    surcharge is 0; the sanity rules decide what a zero instance price means)."""
    for name in ("per_hour", "low", "high"):
        value = getattr(price, name)
        if value is None and name != "per_hour":
            continue
        if not (isinstance(value, int | float) and math.isfinite(value)
                and 0 <= value <= MAX_PER_HOUR_USD):
            return (f"{price.provider} {price.region} {price.kind}: {name}={value!r} $/h is not "
                    f"a price (a finite number from 0 to {MAX_PER_HOUR_USD:g})")
    return ""


@dataclass
class RefreshResult:
    """What a refresh fetched (`prices`, also written to the cache) and what failed, per type."""

    provider: str
    region: str
    fetched_at: float
    cache_path: str
    prices: list[CachedPrice] = field(default_factory=list)
    errors: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def save(self) -> RefreshResult:
        """Merge what was fetched into the cache; a cache that cannot be written is an error of
        this refresh (the prices fetched are still in `prices`). A price that is not finite or
        not within [0, MAX_PER_HOUR_USD] is left out with an error naming it: the cache keeps
        the previous one."""
        kept = []
        for price in self.prices:
            problem = price_problem(price)
            if problem:
                self.errors.setdefault(price.instance_type, []).append(
                    f"{problem}; refused, the previous price is kept")
            else:
                kept.append(price)
        self.prices = kept
        if self.prices:
            try:
                write_cache(self.cache_path, self.prices)
            except OSError as exc:
                self.errors.setdefault("(cache)", []).append(
                    f"could not write the price cache {self.cache_path}: {exc}; check the "
                    "folder's permissions or pass --cache")
        return self

    def price_for(self, instance_type: str, kind: str) -> CachedPrice | None:
        for price in self.prices:
            if price.instance_type.lower() == instance_type.lower() and price.kind == kind:
                return price
        return None

    def messages(self) -> list[str]:
        return [f"{itype}: {msg}" for itype, msgs in self.errors.items() for msg in msgs]


def describe_aws_error(exc: BaseException, action: str) -> str:
    """One line saying what went wrong with an AWS call and what to do."""
    from botocore.exceptions import (
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ReadTimeoutError,
    )

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return (f"{action}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY, or give the instance a role")
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        if code in ("Throttling", "ThrottlingException", "RequestLimitExceeded",
                    "TooManyRequestsException"):
            return f"{action}: throttled by AWS ({code}); try again in a minute"
        if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
            return (f"{action}: not allowed ({code}); the credentials need "
                    "pricing:GetProducts and ec2:DescribeSpotPriceHistory")
        if code in ("AuthFailure", "InvalidClientTokenId", "UnrecognizedClientException",
                    "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException"):
            return f"{action}: AWS rejected the credentials ({code}): {message}"
        return f"{action}: AWS error {code}: {message}"
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
        return f"{action}: cannot reach AWS ({exc}); check the network or proxy"
    if isinstance(exc, NoRegionError):
        return f"{action}: no AWS region given"
    return f"{action}: {type(exc).__name__}: {exc}"


def _product_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    location = AWS_REGION_NAMES.get(region)
    # Regions missing from our table are filtered by code (the API knows "regionCode" too).
    region_filter = (
        {"Type": "TERM_MATCH", "Field": "location", "Value": location}
        if location
        else {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}
    )
    return [
        {"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance_type},
        region_filter,
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]


def parse_on_demand(price_list: Iterable[str | dict[str, Any]]) -> tuple[float | None,
                                                                          dict[str, str]]:
    """(lowest positive hourly on-demand USD price, product attributes) from a PriceList."""
    best: float | None = None
    attributes: dict[str, str] = {}
    for item in price_list:
        product = json.loads(item) if isinstance(item, str) else item
        attrs = product.get("product", {}).get("attributes", {})
        if attrs.get("marketoption") not in (None, "OnDemand"):
            continue  # e.g. capacity blocks
        for offer in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in offer.get("priceDimensions", {}).values():
                unit = dimension.get("unit", "Hrs")
                try:
                    usd = float(dimension.get("pricePerUnit", {}).get("USD", ""))
                except ValueError:
                    continue
                if usd > 0 and unit.lower() in ("hrs", "hours", "hour") and (
                        best is None or usd < best):
                    best, attributes = usd, {k: str(v) for k, v in attrs.items()}
    return best, attributes


RESERVED_SOURCE = "AWS Price List API (pricing.get_products, Reserved standard)"
PRICE_LIST_URL = "https://api.pricing.us-east-1.amazonaws.com (GetProducts)"


def parse_reserved(price_list: Iterable[str | dict[str, Any]]) -> dict[int, tuple[float, str]]:
    """{term years: (effective $/h, purchase option)} of standard reserved instances: No Upfront
    where listed (the hourly rate), else the cheapest effective rate (upfront spread over the
    term's hours plus the hourly rate)."""
    options: dict[int, dict[str, float]] = {}
    for item in price_list:
        product = json.loads(item) if isinstance(item, str) else item
        for term in product.get("terms", {}).get("Reserved", {}).values():
            attrs = term.get("termAttributes", {})
            years = {"1yr": 1, "3yr": 3}.get(str(attrs.get("LeaseContractLength", "")))
            option = str(attrs.get("PurchaseOption", ""))
            if years is None or str(attrs.get("OfferingClass", "standard")) != "standard":
                continue
            hourly = upfront = 0.0
            for dim in term.get("priceDimensions", {}).values():
                try:
                    usd = float(dim.get("pricePerUnit", {}).get("USD", ""))
                except ValueError:
                    continue
                if str(dim.get("unit", "")).lower() == "quantity":
                    upfront += usd
                else:
                    hourly += usd
            effective = round(hourly + upfront / (years * HOURS_PER_YEAR), 6)
            if effective > 0:
                current = options.setdefault(years, {})
                current[option] = min(effective, current.get(option, effective))
    result = {}
    for years, by_option in options.items():
        if "No Upfront" in by_option:
            result[years] = (by_option["No Upfront"], "No Upfront")
        else:
            option = min(by_option, key=by_option.__getitem__)
            result[years] = (by_option[option], option)
    return result


def fetch_products(pricing_client: Any, instance_type: str, region: str) -> list[str]:
    """Every PriceList entry for this Linux shared-tenancy instance type in `region`."""
    items: list[str] = []
    kwargs: dict[str, Any] = {
        "ServiceCode": "AmazonEC2",
        "Filters": _product_filters(instance_type, region),
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }
    while True:
        response = pricing_client.get_products(**kwargs)
        items.extend(response.get("PriceList", []))
        token = response.get("NextToken")
        if not token:
            break
        kwargs["NextToken"] = token
    return items


def fetch_on_demand(pricing_client: Any, instance_type: str, region: str) -> tuple[float,
                                                                                    dict[str, str]]:
    """Hourly Linux on-demand price; raises LookupError when AWS lists none."""
    return _on_demand_of(fetch_products(pricing_client, instance_type, region), instance_type,
                         region)


def _on_demand_of(items: list[str], instance_type: str, region: str) -> tuple[float,
                                                                            dict[str, str]]:
    price, attributes = parse_on_demand(items)
    if price is None:
        raise LookupError(
            f"AWS lists no Linux on-demand price for {instance_type} in {region} "
            "(unknown instance type, or not offered in that region)")
    return price, attributes


def fetch_spot(ec2_client: Any, instance_types: list[str],
               now: datetime) -> dict[str, tuple[float, float, int]]:
    """{instance type: (lowest, highest, number of AZs)} of the current Linux spot prices."""
    per_type: dict[str, dict[str, float]] = {}
    kwargs: dict[str, Any] = {
        "InstanceTypes": instance_types,
        "ProductDescriptions": ["Linux/UNIX"],
        "StartTime": now,
    }
    while True:
        response = ec2_client.describe_spot_price_history(**kwargs)
        for entry in response.get("SpotPriceHistory", []):
            try:
                price = float(entry["SpotPrice"])
            except (KeyError, ValueError):
                continue
            zone = entry.get("AvailabilityZone", "?")
            # The newest entry per AZ is the current price; history comes newest first.
            per_type.setdefault(entry["InstanceType"], {}).setdefault(zone, price)
        token = response.get("NextToken")
        if not token:
            break
        kwargs["NextToken"] = token
    return {itype: (min(z.values()), max(z.values()), len(z)) for itype, z in per_type.items()}


def refresh_aws(
    instance_types: Iterable[str],
    region: str,
    *,
    session: Any = None,
    cache_path: str | os.PathLike[str],
    pricing_client: Any = None,
    ec2_client: Any = None,
    progress: Progress | None = None,
    now: float | None = None,
) -> RefreshResult:
    """Fetch live on-demand and spot prices of `instance_types` in `region`, merge them into the
    cache file, and say per type what was found or what went wrong."""
    types = list(dict.fromkeys(t.strip() for t in instance_types if t.strip()))
    fetched_at = time.time() if now is None else now
    result = RefreshResult("aws", region, fetched_at, str(cache_path))
    say = progress or (lambda line: None)

    def fail(itype: str, message: str) -> None:
        result.errors.setdefault(itype, []).append(message)

    if not types:
        fail("(none)", "no instance types given")
        return result
    try:
        if pricing_client is None or ec2_client is None:
            import boto3
            from botocore.config import Config

            session = session or boto3.session.Session()
            config = Config(connect_timeout=5, read_timeout=15,
                            retries={"max_attempts": 3, "mode": "standard"})
            pricing_client = pricing_client or session.client(
                "pricing", region_name=PRICING_API_REGION, config=config)
            ec2_client = ec2_client or session.client("ec2", region_name=region, config=config)
    except Exception as exc:  # bad profile, unknown region ...
        for itype in types:
            fail(itype, describe_aws_error(exc, "creating AWS clients"))
        return result

    spot: dict[str, tuple[float, float, int]] = {}
    spot_error = ""
    try:
        spot = fetch_spot(ec2_client, types, datetime.fromtimestamp(fetched_at, tz=timezone.utc))
    except Exception as exc:
        spot_error = describe_aws_error(exc, "spot prices")

    for itype in types:
        line: list[str] = []
        reserved: dict[int, tuple[float, str]] = {}
        try:
            items = fetch_products(pricing_client, itype, region)
            reserved = parse_reserved(items)
            usd, attributes = _on_demand_of(items, itype, region)
        except LookupError as exc:
            fail(itype, f"on-demand: {exc}")
            line.append("on-demand unknown")
        except Exception as exc:
            fail(itype, describe_aws_error(exc, "on-demand"))
            line.append("on-demand failed")
        else:
            result.prices.append(CachedPrice("aws", region, itype, "on-demand", usd, fetched_at,
                                             ON_DEMAND_SOURCE, attributes=_hardware(attributes),
                                             url=PRICE_LIST_URL))
            line.append(f"on-demand ${usd:.4f}/h")
            for years, (hourly, option) in sorted(reserved.items()):
                result.prices.append(CachedPrice(
                    "aws", region, itype, f"commit-{years}y", hourly, fetched_at,
                    f"{RESERVED_SOURCE} {years}yr {option}", url=PRICE_LIST_URL))
                line.append(f"{years}-year reserved ${hourly:.4f}/h")
        if spot_error:
            fail(itype, spot_error)
            line.append("spot failed")
        elif itype in spot:
            low, high, zones = spot[itype]
            result.prices.append(CachedPrice("aws", region, itype, "spot",
                                             round((low + high) / 2, 6), fetched_at,
                                             SPOT_SOURCE, low=low, high=high,
                                             url=f"https://ec2.{region}.amazonaws.com "
                                                 "(DescribeSpotPriceHistory)"))
            line.append(f"spot ${low:.4f}-{high:.4f}/h across {zones} AZ")
        else:
            fail(itype, f"spot: no Linux spot price for {itype} in {region}")
            line.append("spot unknown")
        say(f"{itype}: " + ", ".join(line))

    return result.save()


def _hardware(attributes: dict[str, str]) -> dict[str, str]:
    """The product attributes worth keeping: enough to describe an instance the catalog lacks."""
    keep = ("vcpu", "memory", "gpu", "gpuMemory", "instanceFamily", "physicalProcessor")
    return {k: attributes[k] for k in keep if k in attributes}
