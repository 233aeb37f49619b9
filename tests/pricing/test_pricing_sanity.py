"""The sanity rules on rows shaped like the known-bad ones of the source catalogs."""

from __future__ import annotations

import pytest

from pricing.catalog import Catalog, load_offers_csv
from pricing.sanity import PER_GPU_HOUR_BANDS, band_for, check_offers

HEADER = ("provider,region,instance_type,accelerator,accelerator_count,accelerator_memory_gib,"
          "vcpus,memory_gib,on_demand,spot_low,spot_high,commit_1y,source,as_of\n")
# The rows of the SkyPilot catalogs that shared/reference/gpu-prices.md calls wrong.
KNOWN_BAD = HEADER + (
    "gcp,us-central1,a2-highgpu-8g,A100-40GB,8,40,96,680,29.387,11.544,11.544,,s,x\n"
    "gcp,us-central1,a2-ultragpu-8g,A100-80GB,8,80,96,1360,23.567,16.088,16.088,,s,x\n"
    "gcp,us-central1,a3-highgpu-8g,H100,8,80,208,1872,700.0,700.0,700.0,,s,x\n"
    "azure,eastus,Standard_ND96isr_H100_v5,H100,12,80,96,1900,98.32,98.32,98.32,,s,x\n"
    "aws,ca-central-1,p5.48xlarge,H100,8,80,192,2048,60.0,60.0,60.0,,s,x\n"
    "aws,us-east-1,g5.xlarge,A10G,1,22.4,4,16,0,0.4,0.4,,s,x\n"
    "aws,us-east-1,g6.xlarge,L4,1,22.4,4,16,0.8048,0.39,0.41,0.9,s,x\n"
)


@pytest.fixture
def checked(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(KNOWN_BAD)
    return check_offers(load_offers_csv(path))


def reasons(rejected, itype):
    return {r.rule: r for r in rejected if r.instance_type == itype}


def test_an_80gb_host_cheaper_than_the_40gb_sibling_is_left_out(checked):
    kept, rejected = checked
    names = [o.instance_type for o in kept]
    assert "a2-highgpu-8g" in names and "a2-ultragpu-8g" not in names
    rule = reasons(rejected, "a2-ultragpu-8g")["sibling"]
    assert rule.describe() == (
        "gcp/us-central1/a2-ultragpu-8g: row $23.567/h left out (sibling): 8 x A100-80GB at "
        "$23.567/h is cheaper than a2-highgpu-8g (8 x A100-40GB, no more CPU or RAM) at "
        "$29.387/h; the bigger host's price is suspect")


def test_placeholder_700_is_outside_the_band(checked):
    kept, rejected = checked
    assert "a3-highgpu-8g" not in [o.instance_type for o in kept]
    assert "outside the plausible band $1.5-16" in reasons(rejected, "a3-highgpu-8g")["band"].reason


def test_known_bad_azure_row_and_spot_placeholder_and_zero(checked):
    kept, rejected = checked
    by_name = {o.instance_type: o for o in kept}
    assert "Standard_ND96isr_H100_v5" not in by_name
    assert "12 GPUs" in reasons(rejected, "Standard_ND96isr_H100_v5")["known-bad"].reason
    p5 = by_name["p5.48xlarge"]
    assert p5.on_demand.per_hour == 60.0 and p5.spot is None  # spot unknown, row kept
    assert "not below on-demand" in reasons(rejected, "p5.48xlarge")["spot-not-below-on-demand"].reason
    g5 = by_name["g5.xlarge"]
    assert g5.on_demand is None and g5.spot.per_hour == 0.4
    assert reasons(rejected, "g5.xlarge")["non-positive"].per_hour == 0
    g6 = by_name["g6.xlarge"]
    assert g6.commit_1y is None  # a commitment above on-demand is a unit error
    assert "commitment-not-below-on-demand" in reasons(rejected, "g6.xlarge")


def test_more_gpus_with_less_cpu_may_be_cheaper():
    # g4dn.12xlarge (4 T4, 48 vCPU) is cheaper than g4dn.16xlarge (1 T4, 64 vCPU): real AWS prices.
    catalog = Catalog.load()
    assert catalog.by_instance("aws", "g4dn.12xlarge").on_demand.per_hour < \
        catalog.by_instance("aws", "g4dn.16xlarge").on_demand.per_hour
    assert not [r for r in catalog.rejections if r.instance_type.startswith("g4dn")]


def test_every_bundled_accelerator_has_a_band_that_holds_its_rows():
    catalog = Catalog.load()
    for offer in catalog:
        low, high = band_for(offer.accelerator)
        assert low <= offer.price_per_accelerator() <= high, offer.instance_type
    assert all(low < high for low, high in PER_GPU_HOUR_BANDS.values())


def test_catalog_load_applies_the_rules_to_extra_catalogs(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(KNOWN_BAD.replace("gcp,us-central1,a2-highgpu-8g", "gcp,us-west1,a2-highgpu-8g"))
    catalog = Catalog.load(extra_catalogs=[path])
    assert catalog.by_instance("azure", "ND96isr_H100_v5") is None
    rules = {(r.instance_type, r.rule) for r in catalog.rejections}
    assert ("a3-highgpu-8g", "band") in rules and ("Standard_ND96isr_H100_v5", "known-bad") in rules
    # us-central1 now has the bundled a2-highgpu-8g (29.387) as the sibling
    assert ("a2-ultragpu-8g", "sibling") in rules
