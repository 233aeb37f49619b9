"""Azure ML surcharges from a local server shaped like the Azure Retail Prices API."""

from __future__ import annotations

import pytest
from local_http import LocalServer, ok
from test_pricing_refresh_azure import PATH, item, page

from pricing.cache import CachedPrice, read_cache, write_cache
from pricing.catalog import Catalog
from pricing.managed import compare_managed, same_hardware
from pricing.refresh_azureml import build_filter, refresh_azureml

ND96 = "Standard_ND96asr_v4"


def ml_item(meter: str, price: float, *, product: str = "Machine Learning service",
            unit: str = "1 Hour") -> dict:
    entry = item(meter, price, product="", sku="")
    entry.update({"productName": product, "serviceName": "Azure Machine Learning",
                  "serviceFamily": "AI + Machine Learning", "meterName": meter,
                  "skuName": "Standard", "armSkuName": "", "unitOfMeasure": unit})
    return entry


SURCHARGES = [ml_item("Standard Training vCPU Surcharge", 0.0),
              ml_item("Standard Training GPU Surcharge", 0.0),
              ml_item("Standard vCPU Surcharge", 0.0),
              ml_item("Standard GPU Surcharge", 0.11),
              ml_item("PB vCPU Surcharge", 0.055),  # pipeline batch: not a machine price
              ml_item("Evaluation Input Tokens", 0.02, unit="1K")]


def test_the_filter_asks_for_azure_ml_in_the_region():
    assert build_filter("eastus") == ("serviceName eq 'Azure Machine Learning' and "
                                      "armRegionName eq 'eastus'")


def test_surcharges_make_the_managed_price_the_vm_price_plus_per_unit_rates(tmp_path):
    cache = tmp_path / "prices.json"
    with LocalServer({PATH: [ok(page(SURCHARGES[:3], "NEXT")),
                             ok(page(SURCHARGES[3:], None))]}) as server:
        next_link = f"{server.url}{PATH}?$skip=3"
        server.routes[PATH][0] = ok(page(SURCHARGES[:3], next_link))
        result = refresh_azureml("eastus", cache_path=cache, base_url=server.url + PATH)
    assert result.ok, result.errors
    assert server.requests[0][1]["$filter"] == build_filter("eastus")
    assert {(p.kind, p.instance_type): p.per_hour for p in read_cache(cache)} == {
        ("surcharge:azureml:training", "per-vCPU"): 0.0,
        ("surcharge:azureml:training", "per-GPU"): 0.0,
        ("surcharge:azureml:inference", "per-vCPU"): 0.0,
        ("surcharge:azureml:inference", "per-GPU"): 0.11}
    catalog = Catalog.load(cache_path=cache)
    training = compare_managed(catalog, ND96, "eastus", cache, provider="azure")
    assert training.managed_per_hour == training.self_managed_per_hour == 27.197
    assert training.markup_pct == 0.0 and "live, " in training.managed_source
    inference = compare_managed(catalog, ND96, "eastus", cache, provider="azure",
                                component="Inference")
    assert inference.managed_per_hour == pytest.approx(27.197 + 8 * 0.11)
    # the surcharges are no VM price: the catalog's Azure rows are as they were
    assert len(catalog.filter(provider="azure")) == len(Catalog.load().filter(provider="azure"))


def test_without_a_refresh_the_bundled_zero_surcharge_is_an_estimate(tmp_path):
    comparison = compare_managed(Catalog.load(), ND96, "eastus", tmp_path / "none.json",
                                 provider="azure")
    assert comparison.managed_per_hour == 27.197 and comparison.markup_pct == 0.0
    assert "assumed $0" in comparison.managed_source and "estimate" in comparison.managed_source


def test_a_failed_refresh_keeps_the_previous_surcharges(tmp_path):
    cache = tmp_path / "prices.json"
    write_cache(cache, [CachedPrice("azure", "eastus", "per-GPU", "surcharge:azureml:training",
                                    0.2, 1e9, "earlier")])
    with LocalServer({PATH: [(429, "", {"Retry-After": "0"}), "hang"]}) as server:
        result = refresh_azureml("eastus", cache_path=cache, base_url=server.url + PATH,
                                 timeout_s=0.5)
    [message] = result.errors["Azure ML"]
    assert "no answer within 0.5 s" in message and message.endswith("(previous prices kept)")
    assert len(server.requests) == 2  # the 429 was retried
    assert [p.per_hour for p in read_cache(cache)] == [0.2]
    comparison = compare_managed(Catalog.load(cache_path=cache), ND96, "eastus", cache,
                                 provider="azure")
    assert comparison.managed_per_hour == pytest.approx(27.197 + 8 * 0.2)


def test_a_region_that_lists_no_surcharge_says_so(tmp_path):
    with LocalServer({PATH: [ok(page([ml_item("Evaluation Input Tokens", 0.02, unit="1K")],
                                     None))]}) as server:
        result = refresh_azureml("westeurope", cache_path=tmp_path / "c.json",
                                 base_url=server.url + PATH)
    assert result.errors["Azure ML"][0].startswith(
        "the Azure Retail Prices API lists no Azure Machine Learning surcharge meter in "
        "westeurope (of 1 Azure ML items seen)")


def test_the_demo_hosts_hardware_on_every_platform(tmp_path):
    base, rows, missing = same_hardware(Catalog.load(), "p4d.24xlarge", tmp_path / "c.json",
                                        provider="aws")
    assert (base.accelerator, base.accelerator_count) == ("A100-40GB", 8)
    assert [(r.platform, r.component, r.instance_type) for r in rows] == [
        ("Vertex AI", "Training", "a2-highgpu-8g"), ("Vertex AI", "Prediction", "a2-highgpu-8g"),
        ("Azure ML", "Training", ND96), ("Azure ML", "Inference", ND96)]
    assert missing == ["SageMaker: no price for p4d.24xlarge (8 x A100-40GB); run `mlcostd "
                       "prices --refresh sagemaker --region us-east-1 --instance p4d.24xlarge`"]
