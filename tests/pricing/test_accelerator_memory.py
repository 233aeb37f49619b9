"""Every accelerator's memory in the catalog is the vendor's nominal figure, read as GiB the
way the README says ("an 80GB H100 holds 80 GiB"), whichever way its source stated it.

Probe 141 L14: `mlcostd prices --fits` gave the 24 GB L4 and A10G as 22.4 GiB (and the 48 GB
L40S as 45) beside the 80 GB H100 as 80: the sources give 80 GiB as 81920 MiB but 24 GB as
22888 MiB (24e9 bytes), and the catalog had copied each reading, so a job that fits a 24 GB
card was told it does not."""

from __future__ import annotations

import json

import pytest

from pricing.cache import CachedPrice
from pricing.catalog import load_bundled_offers, overlay_live
from pricing.offer import nominal_gib
from pricing.refresh_catalog import parse_vms_csv

# The memory each vendor's datasheet gives per accelerator, in its GB (or GiB, for HBM sold in
# binary sizes): NVIDIA's datasheets, Google's TPU system architecture pages, AWS's Neuron docs.
NOMINAL_GB = {"A10": 24, "A10G": 24, "L4": 24, "L40S": 48, "T4": 16, "V100": 16,
              "A100-40GB": 40, "A100-80GB": 80, "H200": 141,
              "TPU-v5e": 16, "TPU-v5p": 95, "TPU-v6e": 32,
              "Inferentia2": 32, "Trainium": 32, "Trainium2": 96}
H100_GB = {80, 94}  # H100 SXM/PCIe 80 GB; H100 NVL 94 GB


def test_every_accelerator_of_the_catalog_is_given_at_its_vendors_nominal_figure():
    offers = load_bundled_offers()
    assert len(offers) > 50
    wrong = sorted({(o.accelerator, o.accelerator_memory_gib) for o in offers
                    if o.accelerator_memory_gib not in (
                        H100_GB if o.accelerator == "H100" else {NOMINAL_GB.get(o.accelerator)})})
    assert wrong == [], f"not the vendor's nominal GB (add a new accelerator above): {wrong}"
    # the same card is the same figure everywhere (L4 on AWS, GCP and Azure alike)
    seen: dict[str, set[float]] = {}
    for o in offers:
        seen.setdefault(o.accelerator, set()).add(o.accelerator_memory_gib)
    assert all(len(v) == 1 for k, v in seen.items() if k != "H100"), seen


def test_fits_gives_a_24_gb_card_as_24_as_it_gives_an_80_gb_card_as_80(tmp_path, capsys):
    from pricing.cli import main

    assert main(["--fits", "21", "--gpus", "1", "--json", "--limit", "50",
                 "--cache", str(tmp_path / "none.json")]) == 0
    rows = json.loads(capsys.readouterr().out)["offers"]
    memory = {r["accelerator"]: r["accelerator_memory_gib"] for r in rows}
    assert memory["L4"] == memory["A10G"] == 24 and memory["L40S"] == 48, memory
    assert memory["H100"] == 80


@pytest.mark.parametrize(("mib", "gib"), [
    (22888, 24),  # AWS/SkyPilot's A10G and L4: 24e9 bytes
    (45776, 48),  # L40S: 48e9 bytes
    (81920, 80), (40960, 40), (16384, 16), (144384, 141),  # binary sizes
    (98304, 96),
])
def test_a_sources_mib_is_read_as_the_nominal_figure(mib, gib):
    assert nominal_gib(mib) == gib


def test_a_refreshed_catalog_gives_the_nominal_figure_whichever_way_its_source_says_it():
    info = ("\"{'Gpus': [{'Name': 'L4', 'Manufacturer': 'NVIDIA', 'Count': 1, "
            "'MemoryInfo': {'SizeInMiB': 22888}}], 'TotalGpuMemoryInMiB': 22888}\"")
    csv = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,"
           "Region,AvailabilityZone,GpuInfo\n"
           f"g6.xlarge,L4,1,4,16,0.8048,0.39,us-east-1,us-east-1a,{info}\n"
           "g5.xlarge,A10G,1,4,16,1.006,0.41,us-east-1,us-east-1a,\n"  # no GpuInfo: our table
           "g6e.xlarge,L40S,1,4,32,1.861,0.8,us-east-1,us-east-1a,\n")
    prices = parse_vms_csv("aws", csv, ["us-east-1"], 10.0, "u")
    memory = {p.instance_type: p.attributes["gpuMemory"] for p in prices}
    assert memory == {"g6.xlarge": "24 GiB", "g5.xlarge": "24 GiB", "g6e.xlarge": "48 GiB"}
    # a type the bundled catalog does not list, described by its live price's attributes
    live = CachedPrice("aws", "us-east-1", "g6.99xlarge", "on-demand", 9.0, 10.0, "test",
                       attributes={"gpu": "4", "gpuModel": "L4", "gpuMemory": "89.4 GiB"})
    offer = next(o for o in overlay_live(load_bundled_offers(), [live])
                 if o.instance_type == "g6.99xlarge")
    assert offer.accelerator_memory_gib == 24  # 4 x 22888 MiB, as AWS lists it
