"""The GPU source: every GPU and every process on it, read through NVML (the pynvml module).

Shape:
- one supervisor thread starts NVML (retrying with backoff while it is missing or mismatched)
  and finds the devices; static facts (name, UUID, total memory) are read once per device,
  slow ones (temperature, memory clock) every SLOW_FIELD_MAX_AGE_S, the rest every tick;
- memory follows NVML's v2 memory info (nvmlDeviceGetMemoryInfo_v2): `used` excludes the memory
  the driver reserves, as nvidia-smi and nvitop show, and the reserved amount is kept beside
  it; a driver with only v1 is said once in the log and leaves memory_reserved_bytes absent;
- one reader thread reads every GPU's dynamic fields in turn, once per interval, just before
  the tick (one thread per GPU cost 3-4x the NVML calls themselves at 8 GPUs: eight wake-ups
  and eight GIL hand-offs a tick; bench/collector.py measures it). A lost GPU is retried on
  its own backoff, the others keep their cadence;
- the tick calls `latest()`, which never blocks: it hands over the newest reading of each GPU
  and marks a GPU whose reading is overdue as timed out. When a call has hung past
  [nvml].call_deadline, the GPUs its thread would read after it go to a new reader thread, so
  a hung GPU delays only itself (it keeps the stuck thread to itself from then on). So too for
  the calls that open a GPU (its handle, its static facts): a device is registered before them.

Every NVML call goes through `daemon.sources.nvml_query.nvml_query`, the one place NVML errors
are classified; a device's calls go through `_Device.query` and `_Device.call`, which turn an
unsupported field into "absent" (remembered, never asked again), a lost GPU into a status of that
GPU, and any other error into an error on that field.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pynvml

from daemon.sources.dcgm import GPM, DcgmActivity, ProfilingCounters
from daemon.sources.nvml_query import (
    LOST,
    NOT_FOUND,
    NVML_FIXES,
    UNSUPPORTED,
    NvmlFailure,
    has_symbol,
    nvml_error_text,
    nvml_query,
    start_nvml,
    stop_nvml,
)
from daemon.sources.nvml_query import text as _text
from daemon.sources.redact import redact_field
from daemon.sources.safe_text import one_line
from daemon.sources.sample import GPU_ERROR, GPU_LOST, GPU_OK, GPU_TIMEOUT, GpuSample, GpuUse


class NvmlSettings(Protocol):
    """What the GPU source reads of its settings ([nvml] in the config: daemon.config.NvmlConfig
    has these fields). Declared here so that sources never import the config, which sits above
    them."""

    @property
    def call_deadline(self) -> float: ...
    @property
    def retry_initial(self) -> float: ...
    @property
    def retry_max(self) -> float: ...
    @property
    def dcgm_exporter_url(self) -> str: ...


log = logging.getLogger(__name__)

__all__ = ["NVML_FIXES", "GpuReading", "NvmlSource", "nvml_error_text"]

_GPM_SM_UTIL = 2  # NVML_GPM_METRIC_SM_UTIL
_NVML_ERROR_IN_USE = 19  # NVML_ERROR_IN_USE: another client holds what was asked for
# Where a GPU's SM activity comes from, besides daemon.sources.dcgm's GPM, DCGM_EXPORTER and
# HOSTENGINE: no GPM on this GPU, or its GPM refused because another reader holds the counters.
NO_ACTIVITY = "none"
# The name a GPU is listed under while its first calls have not answered (its UUID is "" then)
NOT_ANSWERED = "not answered yet"
HELD_BY_OTHER = "held by another reader"
_MEMORY_V2_SYMBOL = "nvmlDeviceGetMemoryInfo_v2"
_MEMORY_V2 = pynvml.nvmlMemory_v2  # the version word of c_nvmlMemory_v2_t
# A process's memory NVML does not know (MIG, vGPU, Windows WDDM)
_MEMORY_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
# pynvml's structs read every field through a Python-level __getattribute__ (it decodes byte
# strings); the ctypes field descriptors read the same integers directly: 3 fields of 32 samples
# took 88 us that way, 15 us this way (x 8 GPUs a tick). Used only on pynvml's own struct type.
_UTIL_SAMPLE = pynvml.c_nvmlProcessUtilizationSample_t
_SAMPLE_PID = _UTIL_SAMPLE.pid.__get__
_SAMPLE_STAMP = _UTIL_SAMPLE.timeStamp.__get__
_SAMPLE_SM = _UTIL_SAMPLE.smUtil.__get__
# How far back a process-utilization query reaches when the last one was longer ago (a read
# late on a loaded host, the first read after a GPU came back): samples older than this say
# little about now, and the newest sample per process is what is read.
SM_SAMPLES_REACH_S = 5.0
# Fields that change slowly are read every few seconds, not every tick (nvitop caches them so
# too): a GPU's temperature moves by thermal inertia; its memory clock moves with the P-state,
# which moves the SM clock too, so it is read again at once when the SM clock changes.
SLOW_FIELD_MAX_AGE_S = 5.0


def percent(value: int) -> float | None:
    """An NVML percentage, or None where it is not one (a driver's or a simulator's -1 in an
    unsigned int reads 4294967295: recorded, it made a run's mean utilization 44 million %)."""
    return float(value) if 0 <= value <= 100 else None


class _ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t, for drivers that only have the unversioned symbol."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def _process_query(symbol: str, info: type[ctypes.Structure]) -> Callable[[Any], list[Any]]:
    """NVML's `symbol` (nvmlDeviceGetComputeRunningProcesses, _v2 or _v3) called as pynvml's
    wrapper of it calls it: the symbol found through pynvml, the count asked first, the array
    of `info` structs oversized for processes that start meanwhile, NVMLError(code) raised on
    any other answer. Returns (pid, usedGpuMemory) per process, read from the C array by the
    struct's field descriptors: pynvml's wrappers turn each struct into an object field by field
    through a Python __getattribute__, a third of a GPU's whole read at 32 processes a GPU
    (bench/nvml_read.py --profile)."""
    pid_of = info.pid.__get__  # type: ignore[attr-defined]
    memory_of = info.usedGpuMemory.__get__  # type: ignore[attr-defined]

    def query(handle: Any) -> list[Any]:
        fn = pynvml._nvmlGetFunctionPointer(symbol)
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == pynvml.NVML_SUCCESS:
            return []  # no process
        if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise pynvml.NVMLError(ret)
        count.value = count.value * 2 + 5
        infos = (info * count.value)()
        ret = fn(handle, ctypes.byref(count), infos)
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        found = infos[: count.value]
        return list(zip(map(pid_of, found), map(memory_of, found), strict=True))

    query.__name__ = query.__qualname__ = symbol  # a failure names the NVML call
    return query


# Newest first; the first whose symbol the library has is used from then on. The structs are
# pynvml's own (nvmlProcessInfo_v2_t; v3 takes the same) but for v1, which pynvml lacks.
_PROCESS_QUERIES: tuple[tuple[str, Callable[[Any], list[Any]]], ...] = tuple(
    (symbol, _process_query(symbol, info)) for symbol, info in (
        ("nvmlDeviceGetComputeRunningProcesses_v3",
         getattr(pynvml, "c_nvmlProcessInfo_v3_t", pynvml.c_nvmlProcessInfo_v2_t)),
        ("nvmlDeviceGetComputeRunningProcesses_v2", pynvml.c_nvmlProcessInfo_v2_t),
        ("nvmlDeviceGetComputeRunningProcesses", _ProcessInfoV1),
    ))


class _Reader:
    """One reader thread and the GPUs it reads, in turn. `indices` is replaced, never mutated,
    under the source's lock (a hung GPU's reader is left with that GPU alone)."""

    def __init__(self, indices: list[int], devices: dict[int, _Device | None] | None = None
                 ) -> None:
        self.indices = indices
        # Each GPU's opened device (None: to open), used by the reader's thread; a GPU handed
        # to a new reader (_isolate, under the lock: the thread reads it no more) goes with its
        # device: opened once (its facts read, what it does not support remembered and said
        # once), not again by each reader it comes to (probe 142 L7: "GPU 1:
        # nvmlDeviceGetPowerUsage is not supported" logged again a second later)
        self.devices: dict[int, _Device | None] = devices if devices is not None else {}


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One reader thread's latest result for its GPU."""

    gpu: GpuSample
    # pid -> its uses of this GPU (one, or one per MIG instance), never changed once made: the
    # tick merges every GPU's with dict.update instead of a loop over every process
    uses: Mapping[int, tuple[GpuUse, ...]]
    read_at: float  # time.monotonic() when the reading finished
    uses_known: bool = True  # False: the GPU could not be read (lost, failed), nor its processes


class GpuFailed(Exception):
    """A GPU cannot be read at all (lost, or its handle is refused); carries the failure."""

    def __init__(self, failure: NvmlFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _Device:
    """One GPU: its handle, its static facts, and the reads of its dynamic fields."""

    def __init__(self, index: int, handle: Any, config: NvmlSettings,
                 profiling: ProfilingCounters | None = None, *, open_now: bool = True) -> None:
        """A GPU's device, opened (`open`) at once unless `open_now` is False: then the caller
        registers it first, so that a first call that hangs is seen in flight as any later one
        (its handle, None, is looked up by `open`)."""
        self.index = index
        self.handle = handle
        self.config = config
        self.profiling = profiling if profiling is not None else ProfilingCounters()
        self.activity_source = GPM  # who this GPU's SM activity comes from (daemon.sources.dcgm)
        self.dcgm_activity: DcgmActivity | None = None
        self.unsupported: set[str] = set()
        # The call in flight and when it started, as ONE value: the watchdog (latest(), on
        # another thread) must never pair one call's name with another call's start time.
        self.in_flight: tuple[str, float] | None = None
        self.process_query: tuple[str, Callable[[Any], list[Any]]] | None = None
        self.gpm_previous: Any = None  # the GPM sample taken at the last read
        self.gpm_spare: Any = None  # the one before it, to take the next sample into
        self.gpm_request: Any = None  # the metrics request, made once and reused
        self.sm_read_at = 0.0  # time.time() of the last process-utilization query
        self.errors: list[str] = []
        # field -> (when read, time.monotonic(); the field it moves with, then; its value)
        self.slow_fields: dict[str, tuple[float, object, Any]] = {}
        # Its static facts, read by `open`; "" until then (a first call that has not answered)
        self.uuid = ""
        self.name = ""
        self.memory_total: int | None = None
        self.opened = False
        # 2 while the driver answers v2 memory info, 1 once it has been found to lack it.
        self.memory_version = 2  # (found by `open`)
        if open_now:
            self.open()

    def open(self) -> None:
        """Take the handle where it has none, read the static facts. Raises GpuFailed when the
        GPU is lost or its handle is refused."""
        index = self.index
        if self.handle is None:
            handle = self.query("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex,
                                index)
            if isinstance(handle, NvmlFailure):
                raise GpuFailed(handle)
            self.handle = handle
        self.memory_version = 2 if has_symbol(_MEMORY_V2_SYMBOL) else 1
        if self.memory_version == 1:
            self._say_memory_v1("the library has no nvmlDeviceGetMemoryInfo_v2")
        # The driver's (or a simulated scenario's) text: in /v1/now, every /metrics label of
        # the GPU, the store and reports; a secret in it hidden once here, control bytes shown.
        self.uuid = redact_field(one_line(_text(
            self.call("uuid", pynvml.nvmlDeviceGetUUID) or f"GPU-index-{index}")))
        self.name = redact_field(one_line(_text(
            self.call("name", pynvml.nvmlDeviceGetName) or "unknown GPU")))
        self.memory_total, _, _ = self._memory()
        support = None
        if has_symbol("nvmlGpmQueryDeviceSupport"):
            support = self.call("gpm", pynvml.nvmlGpmQueryDeviceSupport)
        if not support or not support.isSupportedDevice:
            self.unsupported.add("gpm")
        self.opened = True

    def query(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call through `nvml_query`, marked in flight: its value or an NvmlFailure.

        Raises GpuFailed when the GPU is lost.
        """
        self.in_flight = (name, time.monotonic())
        try:
            result = nvml_query(fn, *args)
        finally:
            self.in_flight = None
        if isinstance(result, NvmlFailure) and result.kind == LOST:
            raise GpuFailed(result)
        return result

    def call(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML read of a field. None when it is unsupported (remembered) or failed (the
        error goes to this reading's errors). Raises GpuFailed when the GPU is lost."""
        if field in self.unsupported:
            return None
        result = self.query(fn.__name__, fn, *args) if args else self.query(
            fn.__name__, fn, self.handle)
        if not isinstance(result, NvmlFailure):
            return result
        if result.kind == UNSUPPORTED:
            self.unsupported.add(field)
            log.info("GPU %d: %s is not supported; shown as absent", self.index, fn.__name__)
        else:
            self.errors.append(result.describe())
        return None

    def read(self) -> GpuReading:
        """Read the dynamic fields and the processes. Raises GpuFailed for a lost GPU."""
        self.errors = []
        h = self.handle
        util = self.call("utilization", pynvml.nvmlDeviceGetUtilizationRates)
        _, memory_used, memory_reserved = self._memory()
        power_mw = self.call("power", pynvml.nvmlDeviceGetPowerUsage)
        now = time.monotonic()
        temperature = self._slow("temperature", now, None, pynvml.nvmlDeviceGetTemperature, h,
                                 pynvml.NVML_TEMPERATURE_GPU)
        sm_clock = self.call("sm_clock", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
        mem_clock = self._slow("memory_clock", now, sm_clock, pynvml.nvmlDeviceGetClockInfo, h,
                               pynvml.NVML_CLOCK_MEM)
        sm_activity = self._sm_activity()
        uses = self._processes()
        gpu = GpuSample(
            index=self.index,
            uuid=self.uuid,
            name=self.name,
            status=GPU_ERROR if self.errors else GPU_OK,
            utilization=percent(util.gpu) if util is not None else None,
            sm_activity=sm_activity,
            memory_used_bytes=memory_used,
            memory_total_bytes=self.memory_total,
            memory_reserved_bytes=memory_reserved,
            power_watts=power_mw / 1000.0 if power_mw is not None else None,
            temperature_c=int(temperature) if temperature is not None else None,
            sm_clock_mhz=int(sm_clock) if sm_clock is not None else None,
            memory_clock_mhz=int(mem_clock) if mem_clock is not None else None,
            # (NVML's texts, redacted where they are made: each is a few known words, so
            # remembered by redact_field; nothing is done on a tick without an error)
            error=redact_field("; ".join(self.errors)) if self.errors else None,
        )
        return GpuReading(gpu=gpu, uses=uses, read_at=time.monotonic())

    def _slow(self, field: str, now: float, depends_on: object, fn: Callable[..., Any],
              *args: Any) -> Any:
        """A slow field's value: the one read within SLOW_FIELD_MAX_AGE_S while `depends_on`
        (a faster field it moves with) has not changed since, else a new read (as `call`). A
        failed read is not kept: the next tick asks again and its error shows meanwhile."""
        kept = self.slow_fields.get(field)
        if kept is not None and now - kept[0] < SLOW_FIELD_MAX_AGE_S and kept[1] == depends_on:
            return kept[2]
        value = self.call(field, fn, *args)
        if value is None:
            self.slow_fields.pop(field, None)
        else:
            self.slow_fields[field] = (now, depends_on, value)
        return value

    def _memory(self) -> tuple[int | None, int | None, int | None]:
        """(total, used, reserved) bytes: v2 memory info while the driver has it (used without
        the reserved memory, as nvidia-smi shows), else v1 (used includes it; reserved None)."""
        if "memory" in self.unsupported:
            return None, None, None
        if self.memory_version == 2:
            info = self.query(_MEMORY_V2_SYMBOL, pynvml.nvmlDeviceGetMemoryInfo, self.handle,
                              _MEMORY_V2)
            if not isinstance(info, NvmlFailure):
                return int(info.total), int(info.used), int(info.reserved)
            if info.kind != UNSUPPORTED:
                self.errors.append(info.describe())
                return None, None, None
            self.memory_version = 1
            self._say_memory_v1(info.message)
        memory = self.call("memory", pynvml.nvmlDeviceGetMemoryInfo)
        if memory is None:
            return None, None, None
        return int(memory.total), int(memory.used), None

    def _say_memory_v1(self, why: str) -> None:
        log.info("GPU %d: v2 memory info is not available (%s); memory used includes the "
                 "driver-reserved memory (older nvidia-smi shows it so too) and "
                 "memory_reserved_bytes is absent", self.index, why)

    def _sm_activity(self) -> float | None:
        """SM activity in percent: from DCGM where it holds this GPU's profiling counters
        (daemon.sources.dcgm), else from GPM (Hopper and later; two samples, so the first read
        is None). GPM is never sampled on a GPU whose counters another reader holds."""
        source, activity = self.profiling.source_for(self.uuid)
        self.dcgm_activity = activity
        if source != GPM:
            if self.activity_source != source:
                log.info("GPU %d: SM activity from %s; GPM left off (DCGM reads the same "
                         "counters)", self.index, source)
            self.activity_source = source
            self._leave_gpm()
            return activity.sm * 100.0 if activity is not None and activity.sm is not None \
                else None
        if "gpm" in self.unsupported:
            if self.activity_source == GPM:
                self.activity_source = NO_ACTIVITY
            return None
        self.activity_source = GPM
        # Two samples, taken into in turn (as NVML's GPM example does): not one allocated and
        # one freed every read, two NVML calls a GPU a tick.
        sample, self.gpm_spare = self.gpm_spare, None
        if sample is None:
            sample = self.query("nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc)
        got = sample if isinstance(sample, NvmlFailure) else self.query(
            "nvmlGpmSampleGet", pynvml.nvmlGpmSampleGet, self.handle, sample)
        if isinstance(got, NvmlFailure):
            if not isinstance(sample, NvmlFailure):
                nvml_query(pynvml.nvmlGpmSampleFree, sample)
            self._leave_gpm()
            self.unsupported.add("gpm")
            if got.code == _NVML_ERROR_IN_USE:
                self.activity_source = HELD_BY_OTHER
                log.warning("GPU %d: another reader holds its profiling counters (%s); GPM "
                            "left off so neither skews the other, SM activity shown as absent "
                            "(set [nvml].dcgm_exporter_url if it is DCGM)", self.index,
                            got.describe())
            else:
                self.activity_source = NO_ACTIVITY
                log.info("GPU %d: GPM is not available (%s); SM activity shown as absent",
                         self.index, got.describe())
            return None
        previous, self.gpm_previous = self.gpm_previous, sample
        if previous is None:
            return None
        request = self.gpm_request
        if request is None:
            request = self.gpm_request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1 = previous
        request.sample2 = sample
        request.metrics[0].metricId = _GPM_SM_UTIL
        self.gpm_spare = previous  # the next read's sample goes into it
        result = self.query("nvmlGpmMetricsGet", pynvml.nvmlGpmMetricsGet, request)
        if isinstance(result, NvmlFailure):
            self.errors.append(result.describe())
            return None
        value = float(request.metrics[0].value)
        return value if math.isfinite(value) else None

    def _leave_gpm(self) -> None:
        """Stop sampling GPM on this GPU: its samples are freed."""
        for sample in (self.gpm_previous, self.gpm_spare):
            if sample is not None:
                nvml_query(pynvml.nvmlGpmSampleFree, sample)
        self.gpm_previous = self.gpm_spare = None

    def _processes(self) -> dict[int, tuple[GpuUse, ...]]:
        infos = self._running_processes()
        if not infos:
            return {}
        shares = self._sm_shares()
        uses: dict[int, tuple[GpuUse, ...]] = {}
        index = self.index
        for pid, memory in infos:
            use = GpuUse(index, None if memory == _MEMORY_NOT_AVAILABLE else memory,
                         shares.get(pid, 0.0))
            held = uses.get(pid)
            uses[pid] = (use,) if held is None else (*held, use)
        return uses

    def _running_processes(self) -> list[tuple[int, int]]:
        """(pid, used memory) of the compute processes, through the newest query whose symbol the library has (v3 -> v2 ->
        v1), chosen once and kept."""
        if "processes" in self.unsupported:
            return []
        if self.process_query is None:
            self.process_query = next(
                ((symbol, query) for symbol, query in _PROCESS_QUERIES if has_symbol(symbol)),
                None)
            if self.process_query is None:
                self.unsupported.add("processes")
                log.warning("GPU %d: no ComputeRunningProcesses symbol in this NVML", self.index)
                return []
        symbol, query = self.process_query
        result = self.query(symbol, query, self.handle)
        if not isinstance(result, NvmlFailure):
            return result
        if result.kind == UNSUPPORTED:
            self.unsupported.add("processes")
        else:
            self.errors.append(result.describe())
        return []

    def _sm_shares(self) -> dict[int, float]:
        """SM share per pid from its newest sample since the last read (at least the last
        second, at most SM_SAMPLES_REACH_S); a process with no sample is at 0%.

        From the last read, as NVML's lastSeenTimeStamp is meant to be used: a short kernel that
        ran between two reads further apart than a second (a read late on a loaded host) is
        still seen once."""
        if "process_utilization" in self.unsupported:
            return {}
        now = time.time()
        since = min(now - 1.0, max(self.sm_read_at, now - SM_SAMPLES_REACH_S))
        self.sm_read_at = now
        samples = self.query("nvmlDeviceGetProcessUtilization",
                             pynvml.nvmlDeviceGetProcessUtilization, self.handle,
                             int(since * 1_000_000))
        if isinstance(samples, NvmlFailure):
            if samples.kind == UNSUPPORTED:
                self.unsupported.add("process_utilization")
            elif samples.kind != NOT_FOUND:  # NOT_FOUND: no process has run a kernel lately
                self.errors.append(samples.describe())
            return {}
        if samples and type(samples[0]) is _UTIL_SAMPLE:
            fields: Iterable[tuple[int, int, int]] = zip(
                map(_SAMPLE_PID, samples), map(_SAMPLE_STAMP, samples), map(_SAMPLE_SM, samples),
                strict=True)
        else:  # another pynvml's type: through its attributes
            fields = ((int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in samples)
        stamps: dict[int, int] = {}
        shares: dict[int, float] = {}
        for pid, stamp, share in fields:  # each pid's newest sample
            if pid not in stamps or stamp > stamps[pid]:
                stamps[pid] = stamp
                shares[pid] = float(share)
        return shares


class NvmlSource:
    """Keeps the latest reading of every GPU; `latest()` is what the tick calls."""

    def __init__(self, config: NvmlSettings, interval: float) -> None:
        self.config = config
        self.interval = interval
        self.status = "starting"
        # The daemon logs NVML's failure to start, and that it retries; `mlcostd profile`, a
        # one-shot run, says it once in its own words instead (runtime/profile.py).
        self.log_unavailable = True
        self.driver_version: str | None = None
        self.gpu_count: int | None = None  # what NVML counted at its start; None before it
        self._readings: dict[int, GpuReading] = {}
        self._readers_started: float | None = None  # time.monotonic() when NVML counted them
        self._all_read = threading.Event()  # each GPU counted has its first reading (or failure)
        self._devices: dict[int, _Device] = {}  # each GPU's latest opened device
        # a GPU's device while it opens (its handle, its static facts): its calls in flight are
        # watched as an opened device's are, its facts listed as far as they were read
        self._opening: dict[int, _Device] = {}
        self._device_status: dict[int, tuple[str, str | None]] = {}
        # GPU index -> (its last complete reading's uses by pid, its wall time): what a GPU
        # that is lost or not answering was running, so those processes are still recorded,
        # holding what they held then (the burn splits that GPU's price by it: "unread")
        self._holders: dict[int, tuple[Mapping[int, tuple[GpuUse, ...]], float]] = {}
        # GPU index -> when its next read is due (time.monotonic(): a wall-clock step, back or
        # forward, must not hold the reads; the reads are still aligned to the wall clock's
        # ticks, see _read_one)
        self._due: dict[int, float] = {}
        self._backoff: dict[int, float] = {}  # GPU index -> its retry delay while it fails
        self._readers: list[_Reader] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []
        # who reads each GPU's profiling counters: DCGM (exporter or host engine) or GPM
        self.profiling = ProfilingCounters(config.dcgm_exporter_url, interval_s=interval,
                                           timeout_s=min(1.0, max(interval, 0.2)))

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self.profiling.start()
        thread = threading.Thread(target=self._supervise, name="nvml-supervisor", daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait_ready(self, timeout: float) -> bool:
        """Wait until NVML has started (or failed once); for `check` and tests."""
        return self._ready.wait(timeout)

    def wait_first_readings(self) -> bool:
        """Wait until each GPU NVML counted has its first reading (or its first failure), for
        as long as a reading may take before it is overdue (`_view`); at once where NVML has
        not started. For the daemon's start: its first tick lists every GPU, those that have
        not answered as not answering (under load the readers' first answers came after the
        first tick, and /v1/now listed no GPU while /v1/health said ok)."""
        end = time.monotonic() + self.interval + self.config.call_deadline
        while self.gpu_count and not self._all_read.wait(0.05):
            now = time.monotonic()
            if now >= end:
                return False
            self._isolate_hung(now)  # (the GPUs behind a hung first call are read meanwhile)
        return True

    def stop(self) -> None:
        self._stop.set()
        self.profiling.stop()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=self.config.call_deadline + 1.0)
        if self._devices:
            stop_nvml()

    def _supervise(self) -> None:
        delay = self.config.retry_initial
        while not self._stop.is_set():
            started = start_nvml()
            if isinstance(started, NvmlFailure):
                self._set_status(f"NVML unavailable: {started.message}; "
                                 f"retrying in {delay:g} s")
                self._ready.set()
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.config.retry_max)
                continue
            count, self.driver_version = started
            self.gpu_count = count
            self._set_status("ok")
            log.info("NVML started: driver %s, %d GPU(s)", self.driver_version, count)
            if count:
                with self._lock:
                    self._readers_started = time.monotonic()
                    self._start_reader(list(range(count)))
            else:
                self._all_read.set()
            self._ready.set()
            return

    def _set_status(self, status: str) -> None:
        """Log a change of NVML's status once, not at every retry."""
        before = self.status.split(";")[0]
        if status == "ok" and before.startswith("NVML unavailable"):
            log.info("NVML is available again")
        elif status != "ok" and status.split(";")[0] != before and self.log_unavailable:
            log.warning("%s", status)
        self.status = status

    # -- one GPU ---------------------------------------------------------------------------

    def _start_reader(self, indices: list[int],
                      devices: dict[int, _Device | None] | None = None) -> None:
        """A reader thread for `indices` (with their `devices` where they have them); the
        caller holds `_lock`."""
        reader = _Reader(indices, devices)
        self._readers.append(reader)
        thread = threading.Thread(target=self._read_gpus, args=(reader,),
                                  name=f"nvml-reader{len(self._readers) - 1}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _read_gpus(self, reader: _Reader) -> None:
        """Read each of the reader's GPUs when it is due: every interval, a little before the
        tick, or on its own backoff while it fails."""
        devices = reader.devices
        while not self._stop.is_set():
            now = time.monotonic()
            for index in reader.indices:
                with self._lock:  # not read once it has gone to another reader
                    if index not in reader.indices:
                        continue
                if self._due.get(index, 0.0) <= now:
                    devices[index] = self._read_one(index, devices.get(index))
            with self._lock:
                due = min(self._due.get(i, 0.0) for i in reader.indices)
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return

    def _read_one(self, index: int, device: _Device | None) -> _Device | None:
        """Read one GPU, record its reading and when it is next due; returns its device (None
        once it is lost: a fresh handle is taken when it comes back). Never raises."""
        backoff = self._backoff.get(index, self.config.retry_initial)
        try:
            if device is None:
                # Known before its first call (the handle's lookup): a call that hangs while
                # it opens hands this reader's other GPUs on as any later one does
                device = _Device(index, None, self.config, self.profiling, open_now=False)
                with self._lock:
                    self._opening[index] = device
                try:
                    device.open()
                finally:
                    with self._lock:
                        if self._opening.get(index) is device:
                            del self._opening[index]
                with self._lock:
                    self._devices[index] = device
            reading = device.read()
            with self._lock:
                self._readings[index] = reading
                self._holders[index] = (reading.uses, time.time())
                if len(self._readings) == self.gpu_count:
                    self._all_read.set()
            self._note_device(index, reading.gpu.status, reading.gpu.error)
            self._backoff[index] = self.config.retry_initial
            # Due a little before the next tick, which the daemon's loop takes on the wall
            # clock's multiples of the interval; waited for on the monotonic clock (a clock
            # stepped back an hour held every GPU's read for that hour, all "timeout")
            lead = min(0.2, self.interval / 4)
            now = time.time()
            wake = math.ceil((now + lead) / self.interval) * self.interval - lead
            if wake - now < self.interval / 2:
                wake += self.interval
            self._due[index] = time.monotonic() + (wake - now)
        except Exception as exc:  # noqa: BLE001 - the reader thread must never die
            if isinstance(exc, GpuFailed):
                lost = exc.failure.kind == LOST
                message = exc.failure.message
            else:  # not NVML's error (a bug, a bad value from the driver): this GPU only
                lost = False
                message = (f"reading GPU {index} failed: {type(exc).__name__}: {exc}; "
                           f"retrying in {backoff:g} s (a bug in mlcostd: please report "
                           "it with this line)")
            message = redact_field(one_line(message))  # (an exception's text: a driver's value)
            status = GPU_LOST if lost else GPU_ERROR
            with self._lock:
                previous = self._readings.get(index)
                base = previous.gpu if previous else GpuSample(
                    index=index, uuid=device.uuid if device else "",
                    name=device.name if device and device.name else "unknown GPU")
                self._readings[index] = GpuReading(
                    gpu=GpuSample(index=index, uuid=base.uuid, name=base.name, status=status,
                                  memory_total_bytes=base.memory_total_bytes,
                                  memory_reserved_bytes=base.memory_reserved_bytes,
                                  error=message),
                    uses={}, read_at=time.monotonic(), uses_known=False)
                if len(self._readings) == self.gpu_count:
                    self._all_read.set()
            self._note_device(index, status, message)
            if lost or (device is not None and not device.opened):
                device = None  # take a fresh handle when it comes back (or open it again)
            self._due[index] = time.monotonic() + backoff
            self._backoff[index] = min(backoff * 2, self.config.retry_max)
        return device

    def _isolate(self, index: int, in_flight: tuple[str, float]) -> None:
        """GPU `index`'s call `in_flight` has hung past the deadline: the other GPUs of its
        reader go to a new reader thread, unless the call has ended meanwhile."""
        with self._lock:
            device = self._opening.get(index, self._devices.get(index))
            if self._stop.is_set() or device is None or device.in_flight is not in_flight:
                return
            reader = next((r for r in self._readers if index in r.indices), None)
            if reader is None or len(reader.indices) == 1:
                return
            others = [i for i in reader.indices if i != index]
            reader.indices = [index]
            # (the stuck thread reads none of them again: it looks at its indices first)
            self._start_reader(others, {i: reader.devices.pop(i) for i in others
                                        if i in reader.devices})
        log.warning("GPU %d: %s has not answered for %.1f s; the other GPUs it shared a "
                    "reader with (%s) are read by a new thread", index, in_flight[0],
                    time.monotonic() - in_flight[1], ", ".join(map(str, others)))

    def _note_device(self, index: int, status: str, error: str | None) -> None:
        """Log a GPU's status when it changes, not every second."""
        previous = self._device_status.get(index)
        if previous is None or previous[0] != status:
            if status == GPU_OK:
                if previous is not None:
                    log.info("GPU %d: back to normal", index)
            else:
                log.warning("GPU %d: %s: %s", index, status, error)
        self._device_status[index] = (status, error)

    # -- the tick's view -----------------------------------------------------------------

    def latest(self) -> tuple[str, tuple[GpuSample, ...], dict[int, tuple[GpuUse, ...]]]:
        """(nvml status, one sample per GPU, GPU uses per pid). Never blocks on NVML."""
        status, gpus, uses, _, _ = self._view()
        return status, gpus, uses

    def latest_and_sick(self) -> tuple[str, tuple[GpuSample, ...],
                                       dict[int, tuple[GpuUse, ...]], dict[int, float],
                                       dict[int, tuple[GpuUse, ...]]]:
        """`latest()` and `sick_holders()` from one look at the readers (the tick asks for
        both: one pass over every GPU's processes, not two), and what each process held on the
        GPUs not read now (lost, failing, not answering) at their last complete reading: its
        memory there, no SM share (nothing is known of its kernels). Never blocks on NVML."""
        status, gpus, uses, stale, held = self._view()
        return (status, gpus, uses,
                {pid: seen for pid, seen in stale.items() if pid not in uses}, held)

    def activity_sources(self) -> dict[int, tuple[str, str, DcgmActivity | None]]:
        """GPU index -> (UUID, where its SM activity comes from, DCGM's tensor/DRAM/SM
        ratios when DCGM is the source): for `check` and /metrics. Never blocks on NVML."""
        with self._lock:
            devices = dict(self._devices)
        return {index: (d.uuid, d.activity_source, d.dcgm_activity)
                for index, d in sorted(devices.items())}

    def read_at(self, index: int) -> float | None:
        """When GPU `index`'s latest reading finished (time.monotonic()); None before its first.
        A read-only view of each GPU reader's cadence."""
        with self._lock:
            reading = self._readings.get(index)
        return reading.read_at if reading is not None else None

    def sick_holders(self) -> dict[int, float]:
        """pid -> when it was last seen (wall time) on a GPU that is now lost, failing or not
        answering, for the pids on no GPU that answers: their GPU use is unknown, but they may
        still run, and their CPU, memory and I/O are recorded. Never blocks on NVML."""
        return self.latest_and_sick()[3]

    def _view(self) -> tuple[str, tuple[GpuSample, ...], dict[int, tuple[GpuUse, ...]],
                             dict[int, float], dict[int, tuple[GpuUse, ...]]]:
        now = time.monotonic()
        deadline = self.config.call_deadline
        gpus = []
        known: list[Mapping[int, tuple[GpuUse, ...]]] = []  # the uses of each GPU that answers
        stale: dict[int, float] = {}
        kept: dict[int, tuple[GpuUse, ...]] = {}  # pid -> its uses of the GPUs not read now

        def held(index: int) -> None:
            # (only for a GPU not read this tick: a handful of uses, not every process's)
            last, seen = holders.get(index, ({}, 0.0))
            for pid, on_gpu in last.items():
                stale[pid] = seen
                then = tuple(GpuUse(index, use.memory_bytes, 0.0) for use in on_gpu)
                kept[pid] = (*kept[pid], *then) if pid in kept else then

        with self._lock:
            readings = dict(self._readings)
            devices = dict(self._devices)
            if self._opening:
                devices.update(self._opening)
            holders = dict(self._holders)
            started = self._readers_started
        if started is not None and len(readings) < (self.gpu_count or 0) \
                and now - started > self.interval + deadline:
            # a GPU whose first reading is overdue (its first call hangs) is listed as not
            # answering, its facts as far as they were read; it was left out of every tick
            for index in range(self.gpu_count or 0):
                if index not in readings:
                    device = devices.get(index)
                    readings[index] = GpuReading(
                        gpu=self._timed_out(GpuSample(
                            index=index, uuid=device.uuid if device else "",
                            name=device.name if device and device.name else NOT_ANSWERED),
                            f"no first reading after {now - started:.1f} s"),
                        uses={}, read_at=started, uses_known=False)
        self._isolate_hung(now, devices)
        for index in sorted(readings):
            reading = readings[index]
            gpu = reading.gpu
            device = devices.get(index)
            in_flight = device.in_flight if device else None  # one read: name and start agree
            overdue = now - reading.read_at > self.interval + deadline
            if in_flight is not None and now - in_flight[1] > deadline:
                gpu = self._timed_out(gpu, f"{in_flight[0]} has not answered for "
                                           f"{now - in_flight[1]:.1f} s")
                held(index)
            elif overdue and gpu.status in (GPU_OK, GPU_ERROR):
                gpu = self._timed_out(gpu, f"no reading for {now - reading.read_at:.1f} s")
                held(index)
            elif not reading.uses_known:
                held(index)
            else:
                known.append(reading.uses)
            gpus.append(gpu)
        uses: dict[int, tuple[GpuUse, ...]] = {}
        for of_gpu in known:
            uses.update(of_gpu)
        if len(uses) < sum(map(len, known)):  # a process on several GPUs: its uses joined
            uses = {}
            for of_gpu in known:
                for pid, on_gpu in of_gpu.items():
                    uses[pid] = (*uses[pid], *on_gpu) if pid in uses else on_gpu
        return self.status, tuple(gpus), uses, stale, kept

    def _isolate_hung(self, now: float, devices: Mapping[int, _Device] | None = None) -> None:
        """A GPU whose call has hung past the deadline: the other GPUs of its reader move to
        a new one (`_isolate`)."""
        if devices is None:
            with self._lock:
                devices = dict(self._devices)
                devices.update(self._opening)
        for index, hung in devices.items():
            flight = hung.in_flight
            if flight is not None and now - flight[1] > self.config.call_deadline:
                self._isolate(index, flight)

    @staticmethod
    def _timed_out(gpu: GpuSample, why: str) -> GpuSample:
        # Total and reserved memory are facts of the GPU: kept while its reading is overdue.
        return replace(GpuSample(index=gpu.index, uuid=gpu.uuid, name=gpu.name,
                                 memory_total_bytes=gpu.memory_total_bytes,
                                 memory_reserved_bytes=gpu.memory_reserved_bytes),
                       status=GPU_TIMEOUT, error=why)
