"""A stand-in for libnvidia-ml that answers from a simulated host's state dir.

pynvml resolves every C symbol with `getattr(pynvml.nvmlLib, name)` and skips loading the real
library when `pynvml.nvmlLib` is set. `install()` sets it to a `SimulatedNvml`, whose attributes
are named like the C symbols, take the same ctypes arguments, fill the real pynvml structs and
return real NVML return codes. So pynvml's wrappers, struct versions and NVMLError classes run
unchanged, and so does any other NVML client in the process (nvitop, gpustat).

A symbol the simulated driver lacks raises AttributeError, which pynvml turns into
NVML_ERROR_FUNCTION_NOT_FOUND: the same way a real older driver answers a version probe.

Reading is cheap by design: records stay mmap'd, the attach directory is rescanned only when its
mtime changes or every RESCAN_NS (to drop dead processes), and one snapshot of all GPUs is shared
by every call within SNAPSHOT_TTL_NS.
"""

from __future__ import annotations

import ctypes
import difflib
import fcntl
import mmap
import os
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from daemon.sim import state

SNAPSHOT_TTL_NS = 50_000_000  # calls within one tick share one read of the records
RESCAN_NS = 500_000_000  # how often dead attachments are looked for
WINDOW_NS = 1_000_000_000  # utilization is measured over about the last second
HISTORY_STEP_NS = 100_000_000
RESERVED_MEMORY = 512 << 20  # driver/firmware reservation, as nvidia-smi shows it
NOT_A_MIG_ID = 0xFFFFFFFF

SUCCESS = pynvml.NVML_SUCCESS
ERR_UNINITIALIZED = pynvml.NVML_ERROR_UNINITIALIZED
ERR_INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
ERR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
ERR_IN_USE = pynvml.NVML_ERROR_IN_USE
ERR_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
ERR_INSUFFICIENT_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
ERR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
ERR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
ERR_LIB_RM_VERSION_MISMATCH = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
ERR_ARGUMENT_VERSION_MISMATCH = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH

# Return codes newer than pynvml's own string table, as libnvidia-ml's nvmlErrorString says them.
_NEWER_ERROR_STRINGS = {ERR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch"}

DRIVER_VERSION = b"550.90.07"
NVML_VERSION = b"12.550.90.07"
CUDA_DRIVER_VERSION = 12040


# Struct layouts as nvml.h lays them out (x86-64), packed directly into the caller's array.
_V1_LAYOUT = struct.Struct("<I4xQ")  # nvmlProcessInfo_v1_t: pid, usedGpuMemory
_V2_LAYOUT = struct.Struct("<I4xQII")  # nvmlProcessInfo_v2_t / nvmlProcessInfo_t (v3)
_UTIL_SAMPLE_LAYOUT = struct.Struct("<I4xQIIII")  # nvmlProcessUtilizationSample_t
assert _V2_LAYOUT.size == ctypes.sizeof(pynvml.c_nvmlProcessInfo_v2_t)
assert _UTIL_SAMPLE_LAYOUT.size == ctypes.sizeof(pynvml.c_nvmlProcessUtilizationSample_t)

# Symbols that work before nvmlInit (everything else answers NVML_ERROR_UNINITIALIZED).
_NO_INIT_NEEDED = {"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlErrorString"}
# Symbols whose first argument is a device handle; faults apply to them per device.
_NOT_PER_DEVICE = {
    "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID",
}


def _per_device(name: str) -> bool:
    return (name.startswith("nvmlDevice") and name not in _NOT_PER_DEVICE) or name in (
        "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet",
    )


_VERSIONED = re.compile(r"(?P<base>.+?)(?:_v(?P<version>[0-9]+))?")


def why_a_fault_never_fires(name: str, missing: frozenset[str] = frozenset()) -> str | None:
    """Why a fault on the GPU's call `name` (hang, not_supported, in_use) would never fire, or
    None: the simulated library has no such symbol, it is not a call on one GPU (the device
    faults are looked at there, and in nvmlDeviceGetHandleByIndex_v2), or a newer version of it
    is there (not in `missing`, the scenario's missing_symbol faults): mlcostd calls the newest
    (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetComputeRunningProcesses_v3), and an older one only
    where the newer ones are missing."""
    symbols = sorted(n for n in vars(_Symbols) if n.startswith("nvml"))
    if name not in symbols:
        near = difflib.get_close_matches(name, symbols, n=1)
        return (f"the simulated NVML library has no {name}"
                + (f": did you mean {near[0]}?" if near else ""))
    match = _VERSIONED.fullmatch(name)
    assert match is not None  # (every name matches)
    base, version = match.group("base"), int(match.group("version") or 1)
    newer = [n for n in symbols if n not in missing and (m := _VERSIONED.fullmatch(n))
             and m.group("base") == base and int(m.group("version") or 1) > version]
    if newer:
        newest = max(newer, key=lambda n: int(n.rpartition("_v")[2]))
        return (f"mlcostd calls {newest} (the newest version the library has), never "
                f"{name}: did you mean {newest}?")
    if not _per_device(name) and name != "nvmlDeviceGetHandleByIndex_v2":
        return f"{name} is no call on one GPU (a GPU's faults are looked at in those)"
    return None


class _Attachment:
    """One (process, GPU) record, mmap'd read-only, with a short history of its counters."""

    __slots__ = ("name", "gpu", "pid", "fd", "mm", "history", "last")

    def __init__(self, name: str, gpu: int, pid: int, fd: int, mm: mmap.mmap) -> None:
        self.name, self.gpu, self.pid, self.fd, self.mm = name, gpu, pid, fd, mm
        self.history: deque[tuple[int, int, int]] = deque()
        self.last: tuple[Any, ...] | None = None  # the newest consistent record

    def read(self) -> tuple[Any, ...] | None:
        """The record, or the last consistent one if the writer is (or died) mid-write."""
        unpack = state.RECORD.unpack_from
        for _ in range(64):
            rec = unpack(self.mm, 0)
            if rec[0] == rec[-1]:
                if self.last is None:
                    self.history.append((rec[8], 0, 0))  # counters start at zero on attach
                self.last = rec
                return rec
        return self.last

    def is_dead(self) -> bool:
        """True once the owner is gone: its exclusive flock died with it."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


# A process on one GPU as of one snapshot:
# (pid, memory_bytes, busy_pct, sm_pct, last_active_ns (monotonic))
_ProcessView = tuple[int, int, float, float, int]


class _GpuView:
    """One GPU as of one snapshot."""

    __slots__ = ("memory_used", "util_pct", "sm_pct", "busy_ns", "sm_busy_ns", "processes")

    def __init__(self) -> None:
        self.memory_used = 0
        self.util_pct = 0.0
        self.sm_pct = 0.0
        self.busy_ns = 0  # cumulative, including processes that have gone (for GPM deltas)
        self.sm_busy_ns = 0
        self.processes: list[_ProcessView] = []


class _HostReader:
    """Reads every attachment record of a state dir, cheaply and without locks on the writers."""

    def __init__(self, state_dir: Path, gpu_count: int) -> None:
        self.attach_dir = state_dir / state.ATTACH_DIR
        self.gpu_count = gpu_count
        self.attachments: dict[str, _Attachment] = {}
        self.dir_mtime_ns = -1
        self.scanned_ns = 0
        self.retired_busy_ns = [0] * gpu_count
        self.retired_sm_ns = [0] * gpu_count
        self.snapshot_ns = 0
        self.wall_offset_ns = 0  # time.time_ns() - time.monotonic_ns() at the snapshot
        self.gpus: list[_GpuView] = [_GpuView() for _ in range(gpu_count)]
        self.lock = threading.Lock()

    def snapshot(self) -> list[_GpuView]:
        now = time.monotonic_ns()
        if now - self.snapshot_ns < SNAPSHOT_TTL_NS:
            return self.gpus
        with self.lock:
            if now - self.snapshot_ns >= SNAPSHOT_TTL_NS:
                self._refresh(now)
        return self.gpus

    def close(self) -> None:
        with self.lock:
            for att in self.attachments.values():
                att.close()
            self.attachments.clear()

    def _rescan(self, now: int) -> None:
        try:
            mtime = os.stat(self.attach_dir).st_mtime_ns
        except FileNotFoundError:
            mtime = 0
        check_liveness = now - self.scanned_ns >= RESCAN_NS
        if mtime == self.dir_mtime_ns and not check_liveness:
            return
        self.dir_mtime_ns = mtime
        try:
            names = set(os.listdir(self.attach_dir))
        except FileNotFoundError:
            names = set()
        for name in [n for n in self.attachments if n not in names]:
            self._retire(self.attachments.pop(name))
        for name in names:
            if name in self.attachments:
                continue
            parsed = state.parse_attach_file_name(name)
            if parsed is None or parsed[0] >= self.gpu_count:
                continue
            try:
                fd = os.open(self.attach_dir / name, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                mm = mmap.mmap(fd, state.RECORD_SIZE, prot=mmap.PROT_READ)
            except (ValueError, OSError):
                os.close(fd)
                continue
            self.attachments[name] = _Attachment(name, parsed[0], parsed[1], fd, mm)
        if check_liveness:
            self.scanned_ns = now
            for name, att in list(self.attachments.items()):
                if att.is_dead():
                    del self.attachments[name]
                    self._retire(att)
                    try:  # a dead process's record is garbage; anyone may sweep it
                        os.unlink(self.attach_dir / name)
                    except OSError:
                        pass

    def _retire(self, att: _Attachment) -> None:
        # Keep what a gone process did in the GPU's cumulative counters, so GPM deltas never
        # go backwards when a process exits.
        if att.last is not None:
            self.retired_busy_ns[att.gpu] += att.last[4]
            self.retired_sm_ns[att.gpu] += att.last[5]
        att.close()

    def _refresh(self, now: int) -> None:
        self._rescan(now)
        gpus = [_GpuView() for _ in range(self.gpu_count)]
        for i, gpu in enumerate(gpus):
            gpu.busy_ns = self.retired_busy_ns[i]
            gpu.sm_busy_ns = self.retired_sm_ns[i]
        window_start = now - WINDOW_NS
        step_before = now - HISTORY_STEP_NS
        for att in self.attachments.values():
            rec = att.read()
            if rec is None:
                continue
            _, pid, gpu_index, memory, busy, sm_busy, k_start, k_sm, _, last_end, _ = rec
            if k_start:  # a kernel is running: count it up to now
                busy += now - k_start
                sm_busy += int((now - k_start) * k_sm)
                last_end = now
            history = att.history
            # history[0] is the newest reading at least WINDOW_NS old (or the attach point)
            while len(history) > 1 and history[1][0] <= window_start:
                history.popleft()
            # The sample period is about a second, from whichever of it and the next reading is
            # nearer to a second old: reads come about a second apart, and one a little early
            # would otherwise stretch the period to two seconds, halving a short kernel's share
            # until NVML's whole percent rounds it to 0 (NVML's own period is 1/6 s to 1 s).
            t0, busy0, sm0 = (history[1] if len(history) > 1
                              and history[1][0] - window_start < window_start - history[0][0]
                              else history[0])
            elapsed = now - t0
            if elapsed > 0:
                busy_pct = 100.0 * (busy - busy0) / elapsed
                sm_pct = 100.0 * (sm_busy - sm0) / elapsed
            else:
                busy_pct = sm_pct = 0.0
            if history[-1][0] <= step_before:
                history.append((now, busy, sm_busy))
            gpu = gpus[gpu_index]
            gpu.memory_used += memory
            gpu.util_pct += busy_pct
            gpu.sm_pct += sm_pct
            gpu.busy_ns += busy
            gpu.sm_busy_ns += sm_busy
            gpu.processes.append((pid, memory, busy_pct, sm_pct, last_end))
        for gpu in gpus:
            # A process's busy time read mid-kernel (counted up to now) can exceed what the
            # same kernel later adds at its end, on a loaded host by more than the new work:
            # a slightly negative rate, which NVML's unsigned int would show as 4294967295 %.
            gpu.util_pct = min(100.0, max(0.0, gpu.util_pct))
            gpu.sm_pct = min(100.0, max(0.0, gpu.sm_pct))
            gpu.processes.sort()
        self.gpus = gpus
        self.wall_offset_ns = time.time_ns() - time.monotonic_ns()
        self.snapshot_ns = now


class _GpmSample:
    __slots__ = ("block", "gpu", "taken_ns", "busy_ns", "sm_busy_ns")

    def __init__(self) -> None:
        self.block = ctypes.create_string_buffer(16)  # the opaque handle points here
        self.gpu = -1
        self.taken_ns = 0
        self.busy_ns = 0
        self.sm_busy_ns = 0


def _out(arg: Any) -> Any:
    """The ctypes object behind a byref() argument (what a C function writes through)."""
    return arg._obj


def _handle_address(handle: Any) -> int | None:
    """The address an opaque handle (a ctypes POINTER) points to."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def _put_pointer(out: Any, address: int) -> None:
    ctypes.c_void_p.from_address(ctypes.addressof(out)).value = address


def _put_string(buf: Any, length: Any, value: bytes) -> int:
    if len(value) + 1 > length.value:
        return ERR_INSUFFICIENT_SIZE
    buf.value = value
    return SUCCESS


class SimulatedNvml:
    """The simulated libnvidia-ml for one state dir. Attributes are the C symbols."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)
        host = state.read_host(self.state_dir)
        self.host = host
        self.gpus: list[dict[str, Any]] = host["gpus"]
        self.start_epoch: float = float(host["start_epoch"])
        faults: list[dict[str, Any]] = host.get("faults", [])
        self.missing_symbols = {
            s for f in faults if f["kind"] == "missing_symbol" for s in f["symbols"]
        }
        self.init_faults = [f for f in faults if f["kind"] in ("nvml_missing", "driver_mismatch")]
        self.device_faults: list[list[dict[str, Any]]] = [[] for _ in self.gpus]
        for f in faults:
            if f["kind"] in ("gpu_lost", "not_supported", "in_use", "hang"):
                targets = [f["gpu"]] if f.get("gpu") is not None else range(len(self.gpus))
                for i in targets:
                    self.device_faults[i].append(f)
        self.init_count = 0
        self.clock = state.TickClock(self.state_dir)
        self.reader = _HostReader(self.state_dir, len(self.gpus))
        self._handle_blocks = [ctypes.create_string_buffer(16) for _ in self.gpus]
        self._handle_index = {
            ctypes.addressof(block): i for i, block in enumerate(self._handle_blocks)
        }
        self._gpm_samples: dict[int, _GpmSample] = {}

    # -- symbol lookup ------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Only called for names not found normally: the C symbols live on _Symbols.
        if name.startswith("_") or name in self.missing_symbols:
            raise AttributeError(name)
        impl = getattr(_Symbols, name, None)
        if impl is None:
            raise AttributeError(f"the simulated NVML library has no symbol {name}")
        fn = self._bind(name, impl)
        self.__dict__[name] = fn  # later lookups skip __getattr__
        return fn

    def _bind(self, name: str, impl: Callable[..., int]) -> Callable[..., Any]:
        needs_init = name not in _NO_INIT_NEEDED
        fn: Callable[..., Any]
        if _per_device(name):
            handle_index = self._handle_index
            device_faults = self.device_faults

            def device_symbol(handle: Any, *args: Any) -> int:
                if needs_init and not self.init_count:
                    return ERR_UNINITIALIZED
                index = handle_index.get(_handle_address(handle))  # type: ignore[arg-type]
                if index is None:
                    return ERR_INVALID_ARGUMENT
                if device_faults[index]:
                    code = self._fault(index, name)
                    if code:
                        return code
                return impl(self, index, *args)

            fn = device_symbol
        else:

            def symbol(*args: Any) -> Any:
                if needs_init and not self.init_count:
                    return ERR_UNINITIALIZED
                return impl(self, *args)

            fn = symbol
        fn.__name__ = fn.__qualname__ = name
        return fn

    def _on(self, fault: dict[str, Any]) -> bool:
        """Whether a fault is on now: by the wall clock (at/until, seconds since the host
        started) and by the host's tick (at_tick/until_tick); a fault sets one or neither."""
        t = time.time() - self.start_epoch
        if not fault.get("at", 0.0) <= t < (fault.get("until") or float("inf")):
            return False
        at_tick, until_tick = fault.get("at_tick", 0), fault.get("until_tick")
        if not at_tick and until_tick is None:
            return True
        tick = self.clock.tick
        return at_tick <= tick and (until_tick is None or tick < until_tick)

    def _fault(self, index: int, name: str) -> int:
        for f in self.device_faults[index]:
            if not self._on(f):
                continue
            kind = f["kind"]
            if kind == "gpu_lost":
                return ERR_GPU_IS_LOST
            if kind == "not_supported" and name in f["symbols"]:
                return ERR_NOT_SUPPORTED
            if kind == "in_use" and name in f["symbols"]:
                return ERR_IN_USE
            if kind == "hang" and name == f["symbol"]:
                time.sleep(f["seconds"])  # a sick GPU: the call just does not come back
        return SUCCESS

    def _lost(self, index: int) -> bool:
        if not self.device_faults[index]:
            return False
        return any(f["kind"] == "gpu_lost" and self._on(f) for f in self.device_faults[index])

    def close(self) -> None:
        self.reader.close()
        self.clock.close()


class _Symbols:
    """The C symbols. Each takes the SimulatedNvml, then (for device symbols) the device index
    resolved from the handle, then the remaining C arguments; each returns an nvmlReturn_t."""

    # -- library ------------------------------------------------------------------------------

    def nvmlInitWithFlags(lib: SimulatedNvml, flags: Any = 0) -> int:
        for f in lib.init_faults:
            if lib._on(f):
                if f["kind"] == "nvml_missing":
                    return ERR_LIBRARY_NOT_FOUND
                return ERR_LIB_RM_VERSION_MISMATCH
        lib.init_count += 1
        return SUCCESS

    def nvmlInit_v2(lib: SimulatedNvml) -> int:
        return _Symbols.nvmlInitWithFlags(lib, 0)

    nvmlInit = nvmlInit_v2

    def nvmlShutdown(lib: SimulatedNvml) -> int:
        lib.init_count -= 1
        return SUCCESS

    def nvmlErrorString(lib: SimulatedNvml, code: Any) -> bytes:
        value = code.value if hasattr(code, "value") else int(code)
        text = pynvml.NVMLError._errcode_to_string.get(value) or _NEWER_ERROR_STRINGS.get(
            value, f"Unknown Error {value}")
        return text.encode()

    def nvmlSystemGetDriverVersion(lib: SimulatedNvml, buf: Any, length: Any) -> int:
        return _put_string(buf, length, DRIVER_VERSION)

    def nvmlSystemGetNVMLVersion(lib: SimulatedNvml, buf: Any, length: Any) -> int:
        return _put_string(buf, length, NVML_VERSION)

    def nvmlSystemGetCudaDriverVersion(lib: SimulatedNvml, version: Any) -> int:
        _out(version).value = CUDA_DRIVER_VERSION
        return SUCCESS

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlSystemGetProcessName(lib: SimulatedNvml, pid: Any, buf: Any, length: Any) -> int:
        try:
            name = os.readlink(f"/proc/{pid.value}/exe").encode()
        except FileNotFoundError:
            return ERR_NOT_FOUND
        except OSError:
            try:
                name = Path(f"/proc/{pid.value}/comm").read_bytes().strip()
            except OSError:
                return ERR_NOT_FOUND
        return _put_string(buf, length, name[: length.value - 1])

    # -- devices ------------------------------------------------------------------------------

    def nvmlDeviceGetCount_v2(lib: SimulatedNvml, count: Any) -> int:
        _out(count).value = len(lib.gpus)
        return SUCCESS

    nvmlDeviceGetCount = nvmlDeviceGetCount_v2

    def nvmlDeviceGetHandleByIndex_v2(lib: SimulatedNvml, index: Any, device: Any) -> int:
        i = index.value if hasattr(index, "value") else int(index)
        if not 0 <= i < len(lib.gpus):
            return ERR_INVALID_ARGUMENT
        if lib.device_faults[i]:  # the GPU's faults that name this call (a hang), or it is lost
            code = lib._fault(i, "nvmlDeviceGetHandleByIndex_v2")
            if code:
                return code
        _put_pointer(_out(device), ctypes.addressof(lib._handle_blocks[i]))
        return SUCCESS

    nvmlDeviceGetHandleByIndex = nvmlDeviceGetHandleByIndex_v2

    def nvmlDeviceGetHandleByUUID(lib: SimulatedNvml, uuid: Any, device: Any) -> int:
        wanted = uuid.value if hasattr(uuid, "value") else uuid
        if isinstance(wanted, str):
            wanted = wanted.encode()
        for i, gpu in enumerate(lib.gpus):
            if gpu["uuid"].encode() == wanted:
                if lib._lost(i):
                    return ERR_GPU_IS_LOST
                _put_pointer(_out(device), ctypes.addressof(lib._handle_blocks[i]))
                return SUCCESS
        return ERR_NOT_FOUND

    def nvmlDeviceGetIndex(lib: SimulatedNvml, i: int, index: Any) -> int:
        _out(index).value = i
        return SUCCESS

    def nvmlDeviceGetName(lib: SimulatedNvml, i: int, buf: Any, length: Any) -> int:
        return _put_string(buf, length, lib.gpus[i]["name"].encode())

    def nvmlDeviceGetUUID(lib: SimulatedNvml, i: int, buf: Any, length: Any) -> int:
        return _put_string(buf, length, lib.gpus[i]["uuid"].encode())

    def nvmlDeviceGetSerial(lib: SimulatedNvml, i: int, buf: Any, length: Any) -> int:
        return _put_string(buf, length, lib.gpus[i]["serial"].encode())

    def nvmlDeviceGetPciInfo_v3(lib: SimulatedNvml, i: int, info: Any) -> int:
        pci = _out(info)
        bus = lib.gpus[i]["pci_bus"]
        bus_id = f"00000000:{bus:02X}:00.0".encode()
        pci.busIdLegacy = bus_id
        pci.busId = bus_id
        pci.domain, pci.bus, pci.device = 0, bus, 0
        pci.pciDeviceId = lib.gpus[i]["pci_device_id"]
        pci.pciSubSystemId = 0x134F10DE
        return SUCCESS

    def nvmlDeviceGetMemoryInfo(lib: SimulatedNvml, i: int, memory: Any) -> int:
        mem = _out(memory)
        total = lib.gpus[i]["memory_total"]
        used = min(total, lib.reader.snapshot()[i].memory_used + RESERVED_MEMORY)
        mem.total, mem.used, mem.free = total, used, total - used
        return SUCCESS

    def nvmlDeviceGetMemoryInfo_v2(lib: SimulatedNvml, i: int, memory: Any) -> int:
        mem = _out(memory)
        if mem.version != pynvml.nvmlMemory_v2:
            return ERR_ARGUMENT_VERSION_MISMATCH
        total = lib.gpus[i]["memory_total"]
        used = min(total - RESERVED_MEMORY, lib.reader.snapshot()[i].memory_used)
        mem.total, mem.reserved, mem.used = total, RESERVED_MEMORY, used
        mem.free = total - RESERVED_MEMORY - used
        return SUCCESS

    def nvmlDeviceGetUtilizationRates(lib: SimulatedNvml, i: int, utilization: Any) -> int:
        util = _out(utilization)
        gpu = lib.reader.snapshot()[i]
        util.gpu = round(gpu.util_pct)
        util.memory = round(gpu.sm_pct * 0.5)  # memory-controller load follows SM activity
        return SUCCESS

    def nvmlDeviceGetPowerUsage(lib: SimulatedNvml, i: int, power: Any) -> int:
        spec = lib.gpus[i]
        util = lib.reader.snapshot()[i].util_pct / 100.0
        watts = spec["power_idle_w"] + (spec["power_max_w"] - spec["power_idle_w"]) * util
        _out(power).value = int(watts * 1000)
        return SUCCESS

    def nvmlDeviceGetEnforcedPowerLimit(lib: SimulatedNvml, i: int, limit: Any) -> int:
        _out(limit).value = int(lib.gpus[i]["power_limit_w"] * 1000)
        return SUCCESS

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit
    nvmlDeviceGetPowerManagementDefaultLimit = nvmlDeviceGetEnforcedPowerLimit

    def nvmlDeviceGetTemperature(lib: SimulatedNvml, i: int, sensor: Any, temp: Any) -> int:
        if sensor.value != pynvml.NVML_TEMPERATURE_GPU:
            return ERR_INVALID_ARGUMENT
        _out(temp).value = 32 + round(0.45 * lib.reader.snapshot()[i].util_pct)
        return SUCCESS

    def nvmlDeviceGetClockInfo(lib: SimulatedNvml, i: int, clock_type: Any, clock: Any) -> int:
        spec = lib.gpus[i]
        kind = clock_type.value
        if kind == pynvml.NVML_CLOCK_MEM:
            _out(clock).value = spec["mem_clock_mhz"]
            return SUCCESS
        if kind not in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_VIDEO):
            return ERR_INVALID_ARGUMENT
        busy = lib.reader.snapshot()[i].util_pct > 0
        top = spec["sm_clock_max_mhz"] if kind != pynvml.NVML_CLOCK_VIDEO else 1275
        _out(clock).value = top if busy else 210  # boosts when anything runs, else idles down
        return SUCCESS

    def nvmlDeviceGetMaxClockInfo(lib: SimulatedNvml, i: int, clock_type: Any, clock: Any) -> int:
        spec = lib.gpus[i]
        kind = clock_type.value
        top = {pynvml.NVML_CLOCK_MEM: spec["mem_clock_mhz"], pynvml.NVML_CLOCK_VIDEO: 1275}
        _out(clock).value = top.get(kind, spec["sm_clock_max_mhz"])
        return SUCCESS

    def nvmlDeviceGetFanSpeed(lib: SimulatedNvml, i: int, speed: Any) -> int:
        return ERR_NOT_SUPPORTED  # data-centre GPUs are passively cooled

    def nvmlDeviceGetPerformanceState(lib: SimulatedNvml, i: int, pstate: Any) -> int:
        _out(pstate).value = 0
        return SUCCESS

    def nvmlDeviceGetPersistenceMode(lib: SimulatedNvml, i: int, mode: Any) -> int:
        _out(mode).value = pynvml.NVML_FEATURE_ENABLED
        return SUCCESS

    def nvmlDeviceGetComputeMode(lib: SimulatedNvml, i: int, mode: Any) -> int:
        _out(mode).value = pynvml.NVML_COMPUTEMODE_DEFAULT
        return SUCCESS

    def nvmlDeviceGetDisplayMode(lib: SimulatedNvml, i: int, mode: Any) -> int:
        _out(mode).value = pynvml.NVML_FEATURE_DISABLED
        return SUCCESS

    nvmlDeviceGetDisplayActive = nvmlDeviceGetDisplayMode

    def nvmlDeviceGetMigMode(lib: SimulatedNvml, i: int, current: Any, pending: Any) -> int:
        _out(current).value = pynvml.NVML_DEVICE_MIG_DISABLE
        _out(pending).value = pynvml.NVML_DEVICE_MIG_DISABLE
        return SUCCESS

    def nvmlDeviceGetCudaComputeCapability(
        lib: SimulatedNvml, i: int, major: Any, minor: Any
    ) -> int:
        _out(major).value, _out(minor).value = lib.gpus[i]["compute_capability"]
        return SUCCESS

    # -- processes ----------------------------------------------------------------------------

    def _fill_processes(lib: SimulatedNvml, i: int, count: Any, infos: Any, v1: bool) -> int:
        procs = lib.reader.snapshot()[i].processes
        n_out = _out(count)
        if infos is None or n_out.value < len(procs):
            n_out.value = len(procs)
            return ERR_INSUFFICIENT_SIZE if procs else SUCCESS
        # Written in the layout of the symbol's version, whatever array the caller passed: as C.
        layout = _V1_LAYOUT if v1 else _V2_LAYOUT
        buf = (ctypes.c_char * (len(procs) * layout.size)).from_address(ctypes.addressof(infos))
        if v1:
            for k, proc in enumerate(procs):
                _V1_LAYOUT.pack_into(buf, k * _V1_LAYOUT.size, proc[0], proc[1])
        else:
            for k, proc in enumerate(procs):
                _V2_LAYOUT.pack_into(buf, k * _V2_LAYOUT.size, proc[0], proc[1], NOT_A_MIG_ID,
                                     NOT_A_MIG_ID)
        n_out.value = len(procs)
        return SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(
        lib: SimulatedNvml, i: int, count: Any, infos: Any
    ) -> int:
        return _Symbols._fill_processes(lib, i, count, infos, False)

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3

    def nvmlDeviceGetComputeRunningProcesses(
        lib: SimulatedNvml, i: int, count: Any, infos: Any
    ) -> int:
        return _Symbols._fill_processes(lib, i, count, infos, True)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(
        lib: SimulatedNvml, i: int, count: Any, infos: Any
    ) -> int:
        _out(count).value = 0  # a headless compute host: no graphics clients
        return SUCCESS

    nvmlDeviceGetGraphicsRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetGraphicsRunningProcesses = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses_v3

    def nvmlDeviceGetProcessUtilization(
        lib: SimulatedNvml, i: int, samples: Any, count: Any, last_seen: Any
    ) -> int:
        reader = lib.reader
        gpu = reader.snapshot()[i]
        offset = reader.wall_offset_ns
        since_us = last_seen.value if hasattr(last_seen, "value") else int(last_seen)
        active = [
            p for p in gpu.processes if p[3] > 0 and (p[4] + offset) // 1000 > since_us
        ]
        if not active:
            return ERR_NOT_FOUND
        n_out = _out(count)
        if samples is None or n_out.value < len(active):
            n_out.value = len(active)
            return ERR_INSUFFICIENT_SIZE
        stamp_us = (reader.snapshot_ns + offset) // 1000
        size = _UTIL_SAMPLE_LAYOUT.size
        buf = (ctypes.c_char * (len(active) * size)).from_address(ctypes.addressof(samples))
        for k, (pid, _, _, sm_pct, _) in enumerate(active):
            _UTIL_SAMPLE_LAYOUT.pack_into(
                buf, k * size, pid, stamp_us, round(sm_pct), round(sm_pct * 0.5), 0, 0
            )
        n_out.value = len(active)
        return SUCCESS

    # -- GPM (Hopper and later) ---------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(lib: SimulatedNvml, i: int, support: Any) -> int:
        out = _out(support)
        if out.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return ERR_ARGUMENT_VERSION_MISMATCH
        out.isSupportedDevice = 1 if lib.gpus[i]["gpm"] else 0
        return SUCCESS

    def nvmlGpmSampleAlloc(lib: SimulatedNvml, sample: Any) -> int:
        gpm = _GpmSample()
        address = ctypes.addressof(gpm.block)
        lib._gpm_samples[address] = gpm
        _put_pointer(_out(sample), address)
        return SUCCESS

    def nvmlGpmSampleFree(lib: SimulatedNvml, sample: Any) -> int:
        if lib._gpm_samples.pop(_handle_address(sample), None) is None:  # type: ignore[arg-type]
            return ERR_INVALID_ARGUMENT
        return SUCCESS

    def nvmlGpmSampleGet(lib: SimulatedNvml, i: int, sample: Any) -> int:
        if not lib.gpus[i]["gpm"]:
            return ERR_NOT_SUPPORTED
        gpm = lib._gpm_samples.get(_handle_address(sample))  # type: ignore[arg-type]
        if gpm is None:
            return ERR_INVALID_ARGUMENT
        reader = lib.reader
        gpu = reader.snapshot()[i]
        gpm.gpu, gpm.taken_ns = i, reader.snapshot_ns
        gpm.busy_ns, gpm.sm_busy_ns = gpu.busy_ns, gpu.sm_busy_ns
        return SUCCESS

    def nvmlGpmMetricsGet(lib: SimulatedNvml, metrics_get: Any) -> int:
        request = _out(metrics_get)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return ERR_ARGUMENT_VERSION_MISMATCH
        first = lib._gpm_samples.get(_handle_address(request.sample1))  # type: ignore[arg-type]
        second = lib._gpm_samples.get(_handle_address(request.sample2))  # type: ignore[arg-type]
        if first is None or second is None or first.gpu < 0 or first.gpu != second.gpu:
            return ERR_INVALID_ARGUMENT
        elapsed = second.taken_ns - first.taken_ns
        if elapsed <= 0:
            return ERR_INVALID_ARGUMENT
        busy = min(100.0, 100.0 * (second.busy_ns - first.busy_ns) / elapsed)
        sm = min(100.0, 100.0 * (second.sm_busy_ns - first.sm_busy_ns) / elapsed)
        values = {
            pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: busy,
            pynvml.NVML_GPM_METRIC_SM_UTIL: sm,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: sm,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: sm * 0.5,
        }
        for k in range(min(request.numMetrics, pynvml.NVML_GPM_METRIC_MAX)):
            metric = request.metrics[k]
            value = values.get(metric.metricId)
            if value is None:
                metric.nvmlReturn = ERR_NOT_SUPPORTED
                metric.value = 0.0
            else:
                metric.nvmlReturn = SUCCESS
                metric.value = max(0.0, value)
        return SUCCESS


def _clear_pointer_cache() -> None:
    pynvml._nvmlGetFunctionPointer_cache.clear()


def install(state_dir: str | os.PathLike[str] | None = None) -> SimulatedNvml:
    """Make pynvml (and every NVML client in this process) read the simulated host.

    `state_dir` defaults to $MLCOST_SIM_DIR. Replaces any earlier simulation. Call
    pynvml.nvmlInit() afterwards, as with the real library.
    """
    state_dir = state_dir if state_dir is not None else os.environ.get(state.STATE_DIR_ENV)
    if not state_dir:
        raise RuntimeError(
            f"no simulated host: pass a state dir or set {state.STATE_DIR_ENV} "
            "(see `python -m daemon.sim --help`)"
        )
    lib = SimulatedNvml(state_dir)
    with pynvml.libLoadLock:
        previous = pynvml.nvmlLib
        pynvml.nvmlLib = lib
        pynvml._nvmlLib_refcount = 0
        _clear_pointer_cache()
    if isinstance(previous, SimulatedNvml):
        previous.close()
    return lib


def uninstall() -> None:
    """Undo install(): pynvml will load the real library again on the next nvmlInit."""
    with pynvml.libLoadLock:
        previous = pynvml.nvmlLib
        if not isinstance(previous, SimulatedNvml):
            return
        pynvml.nvmlLib = None
        pynvml._nvmlLib_refcount = 0
        _clear_pointer_cache()
    previous.close()


def installed() -> SimulatedNvml | None:
    """The simulation pynvml is reading now, if any."""
    lib = pynvml.nvmlLib
    return lib if isinstance(lib, SimulatedNvml) else None
