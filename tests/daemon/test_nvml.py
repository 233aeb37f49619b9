"""mlcostd's NVML source on the simulated NVML: readings, versions, and every fault."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time

import pynvml
import pytest
from simhost import GIB, attached, host_toml, run_concurrently, wait_until

from daemon.config import NvmlConfig
from daemon.sources.nvml import NOT_ANSWERED, NvmlSource, _Device
from daemon.sources.nvml_query import (
    ERROR,
    NOT_FOUND,
    UNSUPPORTED,
    NvmlFailure,
    has_symbol,
    nvml_query,
)
from daemon.sources.sample import GPU_LOST, GPU_OK, GPU_TIMEOUT

# The simulated GPUs' state is set by this process (simhost.attached: memory held, a kernel
# running) and faults go on when a test moves the host's clock (Running.set_tick), so nothing
# here depends on how fast another process runs on a crowded machine.

FAST = NvmlConfig(call_deadline=0.5, retry_initial=0.2, retry_max=0.5)


@pytest.fixture
def source():
    started = []

    def make(config=FAST, interval=0.5):
        src = NvmlSource(config, interval)
        src.start()
        started.append(src)
        return src

    yield make
    for src in started:
        src.stop()


def readings(src, count, timeout=8.0):
    """Wait until `count` GPUs have a reading; return latest()."""
    return wait_until(lambda: (lambda r: r if len(r[1]) >= count else None)(src.latest()),
                      timeout=timeout)


def test_gpus_and_processes_as_the_workloads_asked(sim_host, source):
    running = sim_host(host_toml(gpus=3), init=False)
    pid = os.getpid()  # this process holds both GPUs: busy on GPU 0, holding memory on GPU 1
    with attached(running, 0, 6, sm=0.8), attached(running, 1, 3):
        src = source()
        assert src.wait_ready(5)

        def settled():
            status, gpus, uses = src.latest()
            if len(gpus) < 3 or len(uses.get(pid, ())) < 2:
                return None
            if gpus[0].utilization is None or gpus[0].utilization < 90:  # a full busy window
                return None
            return status, gpus, uses

        status, gpus, uses = wait_until(settled, timeout=10)
    assert status == "ok"
    by_index = {g.index: g for g in gpus}
    assert by_index[0].name == "NVIDIA A100-SXM4-40GB"
    assert by_index[0].memory_total_bytes == 40 * GIB
    assert by_index[0].utilization >= 90
    assert by_index[2].utilization == 0  # no process: idle
    assert by_index[2].power_watts is not None and by_index[2].power_watts < by_index[0].power_watts
    assert by_index[0].sm_activity is None  # A100: no GPM, absent rather than 0
    busy, holder = sorted(uses[pid], key=lambda u: u.gpu_index)
    assert busy.gpu_index == 0 and busy.memory_bytes == 6 * GIB
    assert 70 <= busy.sm_share <= 90  # the kernel's 80 % of the SMs
    assert holder.gpu_index == 1 and holder.memory_bytes == 3 * GIB
    assert holder.sm_share == 0.0  # no sample since the last second reads 0%
    assert all(g.status == GPU_OK for g in gpus)


def test_gpm_sm_activity_on_hopper(sim_host, source):
    running = sim_host(host_toml(gpus=1, model="NVIDIA H100 80GB HBM3", gpm=True), init=False)
    with attached(running, 0, 2, sm=0.5):
        src = source()
        gpu = wait_until(lambda: (lambda g: g[0] if g and g[0].sm_activity is not None else None)(
            src.latest()[1]), timeout=10)
    assert 35 <= gpu.sm_activity <= 60


def test_not_supported_fields_are_absent_not_zero(sim_host, source):
    sim_host(host_toml(gpus=2, faults="""
[[faults]]
kind = "not_supported"
gpu = 1
calls = ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"]
"""), init=False)
    src = source()
    _, gpus, _ = readings(src, 2)
    assert gpus[1].power_watts is None and gpus[1].temperature_c is None
    assert gpus[1].status == GPU_OK and gpus[1].utilization is not None
    assert gpus[0].power_watts is not None and gpus[0].temperature_c is not None


def test_lost_gpu_is_marked_and_the_others_keep_their_cadence(sim_host, source):
    running = sim_host(host_toml(gpus=3, faults="""
[[faults]]
kind = "gpu_lost"
gpu = 1
at_tick = 1
"""), init=False)
    src = source(interval=0.5)
    _, gpus, _ = readings(src, 3)
    assert gpus[1].status == GPU_OK  # read before the fault...
    running.set_tick(1)  # ...and lost from now on
    gpus = wait_until(lambda: (lambda g: g if g[1].status == GPU_LOST else None)(
        src.latest()[1]), timeout=6)
    assert "GPU is lost" in gpus[1].error
    assert gpus[1].utilization is None
    # The other GPUs keep being read: two more readings each (interval 0.5 s) arrive.
    first = {i: src.read_at(i) for i in (0, 2)}
    wait_until(lambda: all(src.read_at(i) - first[i] >= 1.0 for i in (0, 2)),
               timeout=10)
    _, gpus, _ = src.latest()
    assert gpus[0].status == GPU_OK and gpus[2].status == GPU_OK


def test_a_hanging_call_times_out_one_gpu_only(sim_host, source):
    running = sim_host(host_toml(gpus=2, faults="""
[[faults]]
kind = "hang"
gpu = 1
call = "nvmlDeviceGetUtilizationRates"
seconds = 8.0
at_tick = 1
"""), init=False)
    src = source(interval=0.5)
    readings(src, 2)
    running.set_tick(1)
    # Timed out, naming the call that hangs. (On a loaded machine the reading can first be
    # overdue while the call is not yet past its deadline: "no reading for 1.0 s", then this.)
    gpus = wait_until(lambda: (lambda g: g if g[1].status == GPU_TIMEOUT and
                               "nvmlDeviceGetUtilizationRates" in g[1].error else None)(
        src.latest()[1]), timeout=6)
    # the GPU's memory facts stay known while its reading is overdue; the reading itself does not
    assert gpus[1].memory_total_bytes == 40 * GIB and gpus[1].memory_used_bytes is None
    assert gpus[1].memory_reserved_bytes is not None
    assert gpus[1].memory_reserved_bytes == gpus[0].memory_reserved_bytes
    # GPU 0 goes on being read (two more readings) while GPU 1's call hangs: one reader
    # thread reads both GPUs in turn, and the hung call hands GPU 0 to a thread of its own.
    before = src.read_at(0)
    wait_until(lambda: src.read_at(0) - before >= 0.9, timeout=10)
    assert src.latest()[1][0].status == GPU_OK
    assert src._devices[1].in_flight is not None, "GPU 0 was read only once GPU 1's hang ended"


def test_a_gpu_handed_to_a_new_reader_keeps_its_device_and_says_what_it_lacks_once(
        sim_host, source, caplog):
    """GPU 0's call hangs, so GPU 1 goes to a new reader thread: it was opened again there (its
    facts read again, what it does not support forgotten), and "GPU 1: nvmlDeviceGetPowerUsage
    is not supported" was logged twice, a second apart (probe 142 L7, the faults scenario)."""
    running = sim_host(host_toml(gpus=2, faults="""
[[faults]]
kind = "hang"
gpu = 0
call = "nvmlDeviceGetUtilizationRates"
seconds = 8.0
at_tick = 1

[[faults]]
kind = "not_supported"
gpu = 1
calls = ["nvmlDeviceGetPowerUsage"]
"""), init=False)
    caplog.set_level("INFO", logger="daemon.sources.nvml")
    src = source(interval=0.5)
    readings(src, 2)
    device = wait_until(lambda: src._devices.get(1))
    running.set_tick(1)
    # (the tick's view, latest(), is what sees a call past its deadline and hands GPU 1 on)
    wait_until(lambda: src.latest() and "are read by a new thread" in caplog.text, timeout=6)
    before = src.read_at(1)
    wait_until(lambda: src.read_at(1) - before >= 0.9, timeout=10)  # read there, twice
    said = [r.getMessage() for r in caplog.records if "is not supported" in r.getMessage()]
    assert said == ["GPU 1: nvmlDeviceGetPowerUsage is not supported; shown as absent"], said
    assert src._devices[1] is device  # the same device, not opened again
    assert src.latest()[1][1].status == GPU_OK and src.latest()[1][1].power_watts is None


@pytest.mark.parametrize("symbol, call, named", [
    ("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex", False),  # its handle
    ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo_v2", True),  # its total memory
])
def test_a_call_that_hangs_while_a_gpu_opens_times_out_that_gpu_only(sim_host, source, symbol,
                                                                      call, named):
    """A GPU's first calls (its handle, then its facts in _Device.open) hang: only that GPU
    times out. The hang was not isolated (the device was registered only once opened): every
    GPU of its reader waited for as long as the call hung, GPU 2, behind it, was never read."""
    running = sim_host(host_toml(gpus=3, faults=f"""
[[faults]]
kind = "hang"
gpu = 1
call = "{symbol}"
seconds = 8.0
until_tick = 1
"""), init=False)
    src = source(interval=0.5)

    def read_at(*indices):  # (the tick's latest() is the watchdog that isolates a hung call)
        src.latest()
        return tuple(src.read_at(i) for i in indices)

    # GPU 2, which the reader reads after GPU 1, is read; then GPUs 0 and 2 twice more each
    first = wait_until(lambda: (lambda t: t if None not in t else None)(read_at(0, 2)),
                       timeout=5)
    wait_until(lambda: (lambda t: t[0] - first[0] >= 0.9 and t[1] - first[1] >= 0.9)(
        read_at(0, 2)), timeout=10)
    hung = src._opening[1]
    assert 1 not in src._devices
    assert not hung.opened and hung.in_flight is not None and hung.in_flight[0] == call, \
        "the other GPUs were read only once GPU 1's first call had answered"
    assert src.read_at(1) is None
    gpus = wait_until(lambda: (lambda g: g if len(g) == 3 and g[1].status == GPU_TIMEOUT and
                               call in (g[1].error or "") else None)(src.latest()[1]), timeout=6)
    assert [g.status for g in gpus] == [GPU_OK, GPU_TIMEOUT, GPU_OK]
    assert f"{call} has not answered for" in gpus[1].error
    if named:  # read before the call that hangs
        assert gpus[1].name == gpus[0].name and gpus[1].uuid.startswith("GPU-")
    else:  # nothing known of it yet, and said so
        assert (gpus[1].name, gpus[1].uuid) == (NOT_ANSWERED, "")
    assert 1 not in src.activity_sources()
    # The call answers: the GPU is read from then on, as after a later hang
    running.set_tick(1)
    gpus = wait_until(lambda: (lambda g: g if g[1].status == GPU_OK else None)(
        src.latest()[1]), timeout=20)
    assert gpus[1].name == gpus[0].name and gpus[1].uuid.startswith("GPU-")
    assert gpus[1].memory_total_bytes == 40 * GIB and gpus[1].memory_used_bytes is not None
    assert src._devices[1].opened and 1 not in src._opening and 1 in src.activity_sources()
    assert [g.status for g in src.latest()[1]] == [GPU_OK] * 3


def test_a_call_that_hangs_while_a_lost_gpu_is_opened_again_times_out_that_gpu_only(
        sim_host, source):
    """A lost GPU comes back and is opened again (a fresh handle, its facts): a call that hangs
    then is isolated too; GPU 0, on the same reader, is read on."""
    running = sim_host(host_toml(gpus=2, faults="""
[[faults]]
kind = "gpu_lost"
gpu = 1
at_tick = 1
until_tick = 2

[[faults]]
kind = "hang"
gpu = 1
call = "nvmlDeviceGetName"
seconds = 8.0
at_tick = 1
until_tick = 3
"""), init=False)
    src = source(interval=0.5)
    readings(src, 2)
    running.set_tick(1)
    wait_until(lambda: src.latest()[1][1].status == GPU_LOST, timeout=6)
    running.set_tick(2)  # back: its name, asked as it is opened again, hangs
    gpus = wait_until(lambda: (lambda g: g if g[1].status == GPU_TIMEOUT and
                               "nvmlDeviceGetName has not answered" in (g[1].error or "")
                               else None)(src.latest()[1]), timeout=10)
    assert gpus[0].status == GPU_OK and gpus[1].name == gpus[0].name  # (known from before)
    before = src.read_at(0)
    wait_until(lambda: (src.latest(), src.read_at(0) - before >= 0.9)[1], timeout=5)
    assert src._opening[1].in_flight is not None
    running.set_tick(3)
    wait_until(lambda: src.latest()[1][1].status == GPU_OK, timeout=20)


def test_a_gpu_not_answering_keeps_its_holders_as_its_last_reading_saw_them(sim_host, source):
    """Probe 142 L9: the process holding 30 GiB on a timed-out GPU was recorded with no GPU
    use, so the burn called the GPU unheld and charged the process $0. What it held at the
    GPU's last reading goes with it (no SM share: its kernels are not known), beside its use
    of a GPU that answers."""
    running = sim_host(host_toml(gpus=2, faults="""
[[faults]]
kind = "hang"
gpu = 1
call = "nvmlDeviceGetUtilizationRates"
seconds = 8.0
at_tick = 1
"""), init=False)
    pid = os.getpid()
    with attached(running, 0, 2), attached(running, 1, 30, sm=0.5):
        src = source(interval=0.5)
        wait_until(lambda: len(src.latest()[2].get(pid, ())) == 2, timeout=10)
        running.set_tick(1)
        _, gpus, uses, sick, kept = wait_until(
            lambda: (lambda v: v if v[1][1].status == GPU_TIMEOUT else None)(
                src.latest_and_sick()), timeout=6)
    assert [(u.gpu_index, u.memory_bytes) for u in uses[pid]] == [(0, 2 * GIB)]
    assert sick == {}  # it answers on GPU 0: not a sick holder, watched as a GPU process
    assert [(u.gpu_index, u.memory_bytes, u.sm_share) for u in kept[pid]] == [(1, 30 * GIB, 0.0)]


@pytest.mark.parametrize("kind, expected", [
    ("nvml_missing", "libnvidia-ml.so.1 was not found"),
    ("driver_mismatch", "reboot"),
])
def test_nvml_unavailable_is_a_status_then_recovers(sim_host, source, kind, expected):
    running = sim_host(host_toml(gpus=1, faults=f"""
[[faults]]
kind = "{kind}"
until_tick = 1
"""), init=False)
    src = source()
    src.wait_ready(5)
    status, gpus, _ = src.latest()
    assert status.startswith("NVML unavailable") and expected in status
    assert gpus == ()
    running.set_tick(1)  # the library answers again: the next retry starts it
    status, gpus, _ = readings(src, 1, timeout=8)
    assert status == "ok"


@pytest.mark.parametrize("missing, used", [
    ('"nvmlDeviceGetComputeRunningProcesses_v3"', "nvmlDeviceGetComputeRunningProcesses_v2"),
    ('"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"',
     "nvmlDeviceGetComputeRunningProcesses"),
])
def test_process_query_falls_back_by_symbol(sim_host, source, missing, used):
    running = sim_host(host_toml(gpus=1, faults=f"""
[[faults]]
kind = "missing_symbol"
symbols = [{missing}]
"""), init=False)
    with attached(running, 0, 2):
        src = source()
        uses = wait_until(lambda: src.latest()[2].get(os.getpid()), timeout=8)
    assert uses[0].memory_bytes == 2 * GIB
    assert src._devices[0].process_query[0] == used


def test_real_library_missing_without_simulation(source):
    """On this machine (no NVIDIA driver) the real pynvml path says what is wrong."""
    from daemon.sim import nvml as sim_nvml

    sim_nvml.uninstall()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a real NVML answers on this host; the missing-library path can't be simulated")
    src = source()
    src.wait_ready(5)
    assert "NVML unavailable" in src.latest()[0]


def test_the_call_in_flight_is_never_read_as_a_torn_pair(sim_host):
    """The watchdog (latest(), another thread) reads the in-flight call's name and start time
    while the reader thread starts call after call. Call i starts after call i-1 ended and
    before call i ends, so a start time outside that span is another call's: a torn read.
    Before the fix name and start were two attributes, written and read one after the other."""
    sim_host(host_toml(gpus=1))
    device = _Device(0, pynvml.nvmlDeviceGetHandleByIndex(0), FAST)
    ended: dict[int, float] = {}
    torn: list[tuple[str, float, float]] = []
    stop = threading.Event()
    calls = [0]

    def make_call(i):
        def call():
            ended[i] = time.monotonic()
        call.__name__ = f"call{i}"
        return call

    def reader():
        i = 0
        while not stop.is_set():
            i += 1
            device.query(f"call{i}", make_call(i))
        calls[0] = i

    def watchdog():
        while not stop.is_set():
            flight = device.in_flight
            if flight is None:
                continue
            name, started = flight
            i = int(name[4:])
            if not ended.get(i - 1, 0.0) <= started <= ended.get(i, math.inf):
                torn.append((name, started, ended.get(i - 1, 0.0)))

    run_concurrently([reader, watchdog], stop, 2.0, torn)
    assert not torn, f"name and start time of different calls read together: {torn[0]}"
    assert calls[0] > 1000


def test_nvml_query_turns_every_nvml_error_into_a_failure_of_its_kind(sim_host):
    sim_host(host_toml(gpus=2, faults="""
[[faults]]
kind = "not_supported"
gpu = 1
calls = ["nvmlDeviceGetPowerUsage"]

[[faults]]
kind = "missing_symbol"
symbols = ["nvmlDeviceGetComputeRunningProcesses_v3"]
"""))
    gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert isinstance(nvml_query(pynvml.nvmlDeviceGetPowerUsage, gpu0), int)
    unsupported = nvml_query(pynvml.nvmlDeviceGetPowerUsage, gpu1)
    assert isinstance(unsupported, NvmlFailure) and unsupported.kind == UNSUPPORTED
    assert unsupported.describe().startswith("nvmlDeviceGetPowerUsage: ")
    missing = nvml_query(pynvml.nvmlDeviceGetComputeRunningProcesses_v3, gpu0)
    assert isinstance(missing, NvmlFailure) and missing.kind == UNSUPPORTED
    bad_index = nvml_query(pynvml.nvmlDeviceGetHandleByIndex, 7)
    assert isinstance(bad_index, NvmlFailure) and bad_index.kind in (ERROR, NOT_FOUND)
    # Feature detection by symbol, as the process query's v3 -> v2 -> v1 choice uses it.
    assert not has_symbol("nvmlDeviceGetComputeRunningProcesses_v3")
    assert has_symbol("nvmlDeviceGetComputeRunningProcesses_v2")


@contextlib.contextmanager
def _holder_reading(sim_host, source, faults: str = ""):
    """One GPU with a process (this one) holding 3 GiB, for the `with` block; the source and
    its first reading showing it."""
    running = sim_host(host_toml(gpus=1, faults=faults), init=False)
    with attached(running, 0, 3):
        src = source()
        gpu = wait_until(lambda: next((g for g in src.latest()[1]
                                       if g.memory_used_bytes and g.memory_used_bytes >= 3 * GIB),
                                      None), timeout=8)
        yield src, gpu


def test_memory_used_follows_v2_memory_info_as_nvidia_smi_shows_it(sim_host, source):
    from daemon.sim.nvml import RESERVED_MEMORY

    with _holder_reading(sim_host, source) as (src, gpu):
        v1 = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert src._devices[0].memory_version == 2
    # v2: used is what processes hold; the driver's reservation is beside it, not in it
    assert gpu.memory_used_bytes == 3 * GIB
    assert gpu.memory_reserved_bytes == RESERVED_MEMORY
    assert v1.used == gpu.memory_used_bytes + gpu.memory_reserved_bytes  # v1 counts it as used


def test_a_driver_without_v2_memory_info_is_read_through_v1_and_says_so(sim_host, source,
                                                                        caplog):
    from daemon.sim.nvml import RESERVED_MEMORY

    caplog.set_level("INFO", logger="daemon.sources.nvml")
    with _holder_reading(sim_host, source, faults="""
[[faults]]
kind = "missing_symbol"
symbols = ["nvmlDeviceGetMemoryInfo_v2"]
""") as (src, gpu):
        pass
    assert src._devices[0].memory_version == 1
    assert gpu.memory_used_bytes == 3 * GIB + RESERVED_MEMORY  # v1's used includes it
    assert gpu.memory_reserved_bytes is None  # the field says "not known" on such a driver
    assert gpu.status == GPU_OK and gpu.error is None
    assert "GPU 0: v2 memory info is not available" in caplog.text


def test_a_driver_that_rejects_the_v2_struct_version_falls_back_to_v1(sim_host, source,
                                                                      monkeypatch, caplog):
    # An older driver exports the _v2 symbol but answers ARGUMENT_VERSION_MISMATCH for a
    # struct version it does not know: an unsupported field, read through v1 from then on.
    from daemon.sources import nvml as nvml_source

    caplog.set_level("INFO", logger="daemon.sources.nvml")
    monkeypatch.setattr(nvml_source, "_MEMORY_V2", pynvml.nvmlMemory_v2 + (1 << 24))
    with _holder_reading(sim_host, source) as (src, gpu):
        pass
    assert src._devices[0].memory_version == 1 and gpu.memory_reserved_bytes is None
    assert gpu.status == GPU_OK
    assert "Argument version mismatch (NVML error 25)" in caplog.text


def test_a_utilization_that_is_no_percentage_is_absent():
    """A -1 in NVML's unsigned int reads 4294967295: once recorded, it made a compare of two
    runs say the fixed run's GPU was 44 million % busy."""
    from daemon.sources.nvml import percent

    assert percent(0) == 0.0 and percent(100) == 100.0 and percent(37) == 37.0
    assert percent(4294967295) is None and percent(101) is None and percent(-1) is None


def _counted(monkeypatch, name, fail_first=0):
    """pynvml.`name`, replaced by a wrapper that counts its calls (by their arguments) and
    raises NVML's Unknown Error for the first `fail_first` of them."""
    import functools

    real = getattr(pynvml, name)
    calls: list[tuple] = []

    @functools.wraps(real)
    def counted(*args):
        calls.append(args[1:])
        if len(calls) <= fail_first:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return real(*args)

    monkeypatch.setattr(pynvml, name, counted)
    return calls


def test_slow_fields_are_read_every_few_seconds_and_the_memory_clock_when_the_sm_clock_moves(
        sim_host, monkeypatch):
    from daemon.sources import nvml as nvml_source

    running = sim_host(host_toml(gpus=1))
    temperatures = _counted(monkeypatch, "nvmlDeviceGetTemperature")
    clocks = _counted(monkeypatch, "nvmlDeviceGetClockInfo")
    device = _Device(0, pynvml.nvmlDeviceGetHandleByIndex(0), FAST)
    first, second, third = (device.read().gpu for _ in range(3))
    assert len(temperatures) == 1 and first.temperature_c is not None
    assert third.temperature_c == first.temperature_c and third.status == GPU_OK
    assert clocks.count((pynvml.NVML_CLOCK_SM,)) == 3  # the SM clock: every read
    assert clocks.count((pynvml.NVML_CLOCK_MEM,)) == 1 and third.memory_clock_mhz == 1215
    with attached(running, 0, 1, sm=0.8):  # a kernel runs: the SM clock boosts...
        boosted = wait_until(lambda: (lambda g: g if g.sm_clock_mhz != first.sm_clock_mhz
                                      else None)(device.read().gpu), timeout=5)
    assert clocks.count((pynvml.NVML_CLOCK_MEM,)) == 2  # ...and the memory clock is read again
    assert boosted.memory_clock_mhz == 1215
    monkeypatch.setattr(nvml_source, "SLOW_FIELD_MAX_AGE_S", 0.0)  # as once they are old
    asked = len(temperatures)
    device.read()
    assert len(temperatures) == asked + 1


def test_a_slow_field_that_failed_is_asked_again_at_the_next_read(sim_host, monkeypatch):
    sim_host(host_toml(gpus=1))
    temperatures = _counted(monkeypatch, "nvmlDeviceGetTemperature", fail_first=1)
    device = _Device(0, pynvml.nvmlDeviceGetHandleByIndex(0), FAST)
    failed = device.read().gpu
    assert failed.temperature_c is None and "nvmlDeviceGetTemperature" in failed.error
    read = device.read().gpu
    assert read.temperature_c is not None and read.status == GPU_OK
    assert len(temperatures) == 2


def test_a_process_whose_memory_nvml_does_not_know_reads_as_unknown(sim_host, monkeypatch):
    """NVML says NVML_VALUE_NOT_AVAILABLE for a process's memory under MIG or vGPU: 'not known',
    and the GPU reads as OK (pynvml's own wrapper turns it into None: int(None) failed the whole
    GPU's read before the source read the structs itself)."""
    from daemon.sim import nvml as sim_nvml
    from daemon.sources.nvml import _MEMORY_NOT_AVAILABLE
    from daemon.sources.sample import GpuUse

    running = sim_host(host_toml(gpus=1))
    lib = sim_nvml.installed()
    real = lib.nvmlDeviceGetComputeRunningProcesses_v3

    def not_available(handle, count, infos):  # the driver's answer, in the same C array
        ret = real(handle, count, infos)
        if infos is not None:
            infos[0].usedGpuMemory = _MEMORY_NOT_AVAILABLE
        return ret

    with attached(running, 0, 3):
        device = _Device(0, pynvml.nvmlDeviceGetHandleByIndex(0), FAST)
        assert device.read().uses == {os.getpid(): (GpuUse(0, 3 * GIB, 0.0),)}
        monkeypatch.setitem(pynvml._nvmlGetFunctionPointer_cache,
                            "nvmlDeviceGetComputeRunningProcesses_v3", not_available)
        reading = device.read()
    assert reading.gpu.status == GPU_OK, reading.gpu.error
    assert reading.uses == {os.getpid(): (GpuUse(0, None, 0.0),)}


def test_each_process_gets_its_newest_utilization_sample_whatever_type_pynvml_gives(
        sim_host, monkeypatch):
    from types import SimpleNamespace

    running = sim_host(host_toml(gpus=1))
    pid = os.getpid()
    with attached(running, 0, 1, sm=0.8):
        device = _Device(0, pynvml.nvmlDeviceGetHandleByIndex(0), FAST)
        share = wait_until(lambda: device.read().uses[pid][0].sm_share, timeout=5)
        assert 0 < share <= 100  # from pynvml's own struct, through its field descriptors
        older, newer = (SimpleNamespace(pid=pid, timeStamp=t, smUtil=u) for t, u in
                        ((10, 90), (20, 30)))
        monkeypatch.setattr(pynvml, "nvmlDeviceGetProcessUtilization",
                            lambda handle, since: [newer, older])
        assert device.read().uses[pid][0].sm_share == 30.0


def test_gpm_samples_are_taken_into_two_buffers_in_turn(sim_host, monkeypatch):
    """Not one allocated and one freed at every read: two NVML calls a GPU a tick."""
    from daemon.sim import nvml as sim_nvml

    sim_host(host_toml(gpus=1, model="NVIDIA H100 80GB HBM3", gpm=True))
    lib = sim_nvml.installed()
    allocs = _counted(monkeypatch, "nvmlGpmSampleAlloc")
    frees = _counted(monkeypatch, "nvmlGpmSampleFree")
    device = _Device(0, pynvml.nvmlDeviceGetHandleByIndex(0), FAST)
    activity = []
    for _ in range(4):
        lib.reader.snapshot_ns = 0  # a fresh reading of the GPU, as a second later
        gpu = device.read().gpu
        assert gpu.status == GPU_OK, gpu.error
        activity.append(gpu.sm_activity)
    assert activity[0] is None and None not in activity[1:]  # GPM needs two samples
    assert len(allocs) == 2 and frees == [] and len(lib._gpm_samples) == 2


def test_a_kernel_between_two_reads_more_than_a_second_apart_is_seen(sim_host):
    """A read late on a loaded host: the process-utilization query asks from the last read,
    not from a second ago, so a short kernel that ran between the two is seen (probe 132 H2)."""
    running = sim_host(host_toml(gpus=1))
    pid = os.getpid()
    with attached(running, 0, 1) as gpu:
        device = _Device(0, pynvml.nvmlDeviceGetHandleByIndex(0), FAST)
        assert device.read().uses[pid][0].sm_share == 0.0  # it has run nothing yet
        gpu.kernel(0.1, sm=0.8)
        ended = time.monotonic()
        wait_until(lambda: time.monotonic() > ended + 1.3, timeout=5)  # the late read's time
        assert device.read().uses[pid][0].sm_share > 0
        assert device.read().uses[pid][0].sm_share == 0.0  # and once, not at every read
