"""Vertex AI machine prices (custom training, online/batch prediction) from the Cloud Billing
Catalog API, with the same API key file as the Compute Engine refresh (pricing.refresh_gcp).

`GET https://cloudbilling.googleapis.com/v1/services/C7E2-9256-1C43/skus` (Vertex AI). Vertex
AI prices a machine like Compute Engine does, per part, with its own SKUs:
"Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", "... on A3 Instance Core in Iowa",
"... on A3 Instance RAM in Iowa"; "Vertex AI: Online/Batch Prediction Nvidia H100 80gb GPU
running in Iowa", "... A3 Predefined Instance Core running in Iowa". A machine's price is its
vCPUs, GiB and GPUs at those prices (hardware from the catalog's GCP row). The "management
fee" SKUs are billed instead on flex-start (DWS) VMs, which Compute Engine bills itself: they
are left out, so are Spot and other non-on-demand SKUs.

Results are cached as kind "managed:vertex:training" / "managed:vertex:prediction" (see
pricing.managed); a failure keeps the previous prices and never shows the key.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

from pricing.cache import CachedPrice
from pricing.catalog import InstanceOffer
from pricing.http import DEFAULT_TIMEOUT_S
from pricing.managed import PLATFORMS, managed_kind
from pricing.refresh import Progress, RefreshResult
from pricing.refresh_gcp import (
    BILLING_URL,
    compose,
    parse_skus,
    service_skus,
    sku_part,
    skus_url,
)

VERTEX_AI_SERVICE = "C7E2-9256-1C43"
SOURCE = "GCP Cloud Billing Catalog API (Vertex AI SKUs)"
# How each Vertex AI SKU description names what it prices, after "Vertex AI: ".
COMPONENT_PREFIXES = (("training/pipelines on ", "Training"), ("training on ", "Training"),
                      ("online/batch prediction ", "Prediction"), ("prediction ", "Prediction"))
ON_DEMAND_ONLY = {"OnDemand": "on-demand"}


def vertex_sku_part(description: str) -> str | None:
    """'<component>|<part>' of one Vertex AI SKU ('Training|gpu:H100', 'Prediction|core:A3');
    None for management fees and anything that is not a machine part."""
    text = " ".join(description.lower().split()).removeprefix("vertex ai: ")
    if "management fee" in text:
        return None
    for prefix, component in COMPONENT_PREFIXES:
        if text.startswith(prefix):
            part = sku_part(text.removeprefix(prefix))
            return f"{component}|{part}" if part else None
    return None


def compose_machines(offers: Sequence[InstanceOffer], skus: list[dict[str, Any]], region: str,
                     fetched_at: float, url: str) -> tuple[list[CachedPrice], dict[str, str]]:
    """(one managed price per machine and component composed from its parts, {machine: why
    none} for machines no component could be priced for)."""
    parts = parse_skus(skus, region, part_of=vertex_sku_part, usage_types=ON_DEMAND_ONLY)
    prices: list[CachedPrice] = []
    missing: dict[str, str] = {}
    for offer in offers:
        for component in PLATFORMS["vertex"].components:
            own = {(part.split("|", 1)[1], kind): value for (part, kind), value in parts.items()
                   if part.startswith(f"{component}|")}
            composed = compose(offer, own, "on-demand")
            if composed is None:
                continue
            price, family = composed
            prices.append(CachedPrice(
                "gcp", region, offer.instance_type, managed_kind("vertex", component), price,
                fetched_at,
                f"{SOURCE}: {component} on {offer.vcpus} x {family} vCPU + "
                f"{offer.memory_gib:g} GiB x {family} RAM + {offer.accelerator_count} x "
                f"{offer.accelerator}", url=url,
                attributes={"platform": "Vertex AI", "component": component,
                            "self_managed": offer.instance_type}))
        if not any(p.instance_type == offer.instance_type for p in prices):
            missing[offer.instance_type] = (
                f"Vertex AI lists no on-demand SKUs for all parts of {offer.instance_type} "
                f"({offer.accelerator_count} x {offer.accelerator}) in {region}")
    return prices, missing


async def refresh_vertex_async(offers: Sequence[InstanceOffer], region: str, *,
                               key_file: str | os.PathLike[str],
                               cache_path: str | os.PathLike[str], base_url: str = BILLING_URL,
                               timeout_s: float = DEFAULT_TIMEOUT_S,
                               max_retry_after_s: float = 30.0,
                               progress: Progress | None = None,
                               now: float | None = None) -> RefreshResult:
    """Price each GCP machine in `offers` on Vertex AI in `region` (training and prediction)
    and merge the prices into the cache; a failure keeps the previous prices."""
    fetched_at = time.time() if now is None else now
    result = RefreshResult("gcp", region, fetched_at, str(cache_path))
    say = progress or (lambda line: None)
    url = skus_url(base_url, VERTEX_AI_SERVICE)
    skus = await service_skus(result, key_file, VERTEX_AI_SERVICE, base_url=base_url,
                              timeout_s=timeout_s, max_retry_after_s=max_retry_after_s,
                              name="Vertex AI")
    if skus is None:
        return result
    result.prices, missing = compose_machines(offers, skus, region, fetched_at, url)
    for machine, why in missing.items():
        result.errors.setdefault(machine, []).append(why)
    for offer in offers:
        got = [f"{p.attributes['component'].lower()} ${p.per_hour:.4f}/h" for p in result.prices
               if p.instance_type == offer.instance_type]
        say(f"{offer.instance_type}: " + (", ".join(got) or "no price"))
    return result.save()


def refresh_vertex(offers: Sequence[InstanceOffer], region: str, **kwargs: Any) -> RefreshResult:
    """`refresh_vertex_async` for synchronous callers (the CLI)."""
    return asyncio.run(refresh_vertex_async(offers, region, **kwargs))
