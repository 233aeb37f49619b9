"""Live AWS refresh: Price List via botocore's Stubber, spot history via a moto server."""

from __future__ import annotations

import json

import boto3
import pytest
from conftest import expected_get_products, get_products_response, price_list_item

from pricing.catalog import Catalog
from pricing.refresh import parse_on_demand, parse_reserved, refresh_aws


def test_refresh_fetches_on_demand_and_spot_and_caches(tmp_path, pricing_stub, ec2_client):
    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(
        price_list_item("g5.xlarge", "us-east-1", "1.0060000000")),
        expected_get_products("g5.xlarge", "us-east-1"))
    cache = tmp_path / "prices.json"
    lines = []
    result = refresh_aws(["g5.xlarge"], "us-east-1", cache_path=cache, pricing_client=client,
                         ec2_client=ec2_client, progress=lines.append)
    assert result.ok, result.errors
    assert result.price_for("g5.xlarge", "on-demand").per_hour == 1.006
    spot = result.price_for("g5.xlarge", "spot")
    assert spot.low == spot.high == pytest.approx(0.00001)  # moto's placeholder price
    assert lines and lines[0].startswith("g5.xlarge: on-demand $1.0060/h, spot $0.0000-0.0000/h")

    stored = json.loads(cache.read_text())
    assert {p["kind"] for p in stored["prices"]} == {"on-demand", "spot"}
    offer = Catalog.load(cache_path=cache).by_instance("aws", "g5.xlarge", "us-east-1")
    assert offer.on_demand.live and offer.on_demand.per_hour == 1.006
    assert offer.on_demand.describe().startswith("live, ")
    assert offer.on_demand.age_s < 60
    assert offer.spot.live
    other = Catalog.load(cache_path=cache).by_instance("aws", "g6.xlarge")
    assert other.on_demand.describe() == "bundled, catalog date unknown"


def test_unknown_type_gets_a_clear_message(tmp_path, pricing_stub, ec2_client):
    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(),
                         expected_get_products("p9.48xlarge", "us-east-1"))
    result = refresh_aws(["p9.48xlarge"], "us-east-1", cache_path=tmp_path / "c.json",
                         pricing_client=client, ec2_client=ec2_client)
    assert not result.ok and result.prices == []
    assert result.errors["p9.48xlarge"] == [
        "on-demand: AWS lists no Linux on-demand price for p9.48xlarge in us-east-1 "
        "(unknown instance type, or not offered in that region)",
        "spot: no Linux spot price for p9.48xlarge in us-east-1",
    ]
    assert not (tmp_path / "c.json").exists()


def test_throttling_is_a_message_per_type(tmp_path, pricing_stub, ec2_client):
    client, stubber = pricing_stub
    stubber.add_client_error("get_products", service_error_code="ThrottlingException",
                             service_message="Rate exceeded", http_status_code=400)
    stubber.add_response("get_products", get_products_response(
        price_list_item("g6.xlarge", "us-east-1", "0.8048000000")),
        expected_get_products("g6.xlarge", "us-east-1"))
    from pricing.cache import CachedPrice, read_cache, write_cache

    cache = tmp_path / "c.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "g5.xlarge", "on-demand", 0.99, 1e9,
                                    "an earlier refresh")])
    result = refresh_aws(["g5.xlarge", "g6.xlarge"], "us-east-1",
                         cache_path=cache, pricing_client=client,
                         ec2_client=ec2_client)
    assert result.errors == {"g5.xlarge": [
        "on-demand: throttled by AWS (ThrottlingException); try again in a minute"]}
    assert result.price_for("g6.xlarge", "on-demand").per_hour == 0.8048
    kept = {(p.instance_type, p.kind): p.per_hour for p in read_cache(cache)}
    assert kept[("g5.xlarge", "on-demand")] == 0.99  # the last good price stays
    assert kept[("g6.xlarge", "on-demand")] == 0.8048


def test_no_credentials_is_a_message_not_a_traceback(tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    session = boto3.session.Session(region_name="us-east-1")
    result = refresh_aws(["g5.xlarge"], "us-east-1", session=session,
                         cache_path=tmp_path / "c.json")
    assert all("no AWS credentials found" in m for m in result.errors["g5.xlarge"])
    assert len(result.errors["g5.xlarge"]) == 2  # spot and on-demand


def test_live_price_for_a_region_the_catalog_lacks(tmp_path, pricing_stub, moto_endpoint):
    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(
        price_list_item("g5.xlarge", "eu-west-1", "1.1220000000")),
        expected_get_products("g5.xlarge", "eu-west-1"))
    ec2 = boto3.client("ec2", region_name="eu-west-1", endpoint_url=moto_endpoint)
    cache = tmp_path / "c.json"
    result = refresh_aws(["g5.xlarge"], "eu-west-1", cache_path=cache, pricing_client=client,
                         ec2_client=ec2)
    assert result.ok, result.errors
    offer = Catalog.load(cache_path=cache).by_instance("aws", "g5.xlarge", "eu-west-1")
    assert offer.on_demand.per_hour == 1.122 and offer.accelerator == "A10G"
    assert offer.commit_1y is None


def test_parse_on_demand_takes_hourly_positive_price():
    items = [price_list_item("g5.xlarge", "us-east-1", "0.0000000000", sku="ZERO"),
             price_list_item("g5.xlarge", "us-east-1", "1.0060000000")]
    price, attributes = parse_on_demand(items)
    assert price == 1.006 and attributes["gpuMemory"] == "24 GiB"
    assert parse_on_demand([]) == (None, {})


def with_reserved(item: str, terms: list[tuple[str, str, str, str]]) -> str:
    """Add Reserved terms shaped like the Price List's: (length, option, hourly, upfront)."""
    product = json.loads(item)
    sku = product["product"]["sku"]
    reserved = {}
    for n, (length, option, hourly, upfront) in enumerate(terms):
        code = f"{sku}.RES{n}"
        dims = {f"{code}.HRS": {"unit": "Hrs", "pricePerUnit": {"USD": hourly},
                                "description": "USD per hour", "rateCode": f"{code}.HRS"}}
        if upfront:
            dims[f"{code}.UPF"] = {"unit": "Quantity", "pricePerUnit": {"USD": upfront},
                                   "description": "Upfront Fee", "rateCode": f"{code}.UPF"}
        reserved[code] = {"priceDimensions": dims, "sku": sku, "offerTermCode": f"RES{n}",
                          "effectiveDate": "2025-06-01T00:00:00Z",
                          "termAttributes": {"LeaseContractLength": length,
                                             "OfferingClass": "standard",
                                             "PurchaseOption": option}}
    reserved["CONVERTIBLE"] = {"priceDimensions": {"x": {"unit": "Hrs",
                                                          "pricePerUnit": {"USD": "0.0001"}}},
                               "termAttributes": {"LeaseContractLength": "1yr",
                                                  "OfferingClass": "convertible",
                                                  "PurchaseOption": "No Upfront"}}
    product["terms"]["Reserved"] = reserved
    return json.dumps(product)


def test_reserved_prices_become_1_and_3_year_commitments(tmp_path, pricing_stub, ec2_client):
    client, stubber = pricing_stub
    item = with_reserved(price_list_item("g5.xlarge", "us-east-1", "1.0060000000"), [
        ("1yr", "No Upfront", "0.6340000000", ""),
        ("1yr", "All Upfront", "0.0000000000", "5300"),
        ("3yr", "Partial Upfront", "0.2000000000", "6000"),
        ("3yr", "All Upfront", "0.0000000000", "11000")])
    stubber.add_response("get_products", get_products_response(item),
                         expected_get_products("g5.xlarge", "us-east-1"))
    cache = tmp_path / "c.json"
    result = refresh_aws(["g5.xlarge"], "us-east-1", cache_path=cache, pricing_client=client,
                         ec2_client=ec2_client)
    assert result.ok, result.errors
    one = result.price_for("g5.xlarge", "commit-1y")
    assert one.per_hour == 0.634 and one.source.endswith("1yr No Upfront")  # not the convertible
    three = result.price_for("g5.xlarge", "commit-3y")
    assert three.per_hour == pytest.approx(11000 / (3 * 8760), abs=1e-6)  # cheaper than partial
    assert three.source.endswith("3yr All Upfront")
    offer = Catalog.load(cache_path=cache).by_instance("aws", "g5.xlarge", "us-east-1")
    assert offer.commitment(1).per_hour == 0.634 and offer.commitment(3).live
    assert offer.on_demand.url.startswith("https://api.pricing.us-east-1.amazonaws.com")
    assert parse_reserved([price_list_item("g5.xlarge", "us-east-1", "1.0")]) == {}
