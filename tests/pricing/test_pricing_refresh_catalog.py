"""SkyPilot vms.csv refresh: a local server serving files shaped like the public catalogs."""

from __future__ import annotations

import pytest
from local_http import LocalServer, ok

from pricing.cache import CachedPrice, read_cache, write_cache
from pricing.catalog import Catalog
from pricing.refresh_catalog import parse_vms_csv, refresh_catalog

HEADER = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,"
          "Region,AvailabilityZone,GpuInfo\n")
A100_40 = "\"{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 8.0, 'MemoryInfo': {'SizeInMiB': 40960}}], 'TotalGpuMemoryInMiB': 327680}\""
A100_80 = "\"{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 8.0, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 655360}\""
AWS_CSV = HEADER + (
    f"p4d.24xlarge,A100,8,96,1152,21.96,5.09,us-east-1,us-east-1a,{A100_40}\n"
    f"p4d.24xlarge,A100,8,96,1152,21.96,9.61,us-east-1,us-east-1b,{A100_40}\n"
    # duplicated under two names, and a zone whose spot is the on-demand placeholder
    f"p4de.24xlarge,A100,8,96,1152,27.45,5.84,us-east-1,us-east-1a,{A100_80}\n"
    f"p4de.24xlarge,A100-80GB,8,96,1152,27.45,7.81,us-east-1,us-east-1c,{A100_80}\n"
    "g5.xlarge,A10G,1,4,16,1.006,,us-east-1,us-east-1a,\n"  # blank spot
    "g5.xlarge,A10G,1,4,16,1.006,0.41,eu-west-1,eu-west-1a,\n"  # another region
    "p5.48xlarge,H100,8,192,2048,55.04,55.04,us-east-1,us-east-1a,\n"  # spot = placeholder
    "m5.large,,,2,8,0.096,0.04,us-east-1,us-east-1a,\n"  # CPU only
)
GCP_CSV = HEADER + (
    "a2-highgpu-8g,A100,8,96,680,8.01,2.5,us-central1,us-central1-a,\n"
    ",A100,8,,,21.37,9.0,us-central1,us-central1-a,\n"
    "g2-standard-4,L4,1,4,16,0.14679,0.0587,us-central1,us-central1-a,\n"
    ",L4,1,,,0.56004,0.2240,us-central1,us-central1-a,\n"
    ",L4,8,,,4.48032,1.792,us-central1,us-central1-a,\n"
    "a3-highgpu-8g,H100,8,208,1872,12.0,4.0,us-central1,us-central1-b,\n"
    ",H100,8,,,700.0,700.0,us-central1,us-central1-b,\n"  # not offered
)
LAMBDA_CSV = HEADER + "gpu_1x_h100_pcie,H100,1,26,200,2.49,,us-east-1,us-east-1,\n"


def by(prices, itype, kind, region=None):
    return next(p for p in prices if p.instance_type == itype and p.kind == kind
                and (region is None or p.region == region))


def test_aws_zones_fold_into_one_offer_and_duplicates_keep_the_specific_name():
    prices = parse_vms_csv("aws", AWS_CSV, ["us-east-1"], 10.0, "u")
    assert by(prices, "p4d.24xlarge", "on-demand").per_hour == 21.96
    spot = by(prices, "p4d.24xlarge", "spot")
    assert (spot.low, spot.high) == (5.09, 9.61)
    p4de = [p for p in prices if p.instance_type == "p4de.24xlarge"]
    assert len(p4de) == 2 and {p.attributes["gpuModel"] for p in p4de} == {"A100-80GB"}
    assert by(prices, "p4d.24xlarge", "on-demand").attributes["gpuModel"] == "A100-40GB"
    assert [p.kind for p in prices if p.instance_type == "g5.xlarge"] == ["on-demand"]
    assert not any(p.instance_type == "m5.large" for p in prices)
    assert not any(p.region == "eu-west-1" for p in prices)


def test_gcp_host_price_is_the_vm_row_plus_the_gpu_row_for_that_count():
    prices = parse_vms_csv("gcp", GCP_CSV, ["us-central1"])
    assert by(prices, "g2-standard-4", "on-demand").per_hour == pytest.approx(0.70683)
    assert by(prices, "a2-highgpu-8g", "on-demand").per_hour == pytest.approx(29.38)
    assert by(prices, "a2-highgpu-8g", "spot").per_hour == pytest.approx(11.5)
    assert not any(p.instance_type == "a3-highgpu-8g" for p in prices)  # GPUs at 700.0


def test_not_a_vms_csv_is_refused():
    with pytest.raises(ValueError, match="not a SkyPilot vms.csv"):
        parse_vms_csv("aws", "name,price\nx,1\n")


def test_refresh_every_cloud_then_the_sanity_rules_apply(tmp_path):
    cache = tmp_path / "prices.json"
    routes = {"/v7/aws/vms.csv": [ok(AWS_CSV)], "/v7/gcp/vms.csv": [ok(GCP_CSV)],
              "/v7/lambda/vms.csv": [ok(LAMBDA_CSV)], "/v6/azure/vms.csv": [(404, "nope", {})]}
    with LocalServer(routes) as server:
        result = refresh_catalog(["aws", "gcp", "azure", "lambda"], cache_path=cache,
                                 base_url=server.url)
    assert set(result.errors) == {"azure"}
    assert "HTTP 404" in result.errors["azure"][0]
    assert "previous azure prices kept" in result.errors["azure"][0]
    cached = read_cache(cache)
    assert {p.provider for p in cached} == {"aws", "gcp", "lambda"}
    assert all(p.url.startswith(server.url) and p.fetched_at > 0 for p in cached)
    catalog = Catalog.load(cache_path=cache)
    p5 = catalog.by_instance("aws", "p5.48xlarge", "us-east-1")
    assert p5.on_demand.per_hour == 55.04 and p5.on_demand.live
    assert p5.spot is None  # spot = on-demand placeholder dropped
    assert any(r.instance_type == "p5.48xlarge" and r.rule == "spot-not-below-on-demand"
               for r in catalog.rejections)
    g2 = catalog.by_instance("gcp", "g2-standard-4", "us-central1")
    assert g2.on_demand.live and g2.on_demand.per_hour == pytest.approx(0.70683)


def test_a_failed_refresh_keeps_the_previous_prices(tmp_path):
    cache = tmp_path / "prices.json"
    write_cache(cache, [CachedPrice("lambda", "us-east-1", "gpu_1x_h100_pcie", "on-demand",
                                    2.49, 5.0, "earlier")])
    with LocalServer({"/v7/lambda/vms.csv": [ok("<html>rate limited</html>")]}) as server:
        result = refresh_catalog(["lambda"], cache_path=cache, base_url=server.url)
    assert "not a SkyPilot vms.csv" in result.errors["lambda"][0]
    assert [(p.source, p.fetched_at) for p in read_cache(cache)] == [("earlier", 5.0)]


def test_unknown_cloud_is_named():
    result = refresh_catalog(["oracle"], cache_path="/nonexistent/c.json")
    assert result.errors == {"oracle": [
        "no SkyPilot catalog for 'oracle'; use one of aws, gcp, azure, lambda"]}
