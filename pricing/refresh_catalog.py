"""Live prices from SkyPilot-format `vms.csv` catalogs (aws, gcp, azure, lambda), no credentials.

SkyPilot regenerates these files every 7 hours for AWS, GCP and Lambda (Azure by hand) and
serves them as raw files under `<base>/<schema>/<cloud>/vms.csv`. Columns: InstanceType,
AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, Price, SpotPrice, Region,
AvailabilityZone, GpuInfo. The traps this parser handles:

- GCP machine rows (a2, a3, g2) are the VM price only; the GPU's price is a separate row with
  an empty InstanceType whose Price is the total for that AcceleratorCount (L4 x 8 = 4.48032):
  the host price is VM row + the GPU row of the same accelerator, count and zone.
- 700.0 means "not offered"; a blank Price or SpotPrice means unknown.
- rows are repeated per availability zone, and some twice under two accelerator names (p4de as
  "A100" and "A100-80GB"): one offer per (instance type, region), spot as the zone range.
- spot equal to on-demand is a placeholder: the sanity rules (pricing.sanity) drop it.
"""

from __future__ import annotations

import ast
import asyncio
import csv
import math
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pricing.cache import CachedPrice
from pricing.http import DEFAULT_TIMEOUT_S, FetchError, fetch
from pricing.offer import nominal_gib
from pricing.refresh import Progress, RefreshResult

SKYPILOT_CATALOG_BASE_URL = (
    "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs")
# The schema each cloud's file is read at (the versions shared/reference/gpu-prices.md used).
CATALOG_SCHEMAS = {"aws": "v7", "gcp": "v7", "azure": "v6", "lambda": "v7"}
CATALOG_CLOUDS = tuple(CATALOG_SCHEMAS)
# The regions fetched when none is given: those of the bundled catalog.
DEFAULT_REGIONS = {"aws": ("us-east-1",), "gcp": ("us-central1", "us-east4"),
                   "azure": ("eastus",), "lambda": ("us-east-1",)}
NOT_OFFERED = 700.0  # SkyPilot's placeholder price
# The largest accelerator count a row can carry: a TPU v5p pod slice has 8960 chips; past this
# a count is an error in the file, not a machine.
MAX_ACCELERATORS = 10_000
MAX_GPU_INFO = 4096  # GpuInfo is a ~200-byte dict literal; a longer one is not evaluated
SOURCE = "SkyPilot catalog"
# Per-accelerator memory when GpuInfo does not say: the vendor's nominal GB read as GiB, as
# the whole catalog gives it (pricing.offer.nominal_gib); a name SkyPilot uses for one memory
# size gets our name for it.
ACCELERATOR_MEMORY_GIB = {"A100": 40, "A100-80GB": 80, "H100": 80, "H200": 141, "L4": 24,
                          "L40S": 48, "A10G": 24, "A10": 24, "T4": 16, "V100": 16,
                          "V100-32GB": 32}
ACCELERATOR_NAMES = {"A100": "A100-40GB"}  # SkyPilot's "A100" is the 40 GB part


@dataclass
class _Offer:
    instance_type: str
    region: str
    accelerator: str
    count: int
    memory_per_gpu_gib: float | None
    vcpus: float | None
    memory_gib: float | None
    on_demand: list[float] = field(default_factory=list)
    spot: list[float] = field(default_factory=list)


def catalog_url(base_url: str, cloud: str) -> str:
    return f"{base_url.rstrip('/')}/{CATALOG_SCHEMAS[cloud]}/{cloud}/vms.csv"


def _num(text: str | None) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if value != value or value <= 0 or value >= NOT_OFFERED:  # NaN, placeholders
        return None
    return value


def _count(text: str | None, line: int) -> float:
    """AcceleratorCount as a number (blank: 0); ValueError naming the line and the value when it
    is not a finite number from 0 to MAX_ACCELERATORS. Fractions are real (Azure's partial
    GPUs, e.g. 0.125) and left to the caller."""
    raw = (text or "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_ACCELERATORS):
        raise ValueError(f"line {line}: AcceleratorCount={raw[:40]!r} is not a count (a "
                         f"number from 0 to {MAX_ACCELERATORS})")
    return value


def _gpu_memory_mib(gpu_info: str) -> float | None:
    if not gpu_info.strip():
        return None
    mib: float | None
    try:
        if len(gpu_info) > MAX_GPU_INFO:
            raise ValueError("too long to evaluate")
        info = ast.literal_eval(gpu_info)  # SkyPilot writes a Python dict literal
        mib = float(info["Gpus"][0]["MemoryInfo"]["SizeInMiB"])
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError, OverflowError,
            RecursionError, MemoryError):
        match = re.search(r"SizeInMiB'?\"?:\s*([0-9.]{1,20})", gpu_info)
        try:
            mib = float(match.group(1)) if match else None
        except ValueError:
            mib = None
    # a GPU's memory is a finite size under 4 TiB; anything else is not a reading
    return mib if mib is not None and math.isfinite(mib) and 0 < mib < (4 << 20) else None


def _specific(a: str, b: str) -> str:
    """Of two names for one accelerator, the one that says more ('A100-80GB' over 'A100')."""
    return a if len(a) >= len(b) else b


def parse_vms_csv(cloud: str, text: str, regions: Sequence[str] | None = None,
                  fetched_at: float = 0.0, url: str = "") -> list[CachedPrice]:
    """The accelerator offers of one cloud's vms.csv as cached prices (on-demand and spot per
    instance type and region). Raises ValueError when the file is not a vms.csv, or a row
    holds a count that is not one (inf, nan, negative, absurd) or a field longer than csv's
    limit (128 KiB): such a file is refused whole, naming the line, the field and the value."""
    reader = csv.DictReader(text.splitlines())
    try:
        need = {"InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region"}
        if not reader.fieldnames or not need.issubset(reader.fieldnames):
            raise ValueError(f"not a SkyPilot vms.csv (columns {str(reader.fieldnames)[:200]}; "
                             f"need {', '.join(sorted(need))})")
        wanted = {r.lower() for r in regions} if regions else None
        rows = [(reader.line_num, r) for r in reader
                if wanted is None or (r.get("Region") or "").lower() in wanted]
    except csv.Error as exc:  # a field past csv.field_size_limit(), a NUL byte ...
        # the line being read when it failed is the one after the last one read
        what = (f"a field longer than {csv.field_size_limit()} bytes"
                if "field limit" in str(exc) else str(exc)[:100])
        raise ValueError(f"line {reader.line_num + 1}: {what}; not a SkyPilot vms.csv") \
            from None
    counts = {id(r): _count(r.get("AcceleratorCount"), line) for line, r in rows}
    # GCP GPU rows: (accelerator, count, zone or region) -> (price, spot) for that many GPUs.
    gpu_parts: dict[tuple[str, int, str], tuple[float | None, float | None]] = {}
    if cloud == "gcp":
        for _, r in rows:
            if not (r.get("InstanceType") or "").strip() and (r.get("AcceleratorName") or "").strip():
                count = int(counts[id(r)])
                place = (r.get("AvailabilityZone") or r["Region"]).strip()
                gpu_parts[(r["AcceleratorName"].strip(), count, place)] = (
                    _num(r.get("Price")), _num(r.get("SpotPrice")))
    offers: dict[tuple[str, str], _Offer] = {}
    for _, r in rows:
        itype = (r.get("InstanceType") or "").strip()
        accel = (r.get("AcceleratorName") or "").strip()
        if not itype or not accel:
            continue  # a GPU part (GCP) or a CPU-only VM
        count = int(counts[id(r)])
        if count <= 0:
            continue
        price, spot = _num(r.get("Price")), _num(r.get("SpotPrice"))
        if cloud == "gcp" and not itype.startswith("tpu"):
            place = (r.get("AvailabilityZone") or r["Region"]).strip()
            part = gpu_parts.get((accel, count, place))
            if part is None:
                continue  # the GPUs' price is unknown here: the VM price alone would mislead
            price = None if price is None or part[0] is None else price + part[0]
            spot = None if spot is None or part[1] is None else spot + part[1]
        key = (itype.lower(), r["Region"].strip())
        mib = _gpu_memory_mib(r.get("GpuInfo") or "")
        offer = offers.get(key)
        if offer is None:
            offer = offers[key] = _Offer(
                itype, r["Region"].strip(), accel, count,
                None if mib is None else nominal_gib(mib), _num(r.get("vCPUs")),
                _num(r.get("MemoryGiB")))
        else:
            offer.accelerator = _specific(offer.accelerator, accel)  # duplicated rows
        if price is not None:
            offer.on_demand.append(price)
        if spot is not None:
            offer.spot.append(spot)
    result: list[CachedPrice] = []
    for offer in offers.values():
        memory = offer.memory_per_gpu_gib or ACCELERATOR_MEMORY_GIB.get(offer.accelerator)
        name = ACCELERATOR_NAMES.get(offer.accelerator, offer.accelerator)
        if name == "A100-40GB" and memory and memory >= 79:
            name = "A100-80GB"
        attributes = {"gpu": str(offer.count), "gpuModel": name,
                      **({"gpuMemory": f"{memory * offer.count:g} GiB"} if memory else {}),
                      **({"vcpu": f"{offer.vcpus:g}"} if offer.vcpus else {}),
                      **({"memory": f"{offer.memory_gib:g} GiB"} if offer.memory_gib else {})}
        source = f"{SOURCE} {cloud}/vms.csv" + (" (VM + GPU rows)" if cloud == "gcp" else "")
        if offer.on_demand:
            result.append(CachedPrice(cloud, offer.region, offer.instance_type, "on-demand",
                                      min(offer.on_demand), fetched_at, source,
                                      attributes=attributes, url=url))
        if offer.spot:
            low, high = min(offer.spot), max(offer.spot)
            result.append(CachedPrice(cloud, offer.region, offer.instance_type, "spot",
                                      round((low + high) / 2, 6), fetched_at, source, low=low,
                                      high=high, attributes=attributes, url=url))
    return result


async def refresh_catalog_async(clouds: Iterable[str] = CATALOG_CLOUDS, *,
                                cache_path: str | os.PathLike[str],
                                base_url: str = SKYPILOT_CATALOG_BASE_URL,
                                regions: Sequence[str] | None = None,
                                timeout_s: float = DEFAULT_TIMEOUT_S,
                                max_retry_after_s: float = 30.0,
                                progress: Progress | None = None,
                                now: float | None = None) -> RefreshResult:
    """Fetch each cloud's vms.csv from `base_url`, parse it, merge into the cache; a cloud
    that fails keeps its previous prices and its error is in `errors[cloud]`."""
    fetched_at = time.time() if now is None else now
    result = RefreshResult("catalog", ",".join(regions or []) or "default", fetched_at,
                           str(cache_path))
    say = progress or (lambda line: None)
    async with aiohttp.ClientSession() as session:
        for cloud in clouds:
            if cloud not in CATALOG_SCHEMAS:
                result.errors.setdefault(cloud, []).append(
                    f"no SkyPilot catalog for {cloud!r}; use one of {', '.join(CATALOG_CLOUDS)}")
                continue
            url = catalog_url(base_url, cloud)
            try:
                text = await fetch(session, url, as_json=False, timeout_s=timeout_s,
                                   max_retry_after_s=max_retry_after_s)
                prices = parse_vms_csv(cloud, text, regions or DEFAULT_REGIONS[cloud],
                                       fetched_at, url)
            except (FetchError, ValueError) as exc:
                message = str(exc) if isinstance(exc, FetchError) else f"{url}: {exc}"
                result.errors.setdefault(cloud, []).append(
                    f"{message}; previous {cloud} prices kept (set the catalog base URL with "
                    "--catalog-url if it moved)")
                say(f"{cloud}: failed")
                continue
            if not prices:
                result.errors.setdefault(cloud, []).append(
                    f"{url}: no accelerator prices for region(s) "
                    f"{', '.join(regions or DEFAULT_REGIONS[cloud])}; previous prices kept")
            result.prices.extend(prices)
            say(f"{cloud}: {len(prices)} price(s) from {url}")
    return result.save()


def refresh_catalog(clouds: Iterable[str] = CATALOG_CLOUDS, **kwargs: Any) -> RefreshResult:
    """`refresh_catalog_async` for synchronous callers (the CLI)."""
    return asyncio.run(refresh_catalog_async(clouds, **kwargs))
