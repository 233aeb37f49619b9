"""Azure Retail Prices refresh against a local server shaped like prices.azure.com."""

from __future__ import annotations

import json

import pytest
from local_http import LocalServer, ok

from pricing.cache import CachedPrice, read_cache, write_cache
from pricing.catalog import Catalog
from pricing.refresh_azure import build_filter, classify, refresh_azure

PATH = "/api/retail/prices"
SKU = "Standard_NC24ads_A100_v4"


def item(sku_name: str, price: float, *, kind: str = "Consumption", term: str | None = None,
         product: str = "NCads A100 v4 Series", sku: str = SKU, region: str = "eastus") -> dict:
    entry = {"currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price,
             "unitPrice": price, "armRegionName": region, "location": "US East",
             "effectiveStartDate": "2025-01-01T00:00:00Z", "meterId": "m",
             "meterName": sku_name, "productId": "DZH318Z0BQ4B", "skuId": "DZH318Z0BQ4B/00",
             "productName": f"Virtual Machines {product}", "skuName": sku_name,
             "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8",
             "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": kind,
             "isPrimaryMeterRegion": True, "armSkuName": sku}
    if term:
        entry["reservationTerm"] = term
    return entry


def page(items: list[dict], next_link: str | None) -> str:
    return json.dumps({"BillingCurrency": "USD", "CustomerEntityId": "Default",
                       "CustomerEntityType": "Retail", "Items": items,
                       "NextPageLink": next_link, "Count": len(items)})


def test_filter_names_service_region_and_each_sku():
    assert build_filter("eastus", ["NC24ads_A100_v4", "Standard_ND96asr_v4"]) == (
        "serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' and "
        "(armSkuName eq 'Standard_NC24ads_A100_v4' or armSkuName eq 'Standard_ND96asr_v4')")


def test_spot_low_priority_windows_and_reservations_are_told_apart():
    assert classify(item("NC24ads A100 v4", 3.673)) == "on-demand"
    assert classify(item("NC24ads A100 v4 Spot", 0.44)) == "spot"
    assert classify(item("NC24ads A100 v4 Low Priority", 0.73)) == "low-priority"
    assert classify(item("NC24ads A100 v4", 5.0, product="NCads A100 v4 Series Windows")) is None
    assert classify(item("NC24ads A100 v4", 20000, kind="Reservation", term="1 Year")) == "commit-1y"
    assert classify(item("NC24ads A100 v4", 40000, kind="Reservation", term="3 Years")) == "commit-3y"


def test_refresh_follows_next_page_link_and_caches_every_lifecycle(tmp_path):
    cache = tmp_path / "prices.json"
    with LocalServer({PATH: [], "/page2": []}) as server:
        server.routes[PATH] = [ok(page([item("NC24ads A100 v4", 3.673),
                                        item("NC24ads A100 v4 Spot", 0.444)],
                                       f"{server.url}/page2?$skip=2"))]
        server.routes["/page2"] = [ok(page([
            item("NC24ads A100 v4 Low Priority", 0.7346),
            item("NC24ads A100 v4", 6.0, product="NCads A100 v4 Series Windows"),
            item("NC24ads A100 v4", 19301.0, kind="Reservation", term="1 Year"),
            item("NC24ads A100 v4", 37154.0, kind="Reservation", term="3 Years")], None))]
        lines: list[str] = []
        result = refresh_azure([SKU], "eastus", cache_path=cache,
                               base_url=server.url + PATH, progress=lines.append)
    assert result.ok, result.errors
    assert [path for path, _ in server.requests] == [PATH, "/page2"]
    assert "armSkuName eq 'Standard_NC24ads_A100_v4'" in server.requests[0][1]["$filter"]
    assert server.requests[1][1] == {"$skip": "2"}  # the link as given, not the filter again
    kinds = {p.kind: p.per_hour for p in read_cache(cache)}
    assert kinds == {"on-demand": 3.673, "spot": 0.444, "low-priority": 0.7346,
                     "commit-1y": pytest.approx(19301.0 / 8760, abs=1e-6),
                     "commit-3y": pytest.approx(37154.0 / (3 * 8760), abs=1e-6)}
    assert all(p.url == server.url + PATH for p in read_cache(cache))
    offer = Catalog.load(cache_path=cache).by_instance("azure", SKU, "eastus")
    assert offer.on_demand.live and offer.spot.per_hour == 0.444  # not the low-priority price
    assert offer.commitment(1).per_hour == pytest.approx(2.203311)
    assert offer.commitment(3).per_hour == pytest.approx(1.413775)
    assert lines[0].startswith(f"{SKU}: commit-1y $2.2033/h")


def test_a_429_with_retry_after_is_retried(tmp_path):
    with LocalServer({PATH: [(429, "slow down", {"Retry-After": "0"}),
                             ok(page([item("NC24ads A100 v4", 3.5)], None))]}) as server:
        result = refresh_azure([SKU], "eastus", cache_path=tmp_path / "c.json",
                               base_url=server.url + PATH)
    assert result.ok, result.errors
    assert len(server.requests) == 2
    assert result.prices[0].per_hour == 3.5


def test_a_long_retry_after_fails_at_once_and_keeps_previous_prices(tmp_path):
    cache = tmp_path / "c.json"
    write_cache(cache, [CachedPrice("azure", "eastus", SKU, "on-demand", 3.6, 1.0, "earlier")])
    with LocalServer({PATH: [(429, "", {"Retry-After": "3600"})]}) as server:
        result = refresh_azure([SKU], "eastus", cache_path=cache, base_url=server.url + PATH)
    assert len(server.requests) == 1
    [message] = result.errors[SKU]
    assert "throttled (HTTP 429, Retry-After 3600 s)" in message
    assert message.endswith("(previous prices kept)")
    assert [(p.per_hour, p.source) for p in read_cache(cache)] == [(3.6, "earlier")]


def test_a_timeout_is_a_clear_error(tmp_path):
    with LocalServer({PATH: ["hang"]}) as server:
        result = refresh_azure([SKU], "eastus", cache_path=tmp_path / "c.json",
                               base_url=server.url + PATH, timeout_s=0.3)
    [message] = result.errors[SKU]
    assert "no answer within 0.3 s; check the network or proxy" in message
    assert not (tmp_path / "c.json").exists()


def test_a_malformed_page_fails_the_refresh(tmp_path):
    with LocalServer({PATH: [ok("<html>maintenance</html>")]}) as server:
        result = refresh_azure([SKU], "eastus", cache_path=tmp_path / "c.json",
                               base_url=server.url + PATH)
    assert "the answer is not JSON" in result.errors[SKU][0]
    with LocalServer({PATH: [ok(json.dumps({"items": []}))]}) as server:
        result = refresh_azure([SKU], "eastus", cache_path=tmp_path / "c.json",
                               base_url=server.url + PATH)
    assert "a page without an 'Items' list" in result.errors[SKU][0]


def test_a_size_azure_does_not_list_is_named(tmp_path):
    with LocalServer({PATH: [ok(page([], None))]}) as server:
        result = refresh_azure(["ND999_v9"], "eastus", cache_path=tmp_path / "c.json",
                               base_url=server.url + PATH)
    assert result.errors["Standard_ND999_v9"] == [
        "the Azure Retail Prices API lists no Linux on-demand price for Standard_ND999_v9 in "
        "eastus (unknown size, or not offered there)"]
