"""Managed ML platform prices (SageMaker, Vertex AI, Azure ML) beside the same hardware
self-managed: what the platform costs on top, per month and as a markup.

SageMaker prices come from the AWS Price List (ServiceCode AmazonSageMaker, attribute
`instanceName` ml.<type>, `component` Training / Hosting / Notebook); they are cached with kind
"managed" and `attributes["platform"]`, `attributes["component"]`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from pricing.cache import CachedPrice, read_cache
from pricing.catalog import Catalog, PricingError, normalize_instance_type
from pricing.offcloud import HOURS_PER_MONTH
from pricing.refresh import AWS_REGION_NAMES, PRICING_API_REGION, RefreshResult, describe_aws_error

SAGEMAKER_SOURCE = "AWS Price List API (AmazonSageMaker)"
SAGEMAKER_COMPONENTS = ("Training", "Hosting", "Notebook")
MANAGED_KIND = "managed"


@dataclass(frozen=True)
class ManagedComparison:
    """A managed platform's price against the same instance self-managed."""

    platform: str
    component: str
    instance_type: str  # the self-managed type, e.g. p4d.24xlarge
    managed_instance_type: str  # e.g. ml.p4d.24xlarge
    region: str
    managed_per_hour: float
    self_managed_per_hour: float
    hours_per_month: float
    managed_source: str
    self_managed_source: str

    @property
    def monthly_difference(self) -> float:
        return (self.managed_per_hour - self.self_managed_per_hour) * self.hours_per_month

    @property
    def markup_pct(self) -> float:
        return (self.managed_per_hour / self.self_managed_per_hour - 1) * 100

    def describe(self) -> str:
        return (f"{self.platform} {self.component} {self.managed_instance_type} "
                f"${self.managed_per_hour:.4f}/h against {self.instance_type} "
                f"${self.self_managed_per_hour:.4f}/h self-managed in {self.region}: "
                f"+{self.markup_pct:.1f} %, ${self.monthly_difference:,.0f} a month at "
                f"{self.hours_per_month:g} h")


def sagemaker_type(instance_type: str) -> str:
    return instance_type if instance_type.startswith("ml.") else f"ml.{instance_type}"


def parse_sagemaker(price_list: list[Any], component: str) -> float | None:
    """The lowest positive hourly on-demand USD price of `component` in a PriceList."""
    best = None
    for item in price_list:
        product = json.loads(item) if isinstance(item, str) else item
        attrs = product.get("product", {}).get("attributes", {})
        if attrs.get("component", component).lower() != component.lower():
            continue
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                try:
                    usd = float(dim.get("pricePerUnit", {}).get("USD", ""))
                except ValueError:
                    continue
                if usd > 0 and str(dim.get("unit", "Hrs")).lower() in ("hrs", "hour", "hours"):
                    best = usd if best is None else min(best, usd)
    return best


def refresh_sagemaker(instance_types: list[str], region: str, *,
                      cache_path: str | os.PathLike[str], pricing_client: Any = None,
                      component: str = "Training", now: float | None = None) -> RefreshResult:
    """Fetch SageMaker `component` prices of `instance_types` (ml. prefix optional) in
    `region` and cache them; failures are messages per type."""
    fetched_at = time.time() if now is None else now
    result = RefreshResult("aws", region, fetched_at, str(cache_path))
    if component not in SAGEMAKER_COMPONENTS:
        result.errors["(component)"] = [f"unknown SageMaker component {component!r}; use one "
                                        f"of {', '.join(SAGEMAKER_COMPONENTS)}"]
        return result
    try:
        if pricing_client is None:
            import boto3

            pricing_client = boto3.client("pricing", region_name=PRICING_API_REGION)
    except Exception as exc:
        result.errors["(client)"] = [describe_aws_error(exc, "creating the AWS pricing client")]
        return result
    location = AWS_REGION_NAMES.get(region)
    for itype in instance_types:
        ml_type = sagemaker_type(itype)
        filters = [{"Type": "TERM_MATCH", "Field": "instanceName", "Value": ml_type},
                   ({"Type": "TERM_MATCH", "Field": "location", "Value": location} if location
                    else {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}),
                   {"Type": "TERM_MATCH", "Field": "component", "Value": component}]
        try:
            response = pricing_client.get_products(ServiceCode="AmazonSageMaker",
                                                   Filters=filters, FormatVersion="aws_v1",
                                                   MaxResults=100)
        except Exception as exc:
            result.errors.setdefault(ml_type, []).append(describe_aws_error(exc, "SageMaker"))
            continue
        usd = parse_sagemaker(response.get("PriceList", []), component)
        if usd is None:
            result.errors.setdefault(ml_type, []).append(
                f"AWS lists no SageMaker {component} price for {ml_type} in {region}")
            continue
        result.prices.append(CachedPrice(
            "aws", region, ml_type, f"{MANAGED_KIND}:sagemaker:{component.lower()}", usd,
            fetched_at, SAGEMAKER_SOURCE,
            attributes={"platform": "SageMaker", "component": component,
                        "self_managed": ml_type.removeprefix("ml.")}))
    return result.save()


def managed_prices(cache_path: str | os.PathLike[str]) -> list[CachedPrice]:
    """Every cached managed-platform price."""
    return [p for p in read_cache(cache_path) if p.kind.startswith(MANAGED_KIND)]


def compare_managed(catalog: Catalog, instance_type: str, region: str,
                    cache_path: str | os.PathLike[str], *, provider: str = "aws",
                    hours_per_month: float = HOURS_PER_MONTH,
                    component: str = "Training") -> ManagedComparison:
    """The managed price of `instance_type` (self-managed name or ml. name) against its
    self-managed on-demand price; `hours_per_month` is the workload's hours (730 = always on).
    Raises PricingError saying which price is missing and the command that fetches it."""
    base = normalize_instance_type(instance_type).removeprefix("ml.")
    offer = catalog.by_instance(provider, base, region)
    if offer is None or offer.on_demand is None:
        raise PricingError(f"no self-managed on-demand price for {provider}/{base} in {region}; "
                           f"run `mlcostd prices --refresh {provider} --region {region} "
                           f"--instance {base}`")
    kind = f"{MANAGED_KIND}:sagemaker:{component.lower()}"
    for price in managed_prices(cache_path):
        if (price.provider == provider and price.region == region and price.kind == kind
                and price.instance_type.lower() == sagemaker_type(base)):
            return ManagedComparison(
                "SageMaker", component, offer.instance_type, price.instance_type, region,
                price.per_hour, offer.on_demand.per_hour, hours_per_month,
                price.source, f"{offer.on_demand.source} ({offer.on_demand.describe()})")
    raise PricingError(f"no SageMaker {component} price for {sagemaker_type(base)} in {region} "
                       f"in the cache {cache_path}; run `mlcostd prices --refresh sagemaker "
                       f"--region {region} --instance {base}`")
