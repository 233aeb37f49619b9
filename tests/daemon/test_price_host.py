"""Pricing the host at start: the catalog the daemon uses includes what `mlcostd prices
--refresh` cached and the extra catalogs; off-cloud hosts are priced from their config; a
price that cannot be trusted today says so, with the command that fixes it."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from simhost import poll

from daemon import config as config_module
from daemon.analysis.cost import HostPrice
from daemon.runtime import price_host
from pricing.cache import CachedPrice, write_cache

P5 = {"provider": "aws", "type": "p5.48xlarge", "region": "us-east-1"}


pytestmark = pytest.mark.usefixtures("fresh_catalog")  # tests/conftest.py


def make_config(tmp_path, **sections):
    sections.setdefault("pricing", {})
    sections["pricing"].setdefault("cache", str(tmp_path / "prices.json"))
    return config_module.from_dict(sections, where="test")


def test_a_refreshed_price_in_the_configured_cache_is_what_the_daemon_charges(tmp_path):
    config = make_config(tmp_path, instance=P5)
    bundled, _, _ = price_host.price_host(config, None, 8)
    assert not bundled.live
    write_cache(tmp_path / "prices.json", [CachedPrice(
        "aws", "us-east-1", "p5.48xlarge", "on-demand", 54.99, time.time() - 60, "test refresh")])
    price, _, recorded = price_host.price_host(config, None, 8)
    assert price.per_hour == 54.99 and price.live and "test refresh" in price.source
    assert price_host.price_warning(price, price_host.load_catalog(config)) is None
    assert recorded["type"] == "p5.48xlarge"


def test_an_extra_catalog_prices_a_type_the_bundled_one_lacks(tmp_path):
    from pricing.catalog import BUNDLED_CATALOG

    sheet = tmp_path / "coreweave.csv"
    first = BUNDLED_CATALOG.read_text().splitlines()[0]  # the bundled format's header
    today = datetime.now(timezone.utc).date().isoformat()
    sheet.write_text(first + "\n" + f"lambda,us-east-1,gpu_8x_h100_test,H100,8,80,208,1800,"
                     f"gpu-hour,2.99,,,,,test sheet,{today},current,\n")
    config = make_config(tmp_path, instance={"provider": "lambda", "type": "gpu_8x_h100_test",
                                             "region": "us-east-1"},
                         pricing={"extra_catalogs": [str(sheet)]})
    price, _, _ = price_host.price_host(config, None, 8)
    assert price.per_hour == pytest.approx(2.99 * 8)
    assert "test sheet" in price.source
    assert price_host.price_warning(price, price_host.load_catalog(config)) is None


def test_off_cloud_per_gpu_hour_and_amortization(tmp_path):
    per_gpu = make_config(tmp_path, instance={"provider": "on-prem",
                                              "price_per_gpu_hour": 1.5,
                                              "hosting_per_month": 730})
    price, _, _ = price_host.price_host(per_gpu, None, 4)
    assert price.per_hour == pytest.approx(4 * 1.5 + 1.0)
    assert price.per_gpu == pytest.approx(1.75)
    assert price.lifecycle == price_host.OWNED_LIFECYCLE  # no spot or commitment advice
    assert "1.5 $/GPU-h x 4 GPU(s)" in price.source and "hosting 730 $/month" in price.source
    assert price_host.price_warning(price, None) is None  # the user's own price

    bought = make_config(tmp_path, instance={"purchase_price": 350400,
                                             "amortization_years": 4})
    price, _, _ = price_host.price_host(bought, None, 8)
    assert price.per_hour == pytest.approx(350400 / (4 * 8760))
    assert "350400 $ over 4 years" in price.source


def test_off_cloud_without_gpus_seen_prices_one_and_says_so(tmp_path):
    config = make_config(tmp_path, instance={"price_per_gpu_hour": 2.0})
    price, _, _ = price_host.price_host(config, None, None)
    assert price.per_hour == 2.0 and "no GPU seen at start" in price.source


def test_a_pre_cut_bundled_price_warns_with_the_refresh_command(tmp_path):
    config = make_config(tmp_path, instance={"provider": "aws", "type": "p4d.24xlarge",
                                             "region": "us-east-1"})
    price, catalog, _ = price_host.price_host(config, None, 8)
    verdict = price_host.price_warning(price, catalog)
    assert verdict is not None and verdict.reason == "predates-cut"
    assert "June 2025" in verdict.message
    assert verdict.refresh_command == ("mlcostd prices --refresh aws --region us-east-1 "
                                       "--instance p4d.24xlarge")
    as_json = price_host.warning_json(verdict)
    assert as_json is not None and as_json["refresh_command"] in as_json["message"]


def test_a_stale_price_is_logged_as_a_warning_on_a_real_host_only(tmp_path, caplog):
    """Every `mlcostd profile --simulate` printed `WARNING price: aws/us-east-1/g5.xlarge
    on-demand price $1.006/h may be wrong: its date is unknown; run mlcostd prices --refresh
    aws ...`: advice to refresh a real cloud's price for a simulated host, in every CI run
    that uses the simulation (probe 150 F9). A simulated instance's price is said at debug
    level; the same instance configured on a real host still warns, and the price carries
    its warning either way (reports, /v1/now, mlcost-top's header)."""
    g5 = {"provider": "aws", "type": "g5.xlarge", "region": "us-east-1"}
    with caplog.at_level("DEBUG", logger=price_host.log.name):
        simulated, _, _ = price_host.price_host(
            make_config(tmp_path), {**g5, "lifecycle": "on-demand", "source": "simulated"}, 1)
    said = [r for r in caplog.records if "may be wrong" in r.getMessage()]
    assert [r.levelname for r in said] == ["DEBUG"], caplog.text
    assert "--refresh aws" in simulated.warning
    caplog.clear()
    with caplog.at_level("DEBUG", logger=price_host.log.name):
        real, _, _ = price_host.price_host(make_config(tmp_path, instance=g5), None, 1)
        # a simulated host whose [instance] the config names is priced as that instance
        configured, _, _ = price_host.price_host(make_config(tmp_path, instance=g5),
                                                 {**g5, "source": "simulated"}, 1)
    said = [r for r in caplog.records if "may be wrong" in r.getMessage()]
    assert [r.levelname for r in said] == ["WARNING", "WARNING"], caplog.text
    assert real.warning == simulated.warning == configured.warning


def test_a_dated_bundled_price_goes_stale_after_90_days(tmp_path):
    config = make_config(tmp_path, instance=P5)
    price, catalog, _ = price_host.price_host(config, None, 8)
    assert price.as_of is not None
    dated = datetime.fromisoformat(price.as_of).timestamp()
    assert price_host.price_warning(price, catalog, now=dated + 30 * 86400) is None
    old = price_host.price_warning(price, catalog, now=dated + 120 * 86400)
    assert old is not None and old.reason == "older-than-threshold"
    assert "120 days old" in old.message


def test_an_old_live_price_is_stale_too(tmp_path):
    fetched = time.time() - 200 * 86400
    price = HostPrice(50.0, 8, "on-demand", "p5.48xlarge", "aws", "us-east-1", "live: test",
                      datetime.fromtimestamp(fetched, timezone.utc).isoformat(), live=True)
    verdict = price_host.price_warning(price, None)
    assert verdict is not None and "200 days old" in verdict.message


def test_a_refresh_after_start_tells_to_restart(tmp_path):
    config = make_config(tmp_path, instance={"provider": "aws", "type": "p4d.24xlarge",
                                             "region": "us-east-1"})
    started, _, _ = price_host.price_host(config, None, 8)
    write_cache(tmp_path / "prices.json", [CachedPrice(
        "aws", "us-east-1", "p4d.24xlarge", "on-demand", 21.96, time.time(), "test refresh")])
    verdict = price_host.price_warning(started, price_host.load_catalog(config))
    assert verdict is not None
    assert "already has $21.96/h" in verdict.message and "restart mlcostd" in verdict.message


def test_no_managed_review_unless_managed_or_asked(tmp_path):
    config = make_config(tmp_path, instance=P5)
    price, catalog, _ = price_host.price_host(config, None, 8)
    assert price_host.managed_review(config, price, catalog) is None
    asked = make_config(tmp_path, instance=P5, pricing={"compare_managed": True})
    review = price_host.managed_review(asked, price, catalog)
    assert review is not None and "--refresh sagemaker" in review["error"]


def test_a_managed_host_is_charged_its_cached_sagemaker_price(tmp_path):
    write_cache(tmp_path / "prices.json", [CachedPrice(
        "aws", "us-east-1", "ml.p4d.24xlarge", "managed:sagemaker:training", 37.688,
        time.time() - 60, "AWS Price List API (AmazonSageMaker)",
        attributes={"platform": "SageMaker", "component": "Training"})])
    config = make_config(tmp_path, instance={"provider": "aws", "type": "ml.p4d.24xlarge",
                                             "region": "us-east-1"})
    price, catalog, _ = price_host.price_host(config, None, None)
    assert price.per_hour == 37.688 and price.gpu_count == 8 and price.live
    assert price.lifecycle == price_host.MANAGED_LIFECYCLE and "SageMaker Training" in price.source
    review = price_host.managed_review(config, price, catalog)
    assert review is not None and review["managed_per_hour"] == 37.688
    assert review["self_managed_per_hour"] == pytest.approx(32.7726)


def test_a_managed_host_without_a_cached_price_says_there_is_none(tmp_path):
    config = make_config(tmp_path, instance={"provider": "aws", "type": "ml.p4d.24xlarge",
                                             "region": "us-east-1"})
    price, _, _ = price_host.price_host(config, None, 8)
    assert price.per_hour == 0 and "no price" in price.source


def test_the_review_of_a_gcp_or_azure_host_compares_its_own_platform(tmp_path):
    a2 = {"provider": "gcp", "type": "a2-highgpu-8g", "region": "us-central1"}
    config = make_config(tmp_path, instance=a2, pricing={"compare_managed": True})
    price, catalog, _ = price_host.price_host(config, None, 8)
    review = price_host.managed_review(config, price, catalog)
    assert review is not None and review["platform"] == "Vertex AI"
    assert review["self_managed_per_hour"] == 29.387
    assert review["markup_pct"] == pytest.approx(15.0)
    assert "estimate" in review["managed_source"]
    nd96 = {"provider": "azure", "type": "Standard_ND96asr_v4", "region": "eastus"}
    config = make_config(tmp_path, instance=nd96, pricing={"compare_managed": True})
    price, catalog, _ = price_host.price_host(config, None, 8)
    review = price_host.managed_review(config, price, catalog)
    assert review is not None and review["platform"] == "Azure ML"
    assert review["managed_per_hour"] == review["self_managed_per_hour"] == 27.197


def test_the_host_is_priced_whichever_pricing_module_was_imported_first(tmp_path):
    """`pricing` loads its names lazily; `pricing.detect` is also a module, and once it was
    imported (in the test order CI met) the package's `detect` was the module, and every
    daemon start failed with "'module' object is not callable". A fresh interpreter that
    imports the module first, then prices a host."""
    import subprocess
    import sys

    from tests.livedaemon import ROOT

    code = ("import pricing.detect, pricing.cache\n"
            "from daemon import config\n"
            "from daemon.runtime.price_host import price_host\n"
            "cfg = config.from_dict({'pricing': {'cache': sys.argv[1]}}, where='test')\n"
            "price, _, recorded = price_host(cfg, {'provider': 'aws', 'type': 'p5.48xlarge',"
            " 'region': 'us-east-1', 'lifecycle': 'on-demand', 'source': 'test'}, 8)\n"
            "print(recorded['type'], price.per_hour > 0)\n")
    done = subprocess.run([sys.executable, "-c", "import sys\n" + code,
                           str(tmp_path / "prices.json")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["p5.48xlarge", "True"]


def test_the_daemon_charges_a_price_per_gpu_hour_for_every_gpu_of_the_host(mlcostd):
    # Pricing runs at start, before the first GPU reading: it once saw no GPU there and
    # priced the 8-GPU demo host as one GPU (on real NVML, an H200 host's log said "no GPU
    # seen at start" a line after NVML had counted its GPU).
    daemon = mlcostd("demo", config={"instance": {"price_per_gpu_hour": 2.0},
                                     "idle": {"host_after": "24h"}})
    # the first tick whose GPU readings came in (on a loaded machine the NVML readers' first
    # answers may miss the first tick; the price is set before either)
    def with_gpus() -> dict | None:
        doc = daemon.now()
        return doc if doc["gpus"] else None

    now = poll(with_gpus, 60, "a tick with the GPUs read")
    price = now["host"]["price"]
    assert len(now["gpus"]) == 8
    assert price["per_hour"] == pytest.approx(16.0) and price["gpu_count"] == 8
    assert "x 8 GPU(s)" in price["source"]
    assert sum(gpu["price_per_hour"] for gpu in now["burn"]["gpus"]) == pytest.approx(16.0)


def test_the_reports_price_warning_says_the_age_in_whole_days_as_the_message(tmp_path):
    """`host.price_warning.age_days` read 120.6 beside a message saying "120 days old" and
    `mlcostd prices --json` saying 120: one number everywhere."""
    config = make_config(tmp_path, instance=P5)
    price, catalog, _ = price_host.price_host(config, None, 8)
    assert price.as_of is not None
    dated = datetime.fromisoformat(price.as_of).timestamp()
    old = price_host.price_warning(price, catalog, now=dated + 120.6 * 86400)
    warning = price_host.warning_json(old)
    assert warning is not None and warning["age_days"] == 120
    assert "120 days old" in warning["message"]
