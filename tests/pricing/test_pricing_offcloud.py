from __future__ import annotations

import pytest

from pricing.catalog import load_offers_csv
from pricing.offcloud import energy_per_hour, off_cloud_price


def test_price_per_gpu_hour_times_gpus_plus_energy():
    price = off_cloud_price(8, price_per_gpu_hour=2.0, electricity_per_kwh=0.15,
                            measured_watts=5600)
    assert price.capital_per_hour == 16.0
    assert price.energy_per_hour == pytest.approx(0.84)
    assert price.per_hour == pytest.approx(16.84) and price.per_gpu_hour == pytest.approx(2.105)
    assert price.method == "2 $/GPU-h x 8 GPU(s) + 5600 W at 0.15 $/kWh"


def test_amortization_with_hosting():
    price = off_cloud_price(8, purchase_price=300_000, years=3, hosting_per_month=1460)
    assert price.capital_per_hour == pytest.approx(300_000 / (3 * 8760))
    assert price.hosting_per_hour == pytest.approx(2.0)
    assert price.energy_per_hour == 0.0
    assert price.per_hour == pytest.approx(11.415525 + 2.0, rel=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "either price_per_gpu_hour or purchase_price"),
    ({"price_per_gpu_hour": 1, "purchase_price": 1, "years": 1}, "not both"),
    ({"purchase_price": 1000}, "years > 0"),
    ({"price_per_gpu_hour": -1}, "must be > 0, not -1"),
])
def test_bad_inputs_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        off_cloud_price(1, **kwargs)
    with pytest.raises(ValueError, match="watts"):
        energy_per_hour(-5, 0.1)


def test_coreweave_style_per_gpu_rows_become_host_prices(tmp_path):
    path = tmp_path / "coreweave.csv"
    path.write_text(
        "provider,region,instance_type,accelerator,accelerator_count,accelerator_memory_gib,"
        "vcpus,memory_gib,price_unit,on_demand,spot_low,spot_high,commit_1y,commit_3y,source,"
        "as_of,status,note\n"
        "coreweave,us-east-04,gd-8xh100ib-i128,H100,8,80,128,2048,gpu-hour,6.155,,,,,"
        "price sheet,2026-11-01,current,\n")
    [offer] = load_offers_csv(path)
    assert offer.price_unit == "gpu-hour"
    assert offer.on_demand.per_hour == pytest.approx(49.24)
    assert offer.price_per_accelerator() == pytest.approx(6.155)
    assert "host vCPU and RAM included" in offer.on_demand.note
    path.write_text(path.read_text().replace("gpu-hour", "gpu-month"))
    with pytest.raises(ValueError, match="price_unit 'gpu-month'.*host-hour, gpu-hour"):
        load_offers_csv(path)
