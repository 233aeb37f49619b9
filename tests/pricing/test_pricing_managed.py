"""SageMaker prices through the AWS Price List (botocore Stubber) against self-managed EC2."""

from __future__ import annotations

import json

import pytest
from conftest import get_products_response

from pricing.catalog import Catalog, PricingError
from pricing.managed import compare_managed, parse_sagemaker, refresh_sagemaker
from pricing.refresh import AWS_REGION_NAMES


def sagemaker_item(ml_type: str, region: str, usd: str, component: str = "Training") -> str:
    """One PriceList entry of ServiceCode AmazonSageMaker, as the API returns it."""
    sku = "SMSKU" + ml_type.replace(".", "")[:10].upper()
    rate = f"{sku}.JRTCKXETXF.6YS6EN2CT7"
    return json.dumps({
        "product": {"productFamily": "ML Instance", "sku": sku, "attributes": {
            "instanceName": ml_type, "component": component, "location": AWS_REGION_NAMES[region],
            "regionCode": region, "servicecode": "AmazonSageMaker",
            "usagetype": f"USE1-{component}:{ml_type}", "operation": "RunInstance",
            "vCpu": "96", "gpu": "8", "computeType": "GPU"}},
        "serviceCode": "AmazonSageMaker",
        "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {"priceDimensions": {rate: {
            "unit": "Hrs", "pricePerUnit": {"USD": usd}, "rateCode": rate,
            "description": f"${usd} per hour for {component} on {ml_type}",
            "beginRange": "0", "endRange": "Inf", "appliesTo": []}},
            "sku": sku, "effectiveDate": "2025-06-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
            "termAttributes": {}}}},
        "version": "20250601000000", "publicationDate": "2025-06-01T00:00:00Z"})


def expected(ml_type: str, region: str = "us-east-1", component: str = "Training") -> dict:
    return {"ServiceCode": "AmazonSageMaker", "FormatVersion": "aws_v1", "MaxResults": 100,
            "Filters": [
                {"Type": "TERM_MATCH", "Field": "instanceName", "Value": ml_type},
                {"Type": "TERM_MATCH", "Field": "location", "Value": AWS_REGION_NAMES[region]},
                {"Type": "TERM_MATCH", "Field": "component", "Value": component}]}


def test_demo_host_markup_from_a_sagemaker_price(tmp_path, pricing_stub):
    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(
        sagemaker_item("ml.p4d.24xlarge", "us-east-1", "37.6880000000")),
        expected("ml.p4d.24xlarge"))
    cache = tmp_path / "prices.json"
    result = refresh_sagemaker(["p4d.24xlarge"], "us-east-1", cache_path=cache,
                               pricing_client=client)
    assert result.ok, result.errors
    [cached] = result.prices  # with its source, URL and fetch time
    assert cached.url.startswith("https://api.pricing.us-east-1.amazonaws.com")
    assert cached.source == "AWS Price List API (AmazonSageMaker)" and cached.fetched_at > 0
    comparison = compare_managed(Catalog.load(cache_path=cache), "p4d.24xlarge", "us-east-1",
                                 cache)
    assert comparison.managed_per_hour == 37.688
    assert comparison.self_managed_per_hour == 32.7726
    assert comparison.markup_pct == pytest.approx((37.688 / 32.7726 - 1) * 100)
    assert comparison.monthly_difference == pytest.approx((37.688 - 32.7726) * 730)
    assert comparison.describe().startswith(
        "SageMaker Training ml.p4d.24xlarge $37.6880/h against p4d.24xlarge $32.7726/h "
        "self-managed in us-east-1: +15.0 %, $3,588 a month at 730 h")
    half = compare_managed(Catalog.load(cache_path=cache), "ml.p4d.24xlarge", "us-east-1",
                           cache, hours_per_month=365)
    assert half.monthly_difference == pytest.approx(comparison.monthly_difference / 2)
    # the managed price does not replace the EC2 price in the catalog
    offer = Catalog.load(cache_path=cache).by_instance("aws", "p4d.24xlarge", "us-east-1")
    assert offer.on_demand.per_hour == 32.7726


def test_missing_prices_say_which_command_fetches_them(tmp_path, pricing_stub):
    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(), expected("ml.g5.xlarge"))
    cache = tmp_path / "prices.json"
    result = refresh_sagemaker(["g5.xlarge"], "us-east-1", cache_path=cache,
                               pricing_client=client)
    assert result.errors == {"ml.g5.xlarge": [
        "AWS lists no SageMaker Training price for ml.g5.xlarge in us-east-1"]}
    with pytest.raises(PricingError, match=r"run `mlcostd prices --refresh sagemaker "
                                           r"--region us-east-1 --instance g5.xlarge`"):
        compare_managed(Catalog.load(), "g5.xlarge", "us-east-1", cache)
    with pytest.raises(PricingError, match="no self-managed on-demand price for aws/g5.xlarge "
                                           "in eu-west-1"):
        compare_managed(Catalog.load(), "g5.xlarge", "eu-west-1", cache)


def test_parse_sagemaker_keeps_the_component_asked_for():
    items = [sagemaker_item("ml.g5.xlarge", "us-east-1", "1.4080000000", "Hosting"),
             sagemaker_item("ml.g5.xlarge", "us-east-1", "1.4080000000", "Training")]
    items[0] = items[0].replace("1.4080000000", "1.2000000000")
    assert parse_sagemaker(items, "Training") == 1.408
    assert parse_sagemaker(items, "Hosting") == 1.2


def test_a_throttled_sagemaker_refresh_keeps_the_last_good_price(tmp_path, pricing_stub):
    from pricing.cache import CachedPrice, read_cache, write_cache

    client, stubber = pricing_stub
    stubber.add_client_error("get_products", service_error_code="ThrottlingException",
                             service_message="Rate exceeded", http_status_code=400)
    cache = tmp_path / "prices.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "ml.p4d.24xlarge",
                                    "managed:sagemaker:training", 37.688, 1e9, "earlier")])
    result = refresh_sagemaker(["p4d.24xlarge"], "us-east-1", cache_path=cache,
                               pricing_client=client)
    assert result.errors == {"ml.p4d.24xlarge": [
        "SageMaker: throttled by AWS (ThrottlingException); try again in a minute"]}
    assert [p.per_hour for p in read_cache(cache)] == [37.688]
    comparison = compare_managed(Catalog.load(cache_path=cache), "p4d.24xlarge", "us-east-1",
                                 cache)
    assert comparison.managed_per_hour == 37.688
