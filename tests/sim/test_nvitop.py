"""Cross-check: nvitop, an independent NVML client, reads the same simulated host."""

from __future__ import annotations

import nvitop  # noqa: E402  (in the test extra)
import pynvml
import pytest
from simhost import GIB, attach_code, host_toml, wait_until

from daemon.sim import nvml as sim_nvml

# The simulated GPUs' utilization here is the duty cycle of real workload processes, which
# stretches when other workloads crowd the CPUs: under pytest-xdist these modules run one after
# another in one worker (tests/conftest.py pytest_xdist_make_scheduler).
pytestmark = pytest.mark.xdist_group("serial")


def test_nvitop_reads_the_same_memory_and_utilization(sim_host):
    running = sim_host(host_toml(gpus=2, workloads=[
        {"name": "busy", "gpus": [0], "code": attach_code(0, 5, "dev.kernel(0.1, sm=0.9)")},
    ]))
    pid = running.workloads[0][1]
    h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
    # Until a full utilization window of the busy workload has passed.
    wait_until(lambda: pynvml.nvmlDeviceGetUtilizationRates(h0).gpu >= 90, timeout=10)
    devices = nvitop.Device.all()
    assert [d.name() for d in devices] == ["NVIDIA A100-SXM4-40GB"] * 2
    busy, idle = devices
    # nvitop asks for memory info v2, where reserved memory is not part of `used`
    assert busy.memory_used() == pynvml.nvmlDeviceGetMemoryInfo(h0, pynvml.nvmlMemory_v2).used
    assert busy.memory_used() >= 5 * GIB
    assert busy.gpu_utilization() >= 90 and idle.gpu_utilization() == 0
    assert busy.uuid() == pynvml.nvmlDeviceGetUUID(h0)
    procs = busy.processes()
    assert list(procs) == [pid] and procs[pid].gpu_memory() == 5 * GIB
    assert idle.processes() == {}
    assert sim_nvml.installed() is not None
