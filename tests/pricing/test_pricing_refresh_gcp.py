"""GCP Cloud Billing Catalog refresh: API key file rules, SKU composition, pagination."""

from __future__ import annotations

import json
import logging
import os

import pytest
from local_http import LocalServer, ok

from pricing.cache import read_cache
from pricing.catalog import Catalog
from pricing.refresh_gcp import GcpKeyError, read_api_key, refresh_gcp

KEY = "AIzaSyFAKE-key-0123456789"
PATH = "/services/6F81-5844-456A/skus"


def sku(description: str, usage: str, usd: float, group: str = "GPU",
        regions: tuple[str, ...] = ("us-central1",)) -> dict:
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    return {"name": f"services/6F81-5844-456A/skus/{abs(hash(description + usage)) % 10**8}",
            "skuId": "0000-0000-0000", "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                         "resourceGroup": group, "usageType": usage},
            "serviceRegions": list(regions),
            "pricingInfo": [{"effectiveTime": "2026-11-30T00:00:00Z", "pricingExpression": {
                "usageUnit": "h", "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0,
                                 "unitPrice": {"currencyCode": "USD", "units": str(units),
                                               "nanos": nanos}}]}}],
            "serviceProviderName": "Google"}


# Descriptions as public billing data shows them (see pricing/refresh_gcp.py).
PAGE1 = [sku("Nvidia L4 GPU running in Americas", "OnDemand", 0.56004),
         sku("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas",
             "Preemptible", 0.224),
         sku("G2 Instance Core running in Americas", "OnDemand", 0.024, "CPU"),
         sku("G2 Instance Ram running in Americas", "OnDemand", 0.0028, "RAM"),
         sku("G2 Custom Instance Core running in Americas", "OnDemand", 0.9, "CPU")]
PAGE2 = [sku("Spot Preemptible G2 Instance Core running in Americas", "Preemptible", 0.0096,
             "CPU"),
         sku("Spot Preemptible G2 Instance Ram running in Americas", "Preemptible", 0.00112,
             "RAM"),
         sku("Commitment v1: Nvidia L4 GPU running in Americas for 1 Year", "Commit1Yr", 0.35),
         sku("Commitment v1: G2 Cpu in Americas for 1 Year", "Commit1Yr", 0.015, "CPU"),
         sku("Commitment v1: G2 Ram in Americas for 1 Year", "Commit1Yr", 0.0018, "RAM"),
         sku("Nvidia L4 GPU running in EMEA", "OnDemand", 0.7, regions=("europe-west4",))]

@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "gcp.key"
    path.write_text(KEY + "\n")
    path.chmod(0o600)
    return path


def test_a_key_file_readable_by_others_is_refused_with_the_fix(tmp_path, key_file):
    assert read_api_key(key_file) == KEY
    key_file.chmod(0o644)
    with pytest.raises(GcpKeyError) as excinfo:
        read_api_key(key_file)
    assert str(excinfo.value) == (f"GCP API key file {key_file} has mode 0644, readable by "
                                  f"others; run `chmod 600 {key_file}`")
    with pytest.raises(GcpKeyError, match="create it with the key on one line"):
        read_api_key(tmp_path / "missing.key")


def test_a_key_file_that_is_no_file_of_one_line_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "gcp.key"
    os.mkfifo(fifo, 0o600)  # no writer: an open that waits for one never returns
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)  # (was: "run `chmod 600` on it")
    two_lines = tmp_path / "two.key"
    two_lines.write_text(KEY + "\n" + KEY + "\n")
    two_lines.chmod(0o600)
    for path, reason in ((fifo, "is not a regular file"), (folder, "is not a regular file"),
                         (two_lines, "holds more than one line")):
        with pytest.raises(GcpKeyError) as refused:
            read_api_key(path)
        assert str(refused.value) == (f"GCP API key file {path} {reason}"
                                      + ", or control characters" * (path == two_lines)
                                      + "; put the API key on one line in a file of its own")
        assert KEY not in str(refused.value)


def test_refresh_composes_host_prices_from_sku_parts(tmp_path, key_file, caplog):
    caplog.set_level(logging.DEBUG)
    cache = tmp_path / "prices.json"
    offers = Catalog.load().filter(provider="gcp", instance_types=["g2-standard-4"])
    with LocalServer({PATH: [ok(json.dumps({"skus": PAGE1, "nextPageToken": "p2"})),
                             ok(json.dumps({"skus": PAGE2, "nextPageToken": ""}))]}) as server:
        result = refresh_gcp(offers, "us-central1", key_file=key_file, cache_path=cache,
                             base_url=server.url)
    assert result.ok, result.errors
    assert [q.get("pageToken") for _, q in server.requests] == [None, "p2"]
    assert all("key" not in q for _, q in server.requests)  # never in a URL
    assert all(h["X-Goog-Api-Key"] == KEY for h in server.headers)
    prices = {p.kind: p.per_hour for p in read_cache(cache)}
    # 4 vCPU + 16 GiB + 1 L4
    assert prices["on-demand"] == pytest.approx(4 * 0.024 + 16 * 0.0028 + 0.56004)
    assert prices["spot"] == pytest.approx(4 * 0.0096 + 16 * 0.00112 + 0.224)
    assert prices["commit-1y"] == pytest.approx(4 * 0.015 + 16 * 0.0018 + 0.35)
    assert "commit-3y" not in prices
    text = cache.read_text()
    assert KEY not in text and f"{server.url}{PATH}" in text
    assert KEY not in caplog.text
    offer = Catalog.load(cache_path=cache).by_instance("gcp", "g2-standard-4", "us-central1")
    assert offer.commitment(1).live and offer.commitment(3) is None


def test_an_api_error_never_shows_the_key(tmp_path, key_file):
    from pricing.cache import CachedPrice, write_cache

    cache = tmp_path / "c.json"
    write_cache(cache, [CachedPrice("gcp", "us-central1", "g2-standard-4", "on-demand", 0.7,
                                    1e9, "an earlier refresh")])
    body = json.dumps({"error": {"code": 400, "message": f"API key not valid: {KEY}"}})
    with LocalServer({PATH: [(400, body, {})]}) as server:
        result = refresh_gcp(Catalog.load().filter(provider="gcp"), "us-central1",
                             key_file=key_file, cache_path=cache,
                             base_url=server.url)
    assert [p.per_hour for p in read_cache(cache)] == [0.7]  # the last good price stays
    [message] = result.errors["Compute Engine"]
    assert "HTTP 400" in message and "API key not valid: ***" in message
    assert KEY not in message
    assert message.endswith("(previous prices kept)")


def test_a_429_then_a_malformed_page(tmp_path, key_file):
    with LocalServer({PATH: [(429, "", {"Retry-After": "0"}), ok(json.dumps({"oops": 1}))]}) as server:
        result = refresh_gcp(Catalog.load().filter(provider="gcp"), "us-central1",
                             key_file=key_file, cache_path=tmp_path / "c.json",
                             base_url=server.url)
    assert len(server.requests) == 2
    assert "a page without a 'skus' list" in result.errors["Compute Engine"][0]
    assert KEY not in result.errors["Compute Engine"][0]


# Compute Engine's H100 and its A3 vCPU/RAM in the Americas: the H100 figure is public billing
# data (2026-07); the vCPU and RAM ones are Vertex AI's A3 SKUs less its 15 % markup (see
# pricing/data/managed.csv). Together they give the bundled a3-highgpu-8g price, 87.832.
A3_SKUS = [sku("Nvidia H100 80GB GPU running in Americas", "OnDemand", 9.796550569,
               regions=("us-east4", "us-central1")),
           sku("A3 Instance Core running in Americas", "OnDemand", 0.0254980, "CPU",
               regions=("us-east4", "us-central1")),
           sku("A3 Instance Ram running in Americas", "OnDemand", 0.0022203, "RAM",
               regions=("us-east4", "us-central1")),
           # SKUs of other machine shapes and provisioning models that share the words
           sku("Nvidia H100 80GB Mega GPU running in Americas", "OnDemand", 10.34,
               regions=("us-east4",)),
           sku("Nvidia H100 80GB Plus GPU running in Americas", "OnDemand", 10.34,
               regions=("us-east4",)),
           sku("Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas",
               "OnDemand", 4.200761, regions=("us-east4",)),
           sku("DWS Defined Duration A3 Core running in Americas", "OnDemand", 0.010934, "CPU",
               regions=("us-east4",)),
           # H200 SKUs drop the "Nvidia" prefix; A3 Ultra has vCPU and RAM SKUs of its own
           sku("H200 141GB GPU running in Americas", "OnDemand", 9.31174),
           sku("A3 Ultra Instance Core running in Americas", "OnDemand", 0.03, "CPU"),
           sku("A3 Ultra Instance Ram running in Americas", "OnDemand", 0.0025, "RAM")]


def test_a3_machines_are_priced_from_their_own_sku_family(tmp_path, key_file):
    cache = tmp_path / "prices.json"
    catalog = Catalog.load()
    a3_high = catalog.filter(provider="gcp", instance_types=["a3-highgpu-8g"])
    a3_ultra = catalog.filter(provider="gcp", instance_types=["a3-ultragpu-8g"])
    with LocalServer({PATH: [ok(json.dumps({"skus": A3_SKUS}))]}) as server:
        high = refresh_gcp(a3_high, "us-east4", key_file=key_file, cache_path=cache,
                           base_url=server.url)
        ultra = refresh_gcp(a3_ultra, "us-central1", key_file=key_file, cache_path=cache,
                            base_url=server.url)
    assert high.ok and ultra.ok, (high.errors, ultra.errors)
    [h100] = high.prices
    assert h100.per_hour == pytest.approx(208 * 0.025498 + 1872 * 0.0022203 + 8 * 9.796550569)
    assert h100.per_hour == pytest.approx(87.832, abs=0.01)  # the bundled row, us-east4
    assert "208 x A3 vCPU" in h100.source
    [h200] = ultra.prices
    assert h200.per_hour == pytest.approx(224 * 0.03 + 2952 * 0.0025 + 8 * 9.31174)
    assert "A3ULTRA vCPU" in h200.source


def test_a_machine_family_without_its_own_skus_is_priced_by_the_base_family():
    from pricing.refresh_gcp import compose, parse_skus

    [a3_ultra] = Catalog.load().filter(provider="gcp", instance_types=["a3-ultragpu-8g"])
    parts = parse_skus([s for s in A3_SKUS if "Ultra" not in s["description"]], "us-central1")
    price, family = compose(a3_ultra, parts, "on-demand")
    assert family == "A3"
    assert price == pytest.approx(224 * 0.025498 + 2952 * 0.0022203 + 8 * 9.31174)
