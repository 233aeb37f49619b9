"""pynvml's own functions, reading a simulated host driven by real processes."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import pynvml
import pytest
from simhost import GIB, attach_code, attached, host_toml, poll, wait_until

from daemon.sim import nvml as sim_nvml

# The simulated GPUs' utilization here is the duty cycle of real workload processes, which
# stretches when other workloads crowd the CPUs: under pytest-xdist these modules run one after
# another in one worker (tests/conftest.py pytest_xdist_make_scheduler).
pytestmark = pytest.mark.xdist_group("serial")

BUSY_HALF_SM = "dev.kernel(0.1, sm=0.5)"


def now_us() -> int:
    return int(time.time() * 1e6)


def handles(n: int) -> list:
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]


def test_memory_utilization_and_sm_share_follow_the_processes(sim_host):
    running = sim_host(host_toml(gpus=2, workloads=[
        {"name": "busy", "gpus": [0], "code": attach_code(0, 3, BUSY_HALF_SM)},
        {"name": "holder", "gpus": [0], "code": attach_code(0, 1)},
    ]))
    busy_pid, holder_pid = (pid for _, pid, _ in running.workloads)
    gpu0, gpu1 = handles(2)
    # Until a full utilization window of the busy workload has passed and both workloads hold
    # their memory (each attaches on its own: the busy one can fill a window first).
    wait_until(lambda: pynvml.nvmlDeviceGetUtilizationRates(gpu0).gpu >= 90, timeout=10)
    wait_until(lambda: pynvml.nvmlDeviceGetMemoryInfo(gpu0).used >= 4 * GIB, timeout=10)

    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlDeviceGetName(gpu0) == "NVIDIA A100-SXM4-40GB"
    mem = pynvml.nvmlDeviceGetMemoryInfo(gpu0)
    assert mem.total == 40 * GIB
    assert mem.used == 4 * GIB + sim_nvml.RESERVED_MEMORY
    assert mem.free == mem.total - mem.used
    mem2 = pynvml.nvmlDeviceGetMemoryInfo(gpu0, version=pynvml.nvmlMemory_v2)
    assert (mem2.used, mem2.reserved) == (4 * GIB, sim_nvml.RESERVED_MEMORY)

    procs = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu0)}
    assert procs == {busy_pid: 3 * GIB, holder_pid: 1 * GIB}

    assert pynvml.nvmlDeviceGetUtilizationRates(gpu0).gpu >= 90
    samples = pynvml.nvmlDeviceGetProcessUtilization(gpu0, now_us() - 1_000_000)
    assert [s.pid for s in samples] == [busy_pid]  # the holder ran nothing
    assert 42 <= samples[0].smUtil <= 52
    assert abs(samples[0].timeStamp - now_us()) < 1_000_000

    # The idle GPU reads idle.
    assert pynvml.nvmlDeviceGetUtilizationRates(gpu1).gpu == 0
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(gpu1) == []
    assert pynvml.nvmlDeviceGetMemoryInfo(gpu1).used == sim_nvml.RESERVED_MEMORY
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(gpu1, 0)
    idle_w = pynvml.nvmlDeviceGetPowerUsage(gpu1) / 1000
    busy_w = pynvml.nvmlDeviceGetPowerUsage(gpu0) / 1000
    assert idle_w == 55 and busy_w > 350
    assert pynvml.nvmlDeviceGetTemperature(gpu0, 0) > pynvml.nvmlDeviceGetTemperature(gpu1, 0)
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(gpu0) == 400_000


def test_process_utilization_honours_last_seen_timestamp(sim_host, tmp_path):
    ended = tmp_path / "kernel-ended"
    code = attach_code(0, 1, "time.sleep(60)").replace(
        "while True:", f"dev.kernel(0.3, sm=0.8)\nopen({str(ended)!r}, 'w').close()\nwhile True:")
    sim_host(host_toml(gpus=1, workloads=[{"name": "burst", "gpus": [0], "code": code}]))
    (gpu,) = handles(1)
    wait_until(ended.exists, timeout=60)  # kernel() returns once the kernel has ended
    ended_by = now_us()
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(gpu, ended_by)
    samples = pynvml.nvmlDeviceGetProcessUtilization(gpu, ended_by - 2_000_000)
    assert len(samples) == 1 and samples[0].smUtil > 0


def test_process_query_versions_and_a_missing_symbol(sim_host):
    running = sim_host(host_toml(gpus=1, faults=(
        '[[faults]]\nkind = "missing_symbol"\nsymbol = "nvmlDeviceGetComputeRunningProcesses_v3"\n')))
    with attached(running, 0, 2) as holder:  # this process holds 2 GiB
        pid = holder.pid
        (gpu,) = handles(1)
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetComputeRunningProcesses_v3(gpu)
        v2 = pynvml.nvmlDeviceGetComputeRunningProcesses_v2(gpu)
        assert [(p.pid, p.usedGpuMemory) for p in v2] == [(pid, 2 * GIB)]
        assert v2[0].gpuInstanceId == 0xFFFFFFFF

        class ProcessInfoV1(ctypes.Structure):  # nvml.h nvmlProcessInfo_v1_t
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
        count = ctypes.c_uint(0)
        assert fn(gpu, ctypes.byref(count), None) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        assert count.value == 1
        infos = (ProcessInfoV1 * 4)()
        count.value = 4
        assert fn(gpu, ctypes.byref(count), infos) == pynvml.NVML_SUCCESS
        assert (count.value, infos[0].pid, infos[0].usedGpuMemory) == (1, pid, 2 * GIB)


def test_calls_before_init_are_uninitialized(sim_host):
    sim_host(host_toml(gpus=1), init=False)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 1
    assert pynvml.nvmlSystemGetDriverVersion() == "550.90.07"


def test_gpu_lost_not_supported_and_hang(sim_host):
    faults = (
        '[[faults]]\nkind = "gpu_lost"\ngpu = 0\nat_tick = 1\nuntil_tick = 2\n'
        '[[faults]]\nkind = "not_supported"\ngpu = 1\ncalls = ["nvmlDeviceGetPowerUsage"]\n'
        '[[faults]]\nkind = "hang"\ngpu = 1\ncall = "nvmlDeviceGetTemperature"\nseconds = 0.3\n'
        # timed in seconds and due in an hour: not on now (a fault ending at `until` seconds:
        # test_init_faults_recover_after_until)
        '[[faults]]\nkind = "not_supported"\ngpu = 0\ncalls = ["nvmlDeviceGetTemperature"]\n'
        'at = 3600.0\n'
    )
    running = sim_host(host_toml(gpus=2, faults=faults), wait=0)
    gpu0, gpu1 = handles(2)
    pynvml.nvmlDeviceGetMemoryInfo(gpu0)  # fine before `at_tick`

    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(gpu1)
    pynvml.nvmlDeviceGetPowerUsage(gpu0)
    pynvml.nvmlDeviceGetUtilizationRates(gpu1)
    t = time.monotonic()
    pynvml.nvmlDeviceGetTemperature(gpu1, 0)
    assert time.monotonic() - t >= 0.3  # the hang happened (a lower bound: never flaky)
    pynvml.nvmlDeviceGetTemperature(gpu0, 0)  # GPU 0 answers (how fast is bench/ business),
    # its own fault not being due for an hour

    def memory_error(handle) -> type[pynvml.NVMLError] | None:
        try:
            pynvml.nvmlDeviceGetMemoryInfo(handle)
        except pynvml.NVMLError as error:
            return type(error)
        return None

    # Lost at `at_tick` (the host's clock is at tick 1: from the next call on) ...
    running.set_tick(1)
    assert memory_error(gpu0) is pynvml.NVMLError_GpuIsLost
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceGetMemoryInfo(gpu1)  # one GPU lost, not all
    # ... and back at `until_tick`.
    running.set_tick(2)
    assert memory_error(gpu0) is None


@pytest.mark.parametrize(("kind", "error"), [
    ("nvml_missing", pynvml.NVMLError_LibraryNotFound),
    ("driver_mismatch", pynvml.NVMLError_LibRmVersionMismatch),
])
def test_init_faults_recover_after_until(sim_host, kind, error):
    sim_host(host_toml(gpus=1, faults=f'[[faults]]\nkind = "{kind}"\nuntil = 0.8\n'), init=False)
    with pytest.raises(error):
        pynvml.nvmlInit()
    wait_until(lambda: _init_ok(), timeout=3)
    assert pynvml.nvmlDeviceGetCount() == 1


def _init_ok() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    return True


def test_dead_processes_disappear(sim_host):
    running = sim_host(host_toml(gpus=1, workloads=[
        {"name": "a", "gpus": [0], "code": attach_code(0, 1, BUSY_HALF_SM)},
        {"name": "b", "gpus": [0], "code": attach_code(0, 2)},
    ]))
    (gpu,) = handles(1)
    pid_a, pid_b = (pid for _, pid, _ in running.workloads)
    assert {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)} == {pid_a, pid_b}
    # Each holds its memory once it has attached: until both have, the sum is short.
    wait_until(lambda: pynvml.nvmlDeviceGetMemoryInfo(gpu).used >= 3 * GIB, timeout=10)
    os.killpg(pid_a, signal.SIGKILL)  # no clean close: its record stays behind
    wait_until(lambda: [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)] == [pid_b],
               timeout=3)
    assert pynvml.nvmlDeviceGetMemoryInfo(gpu).used == 2 * GIB + sim_nvml.RESERVED_MEMORY
    assert not any(n.endswith(f"pid{pid_a}.att") for n in os.listdir(running.state_dir / "attach"))


def test_gpm_on_hopper_only(sim_host):
    running = sim_host(host_toml(gpus=1, model="NVIDIA H100 80GB HBM3"))
    with attached(running, 0, 1, sm=0.5):  # a kernel on half the SMs throughout
        (gpu,) = handles(1)
        assert pynvml.nvmlGpmQueryDeviceSupport(gpu).isSupportedDevice == 1
        first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(gpu, first)
        time.sleep(0.6)
        pynvml.nvmlGpmSampleGet(gpu, second)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1, request.sample2 = first, second
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        request.metrics[1].metricId = pynvml.NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC
        pynvml.nvmlGpmMetricsGet(request)
        assert 40 <= request.metrics[0].value <= 52
        assert request.metrics[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
        pynvml.nvmlGpmSampleFree(first)
        pynvml.nvmlGpmSampleFree(second)


def test_no_gpm_on_ampere(sim_host):
    sim_host(host_toml(gpus=1))
    (gpu,) = handles(1)
    assert pynvml.nvmlGpmQueryDeviceSupport(gpu).isSupportedDevice == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(gpu, pynvml.nvmlGpmSampleAlloc())


def test_a_short_kernel_is_seen_when_a_read_comes_a_little_early(sim_host):
    """NVML's sample period is 1/6 s to 1 s: a 30 ms kernel on 30% of the SMs is 0.9% of a
    second. Reads a little under a second apart (0.95 s) once stretched the simulator's period
    to two seconds, and NVML's whole percent read 0.45% as 0: the kernel was never seen, and a
    stream scorer running one every 3 s read as holding its GPU idle (probe 132 H2)."""
    running = sim_host(host_toml(gpus=1))
    (gpu,) = handles(1)
    with attached(running, 0, 1) as device:
        start = time.monotonic()

        def read_at(offset: float) -> None:
            poll(lambda: time.monotonic() >= start + offset, 5, f"{offset} s on", every=0.005)
            pynvml.nvmlDeviceGetUtilizationRates(gpu)  # the reader's tick: a reading

        read_at(0.0)
        read_at(0.95)
        since = now_us()
        device.kernel(0.03, sm=0.3)
        read_at(1.9)
        samples = pynvml.nvmlDeviceGetProcessUtilization(gpu, since)
        assert [(s.pid, s.smUtil >= 1) for s in samples] == [(os.getpid(), True)], [
            (s.pid, s.smUtil) for s in samples]


def test_memory_runs_out_across_processes_as_cuda_does(sim_host):
    """A 40 GiB GPU where another process holds 30 GiB has 10 GiB left for this one: 20 more
    is "CUDA out of memory", as the processes' sum could otherwise pass the GPU's total
    (probe 125 F9); once the other is killed, its memory is free again."""
    from daemon.sim.device import Device

    running = sim_host(host_toml(gpus=1, workloads=[
        {"name": "big", "gpus": [0], "code": attach_code(0, 30)}]))
    (gpu,) = handles(1)
    (_, big_pid, _), = running.workloads
    wait_until(lambda: pynvml.nvmlDeviceGetMemoryInfo(gpu).used >= 30 * GIB, timeout=10)
    with Device(gpu_index=0, state_dir=running.state_dir) as device:
        with pytest.raises(MemoryError, match="other processes hold 32212254720"):
            device.alloc(20 * GIB)
        device.alloc(9 * GIB)  # what is left fits
        assert device.memory == 9 * GIB
        os.killpg(big_pid, signal.SIGKILL)  # its record stays behind, its lock goes
        wait_until(lambda: not any(p.pid == big_pid for p in
                                   pynvml.nvmlDeviceGetComputeRunningProcesses(gpu)), timeout=5)
        device.alloc(20 * GIB)
        wait_until(lambda: pynvml.nvmlDeviceGetMemoryInfo(gpu).used
                   == 29 * GIB + sim_nvml.RESERVED_MEMORY, timeout=5)
