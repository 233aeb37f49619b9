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
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from pricing.cache import CachedPrice
from pricing.catalog import InstanceOffer
from pricing.http import DEFAULT_TIMEOUT_S, FetchError, fetch
from pricing.key_file import read_key_file
from pricing.refresh import Progress, RefreshResult
from pricing.small_file import MISSING, NOT_PRIVATE, UNREADABLE, SmallFileError

COMPUTE_ENGINE_SERVICE = "6F81-5844-456A"
BILLING_URL = "https://cloudbilling.googleapis.com/v1"
SOURCE = "GCP Cloud Billing Catalog API"
API_KEY_HEADER = "X-Goog-Api-Key"
MAX_PAGES = 200  # Compute Engine lists a few thousand SKUs, 5000 per page at most
USAGE_TYPES = {"OnDemand": "on-demand", "Preemptible": "spot", "Commit1Yr": "commit-1y",
               "Commit3Yr": "commit-3y"}
# SKU descriptions, as public billing data shows them (checked 2026-12; see README "Prices"):
#   "Nvidia Tesla A100 GPU running in Americas"            A100 40 GB (a2-highgpu)
#   "Nvidia Tesla A100 80GB GPU running in Americas"       A100 80 GB (a2-ultragpu)
#   "Nvidia H100 80GB GPU running in Americas"             H100 (a3-highgpu)
#   "H200 141GB GPU running in Americas"                   H200 (a3-ultragpu): no "Nvidia"
#   "Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas"       spot GPU
#   "Spot Preemptible A3 Instance Core running in Americas"                    spot vCPU
#   "A3 Instance Core running in Americas", "A3 Instance Ram running in ..."   a3-highgpu
#   "N1 Predefined Instance Core running in Americas"                          n1 (+ T4)
#   "Commitment v1: A3 Cpu in Americas for 1 Year", "Commitment v1: Ram in ..." (N1),
#   "Commitment v1: Nvidia H100 80GB GPU running in Americas for 3 Years"      committed use
# Other models' SKUs share these words and must not be read as on-demand, spot or committed
# use: "Nvidia H100 80GB Mega GPU" (a3-megagpu), "... Plus GPU", "attached to DWS Defined
# Duration VMs" (flex-start), sole-tenant, custom and reserved (calendar-mode) SKUs.
EXCLUDED_WORDS = ("sole tenancy", "custom", "dws", "defined duration", "flex", "reserved",
                  "calendar", "extended", "premium", "management fee", "local ssd", "storage",
                  "virtual workstation", "licensing")
GPU_EXCLUDED_WORDS = ("mega", "plus")
# The GPU models a SKU description names (its words), per catalog accelerator name.
_GPU_WORDS = (("h200", "H200"), ("h100", "H100"), ("v100", "V100"), ("l4", "L4"),
              ("t4", "T4"))
# "A3 Instance Core", "A3 Ultra Instance Ram", "N1 Predefined Instance Core", "A2 Cpu", "Ram".
_PART = re.compile(r"^(?:(?P<family>[a-z]\d[a-z]?)(?: (?P<shape>ultra|high|mega|edge))? )?"
                   r"(?:predefined )?(?:instance )?(?P<what>core|cpu|ram)\b")
_PREFIXES = ("commitment v1: ", "commitment: ", "spot preemptible ", "preemptible ")


def sku_part(description: str) -> str | None:
    """What one SKU prices, from its description: 'gpu:<accelerator>' (catalog name),
    'core:<family>' or 'ram:<family>' (family A2, A3, A3ULTRA, G2, N1, ...); None for SKUs
    of other provisioning models, machine shapes or resources."""
    text = " ".join(description.lower().split())
    for prefix in _PREFIXES:
        text = text.removeprefix(prefix)
    if any(word in text for word in EXCLUDED_WORDS):
        return None
    match = _PART.match(text)
    if match:
        # "Commitment v1: Cpu in ..." (no family) is how N1's committed use is named.
        family = (match["family"] or "n1") + (match["shape"] or "")
        return f"{'ram' if match['what'] == 'ram' else 'core'}:{family.upper()}"
    words = set(re.findall(r"[a-z0-9]+", text))
    if words & set(GPU_EXCLUDED_WORDS):
        return None
    if "a100" in words:
        return "gpu:A100-80GB" if "80gb" in words else "gpu:A100-40GB"
    for word, accelerator in _GPU_WORDS:
        if word in words:
            return f"gpu:{accelerator}"
    return None


def machine_families(machine_type: str) -> list[str]:
    """The SKU families that may price this machine type's vCPUs and RAM, the most specific
    first: a3-ultragpu-8g -> ['A3ULTRA', 'A3'], a2-highgpu-8g -> ['A2HIGH', 'A2'], g2-standard-4
    -> ['G2']."""
    parts = machine_type.lower().split("-")
    family = parts[0].upper()
    shape = parts[1].removesuffix("gpu") if len(parts) > 1 and parts[1].endswith("gpu") else ""
    return [family + shape.upper(), family] if shape else [family]


class GcpKeyError(ValueError):
    """The API key file is missing, not a key file or readable by others; the message says the
    fix."""


def read_api_key(path: str | os.PathLike[str]) -> str:
    """The key in `path`: one line of a regular file (pricing.key_file) that neither group nor
    others can read (a key is a secret)."""
    file = Path(path).expanduser()
    try:
        return read_key_file(file, private=True)
    except SmallFileError as exc:
        if exc.kind in (MISSING, UNREADABLE):
            fix = (f"; create it with the key on one line and `chmod 600 {file}`, and set "
                   "[pricing].gcp_api_key_file")
        elif exc.kind == NOT_PRIVATE:
            fix = ""  # (the mode's fix is in its message)
        else:
            fix = "; put the API key on one line in a file of its own"
        raise GcpKeyError(f"GCP API key file {file}{exc}{fix}") from None


def skus_url(base_url: str, service: str) -> str:
    return f"{base_url.rstrip('/')}/services/{service}/skus"


def _unit_price(sku: dict[str, Any]) -> float | None:
    try:
        rates = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"]
        money = rates[-1]["unitPrice"]  # the last tier: past any free tier
        return int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9
    except (KeyError, IndexError, TypeError, ValueError, OverflowError):  # save() checks range
        return None


def parse_skus(skus: Iterable[dict[str, Any]], region: str,
               part_of: Callable[[str], str | None] = sku_part,
               usage_types: dict[str, str] = USAGE_TYPES) -> dict[tuple[str, str], float]:
    """{(part, lifecycle): $/unit-hour} in `region` (see `sku_part` for the parts). Where two
    SKUs price the same part the first listed wins."""
    parts: dict[tuple[str, str], float] = {}
    for sku in skus:
        category = sku.get("category") or {}
        kind = usage_types.get(str(category.get("usageType", "")))
        if kind is None or region not in (sku.get("serviceRegions") or []):
            continue
        price = _unit_price(sku)
        if price is None or price <= 0:
            continue
        part = part_of(str(sku.get("description", "")))
        if part is not None:
            parts.setdefault((part, kind), price)
    return parts


def compose(offer: InstanceOffer, parts: dict[tuple[str, str], float],
            kind: str) -> tuple[float, str] | None:
    """(host $/h of `offer` from its parts, the SKU family its vCPUs and RAM were priced by);
    None when a part has no price."""
    gpu = parts.get((f"gpu:{offer.accelerator}", kind))
    if gpu is None or not offer.vcpus or not offer.memory_gib:
        return None
    for family in machine_families(offer.instance_type):
        core = parts.get((f"core:{family}", kind))
        ram = parts.get((f"ram:{family}", kind))
        if core is not None and ram is not None:
            price = offer.vcpus * core + offer.memory_gib * ram + offer.accelerator_count * gpu
            return round(price, 6), family
    return None


async def service_skus(result: RefreshResult, key_file: str | os.PathLike[str], service: str,
                       *, base_url: str, timeout_s: float, max_retry_after_s: float,
                       name: str = "Compute Engine") -> list[dict[str, Any]] | None:
    """Every SKU of `service` with the API key in `key_file`; None when the key or the API
    fails, the reason in `result.errors` under the service's `name` (the key never in it) and
    the previous prices kept."""
    try:
        key = read_api_key(key_file)
    except GcpKeyError as exc:
        result.errors[name] = [str(exc)]
        return None
    try:
        async with aiohttp.ClientSession() as session:
            return await fetch_skus(session, key, base_url=base_url, service=service,
                                    timeout_s=timeout_s, max_retry_after_s=max_retry_after_s)
    except FetchError as exc:
        result.errors[name] = [f"{str(exc).replace(key, '***')} (previous prices kept)"]
        return None


async def fetch_skus(session: aiohttp.ClientSession, key: str, *, base_url: str = BILLING_URL,
                     service: str = COMPUTE_ENGINE_SERVICE, timeout_s: float = DEFAULT_TIMEOUT_S,
                     max_retry_after_s: float = 30.0) -> list[dict[str, Any]]:
    """Every SKU of `service`, across `nextPageToken` pages; raises FetchError."""
    url = skus_url(base_url, service)
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
    url = skus_url(base_url, COMPUTE_ENGINE_SERVICE)
    skus = await service_skus(result, key_file, COMPUTE_ENGINE_SERVICE, base_url=base_url,
                              timeout_s=timeout_s, max_retry_after_s=max_retry_after_s)
    if skus is None:
        return result
    parts = parse_skus(skus, region)
    for offer in offers:
        got = []
        for kind in ("on-demand", "spot", "commit-1y", "commit-3y"):
            composed = compose(offer, parts, kind)
            if composed is None:
                continue
            price, family = composed
            result.prices.append(CachedPrice(
                "gcp", region, offer.instance_type, kind, price, fetched_at,
                f"{SOURCE} ({offer.vcpus} x {family} vCPU + {offer.memory_gib:g} GiB x "
                f"{family} RAM + {offer.accelerator_count} x {offer.accelerator} SKUs)",
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
