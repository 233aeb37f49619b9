"""The demo's workloads, observed the way the daemon will observe them."""

from __future__ import annotations

import time

import pynvml
import pytest

from daemon.sim import nvml as sim_nvml
from daemon.sim import scenario
from tests.simhost import poll

# The simulated GPUs' utilization here is the duty cycle of real workload processes, which
# stretches when other workloads crowd the CPUs: under pytest-xdist these modules run one after
# another in one worker (tests/conftest.py pytest_xdist_make_scheduler).
pytestmark = pytest.mark.xdist_group("serial")

GIB = 1 << 30


def _read_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes")).split()[1])


@pytest.fixture(scope="module")
def demo():
    running = scenario.start(scenario.load("demo"))
    sim_nvml.install(running.state_dir)
    pynvml.nvmlInit()
    yield running
    sim_nvml.uninstall()
    running.stop()


def _gpu_reading() -> tuple[dict[int, int], dict[int, int]]:
    """Each GPU's utilization and its processes' SM share over the last second."""
    utils, sm = {}, {}
    since = int(time.time() * 1e6) - 1_000_000
    for i in range(8):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        utils[i] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        try:
            sm[i] = sum(s.smUtil for s in pynvml.nvmlDeviceGetProcessUtilization(h, since))
        except pynvml.NVMLError_NotFound:
            sm[i] = 0
    return utils, sm


def _looks_like_the_workloads(utils: dict[int, int], sm: dict[int, int]) -> bool:
    return (utils[0] >= 85 and sm[0] >= 70  # healthy
            and utils[1] <= 50  # starved of data
            and utils[4] >= 60 and sm[4] <= 20  # busy-looking, SMs mostly idle (batch size 1)
            and utils[5] == 0 and sm[5] == 0  # nothing on it
            and utils[3] <= 20 and sm[3] == 0)  # holds memory, runs nothing


def test_demo_gpus_look_like_their_workloads(demo):
    pids = {name: pid for name, pid, _ in demo.workloads}
    readings: list[tuple[dict[int, int], dict[int, int]]] = []

    def settled() -> bool:  # past the start-up (data file written, first checkpoint window)
        readings.append(_gpu_reading())
        return _looks_like_the_workloads(*readings[-1])

    poll(settled, 60, "the demo GPUs to look like their workloads", every=0.5,
         explain=lambda: f"last reading (utilization, SM): {readings[-1]}")
    notebook = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(3))
    assert [(p.pid, p.usedGpuMemory) for p in notebook] == [(pids["notebook"], 12 * GIB)]


def test_data_starved_reads_from_disk(demo):
    pid = {name: pid for name, pid, _ in demo.workloads}["train-starved"]
    before = _read_bytes(pid)
    # page cache dropped: real device reads (from the cache, read_bytes would not grow at all)
    poll(lambda: _read_bytes(pid) - before >= 4 << 20, 60, "4 MiB read from the device",
         explain=lambda: f"read {_read_bytes(pid) - before} bytes")
