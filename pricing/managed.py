"""Managed ML platform prices (SageMaker, Vertex AI, Azure ML) beside the same hardware
self-managed: what the platform costs on top, per month and as a markup.

Where the prices come from:
- SageMaker: the AWS Price List (ServiceCode AmazonSageMaker, attribute `instanceName`
  ml.<type>, `component` Training / Hosting / Notebook), `mlcostd prices --refresh sagemaker`.
- Vertex AI: its own SKUs in the Cloud Billing Catalog ("Vertex AI: Training/Pipelines on A3
  Instance Core ...", "... Online/Batch Prediction Nvidia H100 80gb GPU ..."), composed per
  machine type like Compute Engine's (pricing.refresh_vertex), `--refresh vertex`.
- Azure ML: compute is billed at the VM's price plus Azure ML's own per-vCPU and per-GPU
  surcharge meters, most listed at $0 (pricing.refresh_azureml), `--refresh azureml`.
- pricing/data/managed.csv: bundled figures with their source and date, some estimates.

The cache holds per-host prices with kind "managed:<platform>:<component>" and Azure ML's
surcharges with kind "surcharge:azureml:<component>" (instance type "per-vCPU" / "per-GPU").
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pricing.cache import CachedPrice, read_cache
from pricing.catalog import (
    Catalog,
    InstanceOffer,
    Price,
    PricingError,
    _parse_date,
    normalize_instance_type,
)
from pricing.offer import HOURS_PER_MONTH
from pricing.refresh import (
    AWS_REGION_NAMES,
    PRICE_LIST_URL,
    PRICING_API_REGION,
    RefreshResult,
    describe_aws_error,
)

SAGEMAKER_SOURCE = "AWS Price List API (AmazonSageMaker)"
SAGEMAKER_COMPONENTS = ("Training", "Hosting", "Notebook")
MANAGED_KIND = "managed"
SURCHARGE_KIND = "surcharge"
BUNDLED_MANAGED = Path(__file__).resolve().parent / "data" / "managed.csv"
ANY_REGION = "*"  # a bundled surcharge row that holds in every region
PER_VCPU, PER_GPU = "per-vCPU", "per-GPU"


@dataclass(frozen=True)
class Platform:
    key: str  # in `--refresh KEY` and the cache kinds
    name: str
    provider: str
    components: tuple[str, ...]  # the first is the one compared by default
    default_region: str  # the region of the bundled catalog's rows of that cloud


PLATFORMS = {
    "sagemaker": Platform("sagemaker", "SageMaker", "aws", SAGEMAKER_COMPONENTS, "us-east-1"),
    "vertex": Platform("vertex", "Vertex AI", "gcp", ("Training", "Prediction"), "us-central1"),
    "azureml": Platform("azureml", "Azure ML", "azure", ("Training", "Inference"), "eastus"),
}
PLATFORM_OF_PROVIDER = {p.provider: p for p in PLATFORMS.values()}


def managed_kind(platform: str, component: str) -> str:
    return f"{MANAGED_KIND}:{platform}:{component.lower()}"


@dataclass(frozen=True)
class ManagedPrice:
    """One managed-platform host price: the platform's name for the instance, the self-managed
    instance with the same hardware, and the price with its source and age."""

    platform: str  # a PLATFORMS key
    component: str  # e.g. "Training"
    provider: str
    region: str
    instance_type: str  # ml.p4d.24xlarge, a2-highgpu-8g, Standard_ND96asr_v4
    self_managed: str  # p4d.24xlarge, a2-highgpu-8g, Standard_ND96asr_v4
    price: Price

    @property
    def platform_name(self) -> str:
        return PLATFORMS[self.platform].name

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.platform, self.component.lower(), self.region,
                normalize_instance_type(self.instance_type))


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
    self_managed_region: str = ""  # where the self-managed price is from, if not `region`
    accelerators: str = ""  # "8 x A100-40GB"

    @property
    def monthly_difference(self) -> float:
        return (self.managed_per_hour - self.self_managed_per_hour) * self.hours_per_month

    @property
    def markup_pct(self) -> float:
        return (self.managed_per_hour / self.self_managed_per_hour - 1) * 100

    def describe(self) -> str:
        where = self.region
        if self.self_managed_region and self.self_managed_region != self.region:
            where = f"{self.self_managed_region} (managed price from {self.region})"
        return (f"{self.platform} {self.component} {self.managed_instance_type} "
                f"${self.managed_per_hour:.4f}/h against {self.instance_type} "
                f"${self.self_managed_per_hour:.4f}/h self-managed in {where}: "
                f"{self.markup_pct:+.1f} %, ${self.monthly_difference:,.0f} a month at "
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
            "aws", region, ml_type, managed_kind("sagemaker", component), usd,
            fetched_at, SAGEMAKER_SOURCE,
            attributes={"platform": "SageMaker", "component": component,
                        "self_managed": ml_type.removeprefix("ml.")},
            url=f"{PRICE_LIST_URL}, ServiceCode AmazonSageMaker"))
    return result.save()


def _bundled_rows() -> list[dict[str, str]]:
    return list(csv.DictReader(BUNDLED_MANAGED.read_text(encoding="utf-8").splitlines()))


def _bundled_price(row: dict[str, str]) -> Price:
    status = (row.get("status") or "current").strip() or "current"
    return Price(float(row["per_hour"]), "on-demand", row["source"], _parse_date(row["as_of"]),
                 live=False, status=status, note=(row.get("note") or "").strip())


def _live_price(cached: CachedPrice) -> Price:
    return Price(cached.per_hour, "on-demand", cached.source,
                 datetime.fromtimestamp(cached.fetched_at, tz=timezone.utc), live=True,
                 url=cached.url)


def _split_kind(kind: str) -> tuple[str, str] | None:
    """'managed:vertex:training' -> ('vertex', 'training'); None for other kinds."""
    parts = kind.split(":")
    if len(parts) != 3 or parts[1] not in PLATFORMS:
        return None
    return parts[1], parts[2]


def _component_name(platform: str, component: str) -> str:
    for name in PLATFORMS[platform].components:
        if name.lower() == component.lower():
            return name
    return component.capitalize()


def surcharges(cache_path: str | os.PathLike[str] | None) -> dict[tuple[str, str, str], Price]:
    """Azure ML's surcharges, {(region or '*', component, 'per-vCPU' | 'per-GPU'): $/unit-hour}:
    the bundled assumption, overlaid with what `--refresh azureml` cached."""
    found: dict[tuple[str, str, str], Price] = {}
    for row in _bundled_rows():
        if row["platform"] == "azureml" and row["instance_type"] in (PER_VCPU, PER_GPU):
            found[(row["region"], row["component"].lower(), row["instance_type"])] = \
                _bundled_price(row)
    for cached in read_cache(cache_path) if cache_path is not None else ():
        if cached.kind.startswith(f"{SURCHARGE_KIND}:azureml:"):
            component = cached.kind.split(":")[2]
            found[(cached.region, component, cached.instance_type)] = _live_price(cached)
    return found


def _azure_ml_prices(catalog: Catalog,
                     rates: dict[tuple[str, str, str], Price]) -> list[ManagedPrice]:
    """Azure ML's price of each Azure size the catalog prices: the VM's on-demand price plus the
    region's surcharges (or the bundled assumption that holds everywhere)."""
    prices = []
    for offer in catalog.filter(provider="azure"):
        if offer.on_demand is None:
            continue
        for component in PLATFORMS["azureml"].components:
            vcpu, gpu = (rates.get((offer.region, component.lower(), unit))
                         or rates.get((ANY_REGION, component.lower(), unit))
                         for unit in (PER_VCPU, PER_GPU))
            if vcpu is None and gpu is None:
                continue
            prices.append(_vm_plus_surcharge(offer, component, vcpu, gpu))
    return prices


def _vm_plus_surcharge(offer: InstanceOffer, component: str, vcpu: Price | None,
                       gpu: Price | None) -> ManagedPrice:
    vm = offer.on_demand
    assert vm is not None
    parts = [vm] + [p for p in (vcpu, gpu) if p is not None]
    per_hour = (vm.per_hour + (offer.vcpus or 0) * (vcpu.per_hour if vcpu else 0.0)
                + offer.accelerator_count * (gpu.per_hour if gpu else 0.0))
    surcharge = next(p for p in (vcpu, gpu) if p is not None)
    text = ", ".join(f"${p.per_hour:g}/{unit}-h" for p, unit in ((vcpu, "vCPU"), (gpu, "GPU"))
                     if p is not None)
    dates = [p.as_of for p in parts]
    status = next((p.status for p in parts if p.status != "current"), "current")
    price = Price(round(per_hour, 6), "on-demand",
                  f"VM on-demand price ({vm.source}; {vm.describe()}) + Azure ML surcharge "
                  f"{text} ({surcharge.source}; {surcharge.describe()})",
                  None if None in dates else min(d for d in dates if d is not None),
                  live=all(p.live for p in parts), status=status,
                  note=surcharge.note if surcharge.status != "current" else vm.note,
                  url=surcharge.url)
    return ManagedPrice("azureml", component, "azure", offer.region, offer.instance_type,
                        offer.instance_type, price)


def managed_prices(cache_path: str | os.PathLike[str] | None,
                   catalog: Catalog | None = None) -> list[ManagedPrice]:
    """Every managed-platform host price known: bundled (pricing/data/managed.csv), overlaid
    with the cached live ones; with `catalog`, Azure ML's prices of its Azure sizes too."""
    found: dict[tuple[str, str, str, str], ManagedPrice] = {}
    for row in _bundled_rows():
        if row["instance_type"] in (PER_VCPU, PER_GPU):
            continue
        price = ManagedPrice(row["platform"], row["component"], row["provider"], row["region"],
                             row["instance_type"], row["self_managed"], _bundled_price(row))
        found[price.key] = price
    for cached in read_cache(cache_path) if cache_path is not None else ():
        split = _split_kind(cached.kind) if cached.kind.startswith(MANAGED_KIND) else None
        if split is None:
            continue
        platform, component = split
        self_managed = cached.attributes.get("self_managed") or (
            cached.instance_type.removeprefix("ml.") if platform == "sagemaker"
            else cached.instance_type)
        price = ManagedPrice(platform, _component_name(platform, component), cached.provider,
                             cached.region, cached.instance_type, self_managed,
                             _live_price(cached))
        found[price.key] = price
    prices = list(found.values())
    if catalog is not None:
        prices.extend(_azure_ml_prices(catalog, surcharges(cache_path)))
    return prices


def refresh_command(platform: str, region: str, self_managed: str) -> str:
    return f"mlcostd prices --refresh {platform} --region {region} --instance {self_managed}"


def _self_managed_offer(catalog: Catalog, provider: str, instance_type: str,
                        region: str) -> InstanceOffer | None:
    """The offer in `region`, else the catalog's reference region for that type."""
    offer = catalog.by_instance(provider, instance_type, region)
    if offer is None or offer.on_demand is None:
        offer = catalog.by_instance(provider, instance_type)
    return offer if offer is not None and offer.on_demand is not None else None


def _compare(managed: ManagedPrice, offer: InstanceOffer,
             hours_per_month: float) -> ManagedComparison:
    assert offer.on_demand is not None
    return ManagedComparison(
        managed.platform_name, managed.component, offer.instance_type, managed.instance_type,
        managed.region, managed.price.per_hour, offer.on_demand.per_hour, hours_per_month,
        f"{managed.price.source} ({managed.price.describe()})",
        f"{offer.on_demand.source} ({offer.on_demand.describe()})",
        self_managed_region=offer.region,
        accelerators=f"{offer.accelerator_count} x {offer.accelerator}")


def compare_managed(catalog: Catalog, instance_type: str, region: str,
                    cache_path: str | os.PathLike[str], *, provider: str = "aws",
                    hours_per_month: float = HOURS_PER_MONTH,
                    component: str | None = None) -> ManagedComparison:
    """The managed price of `instance_type` (self-managed name, or SageMaker's ml. name) on
    `provider`'s platform against its self-managed on-demand price; `hours_per_month` is the
    workload's hours (730 = always on). Raises PricingError saying which price is missing and
    the command that fetches it."""
    platform = PLATFORM_OF_PROVIDER.get(provider.strip().lower())
    if platform is None:
        raise PricingError(f"no managed ML platform known for provider {provider!r}; known: "
                           + ", ".join(f"{p.name} ({p.provider})" for p in PLATFORMS.values()))
    component = component or platform.components[0]
    base = normalize_instance_type(instance_type).removeprefix("ml.")
    offer = catalog.by_instance(platform.provider, base, region)
    if offer is None or offer.on_demand is None:
        raise PricingError(f"no self-managed on-demand price for {platform.provider}/{base} in "
                           f"{region}; run `mlcostd prices --refresh {platform.provider} "
                           f"--region {region} --instance {base}`")
    for managed in managed_prices(cache_path, catalog):
        if (managed.platform == platform.key and managed.region == region
                and managed.component.lower() == component.lower()
                and normalize_instance_type(managed.self_managed) == base):
            return _compare(managed, offer, hours_per_month)
    name = sagemaker_type(base) if platform.key == "sagemaker" else offer.instance_type
    raise PricingError(f"no {platform.name} {component} price for {name} in {region} in the "
                       f"cache {cache_path}; run `{refresh_command(platform.key, region, base)}`")


def same_hardware(catalog: Catalog, instance_type: str, cache_path: str | os.PathLike[str], *,
                  provider: str, region: str | None = None,
                  hours_per_month: float = HOURS_PER_MONTH, refreshed: str | None = None,
                  refresh_failed: bool = False,
                  ) -> tuple[InstanceOffer, list[ManagedComparison], list[str]]:
    """(the instance, every managed price of its hardware, its accelerators and their count,
    on every platform against that platform's self-managed instance, what is missing with the
    command that fetches it). After `--refresh refreshed` only that platform's missing price
    is said, with what to check where the refresh failed (not the command just run). Raises
    PricingError for an instance the catalog lacks."""
    base_type = normalize_instance_type(instance_type).removeprefix("ml.")
    base = (catalog.by_instance(provider, base_type, region) if region else None) or \
        catalog.by_instance(provider, base_type)
    if base is None:
        raise PricingError(catalog.explain_missing(provider, base_type, region))

    def same(offer: InstanceOffer) -> bool:
        return (offer.accelerator == base.accelerator
                and offer.accelerator_count == base.accelerator_count)

    ranked: dict[tuple[str, str, str], tuple[tuple[bool, bool], ManagedComparison]] = {}
    for managed in managed_prices(cache_path, catalog):
        offer = _self_managed_offer(catalog, managed.provider, managed.self_managed,
                                    managed.region)
        if offer is None or not same(offer):
            continue
        key = (managed.platform, managed.component, normalize_instance_type(offer.instance_type))
        # The asked instance's region first, then a live price, then the first listed.
        rank = (managed.region == base.region, managed.price.live)
        if key not in ranked or rank > ranked[key][0]:
            ranked[key] = (rank, _compare(managed, offer, hours_per_month))
    chosen = {key: comparison for key, (_, comparison) in ranked.items()}
    missing = []
    for platform in PLATFORMS.values():
        if any(c.platform == platform.name for c in chosen.values()):
            continue
        if refreshed is not None and platform.key != refreshed:
            continue  # another service's price: not what was refreshed
        offers = [o for o in catalog.filter(provider=platform.provider) if same(o)]
        what = f"{base.accelerator_count} x {base.accelerator}"
        if not offers:
            missing.append(f"{platform.name}: no {platform.provider} instance with {what} in "
                           "the catalog")
            continue
        target = offers[0]
        if platform.key == refreshed:
            missing.append(f"{platform.name}: no price for {target.instance_type} ({what}); "
                           + ("the refresh failed (its reason is above): check the network, "
                              "proxy and credentials, then refresh again" if refresh_failed
                              else f"{platform.name} lists none for it in the region fetched"))
            continue
        missing.append(f"{platform.name}: no price for {target.instance_type} ({what}); run "
                       f"`{refresh_command(platform.key, target.region, target.instance_type)}`")
    order = {p.name: (i, p.components) for i, p in enumerate(PLATFORMS.values())}

    def position(c: ManagedComparison) -> tuple[int, int, float]:
        index, components = order[c.platform]
        return (index, components.index(c.component) if c.component in components else 99,
                c.managed_per_hour)

    rows = sorted(chosen.values(), key=position)
    return base, rows, missing

