"""`mlcostd check`: each capability works or says why, with the fix."""

import json
import os
import subprocess
import sys
import time

from daemon.commands.check import check_recorded_stacks
from daemon.sources.sample import ProcessSample, Sample
from daemon.store import facts
from daemon.store.writer import Store

MLCOSTD = [sys.executable, "-m", "daemon"]


def test_check_on_the_simulated_host(tmp_path):
    result = subprocess.run(MLCOSTD + ["check", "--simulate", "idle-host", "--json",
                                       "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60)
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert checks["NVML"]["status"] == "ok" and "NVIDIA A10G" in checks["NVML"]["detail"]
    assert checks["py-spy"]["status"] in ("ok", "warn")
    assert checks["database"]["status"] == "ok"
    for name in ("delay accounting", "pressure (PSI)", "process I/O"):
        check = checks[name]
        assert check["status"] == "ok" or check["fix"], check
    assert result.returncode == 0


def test_check_of_this_hosts_nvml(tmp_path):
    """Without a driver (CI) NVML fails with the fix; on a GPU host it lists the GPUs."""
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        has_nvml = True
    except pynvml.NVMLError:
        has_nvml = False
    result = subprocess.run(MLCOSTD + ["check", "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60)
    if has_nvml:
        assert "[ok  ] NVML: driver" in result.stdout
    else:
        assert result.returncode == 1
        assert "[FAIL] NVML" in result.stdout and "install the NVIDIA driver" in result.stdout


def test_recorded_stack_statuses_are_reported(tmp_path):
    path = tmp_path / "x.db"
    store = Store(str(path))
    now = time.time()
    procs = (ProcessSample(10, now - 5, 1, "alice", "python train.py"),
             ProcessSample(11, now - 5, 1, "bob", "./server"))
    store.write(Sample(ts=now, tick=1, processes=procs))
    facts.write_stack_status(store, 10, now - 5, now, "ok", None)
    facts.write_stack_status(store, 11, now - 5, now, "permission_denied",
                                    "Permission Denied: needs root or CAP_SYS_PTRACE")
    store.close()
    check = check_recorded_stacks(path)
    assert check.status == "warn"
    assert "1 ok, 1 not" in check.detail and "pid 11 (./server): permission_denied" in check.detail
    assert "CAP_SYS_PTRACE" in check.fix
    assert check_recorded_stacks(tmp_path / "none.db") is None


def price_config(tmp_path, instance):
    from daemon import config

    return config.from_dict({"instance": instance,
                             "pricing": {"cache": str(tmp_path / "prices.json")}}, where="test")


def test_a_pre_cut_price_warns_with_the_refresh_command(tmp_path):
    from daemon.commands.check import WARN, check_price
    from pricing.catalog import clear_catalog_cache

    clear_catalog_cache()
    found = check_price(price_config(tmp_path, {"provider": "aws", "type": "p4d.24xlarge",
                                                "region": "us-east-1"}))
    assert found.status == WARN
    assert "$32.7726/h for aws p4d.24xlarge us-east-1" in found.detail
    assert "before the cut" in found.detail
    assert found.fix.startswith("mlcostd prices --refresh aws --region us-east-1 "
                                "--instance p4d.24xlarge")


def test_a_current_price_and_an_off_cloud_price_are_ok(tmp_path):
    import time as time_module

    from daemon.commands.check import OK, check_price
    from pricing.cache import CachedPrice, write_cache
    from pricing.catalog import clear_catalog_cache

    clear_catalog_cache()
    write_cache(tmp_path / "prices.json", [CachedPrice(
        "aws", "us-east-1", "p4d.24xlarge", "on-demand", 21.96, time_module.time(), "refresh")])
    fresh = check_price(price_config(tmp_path, {"provider": "aws", "type": "p4d.24xlarge",
                                                "region": "us-east-1"}))
    assert fresh.status == OK and "$21.9600/h" in fresh.detail
    owned = check_price(price_config(tmp_path, {"price_per_gpu_hour": 1.25}))
    assert owned.status == OK and "off-cloud" in owned.detail


def test_no_price_says_how_to_set_one(tmp_path):
    from daemon.commands.check import WARN, check_price

    found = check_price(price_config(tmp_path, {"provider": "on-prem", "type": "dgx-custom"}))
    assert found.status == WARN and "no price" in found.detail
    assert "price_per_gpu_hour" in found.fix


def test_each_failed_refresh_is_a_warning_with_its_errors(tmp_path):
    from daemon.commands.check import check_refreshes
    from pricing.cache import RefreshRecord, record_refresh

    cache = tmp_path / "prices.json"
    record_refresh(cache, RefreshRecord("azure", time.time() - 7200, False, 0,
                                        ("Azure Retail Prices: HTTP 429 after 3 tries",)))
    record_refresh(cache, RefreshRecord("catalog", time.time(), True, 120))
    found = check_refreshes(cache)
    assert [c.name for c in found] == ["price refresh (azure)"]
    assert found[0].detail.startswith("last azure refresh failed: Azure Retail Prices: HTTP 429")
    assert "2 h ago" in found[0].detail and "--refresh azure" in found[0].fix
    assert check_refreshes(tmp_path / "none.json") == []


def test_check_json_has_the_price_of_the_simulated_host(tmp_path):
    env = {**os.environ, "MLCOST_PRICE_CACHE": str(tmp_path / "prices.json")}
    result = subprocess.run(MLCOSTD + ["check", "--simulate", "demo", "--json",
                                       "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60, env=env)
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert checks["price"]["status"] == "warn", checks["price"]
    assert "p4d.24xlarge" in checks["price"]["detail"]
    assert "mlcostd prices --refresh aws" in checks["price"]["fix"]


def test_a_stale_price_is_said_once_as_its_check(tmp_path):
    """It was logged twice before the checks (the price and the carbon check each priced the
    host), then said again as the price check."""
    env = {**os.environ, "MLCOST_PRICE_CACHE": str(tmp_path / "prices.json")}
    result = subprocess.run(MLCOSTD + ["check", "--simulate", "demo",
                                       "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60, env=env)
    said = result.stdout + result.stderr
    assert said.count("may be wrong") == 1, said
    assert said.count("from before the cut") == 1, said
    assert "[warn] price: $32.7726/h for aws p4d.24xlarge" in result.stdout, said


def test_a_managed_host_without_its_price_says_how_to_fetch_it(tmp_path):
    from daemon.commands.check import WARN, check_price

    found = check_price(price_config(tmp_path, {"provider": "aws", "type": "ml.g5.xlarge",
                                                "region": "us-west-2"}))
    assert found.status == WARN
    assert found.fix.startswith("mlcostd prices --refresh sagemaker --region us-west-2 "
                                "--instance ml.g5.xlarge")


def test_a_price_per_gpu_hour_is_charged_for_every_gpu_nvml_counts(tmp_path):
    config = tmp_path / "mlcostd.toml"
    config.write_text("[instance]\nprice_per_gpu_hour = 2.0\n")
    result = subprocess.run(MLCOSTD + ["check", "--simulate", "demo", "--json", "--config",
                                       str(config), "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60)
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert "8 GPUs" in checks["NVML"]["detail"]
    price = checks["price"]["detail"]  # it was "$2.0000/h ... priced as 1 GPU"
    assert "$16.0000/h" in price and "x 8 GPU(s)" in price, price
