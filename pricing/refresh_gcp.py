"""Live GCP prices from the Cloud Billing Catalog API, with an API key read from a 0600 file.

`GET https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus` (Compute
Engine), following `nextPageToken`. A GPU host's price is composed from its parts, each a SKU
priced per unit-hour: vCPUs x the family's core SKU + GiB x its RAM SKU + GPUs x the GPU SKU.
`category.usageType` tells the lifecycle: OnDemand, Preemptible (spot), Commit1Yr, Commit3Yr.

The key travels in the `X-Goog-Api-Key` header, so it never is part of a URL; it never reaches
a log, an error message or the cache.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from pricing.cache import CachedPrice
from pricing.catalog import InstanceOffer
from pricing.http import DEFAULT_TIMEOUT_S, FetchError, fetch
from pricing.refresh import Progress, RefreshResult

COMPUTE_ENGINE_SERVICE = "6F81-5844-456A"
BILLING_URL = "https://cloudbilling.googleapis.com/v1"
SOURCE = "GCP Cloud Billing Catalog API"
API_KEY_HEADER = "X-Goog-Api-Key"
MAX_PAGES = 200  # Compute Engine lists a few thousand SKUs, 5000 per page at most
USAGE_TYPES = {"OnDemand": "on-demand", "Preemptible": "spot", "Commit1Yr": "commit-1y",
               "Commit3Yr": "commit-3y"}
# The words a GPU SKU's description starts with, per catalog accelerator name.
GPU_SKU_NAMES = {"A100-40GB": "Nvidia Tesla A100 GPU", "A100-80GB": "Nvidia Tesla A100 80GB GPU",
                 "H100": "Nvidia H100 80GB GPU", "H200": "Nvidia H200 141GB GPU",
                 "L4": "Nvidia L4 GPU", "T4": "Nvidia Tesla T4 GPU", "V100": "Nvidia Tesla V100 GPU"}


_PART = re.compile(r"^(\w+) (Instance Core|Instance Ram|Cpu|Ram) running in ")


class GcpKeyError(ValueError):
    """The API key file is missing, empty or readable by others; the message says the fix."""


def read_api_key(path: str | os.PathLike[str]) -> str:
    """The key in `path`; refuses a file that group or others can read (a key is a secret)."""
    file = Path(path).expanduser()
    try:
        mode = file.stat().st_mode
    except OSError as exc:
        raise GcpKeyError(f"GCP API key file {file}: {exc.strerror}; create it with the key "
                          f"on one line and `chmod 600 {file}`, and set "
                          "[pricing].gcp_api_key_file") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise GcpKeyError(f"GCP API key file {file} has mode {stat.S_IMODE(mode):04o}, readable "
                          f"by others; run `chmod 600 {file}`")
    key = file.read_text(encoding="utf-8").strip()
    if not key:
        raise GcpKeyError(f"GCP API key file {file} is empty; put the API key on one line")
    return key


def _unit_price(sku: dict[str, Any]) -> float | None:
    try:
        rates = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"]
        money = rates[-1]["unitPrice"]  # the last tier: past any free tier
        return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def parse_skus(skus: Iterable[dict[str, Any]], region: str) -> dict[tuple[str, str], float]:
    """{(part, lifecycle): $/unit-hour} in `region`; part is 'gpu:<accelerator>',
    'core:<family>' or 'ram:<family>' (family: A2, A3, G2, N1, ...)."""
    parts: dict[tuple[str, str], float] = {}
    for sku in skus:
        desc = str(sku.get("description", ""))
        category = sku.get("category") or {}
        kind = USAGE_TYPES.get(str(category.get("usageType", "")))
        if kind is None or region not in (sku.get("serviceRegions") or []):
            continue
        price = _unit_price(sku)
        if price is None or price <= 0:
            continue
        text = desc.removeprefix("Commitment v1: ")
        if any(word in text.lower() for word in ("sole tenancy", "custom", "dws", "reserved",
                                                 "calendar", "extended", "premium")):
            continue
        part = None
        for accel, name in GPU_SKU_NAMES.items():
            if text.lower().startswith((name.lower(), name.lower().removeprefix("nvidia "))):
                part = f"gpu:{accel}"  # dict order: "A100 GPU" cannot match "A100 80GB GPU"
                break
        match = _PART.match(text)
        if part is None and match:
            family, what = match.groups()
            part = f"{'core' if what in ('Instance Core', 'Cpu') else 'ram'}:{family.upper()}"
        if part is not None:
            parts.setdefault((part, kind), price)
    return parts


def compose(offer: InstanceOffer, parts: dict[tuple[str, str], float],
            kind: str) -> float | None:
    """The host $/h of `offer` from its parts, None when a part has no price."""
    family = offer.instance_type.split("-")[0].upper()
    gpu = parts.get((f"gpu:{offer.accelerator}", kind))
    core = parts.get((f"core:{family}", kind))
    ram = parts.get((f"ram:{family}", kind))
    if gpu is None or core is None or ram is None or not offer.vcpus or not offer.memory_gib:
        return None
    return round(offer.vcpus * core + offer.memory_gib * ram + offer.accelerator_count * gpu, 6)


async def fetch_skus(session: aiohttp.ClientSession, key: str, *, base_url: str = BILLING_URL,
                     timeout_s: float = DEFAULT_TIMEOUT_S,
                     max_retry_after_s: float = 30.0) -> list[dict[str, Any]]:
    url = f"{base_url.rstrip('/')}/services/{COMPUTE_ENGINE_SERVICE}/skus"
    skus: list[dict[str, Any]] = []
    # The key goes in a header, not the query: URLs end up in proxy and server logs.
    params = {"pageSize": "5000", "currencyCode": "USD"}
    for _ in range(MAX_PAGES):
        page = await fetch(session, url, params=params, timeout_s=timeout_s,
                           max_retry_after_s=max_retry_after_s,
                           headers={API_KEY_HEADER: key})
        if not isinstance(page, dict) or not isinstance(page.get("skus"), list):
            raise FetchError(f"{url}: a page without a 'skus' list; the API "
                             "changed or the URL is wrong")
        skus.extend(s for s in page["skus"] if isinstance(s, dict))
        token = page.get("nextPageToken")
        if not token:
            return skus
        params = {**params, "pageToken": str(token)}
    raise FetchError(f"{url}: more than {MAX_PAGES} pages; giving up")


async def refresh_gcp_async(offers: Sequence[InstanceOffer], region: str, *,
                            key_file: str | os.PathLike[str],
                            cache_path: str | os.PathLike[str], base_url: str = BILLING_URL,
                            timeout_s: float = DEFAULT_TIMEOUT_S,
                            max_retry_after_s: float = 30.0,
                            progress: Progress | None = None,
                            now: float | None = None) -> RefreshResult:
    """Price each GCP `offer` (hardware from the catalog) in `region` from the SKUs: on-demand,
    spot and 1/3-year committed use; merge into the cache. Failures keep previous prices."""
    fetched_at = time.time() if now is None else now
    result = RefreshResult("gcp", region, fetched_at, str(cache_path))
    say = progress or (lambda line: None)
    try:
        key = read_api_key(key_file)
    except GcpKeyError as exc:
        result.errors["(key)"] = [str(exc)]
        return result
    url = f"{base_url.rstrip('/')}/services/{COMPUTE_ENGINE_SERVICE}/skus"
    try:
        async with aiohttp.ClientSession() as session:
            skus = await fetch_skus(session, key, base_url=base_url, timeout_s=timeout_s,
                                    max_retry_after_s=max_retry_after_s)
    except FetchError as exc:
        result.errors["(api)"] = [f"{str(exc).replace(key, '***')} (previous prices kept)"]
        return result
    parts = parse_skus(skus, region)
    for offer in offers:
        got = []
        for kind in ("on-demand", "spot", "commit-1y", "commit-3y"):
            price = compose(offer, parts, kind)
            if price is None:
                continue
            result.prices.append(CachedPrice(
                "gcp", region, offer.instance_type, kind, price, fetched_at,
                f"{SOURCE} (vCPU + RAM + {offer.accelerator_count} x {offer.accelerator} SKUs)",
                url=url))
            got.append(f"{kind} ${price:.4f}/h")
        if not any(p.instance_type == offer.instance_type and p.kind == "on-demand"
                   for p in result.prices):
            result.errors.setdefault(offer.instance_type, []).append(
                f"no on-demand SKUs for all parts of {offer.instance_type} "
                f"({offer.accelerator}) in {region}")
        say(f"{offer.instance_type}: " + (", ".join(got) or "no price"))
    return result.save()


def refresh_gcp(offers: Sequence[InstanceOffer], region: str, **kwargs: Any) -> RefreshResult:
    """`refresh_gcp_async` for synchronous callers (the CLI)."""
    return asyncio.run(refresh_gcp_async(offers, region, **kwargs))
