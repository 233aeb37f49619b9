"""The simulated host after a resize, on the real path: the simulated EC2 (daemon.sim.ec2) runs
AWS-ResizeInstance through its simulated SSM, says how the host boots (daemon.sim.scenario.
booted_as), and a daemon started on that scenario shows the new type's GPUs and prices each of
them at the type's price over its GPU count. (The rebooted demo kept the scenario's 8 A100s on
a 4 x L40S type, and spread the type's price over 8 GPUs: $1.31/h each.)"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from typing import Any

import pytest
from lifeline import kill_group, spawn_options
from simhost import poll

from pricing.catalog import Catalog

pytestmark = pytest.mark.xdist_group("serial")  # a whole demo host: five workloads

EC2_START_S = 120.0  # moto loads its EC2 models first (the demo allows 60 s; a busy CI more)


def said(lines: queue.Queue[Any], timeout: float, what: str) -> dict[str, Any]:
    """The simulated EC2's next JSON line."""
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"the simulated EC2 said nothing in {timeout:g} s: {what}")
    assert line, f"the simulated EC2 ended before it said {what}"
    return json.loads(line)


def test_the_host_booted_after_a_resize_has_the_types_gpus_priced_each_at_its_share(
        mlcostd, tmp_path):
    import boto3

    with open(tmp_path / "ec2.log", "wb") as log:
        ec2 = subprocess.Popen([sys.executable, "-m", "daemon.sim.ec2", "--scenario", "demo"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                               **spawn_options())
    lines: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        assert ec2.stdout is not None
        for line in ec2.stdout:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=read, daemon=True).start()
    try:
        started = said(lines, EC2_START_S, "its endpoint")
        assert started["type"] == "p4d.24xlarge"
        env = started["env"]
        ssm = boto3.client("ssm", region_name=started["region"],
                           endpoint_url=env["AWS_ENDPOINT_URL_SSM"],
                           aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                           aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        ssm.start_automation_execution(
            DocumentName="AWS-ResizeInstance",
            Parameters={"InstanceId": [started["instance_id"]], "InstanceType": ["g6e.12xlarge"]})
        booted = said(lines, 60, "the host booted again")
        assert (booted["booted"], booted["type"]) == (started["instance_id"], "g6e.12xlarge")
    finally:
        assert ec2.stdin is not None
        ec2.stdin.close()  # it serves until its stdin closes
        try:
            ec2.wait(30)
        finally:
            kill_group(ec2.pid)
    # as the demo runs it (mlcost_tui.demo): a file named as the scenario
    host = tmp_path / "demo.toml"
    host.write_text(booted["scenario"])
    daemon = mlcostd(str(host))
    now = daemon.now()
    assert [(g["index"], g["name"]) for g in now["gpus"]] == [
        (i, "NVIDIA L40S") for i in range(4)]
    assert now["gpus"][0]["memory_total_bytes"] == 46068 << 20
    offer = Catalog.load().by_instance("aws", "g6e.12xlarge", "us-east-1")
    assert offer is not None and offer.on_demand is not None
    price = now["price"]
    assert (price["instance_type"], price["gpu_count"]) == ("g6e.12xlarge", 4)
    assert price["per_hour"] == pytest.approx(offer.on_demand.per_hour)
    assert price["per_gpu_per_hour"] == pytest.approx(offer.on_demand.per_hour / 4)
    assert price["per_gpu_per_hour"] == pytest.approx(2.62316)  # not 10.49264 / 8 = 1.31
    # the workloads started again on the four GPUs: the inference server's GPU 4 is gone, it
    # runs on GPU 3, the one with the most memory free, beside the idle notebook
    assert "simulating 'demo': 4 x NVIDIA L40S" in daemon.log()
    pids = {name: int(pid) for name, pid in re.findall(r"([\w-]+) \(pid (\d+)\)", daemon.log())}
    wanted = {pids["train-resnet"]: [0], pids["train-starved"]: [1],
              pids["train-checkpoints"]: [2], pids["notebook"]: [3], pids["serve-bs1"]: [3]}

    def placed() -> dict[int, list[int]] | None:
        found = {p["pid"]: [g["index"] for g in p["gpus"]] for p in daemon.now()["processes"]}
        return found if found == wanted else None

    poll(placed, 60, f"the workloads on their GPUs, {wanted}", explain=daemon.log_tail)
