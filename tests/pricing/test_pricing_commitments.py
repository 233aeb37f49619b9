"""Commitment prices from each source's fixtures reach the steady_inference_commitment rule.

Each refresh (AWS reserved terms through the Price List, Azure reservations through the Retail
Prices API, GCP committed use through the Cloud Billing Catalog) writes its 1- and 3-year prices
into a cache; the catalog that overlays it gives the rule its figures for an 8 x A100-40GB host
serving steadily on demand.
"""

from __future__ import annotations

import json

import pytest
from conftest import expected_get_products, get_products_response, price_list_item
from local_http import LocalServer, ok
from test_pricing_refresh import with_reserved
from test_pricing_refresh_azure import PATH as AZURE_PATH
from test_pricing_refresh_azure import item, page
from test_pricing_refresh_gcp import PATH as GCP_PATH
from test_pricing_refresh_gcp import key_file, sku  # noqa: F401 (fixture)

from daemon.analysis.cost import host_price
from daemon.analysis.rules import build_analysis, evaluate
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from pricing.catalog import Catalog
from pricing.detect import Instance
from pricing.refresh import refresh_aws
from pricing.refresh_azure import refresh_azure
from pricing.refresh_gcp import refresh_gcp

GIB = 2**30


def serving(n: int = 61, step: float = 10.0, start: float = 100_000.0) -> list[Sample]:
    """An inference server on GPU 0 of an 8 x A100-40GB host since t=0 (about 28 h)."""
    samples = []
    for i in range(n):
        gpus = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok", 90.0 if g == 0 else 0.0,
                               None, 10 * GIB if g == 0 else 0, 40 * GIB) for g in range(8))
        proc = ProcessSample(42, 0.0, 1, "ann", "vllm serve llama",
                             (GpuUse(0, 10 * GIB, 90.0),))
        samples.append(Sample(start + i * step, i, gpus=gpus, processes=(proc,)))
    return samples


def commitment_advice(catalog: Catalog, provider: str, instance_type: str, region: str):
    price = host_price(Instance(provider, instance_type, region, "on-demand", "test"), catalog)
    found = [r for r in evaluate(build_analysis(serving(), None, price, catalog))
             if r.rule == "steady_inference_commitment"]
    [rec] = found
    return price, rec


def assert_figures(price, rec, years: int, commit: float, source_word: str) -> None:
    assert rec.savings_per_month == pytest.approx((price.per_hour - commit) / 8 * 730)
    assert rec.savings_per_month > 0
    assert rec.evidence["commitment"]["years"] == years
    assert rec.evidence["commitment"]["per_hour"] == pytest.approx(commit)
    assert source_word in rec.evidence["commitment"]["source"]
    assert f"{years}-year commitment at ${commit:,.2f}/h" in rec.summary


def test_aws_reserved_terms(tmp_path, pricing_stub, ec2_client):
    client, stubber = pricing_stub
    listed = with_reserved(price_list_item("p4d.24xlarge", "us-east-1", "21.9600000000",
                                           gpu="8", gpu_memory="320 GiB", vcpu="96",
                                           memory="1152 GiB"),
                           [("1yr", "No Upfront", "15.5000000000", ""),
                            ("3yr", "All Upfront", "0.0000000000", "280000")])
    stubber.add_response("get_products", get_products_response(listed),
                         expected_get_products("p4d.24xlarge", "us-east-1"))
    cache = tmp_path / "prices.json"
    result = refresh_aws(["p4d.24xlarge"], "us-east-1", cache_path=cache,
                         pricing_client=client, ec2_client=ec2_client)
    assert result.price_for("p4d.24xlarge", "commit-3y") is not None, result.errors
    price, rec = commitment_advice(Catalog.load(cache_path=cache), "aws", "p4d.24xlarge",
                                   "us-east-1")
    assert price.per_hour == 21.96
    assert_figures(price, rec, 3, 280000 / (3 * 8760), "Reserved standard) 3yr All Upfront")


def test_azure_reservations(tmp_path):
    size = "Standard_ND96asr_v4"
    items = [item("ND96asr v4", 27.197, product="NDasr A100 v4 Series", sku=size),
             item("ND96asr v4", 150000.0, kind="Reservation", term="1 Year",
                  product="NDasr A100 v4 Series", sku=size),
             item("ND96asr v4", 280000.0, kind="Reservation", term="3 Years",
                  product="NDasr A100 v4 Series", sku=size)]
    cache = tmp_path / "prices.json"
    with LocalServer({AZURE_PATH: [ok(page(items, None))]}) as server:
        result = refresh_azure([size], "eastus", cache_path=cache,
                               base_url=server.url + AZURE_PATH)
    assert result.ok, result.errors
    price, rec = commitment_advice(Catalog.load(cache_path=cache), "azure", size, "eastus")
    assert_figures(price, rec, 3, 280000.0 / (3 * 8760), "Reservation 3 Years")


def test_gcp_committed_use(tmp_path, key_file):  # noqa: F811
    skus = [sku("Nvidia Tesla A100 GPU running in Americas", "OnDemand", 2.933908),
            sku("A2 Instance Core running in Americas", "OnDemand", 0.031611, "CPU"),
            sku("A2 Instance Ram running in Americas", "OnDemand", 0.004237, "RAM"),
            sku("Commitment v1: Nvidia Tesla A100 GPU running in Americas for 1 Year",
                "Commit1Yr", 1.8484, "GPU"),
            sku("Commitment v1: A2 Cpu in Americas for 1 Year", "Commit1Yr", 0.019915, "CPU"),
            sku("Commitment v1: A2 Ram in Americas for 1 Year", "Commit1Yr", 0.002669, "RAM"),
            sku("Commitment v1: Nvidia Tesla A100 GPU running in Americas for 3 Years",
                "Commit3Yr", 1.3203, "GPU"),
            sku("Commitment v1: A2 Cpu in Americas for 3 Years", "Commit3Yr", 0.014225, "CPU"),
            sku("Commitment v1: A2 Ram in Americas for 3 Years", "Commit3Yr", 0.001907, "RAM")]
    cache = tmp_path / "prices.json"
    offers = Catalog.load().filter(provider="gcp", instance_types=["a2-highgpu-8g"])
    with LocalServer({GCP_PATH: [ok(json.dumps({"skus": skus}))]}) as server:
        result = refresh_gcp(offers, "us-central1", key_file=key_file, cache_path=cache,
                             base_url=server.url)
    assert result.ok, result.errors
    price, rec = commitment_advice(Catalog.load(cache_path=cache), "gcp", "a2-highgpu-8g",
                                   "us-central1")
    three = 96 * 0.014225 + 680 * 0.001907 + 8 * 1.3203
    assert price.per_hour == pytest.approx(96 * 0.031611 + 680 * 0.004237 + 8 * 2.933908)
    assert_figures(price, rec, 3, three, "GCP Cloud Billing Catalog API")
