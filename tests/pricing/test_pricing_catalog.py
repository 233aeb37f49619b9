import os
import time

import pytest

from pricing.cache import CachedPrice, write_cache
from pricing.catalog import Catalog, PricingError

# Every row of shared/reference/gpu-prices.md, with its 2026-12 corrections: (provider, region,
# type, accel, n, on-demand, spot low, spot high).
AWS_ROWS = [
    ("p5.48xlarge", "H100", 8, 55.06, 20.99, 30.33),  # after the June 2025 cut
    ("p5en.48xlarge", "H200", 8, 63.296, 27.20, 27.20),  # observed 2026-08
    ("p4d.24xlarge", "A100-40GB", 8, 32.7726, 5.09, 9.61),
    ("p4de.24xlarge", "A100-80GB", 8, 40.96575, 5.84, 7.81),
    ("g6e.xlarge", "L40S", 1, 1.861, 0.787, 1.208),
    ("g6e.2xlarge", "L40S", 1, 2.24208, 0.738, 0.879),
    ("g6e.4xlarge", "L40S", 1, 3.00424, 1.047, 1.176),
    ("g6e.8xlarge", "L40S", 1, 4.52856, 1.280, 1.931),
    ("g6e.12xlarge", "L40S", 4, 10.49264, 4.236, 6.027),
    ("g6e.16xlarge", "L40S", 1, 7.57719, 2.428, 3.376),
    ("g6e.24xlarge", "L40S", 4, 15.06559, 4.112, 5.590),
    ("g6e.48xlarge", "L40S", 8, 30.13118, 6.524, 10.804),
    ("g5.xlarge", "A10G", 1, 1.006, 0.397, 0.418),
    ("g5.2xlarge", "A10G", 1, 1.212, 0.429, 0.607),
    ("g5.4xlarge", "A10G", 1, 1.624, 0.628, 0.671),
    ("g5.8xlarge", "A10G", 1, 2.448, 0.963, 0.969),
    ("g5.12xlarge", "A10G", 4, 5.672, 1.994, 2.732),
    ("g5.24xlarge", "A10G", 4, 8.144, 2.966, 3.842),
    ("g5.48xlarge", "A10G", 8, 16.288, 3.927, 4.626),
    ("g6.xlarge", "L4", 1, 0.8048, 0.388, 0.417),
    ("g6.2xlarge", "L4", 1, 0.9776, 0.369, 0.452),
    ("g6.4xlarge", "L4", 1, 1.3232, 0.513, 0.628),
    ("g6.8xlarge", "L4", 1, 2.0144, 0.901, 0.939),
    ("g6.16xlarge", "L4", 1, 3.3968, 1.272, 1.341),
    ("g6.24xlarge", "L4", 4, 6.6752, 2.397, 3.246),
    ("g6.48xlarge", "L4", 8, 13.3504, 2.963, 4.071),
    ("g4dn.xlarge", "T4", 1, 0.526, 0.185, 0.201),
    ("g4dn.12xlarge", "T4", 4, 3.912, 1.268, 1.515),
    ("g4dn.16xlarge", "T4", 1, 4.352, 1.087, 1.137),
    ("p3.8xlarge", "V100", 4, 12.24, 1.75, 2.55),
    ("inf2.xlarge", "Inferentia2", 1, 0.7582, 0.114, 0.192),
    ("inf2.8xlarge", "Inferentia2", 1, 1.96786, 0.576, 0.580),
    ("inf2.48xlarge", "Inferentia2", 12, 12.98127, 1.677, 1.974),
    ("trn1.2xlarge", "Trainium", 1, 1.34375, 0.341, 0.358),
    ("trn1.32xlarge", "Trainium", 16, 21.5, 2.880, 6.282),
    ("trn1n.32xlarge", "Trainium", 16, 24.78, 5.81, 5.81),
]
OTHER_ROWS = [
    ("gcp", "us-central1", "a3-ultragpu-8g", "H200", 8, 86.760, 32.619),
    ("gcp", "us-east4", "a3-highgpu-8g", "H100", 8, 87.832, 15.809),
    ("gcp", "us-central1", "a2-highgpu-1g", "A100-40GB", 1, 3.673, 1.443),
    ("gcp", "us-central1", "a2-highgpu-8g", "A100-40GB", 8, 29.387, 11.544),
    ("gcp", "us-central1", "a2-ultragpu-8g", "A100-80GB", 8, 40.0, 16.3),  # estimate, not 23.567
    ("gcp", "us-central1", "g2-standard-4", "L4", 1, 0.70683, 0.282),
    ("gcp", "us-central1", "g2-standard-24", "L4", 2, 2.001, 0.799),
    ("gcp", "us-central1", "tpu-v6e-1", "TPU-v6e", 1, 2.70, 0.648),
    ("azure", "eastus", "Standard_ND96amsr_A100_v4", "A100-80GB", 8, 32.77, 3.605),
    ("azure", "eastus", "Standard_ND96asr_v4", "A100-40GB", 8, 27.197, 2.992),
    ("azure", "eastus", "Standard_NC24ads_A100_v4", "A100-80GB", 1, 3.673, 0.444),
    ("azure", "eastus", "Standard_NC96ads_A100_v4", "A100-80GB", 4, 14.692, 1.778),
    ("azure", "eastus", "Standard_NC40ads_H100_v5", "H100", 1, 6.98, None),
    ("azure", "eastus", "Standard_NC4as_T4_v3", "T4", 1, 0.526, 0.0627),
    ("azure", "eastus", "Standard_NC64as_T4_v3", "T4", 4, 4.352, 0.519),
    ("azure", "eastus", "Standard_NV36ads_A10_v5", "A10", 1, 3.20, 0.80),
    ("lambda", "us-east-1", "gpu_1x_h100_pcie", "H100", 1, 2.49, None),
    ("lambda", "us-east-1", "gpu_1x_h100_sxm5", "H100", 1, 3.29, None),
    ("lambda", "us-east-1", "gpu_2x_h100_sxm5", "H100", 2, 6.38, None),
    ("lambda", "us-east-1", "gpu_4x_h100_sxm5", "H100", 4, 12.36, None),
    ("lambda", "us-east-1", "gpu_8x_a100_80gb_sxm4", "A100-80GB", 8, 14.32, None),
    ("lambda", "us-east-1", "gpu_8x_a100", "A100-40GB", 8, 10.32, None),
    ("lambda", "us-east-1", "gpu_1x_a10", "A10", 1, 0.75, None),
]


@pytest.mark.parametrize("itype, accel, count, on_demand, low, high", AWS_ROWS)
def test_every_aws_row_of_the_reference_is_present(itype, accel, count, on_demand, low, high):
    offer = Catalog.load().by_instance("aws", itype, "us-east-1")
    assert offer is not None
    assert (offer.accelerator, offer.accelerator_count) == (accel, count)
    assert offer.price("on-demand").per_hour == pytest.approx(on_demand)
    spot = offer.price("spot")
    assert (spot.low, spot.high) == (pytest.approx(low), pytest.approx(high))
    assert low <= spot.per_hour <= high


@pytest.mark.parametrize("provider, region, itype, accel, count, on_demand, spot", OTHER_ROWS)
def test_every_gcp_azure_lambda_row_is_present(provider, region, itype, accel, count,
                                               on_demand, spot):
    offer = Catalog.load().by_instance(provider, itype, region)
    assert offer is not None
    assert (offer.accelerator, offer.accelerator_count) == (accel, count)
    assert offer.on_demand.per_hour == pytest.approx(on_demand)
    if spot is None:
        assert offer.spot is None
    else:
        assert offer.spot.per_hour == pytest.approx(spot)


def test_gcp_vm_and_gpu_parts_are_added():
    offer = Catalog.load().by_instance("gcp", "g2-standard-4")
    assert offer.on_demand.per_hour == pytest.approx(0.14679 + 0.56004)
    assert offer.on_demand.per_hour == pytest.approx(0.70683)
    assert "0.14679" in offer.on_demand.source and "0.56004" in offer.on_demand.source


def test_known_bad_rows_are_left_out():
    catalog = Catalog.load()
    assert catalog.by_instance("azure", "Standard_ND96isr_H100_v5") is None
    assert catalog.by_instance("aws", "p5e.48xlarge") is None
    for offer in catalog:
        for price in (offer.on_demand, offer.spot, offer.commit_1y):
            assert price is None or 0 < price.per_hour < 700.0, offer
        assert offer.on_demand is not None, offer  # nothing without an on-demand price


def test_bundled_prices_say_source_and_unknown_date():
    price = Catalog.load().by_instance("aws", "g5.xlarge").on_demand
    assert price.live is False and price.as_of is None and price.age_s is None
    assert "SkyPilot" in price.source
    assert price.describe() == "bundled, catalog date unknown"


def test_every_bundled_row_carries_a_source_and_an_as_of():
    import csv

    from pricing.catalog import BUNDLED_CATALOG, ROW_STATUSES

    rows = list(csv.DictReader(BUNDLED_CATALOG.read_text().splitlines()))
    assert rows and all(r["source"].strip() and r["as_of"].strip() for r in rows)
    assert all(r["status"] in ROW_STATUSES for r in rows)


def test_rows_before_the_june_2025_aws_cut_are_marked_or_updated():
    catalog = Catalog.load()
    for itype in ("p4d.24xlarge", "p4de.24xlarge"):
        price = catalog.by_instance("aws", itype).on_demand
        assert price.status == "pre-cut" and "June 2025" in price.note
        assert price.describe() == "bundled, catalog date unknown, predates a price cut"
    p5 = catalog.by_instance("aws", "p5.48xlarge").on_demand
    assert p5.status == "current" and p5.as_of.date().isoformat() == "2025-09-01"
    assert p5.describe().startswith("bundled, as of 2025-09-01, ")
    assert p5.per_hour < 60  # not the 98.32 launch price
    p5en = catalog.by_instance("aws", "p5en.48xlarge").on_demand
    assert p5en.per_hour == 63.296 and p5en.as_of.year == 2026


def test_gcp_a100_80gb_host_is_not_cheaper_than_the_40gb_one():
    catalog = Catalog.load()
    big = catalog.by_instance("gcp", "a2-ultragpu-8g", "us-central1")
    small = catalog.by_instance("gcp", "a2-highgpu-8g", "us-central1")
    assert big.on_demand.per_hour > small.on_demand.per_hour
    assert big.on_demand.status == "estimate" and "23.567" in big.on_demand.source


def test_the_bundled_catalog_passes_every_sanity_rule():
    catalog = Catalog.load()
    assert catalog.rejections == ()
    from pricing.sanity import check_offers

    kept, rejected = check_offers(catalog.offers)
    assert len(kept) == len(catalog) and rejected == []


def test_commitment_prices_by_term(tmp_path):
    cache = tmp_path / "c.json"
    now = time.time()
    write_cache(cache, [
        CachedPrice("aws", "us-east-1", "g5.xlarge", "commit-1y", 0.634, now, "AWS SP 1y"),
        CachedPrice("aws", "us-east-1", "g5.xlarge", "commit-3y", 0.435, now, "AWS SP 3y"),
    ])
    offer = Catalog.load(cache_path=cache).by_instance("aws", "g5.xlarge", "us-east-1")
    assert offer.commitment(1).per_hour == 0.634 and offer.price("commit-1y").live
    assert offer.commitment(3).per_hour == 0.435 and offer.price("commit-3y").kind == "commit-3y"
    assert set(offer.commitments()) == {1, 3}
    with pytest.raises(ValueError, match="1 or 3 years, not 2"):
        offer.commitment(2)


def test_well_known_hardware_specs():
    catalog = Catalog.load()
    specs = {(o.instance_type): (o.vcpus, o.memory_gib) for o in catalog.filter(provider="aws")}
    assert specs["p4d.24xlarge"] == (96, 1152)
    assert specs["p5.48xlarge"] == (192, 2048)
    assert specs["g5.xlarge"] == (4, 16)
    assert specs["g6e.xlarge"] == (4, 32)
    assert all(o.vcpus and o.memory_gib for o in catalog)


def test_lookups_are_case_insensitive_and_accept_azure_short_names():
    catalog = Catalog.load()
    assert catalog.by_instance("AWS", "P4D.24XLARGE").instance_type == "p4d.24xlarge"
    short = catalog.by_instance("azure", "nc24ads_a100_v4")
    assert short.instance_type == "Standard_NC24ads_A100_v4"
    assert catalog.by_instance("aws", "g5.xlarge", region="eu-west-1") is None


def test_unknown_instance_error_names_what_is_known():
    with pytest.raises(PricingError) as excinfo:
        Catalog.load().require_instance("aws", "p9.48xlarge")
    message = str(excinfo.value)
    assert message.startswith("no price for aws/p9.48xlarge; known AWS GPU types: ")
    assert "p5.48xlarge" in message and "g5.xlarge" in message
    with pytest.raises(PricingError, match="known in: us-east-1"):
        Catalog.load().require_instance("aws", "g5.xlarge", region="eu-west-1")
    with pytest.raises(PricingError, match="known providers: aws, azure, gcp, lambda"):
        Catalog.load().require_instance("oracle", "BM.GPU4.8")


def test_by_accelerator_exact_then_prefix():
    catalog = Catalog.load()
    assert {o.accelerator for o in catalog.by_accelerator("a100")} == {"A100-40GB", "A100-80GB"}
    assert {o.accelerator for o in catalog.by_accelerator("a100-80gb")} == {"A100-80GB"}
    h100 = catalog.by_accelerator("H100")
    assert {o.provider for o in h100} == {"aws", "gcp", "azure", "lambda"}


def test_price_by_lifecycle_and_per_gpu():
    offer = Catalog.load().by_instance("aws", "p4d.24xlarge")
    assert offer.price("on-demand").kind == "on-demand"
    assert offer.price("spot").kind == "spot"
    assert offer.price("commit-1y") is None  # not known for the bundled rows
    assert offer.commitments() == {}
    assert offer.price_per_accelerator("on-demand") == pytest.approx(32.7726 / 8)
    with pytest.raises(ValueError, match="on-demand, spot, commit-1y, commit-3y"):
        offer.price("reserved")


def test_cheapest_fitting_20_gib_single_gpu_on_aws():
    fits = Catalog.load().cheapest_fitting(20, provider="aws")
    names = [o.instance_type for o in fits]
    assert names[0] == "g6.xlarge"  # L4, 24 GiB >= 20 GiB + 10 %
    assert "g5.xlarge" in names and "g6e.xlarge" in names
    assert "inf2.xlarge" not in names  # not a GPU
    assert all(o.accelerator_memory_gib >= 22 for o in fits)
    prices = [o.on_demand.per_hour for o in fits]
    assert prices == sorted(prices)
    assert len(fits) == 10


def test_cheapest_fitting_more_memory_picks_l40s():
    fits = Catalog.load().cheapest_fitting(30, provider="aws", limit=3)
    assert [o.instance_type for o in fits][0] == "g6e.xlarge"


def test_cheapest_fitting_by_spot_and_gpu_count():
    catalog = Catalog.load()
    eight = catalog.cheapest_fitting(70, gpu_count=8, provider="aws")
    assert [o.instance_type for o in eight] == ["p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"]
    spot = catalog.cheapest_fitting(70, gpu_count=8, provider="aws", spot=True)
    assert spot[0].instance_type == "p4de.24xlarge"
    assert [o.spot.per_hour for o in spot] == sorted(o.spot.per_hour for o in spot)
    lambda_spot = catalog.cheapest_fitting(10, provider="lambda", spot=True)
    assert lambda_spot == []  # Lambda has no spot market
    assert catalog.cheapest_fitting(200) == []
    anywhere = catalog.cheapest_fitting(20, limit=1)
    assert anywhere[0].instance_type == "g2-standard-4"
    with_tpu = catalog.cheapest_fitting(20, provider="gcp", gpus_only=False, limit=20)
    assert "tpu-v6e-1" in [o.instance_type for o in with_tpu]


def test_live_cache_overlays_bundled_prices(tmp_path):
    cache = tmp_path / "prices.json"
    now = time.time()
    write_cache(cache, [
        CachedPrice("aws", "us-east-1", "g5.xlarge", "on-demand", 1.1, now - 3, "test API"),
        CachedPrice("aws", "us-east-1", "g5.xlarge", "spot", 0.45, now - 3, "test spot",
                    low=0.4, high=0.5),
        CachedPrice("aws", "us-west-2", "g5.xlarge", "on-demand", 1.2, now - 7200, "test API"),
        CachedPrice("aws", "us-east-1", "g7.xlarge", "on-demand", 2.0, now, "test API",
                    attributes={"gpu": "1", "gpuMemory": "96 GiB", "vcpu": "4",
                                "memory": "32 GiB"}),
    ])
    catalog = Catalog.load(cache_path=cache)
    offer = catalog.by_instance("aws", "g5.xlarge", "us-east-1")
    assert offer.on_demand.per_hour == 1.1 and offer.on_demand.live
    assert 2.5 <= offer.on_demand.age_s < 30
    assert offer.on_demand.describe() == "live, 3 s old"
    assert (offer.spot.low, offer.spot.high) == (0.4, 0.5)
    assert offer.vcpus == 4 and offer.accelerator == "A10G"  # hardware kept
    west = catalog.by_instance("aws", "g5.xlarge", "us-west-2")
    assert west.on_demand.describe() == "live, 2 h old" and west.spot is None
    new = catalog.by_instance("aws", "g7.xlarge")
    assert new.accelerator_memory_gib == 96 and new.accelerator_count == 1
    other = catalog.by_instance("aws", "g6.xlarge")
    assert other.on_demand.describe() == "bundled, catalog date unknown"
    assert Catalog.load(cache_path=cache) is catalog  # cached while the file is unchanged
    assert Catalog.load() is not catalog


def test_corrupt_or_missing_cache_reads_as_bundled(tmp_path):
    bad = tmp_path / "prices.json"
    bad.write_text("{not json")
    assert not any(o.on_demand.live for o in Catalog.load(cache_path=bad))
    assert len(Catalog.load(cache_path=tmp_path / "missing.json")) == len(Catalog.load())


def test_pricing_imports_neither_daemon_nor_tui():
    import pathlib
    import re

    import pricing

    for path in pathlib.Path(pricing.__path__[0]).glob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(from|import)\s+(daemon|mlcost_tui)\b", text, re.M), path


def test_best_commitment_is_the_cheapest_term(tmp_path):
    cache = tmp_path / "c.json"
    write_cache(cache, [
        CachedPrice("aws", "us-east-1", "g6.xlarge", "commit-1y", 0.51, time.time(), "1y"),
        CachedPrice("aws", "us-east-1", "g6.xlarge", "commit-3y", 0.35, time.time(), "3y")])
    offer = Catalog.load(cache_path=cache).by_instance("aws", "g6.xlarge")
    years, price = offer.best_commitment()
    assert years == 3 and price.per_hour == 0.35
    assert Catalog.load().by_instance("aws", "g6.xlarge").best_commitment() is None


@pytest.mark.parametrize(("gpu_name", "expected"), [
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("A100-SXM4-40GB", "A100-40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100-40GB"), ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 NVL", "H100"), ("NVIDIA H200", "H200"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA A10G", "A10G"), ("NVIDIA A10", "A10"), ("NVIDIA L4", "L4"), ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-16GB", "V100"), ("A100-40GB", "A100-40GB"), ("a100", "A100")])
def test_nvml_gpu_names_read_as_catalog_accelerators(gpu_name, expected):
    from pricing.catalog import catalog_accelerator

    assert catalog_accelerator(gpu_name) == expected


def test_a_cache_or_catalog_path_that_is_no_regular_file_is_neither_waited_on_nor_replaced(
        tmp_path):
    from hostile_http import finishes_within

    from pricing.cache import read_cache
    from pricing.catalog import load_offers_csv
    from pricing.small_file import SmallFileError

    fifo = tmp_path / "prices.json"
    os.mkfifo(fifo)  # no writer: an open that waits for one never returns
    done, outcome = finishes_within(10, read_cache, fifo)
    assert done and outcome == [], outcome  # a cache that is not one holds no prices
    done, outcome = finishes_within(10, load_offers_csv, fifo)
    assert done and isinstance(outcome, SmallFileError), outcome
    assert "is not a regular file" in str(outcome)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    price = CachedPrice("lambda", "us-east-1", "gpu_1x_h100_pcie", "on-demand", 2.49, 1.0e9,
                        "a test")
    for path in (fifo, link):  # (a refresh replaced a FIFO or /dev/zero with its JSON)
        with pytest.raises(OSError, match="is not a regular file"):
            write_cache(path, [price])
    assert fifo.is_fifo() and link.is_symlink() and not (tmp_path / "elsewhere.json").exists()
