"""The one way mlcostd calls NVML: `nvml_query` runs one pynvml function and turns any NVML error
into an `NvmlFailure` value of one of five kinds, so no caller classifies NVML errors itself.

Used by the GPU source (`daemon.sources.nvml`) and by `mlcostd check`. Like nvitop's
`nvmlQuery`, it never raises an NVML error; unlike it, a failure says what kind it is, because the
source treats them differently (an unsupported field is absent for good, a lost GPU stops that
GPU's reads, other errors mark one field).

Features are detected by looking for their C symbol (`has_symbol`), never by version strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

# NvmlFailure.kind values.
UNSUPPORTED = "unsupported"  # NOT_SUPPORTED, FUNCTION_NOT_FOUND: absent on this GPU or driver
NOT_FOUND = "not_found"  # nothing to report (e.g. no process utilization sample yet)
LOST = "lost"  # GPU_IS_LOST, RESET_REQUIRED: the device fell off the bus
UNAVAILABLE = "unavailable"  # NVML itself cannot work: library, driver, permission
ERROR = "error"  # anything else: this one call failed

_KINDS = {
    pynvml.NVML_ERROR_NOT_SUPPORTED: UNSUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: UNSUPPORTED,
    # The driver has the call but not this struct version (e.g. v2 memory info on an old one).
    pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH: UNSUPPORTED,
    pynvml.NVML_ERROR_NOT_FOUND: NOT_FOUND,
    pynvml.NVML_ERROR_GPU_IS_LOST: LOST,
    pynvml.NVML_ERROR_RESET_REQUIRED: LOST,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: UNAVAILABLE,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: UNAVAILABLE,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: UNAVAILABLE,
    pynvml.NVML_ERROR_NO_PERMISSION: UNAVAILABLE,
    pynvml.NVML_ERROR_UNINITIALIZED: UNAVAILABLE,
}

# Fixes for the statuses an operator can act on, shown by `mlcostd check` and the report.
NVML_FIXES = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        "libnvidia-ml.so.1 was not found: install the NVIDIA driver (or run the daemon where the "
        "driver's libraries are visible, e.g. the NVIDIA container toolkit)",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        "the NVIDIA kernel driver is not loaded: check `lsmod | grep nvidia` and dmesg",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        "the NVML library and the kernel driver are different versions (a driver upgrade "
        "without a reboot): reboot, or reload the nvidia kernel modules",
    pynvml.NVML_ERROR_NO_PERMISSION:
        "no permission to open the NVIDIA devices: run mlcostd as root",
}


@dataclass(frozen=True, slots=True)
class NvmlFailure:
    """Why one NVML call gave no value."""

    call: str  # the pynvml function's name
    kind: str  # UNSUPPORTED | NOT_FOUND | LOST | UNAVAILABLE | ERROR
    code: int | None  # the NVML return code
    message: str  # "GPU is lost (NVML error 15)" plus the fix where we know one

    def describe(self) -> str:
        """"nvmlDeviceGetPowerUsage: Unknown Error (NVML error 999)", for a field's error."""
        return f"{self.call}: {self.message}"


def error_kind(code: int | None) -> str:
    """The kind of failure an NVML return code means."""
    return _KINDS.get(code, ERROR) if code is not None else ERROR


def nvml_error_text(error: pynvml.NVMLError) -> str:
    """'GPU is lost (NVML error 15)' plus the fix where we know one."""
    value = getattr(error, "value", None)
    text = f"{error} (NVML error {value})"
    fix = NVML_FIXES.get(value) if value is not None else None
    return f"{text}: {fix}" if fix else text


def failure(call: str, error: pynvml.NVMLError) -> NvmlFailure:
    """The failure value for an NVML error raised by `call`."""
    code = getattr(error, "value", None)
    return NvmlFailure(call, error_kind(code), code, nvml_error_text(error))


def nvml_query(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`'s value, or an `NvmlFailure` if NVML failed. Never raises an NVML error.

    Errors that are not NVML's (a bug, a bad argument type) are not caught.
    """
    try:
        return fn(*args)
    except pynvml.NVMLError as error:
        return failure(getattr(fn, "__name__", repr(fn)), error)


def has_symbol(name: str) -> bool:
    """Whether the loaded NVML library exports the C function `name` (after nvmlInit).

    pynvml resolves symbols through the private `_nvmlGetFunctionPointer`; like nvitop, we look
    for that name before we use it and say "no" when it is not there.
    """
    lookup = getattr(pynvml, "_nvmlGetFunctionPointer", None)
    if lookup is None:
        return False
    try:
        lookup(name)
    except pynvml.NVMLError:
        return False
    return True


def text(value: bytes | str) -> str:
    """An NVML string (bytes on old pynvml, str on new) as text."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def start_nvml() -> tuple[int, str] | NvmlFailure:
    """nvmlInit, then (GPU count, driver version); or the failure of the first call that failed."""
    started = nvml_query(pynvml.nvmlInit)
    if isinstance(started, NvmlFailure):
        return started
    count = nvml_query(pynvml.nvmlDeviceGetCount)
    if isinstance(count, NvmlFailure):
        return count
    driver = nvml_query(pynvml.nvmlSystemGetDriverVersion)
    if isinstance(driver, NvmlFailure):
        return driver
    return int(count), text(driver)


def stop_nvml() -> None:
    """nvmlShutdown, ignoring a failure (nothing is left to do about it)."""
    nvml_query(pynvml.nvmlShutdown)
