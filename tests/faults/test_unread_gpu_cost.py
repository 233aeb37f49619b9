"""Who pays for GPUs mlcostd cannot read (probe 142 M2 and L9), through a real `mlcostd run
--simulate` and its API.

The simulated host is a p4d.24xlarge (8 GPUs in the catalog) of which NVML lists 2, and GPU 1's
utilization call hangs 3 s at every read once its workload has been seen there. /v1/now's burn
must add up to the host's price (the 6 GPUs NVML does not list are charged, idle and wasted,
and said), and while GPU 1 does not answer, the process holding it keeps paying for it (basis
"unread"), as NVML last saw it hold it."""

from __future__ import annotations

import json
import math
import subprocess

import faultkit
import livedaemon
import pytest
from simhost import poll

CONFIG = {"nvml": {"retry_initial": "0.5s", "retry_max": "1s"}}
HANG_FROM_TICK = 6  # after GPU 1's first readings: its holder is known before it stops answering
FAULTS = f"""
[[faults]]
kind = "hang"
gpu = 1
call = "nvmlDeviceGetUtilizationRates"
seconds = 3.0
at_tick = {HANG_FROM_TICK}
"""


def holds(doc: dict, pid: int, gpu: int) -> dict | None:
    """The process `pid` in /v1/now `doc` where it holds GPU `gpu`, else None."""
    return next((p for p in doc.get("processes") or [] if p.get("pid") == pid
                 and gpu in [g.get("index") for g in p.get("gpus") or []]), None)


@pytest.mark.fault("GPU hung, GPUs not listed",
                   "a p4d with 2 of its 8 GPUs listed; GPU 1's utilization call hangs 3 s")
def test_the_burn_adds_up_to_the_price_and_a_hung_gpus_holder_keeps_paying(tmp_path):
    scenario = faultkit.scenario(tmp_path / "scenario", gpus=2, faults=FAULTS)
    daemon = livedaemon.start(tmp_path / "run", scenario, interval=0.5, config=CONFIG)
    try:
        pid = faultkit.workloads(daemon)["w1"]
        doc = poll(lambda: (lambda d: d if any(
            g.get("index") == 1 and g.get("status") == "timeout" for g in d.get("gpus") or [])
            and d["tick"] > HANG_FROM_TICK else None)(daemon.now()), 60,
            "GPU 1 not answering", explain=daemon.log_tail)
    finally:
        code = daemon.stop()
    assert code == 0, daemon.log_tail()
    assert "Traceback" not in daemon.log()
    burn, price = doc["burn"], doc["price"]
    per_hour, per_gpu = price["per_hour"], price["per_gpu_per_hour"]
    assert price["gpu_count"] == 8 and per_hour > 0
    # M2: every dollar of the host's price is somewhere in the burn
    assert burn["total_per_hour"] == pytest.approx(per_hour)
    assert burn["unseen_gpus"] == 6
    assert burn["unseen_per_hour"] == pytest.approx(6 * per_gpu)
    assert math.fsum([*(g["price_per_hour"] for g in burn["gpus"]),
                      burn["unseen_per_hour"]]) == pytest.approx(per_hour)
    processes = math.fsum(p["burn_per_hour"] or 0.0 for p in doc["processes"])
    assert processes + burn["idle_per_hour"] == pytest.approx(per_hour)
    assert burn["wasted_per_hour"] >= burn["unseen_per_hour"] + per_gpu  # + hung GPU 1, whole
    assert "6 GPUs of p4d.24xlarge's 8 not seen by NVML" in burn["warning"]
    # ...and in the ledger: the run so far charged at the host's price, not at 2/8 of it
    cost = doc["cost"]
    assert cost["total"] == pytest.approx(per_hour * cost["seconds"] / 3600, rel=1e-6)
    # L9: the hung GPU is charged to the process NVML last saw on it, by its memory there
    gpu1 = next(g for g in burn["gpus"] if g["index"] == 1)
    assert gpu1["basis"] == "unread" and gpu1["idle_per_hour"] == pytest.approx(0.0)
    holder = holds(doc, pid, 1)
    assert holder is not None, [(p["pid"], p.get("gpus")) for p in doc["processes"]]
    assert [g["memory_bytes"] for g in holder["gpus"] if g["index"] == 1] == [2 << 30]
    assert holder["burn_per_hour"] == pytest.approx(per_gpu)
    # the report on its store says the part of the burn no GPU row shows
    report = subprocess.run(livedaemon.MLCOSTD + ["report", "--db", str(daemon.db), "--since",
                                                  "10m", "--json"],
                            capture_output=True, text=True, timeout=120, check=True)
    window_burn = json.loads(report.stdout)["burn"]
    assert window_burn["unseen_gpus"] == 6
    assert window_burn["unseen_per_hour"] == pytest.approx(6 * per_gpu)
    assert window_burn["total_per_hour"] == pytest.approx(per_hour)
    text = subprocess.run(livedaemon.MLCOSTD + ["report", "--db", str(daemon.db), "--since",
                                                "10m"],
                          capture_output=True, text=True, timeout=120, check=True).stdout
    assert (f"6 GPUs of p4d.24xlarge's 8 not seen by NVML: ${6 * per_gpu:.2f}/h charged as "
            "idle and wasted") in text, text
