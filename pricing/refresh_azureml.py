"""Azure ML's surcharges from the Azure Retail Prices API (public, no key).

Azure ML bills its compute (compute instances, clusters, managed online endpoints) at the
VM's own price, plus per-vCPU and per-GPU surcharge meters of its own:
`GET https://prices.azure.com/api/retail/prices?$filter=serviceName eq 'Azure Machine
Learning' and armRegionName eq 'eastus'`, items of productName "Machine Learning service"
with meterName "Standard Training vCPU Surcharge", "Standard Training GPU Surcharge" (training)
and "Standard vCPU Surcharge", "Standard GPU Surcharge" (inference), unit "1 Hour". Most are
listed at $0. The managed price of a size is then its VM on-demand price (the catalog's, or
`--refresh azure`) plus vCPUs x the vCPU surcharge + GPUs x the GPU surcharge: see
pricing.managed. Other meters (pipeline batch, evaluation tokens, model hosting) are not
machine prices and are left out.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from typing import Any

import aiohttp

from pricing.cache import CachedPrice
from pricing.http import DEFAULT_TIMEOUT_S, FetchError
from pricing.managed import PER_GPU, PER_VCPU, SURCHARGE_KIND
from pricing.refresh import Progress, RefreshResult
from pricing.refresh_azure import AZURE_PRICES_URL, fetch_items

SOURCE = "Azure Retail Prices API (Azure Machine Learning)"
# meterName (lower case) -> (component, per what)
SURCHARGE_METERS = {
    "standard training vcpu surcharge": ("training", PER_VCPU),
    "standard training gpu surcharge": ("training", PER_GPU),
    "standard vcpu surcharge": ("inference", PER_VCPU),
    "standard gpu surcharge": ("inference", PER_GPU),
}


def build_filter(region: str) -> str:
    return f"serviceName eq 'Azure Machine Learning' and armRegionName eq '{region}'"


def parse_surcharges(items: Iterable[dict[str, Any]], region: str, fetched_at: float,
                     url: str) -> list[CachedPrice]:
    """One cached surcharge per (component, per-vCPU | per-GPU): the lowest listed, $0 kept
    (a listed zero is a price, not a placeholder)."""
    best: dict[tuple[str, str], CachedPrice] = {}
    for item in items:
        meter = " ".join(str(item.get("meterName", "")).lower().split())
        what = SURCHARGE_METERS.get(meter)
        if (what is None or str(item.get("type", "")) != "Consumption"
                or str(item.get("unitOfMeasure", "")) != "1 Hour"
                or item.get("armRegionName", region) != region):
            continue
        try:
            price = float(item["retailPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        if price < 0:
            continue
        component, unit = what
        current = best.get(what)
        if current is not None and current.per_hour <= price:
            continue
        best[what] = CachedPrice(
            "azure", region, unit, f"{SURCHARGE_KIND}:azureml:{component}", price, fetched_at,
            f"{SOURCE} ({item.get('meterName', '')}, {item.get('productName', '')})", url=url,
            attributes={"platform": "Azure ML", "component": component.capitalize()})
    return list(best.values())


async def refresh_azureml_async(region: str, *, cache_path: str | os.PathLike[str],
                                base_url: str = AZURE_PRICES_URL,
                                timeout_s: float = DEFAULT_TIMEOUT_S,
                                max_retry_after_s: float = 30.0,
                                progress: Progress | None = None,
                                now: float | None = None) -> RefreshResult:
    """Fetch Azure ML's surcharge meters in `region` and cache them; a failure keeps the
    previous ones. A region that lists none is said, and the bundled $0 assumption stays."""
    fetched_at = time.time() if now is None else now
    result = RefreshResult("azure", region, fetched_at, str(cache_path))
    say = progress or (lambda line: None)
    try:
        async with aiohttp.ClientSession() as session:
            items = await fetch_items(session, base_url, build_filter(region),
                                      timeout_s=timeout_s, max_retry_after_s=max_retry_after_s)
    except FetchError as exc:
        result.errors["Azure ML"] = [f"{exc} (previous prices kept)"]
        return result
    result.prices = parse_surcharges(items, region, fetched_at, base_url)
    if not result.prices:
        result.errors["Azure ML"] = [
            f"the Azure Retail Prices API lists no Azure Machine Learning surcharge meter in "
            f"{region} (of {len(items)} Azure ML items seen); Azure ML compute is then billed at "
            "the VM price alone"]
    for price in sorted(result.prices, key=lambda p: p.kind + p.instance_type):
        say(f"{price.kind.split(':')[2]} {price.instance_type}: ${price.per_hour:g}/h")
    return result.save()


def refresh_azureml(region: str, **kwargs: Any) -> RefreshResult:
    """`refresh_azureml_async` for synchronous callers (the CLI)."""
    return asyncio.run(refresh_azureml_async(region, **kwargs))
