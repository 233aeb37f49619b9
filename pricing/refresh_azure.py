"""Live Azure VM prices from the Azure Retail Prices API (public, no key).

`GET https://prices.azure.com/api/retail/prices?$filter=serviceName eq 'Virtual Machines' and
armRegionName eq 'eastus' and (armSkuName eq 'Standard_NC24ads_A100_v4' or ...)`, following
`NextPageLink` until it is null. Items of `type` "Consumption" are on-demand, spot (`skuName`
contains "Spot") or low priority (contains "Low Priority", kept apart: it is not spot);
Windows items are left out. "Reservation" items carry the total price of the term
(`reservationTerm` "1 Year" / "3 Years"), turned here into $/h over the term's hours.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from typing import Any

import aiohttp

from pricing.cache import CachedPrice
from pricing.http import DEFAULT_TIMEOUT_S, FetchError, fetch
from pricing.offer import HOURS_PER_YEAR
from pricing.refresh import Progress, RefreshResult

AZURE_PRICES_URL = "https://prices.azure.com/api/retail/prices"
SOURCE = "Azure Retail Prices API"
MAX_PAGES = 50  # a filtered VM query is a few pages; more means the filter is wrong
# SKUs per request: the OData filter is a URL; ~10 `or` clauses stay far below URL limits.
SKUS_PER_REQUEST = 10


def build_filter(region: str, skus: Iterable[str]) -> str:
    """The OData `$filter` for these VM sizes in `region`."""
    names = " or ".join(f"armSkuName eq '{_arm_sku(s)}'" for s in skus)
    return (f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}'"
            f" and ({names})")


def _arm_sku(size: str) -> str:
    size = size.strip()
    return size if size.lower().startswith("standard_") else f"Standard_{size}"


def classify(item: dict[str, Any]) -> str | None:
    """The lifecycle of one Retail Prices item, or None for one we do not price (Windows,
    Dev/Test, a unit other than hours)."""
    sku_name = str(item.get("skuName", ""))
    product = str(item.get("productName", ""))
    kind = str(item.get("type", ""))
    if "windows" in product.lower():
        return None
    if kind == "Reservation":
        term = str(item.get("reservationTerm", ""))
        return {"1 Year": "commit-1y", "3 Years": "commit-3y"}.get(term)
    if kind != "Consumption" or str(item.get("unitOfMeasure", "")) != "1 Hour":
        return None
    if "low priority" in sku_name.lower():
        return "low-priority"
    if "spot" in sku_name.lower():
        return "spot"
    return "on-demand"


def parse_items(items: Iterable[dict[str, Any]], region: str, fetched_at: float,
                url: str) -> list[CachedPrice]:
    """One CachedPrice per (size, lifecycle): the lowest current price listed for it."""
    best: dict[tuple[str, str], CachedPrice] = {}
    for item in items:
        kind = classify(item)
        sku = str(item.get("armSkuName", ""))
        if kind is None or not sku or item.get("armRegionName", region) != region:
            continue
        try:
            price = float(item["retailPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        if kind.startswith("commit-"):
            years = 1 if kind == "commit-1y" else 3
            price = round(price / (HOURS_PER_YEAR * years), 6)  # total of the term -> $/h
        current = best.get((sku.lower(), kind))
        if current is not None and current.per_hour <= price:
            continue
        best[(sku.lower(), kind)] = CachedPrice(
            "azure", region, sku, kind, price, fetched_at,
            f"{SOURCE} ({item.get('meterName', '')}, {item.get('type', '')}"
            + (f" {item.get('reservationTerm')}" if item.get("reservationTerm") else "") + ")",
            url=url)
    return list(best.values())


async def fetch_items(session: aiohttp.ClientSession, base_url: str, odata_filter: str,
                      *, timeout_s: float = DEFAULT_TIMEOUT_S,
                      max_retry_after_s: float = 30.0) -> list[dict[str, Any]]:
    """Every item the filter matches, across `NextPageLink` pages; raises FetchError."""
    items: list[dict[str, Any]] = []
    url: str | None = base_url
    params: dict[str, str] | None = {"$filter": odata_filter}
    for _ in range(MAX_PAGES):
        assert url is not None
        page = await fetch(session, url, params=params, timeout_s=timeout_s,
                           max_retry_after_s=max_retry_after_s)
        if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
            raise FetchError(f"{url}: a page without an 'Items' list (got "
                             f"{type(page).__name__}); the API changed or the URL is wrong")
        items.extend(i for i in page["Items"] if isinstance(i, dict))
        url = page.get("NextPageLink") or None
        params = None  # NextPageLink carries the filter and the skip token
        if url is None:
            return items
    raise FetchError(f"{base_url}: more than {MAX_PAGES} pages for {odata_filter!r}; "
                     "narrow the region or sizes")


async def refresh_azure_async(sizes: Iterable[str], region: str, *,
                              cache_path: str | os.PathLike[str],
                              base_url: str = AZURE_PRICES_URL,
                              timeout_s: float = DEFAULT_TIMEOUT_S,
                              max_retry_after_s: float = 30.0,
                              progress: Progress | None = None,
                              now: float | None = None) -> RefreshResult:
    """Fetch on-demand, spot, low-priority and reservation prices of `sizes` in `region` and
    merge them into the cache; on failure the cache keeps its previous prices."""
    wanted = list(dict.fromkeys(_arm_sku(s) for s in sizes if s.strip()))
    fetched_at = time.time() if now is None else now
    result = RefreshResult("azure", region, fetched_at, str(cache_path))
    say = progress or (lambda line: None)
    if not wanted:
        result.errors["(none)"] = ["no Azure VM sizes given; pass --instance SIZE"]
        return result
    async with aiohttp.ClientSession() as session:
        for start in range(0, len(wanted), SKUS_PER_REQUEST):
            chunk = wanted[start:start + SKUS_PER_REQUEST]
            odata = build_filter(region, chunk)
            try:
                items = await fetch_items(session, base_url, odata, timeout_s=timeout_s,
                                          max_retry_after_s=max_retry_after_s)
            except FetchError as exc:
                for sku in chunk:
                    result.errors.setdefault(sku, []).append(
                        f"{exc} (previous prices kept)")
                continue
            result.prices.extend(parse_items(items, region, fetched_at, base_url))
    for sku in wanted:
        got = {p.kind: p.per_hour for p in result.prices if p.instance_type.lower() == sku.lower()}
        if sku in result.errors:
            continue
        if "on-demand" not in got:
            result.errors.setdefault(sku, []).append(
                f"the Azure Retail Prices API lists no Linux on-demand price for {sku} in "
                f"{region} (unknown size, or not offered there)")
        say(f"{sku}: " + (", ".join(f"{k} ${v:.4f}/h" for k, v in sorted(got.items()))
                          or "no price"))
    return result.save()


def refresh_azure(sizes: Iterable[str], region: str, **kwargs: Any) -> RefreshResult:
    """`refresh_azure_async` for synchronous callers (the CLI)."""
    return asyncio.run(refresh_azure_async(sizes, region, **kwargs))
