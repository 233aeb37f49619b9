"""Scenarios: a simulated GPU host described in TOML, and starting one.

    sc = scenario.load("demo")          # a built-in name, or a path to a .toml file
    running = scenario.start(sc)        # state dir, host.json, workloads spawned
    nvml.install(running.state_dir)     # pynvml now reads this host
    running.stop()                      # every workload and its children gone, dir removed

A scenario file:

    name = "demo"                       # optional: defaults to the file name
    description = "..."
    [instance]   provider, type, region, lifecycle ("on-demand" | "spot")
    [gpu]        model, count, and optionally memory_gib, power_idle_w, power_max_w, gpm
    [[workloads]] name, program (a module in daemon.sim.workloads) or command (argv list),
                 gpus = [indices], options = {key = value} passed as --key value
    [[faults]]   kind = gpu_lost | not_supported | in_use | hang | nvml_missing |
                 driver_mismatch | missing_symbol, with the keys listed in FAULT_KEYS; on from
                 `at` until `until` in seconds from start, or from `at_tick` until `until_tick`
                 in the host's ticks (the daemon's ticks since it started the simulation, or
                 what a test sets with Running.set_tick: deterministic, what tests use); no
                 times: on from the start (in_use: the calls answer NVML_ERROR_IN_USE, as GPM
                 does while another reader such as DCGM holds the profiling counters)
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import os
import pkgutil
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from daemon.lifetime import die_with_parent
from daemon.sim import state
from pricing.small_file import SmallFileError, read_small_file

SCENARIO_DIR = Path(__file__).parent / "scenarios"
WORKLOAD_PACKAGE = "daemon.sim.workloads"
STOP_GRACE_S = 3.0
_UUID_NAMESPACE = uuid.UUID("6f1c2a56-4d0e-4c7b-9a43-9b1f0f6d2e11")
GIB = 1 << 30
MAX_SCENARIO_BYTES = 1 << 20  # a scenario of 256 workloads is ~80 kB

LIFECYCLES = ("on-demand", "spot")
FAULT_KINDS = (
    "gpu_lost", "not_supported", "in_use", "hang", "nvml_missing", "driver_mismatch",
    "missing_symbol",
)
# When a fault is on: from `at` to `until` in seconds since the host started (wall clock), or
# from `at_tick` to `until_tick` in the host's ticks (state.TickClock), never both.
WHEN = ("at", "until", "at_tick", "until_tick")
FAULT_KEYS: dict[str, tuple[str, ...]] = {
    "gpu_lost": ("gpu", *WHEN),
    "not_supported": ("gpu", "calls", *WHEN),
    "in_use": ("gpu", "calls", *WHEN),
    "hang": ("gpu", "call", "seconds", *WHEN),
    "nvml_missing": WHEN,
    "driver_mismatch": WHEN,
    "missing_symbol": ("symbol", "symbols"),
}

# What a GPU model looks like to NVML, for the models the built-in scenarios use. A scenario may
# name any other model if it gives memory_gib, power_idle_w and power_max_w itself.
GPU_MODELS: dict[str, dict[str, Any]] = {
    "NVIDIA A100-SXM4-40GB": dict(
        memory_gib=40, power_idle_w=55, power_max_w=400, sm_clock_max_mhz=1410,
        mem_clock_mhz=1215, compute_capability=(8, 0), pci_device_id=0x20B010DE, gpm=False,
    ),
    "NVIDIA A100-SXM4-80GB": dict(
        memory_gib=80, power_idle_w=60, power_max_w=400, sm_clock_max_mhz=1410,
        mem_clock_mhz=1593, compute_capability=(8, 0), pci_device_id=0x20B210DE, gpm=False,
    ),
    "NVIDIA A10G": dict(
        memory_gib=24, power_idle_w=25, power_max_w=300, sm_clock_max_mhz=1710,
        mem_clock_mhz=6251, compute_capability=(8, 6), pci_device_id=0x223710DE, gpm=False,
    ),
    "NVIDIA L4": dict(
        memory_gib=24, power_idle_w=16, power_max_w=72, sm_clock_max_mhz=2040,
        mem_clock_mhz=6251, compute_capability=(8, 9), pci_device_id=0x27B810DE, gpm=False,
    ),
    "NVIDIA H100 80GB HBM3": dict(
        memory_gib=80, power_idle_w=70, power_max_w=700, sm_clock_max_mhz=1980,
        mem_clock_mhz=2619, compute_capability=(9, 0), pci_device_id=0x233010DE, gpm=True,
    ),
    "NVIDIA H200": dict(
        memory_gib=141, power_idle_w=75, power_max_w=700, sm_clock_max_mhz=1980,
        mem_clock_mhz=3201, compute_capability=(9, 0), pci_device_id=0x233510DE, gpm=True,
    ),
    # AWS g6e (what the demo's right-size advice resizes to). NVIDIA's L40S datasheet: 48 GB
    # GDDR6 (nvidia-smi says 46068 MiB, the figure here), 350 W maximum power, 2520 MHz boost,
    # 864 GB/s (18 Gbps GDDR6: a 9001 MHz memory clock as nvidia-smi reports it, as 12.5 Gbps
    # is the A10G's 6251), Ada Lovelace (compute capability 8.9; no GPM, which is Hopper's and
    # later). Device id 0x26B9 from NVIDIA's driver README list of supported GPUs. The idle
    # draw is not in the datasheet: about a tenth of the maximum, like the models above (an
    # estimate).
    "NVIDIA L40S": dict(
        memory_gib=46068 / 1024, power_idle_w=35, power_max_w=350, sm_clock_max_mhz=2520,
        mem_clock_mhz=9001, compute_capability=(8, 9), pci_device_id=0x26B910DE, gpm=False,
    ),
}


class ScenarioError(ValueError):
    """A scenario file that cannot be used: names the key, the value and what is allowed."""

    def __init__(self, source: str, key: str, value: Any, allowed: str) -> None:
        self.source, self.key, self.value, self.allowed = source, key, value, allowed
        super().__init__(f"{source}: {key} = {value!r} is not valid: {allowed}")


@dataclass(frozen=True)
class Instance:
    provider: str
    type: str
    region: str
    lifecycle: str  # "on-demand" or "spot"


@dataclass(frozen=True)
class GpuSpec:
    model: str
    count: int
    memory_gib: float
    power_idle_w: float
    power_max_w: float
    gpm: bool


@dataclass(frozen=True)
class Workload:
    name: str
    gpus: tuple[int, ...]
    program: str | None = None  # a module of daemon.sim.workloads
    command: tuple[str, ...] | None = None  # or any argv
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fault:
    kind: str
    gpu: int | None = None
    at: float = 0.0
    until: float | None = None
    at_tick: int = 0
    until_tick: int | None = None
    symbols: tuple[str, ...] = ()  # not_supported, in_use: the calls; missing_symbol: the symbols
    symbol: str | None = None  # hang: the call that hangs
    seconds: float = 0.0  # hang: how long each call blocks


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    instance: Instance
    gpu: GpuSpec
    workloads: tuple[Workload, ...]
    faults: tuple[Fault, ...]
    source: str

    @property
    def gpu_count(self) -> int:
        return self.gpu.count

    @property
    def gpu_model(self) -> str:
        return self.gpu.model

    def gpu_uuid(self, index: int) -> str:
        """Stable per scenario name and index, like a real board's UUID."""
        return "GPU-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{self.name}:{index}"))


# -- loading --------------------------------------------------------------------------------------


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def workload_programs() -> list[str]:
    from daemon.sim import workloads

    return sorted(m.name for m in pkgutil.iter_modules(workloads.__path__) if not m.name.startswith("_"))


def load(name_or_path: str | os.PathLike[str]) -> Scenario:
    """A built-in scenario by name, or a scenario file by path."""
    text, path = _read(name_or_path)
    return loads(text, source=str(path), default_name=path.stem)


_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def booted_as(name_or_path: str | os.PathLike[str], instance_type: str) -> str:
    """The scenario's TOML as the simulated host boots after a resize (the runbook stopped it,
    changed its type to `instance_type`, started it): see resized() for what changes; the rest
    of the file stays as written. A file of this text in a folder, named as the scenario (its
    GPU UUIDs follow the name), is what `--simulate` then runs. Raises ScenarioError."""
    import tomli_w

    text, path = _read(name_or_path)
    before = loads(text, source=str(path), default_name=path.stem)
    if _TYPE_NAME.fullmatch(instance_type) is None:
        raise ScenarioError(str(path), "instance.type", instance_type, "an instance type name")
    after = resized(before, instance_type)
    data = tomllib.loads(text)
    data["description"] = after.description
    data.setdefault("instance", {})["type"] = instance_type
    data["gpu"] = {key: getattr(after.gpu, key) for key in
                   ("model", "count", "memory_gib", "power_idle_w", "power_max_w", "gpm")}
    for raw, placed_on in zip(data.get("workloads", []), after.workloads, strict=True):
        raw["gpus"] = list(placed_on.gpus)
    if "faults" in data:  # (resized() keeps those of the host and of the GPUs left)
        data["faults"] = [f for f in data["faults"] if f.get("gpu") is None
                          or f["gpu"] < after.gpu.count]
    booted = tomli_w.dumps(data)
    again = loads(booted, source=str(path), default_name=path.stem)
    assert (again.instance, again.gpu, again.workloads) == (
        after.instance, after.gpu, after.workloads)
    return booted


def resized(sc: Scenario, instance_type: str) -> Scenario:
    """The host of `sc` after a resize to `instance_type` (ScenarioError for a type the price
    catalog does not list, or whose accelerator the simulated NVML has no model for).

    - its GPUs are the type's: the count and model of the catalog's row for it (in the
      scenario's region, else its first); the scenario's own model and figures where the type
      has the same accelerator, else the GPU_MODELS entry the catalog's name reads as;
    - its workloads: a resize stops the instance, so none survives it; each starts again as the
      host boots (as its services would), on the GPUs it used that are left, and for each that
      is gone on the GPU left with the most memory free (after the workloads that kept their
      GPUs, then those placed before it; the lowest index of equals), none twice: see placed();
    - its faults: one on a GPU that is gone is gone with it; the others (the host's, and those
      of a GPU that is left) stay as the scenario says;
    - its name (so its GPU UUIDs), region, lifecycle and the rest stay."""
    from pricing.catalog import Catalog, catalog_accelerator

    catalog = Catalog.load()
    offer = (catalog.by_instance(sc.instance.provider, instance_type, sc.instance.region)
             or catalog.by_instance(sc.instance.provider, instance_type))
    if offer is None:
        raise ScenarioError(sc.source, "instance.type", instance_type,
                            "an instance type of the price catalog, which says its GPUs "
                            f"({catalog.explain_missing(sc.instance.provider, instance_type)})")
    count = offer.accelerator_count
    accelerator = offer.accelerator.upper()
    if catalog_accelerator(sc.gpu.model).upper() == accelerator:
        gpu = dataclasses.replace(sc.gpu, count=count)
    else:
        models = [m for m in GPU_MODELS if catalog_accelerator(m).upper() == accelerator]
        if not models or not 1 <= count <= 64:
            known = ", ".join(sorted({catalog_accelerator(m) for m in GPU_MODELS}))
            raise ScenarioError(sc.source, "instance.type", instance_type,
                                f"a type whose GPUs the simulated NVML has ({offer.accelerator}"
                                f" x {count}; it has {known})")
        spec = GPU_MODELS[models[0]]
        gpu = GpuSpec(model=models[0], count=count, memory_gib=float(spec["memory_gib"]),
                      power_idle_w=float(spec["power_idle_w"]),
                      power_max_w=float(spec["power_max_w"]), gpm=bool(spec["gpm"]))
    workloads = placed(sc.workloads, count, gpu.memory_gib)
    faults = tuple(f for f in sc.faults if f.gpu is None or f.gpu < count)
    moved = [f"{w.name} (GPU {', '.join(map(str, was.gpus))} -> {', '.join(map(str, w.gpus))})"
             for was, w in zip(sc.workloads, workloads, strict=True) if w.gpus != was.gpus]
    note = (f"Resized to {instance_type}: {count} x {gpu.model}; the workloads started again, "
            + (f"those of GPUs that are gone on the GPUs left: {'; '.join(moved)}." if moved
               else "each on its GPUs."))
    description = f"{sc.description}\n\n{note}" if sc.description else note
    return dataclasses.replace(
        sc, description=description, instance=dataclasses.replace(sc.instance, type=instance_type),
        gpu=gpu, workloads=workloads, faults=faults)


def placed(workloads: tuple[Workload, ...], count: int,
           memory_gib: float) -> tuple[Workload, ...]:
    """`workloads` on a host of `count` GPUs of `memory_gib` each: each keeps its GPUs that are
    left; for each that is gone it takes the GPU left, not already its own, with the most
    memory free (what the workloads that kept their GPUs hold, then those placed before it;
    workload_memory_gib), the lowest index of equals. A workload that has every GPU already
    gets no more: a job of 8 GPUs runs on the 4 that are left."""
    free = [memory_gib] * count
    kept = [tuple(dict.fromkeys(g for g in w.gpus if g < count)) for w in workloads]
    for w, left in zip(workloads, kept, strict=True):
        for g in left:
            free[g] -= workload_memory_gib(w)
    out = []
    for w, left in zip(workloads, kept, strict=True):
        gpus = list(left)
        for _ in range(len(set(w.gpus)) - len(left)):
            others = [g for g in range(count) if g not in gpus]
            if not others:
                break
            best = max(others, key=lambda g: (free[g], -g))
            gpus.append(best)
            free[best] -= workload_memory_gib(w)
        out.append(dataclasses.replace(w, gpus=tuple(gpus)))
    return tuple(out)


def workload_memory_gib(w: Workload) -> float:
    """What `w` holds on each of its GPUs: its memory_gib option, else its program's
    MEMORY_GIB (the default of its --memory-gib); a command's is not known (0)."""
    for key in ("memory_gib", "memory-gib"):
        value = w.options.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    if w.program is None:
        return 0.0
    module = importlib.import_module(f"{WORKLOAD_PACKAGE}.{w.program}")
    return float(getattr(module, "MEMORY_GIB", 0.0))


def _read(name_or_path: str | os.PathLike[str]) -> tuple[str, Path]:
    """A scenario's TOML text, and the file it is in."""
    text_name = os.fspath(name_or_path)
    path = Path(text_name)
    if not (text_name.endswith(".toml") or os.sep in text_name):
        builtin = SCENARIO_DIR / f"{text_name}.toml"
        if not builtin.exists():
            raise ScenarioError(
                text_name, "scenario", text_name,
                f"a built-in scenario ({', '.join(builtin_names())}) or a path to a .toml file",
            )
        path = builtin
    try:  # (a FIFO, /dev/zero or a folder there: refused, not waited on or read forever)
        raw = read_small_file(path, MAX_SCENARIO_BYTES)
    except SmallFileError as e:
        raise ScenarioError(str(path), "scenario", str(path),
                            f"a readable TOML file (this one{e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ScenarioError(str(path), "scenario", str(path),
                            f"a TOML file in UTF-8 (byte {raw[e.start]:#04x} on line {line} "
                            "is not)") from None
    return text, path


def loads(text: str, source: str = "<string>", default_name: str = "custom") -> Scenario:
    """A scenario from TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(source, "(file)", None, f"valid TOML ({e})") from e
    return _parse(data, source, default_name)


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, value: Any, allowed: str) -> ScenarioError:
        return ScenarioError(self.source, key, value, allowed)

    def table(self, data: dict[str, Any], prefix: str, allowed: tuple[str, ...]) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(f"{prefix}{key}", data[key], f"a known key ({', '.join(allowed)})")

    def string(self, data: dict[str, Any], key: str, prefix: str, default: str | None = None) -> str:
        value = data.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.fail(prefix + key, value, "a non-empty string")
        return value

    def number(
        self, data: dict[str, Any], key: str, prefix: str, default: float | None = None,
        minimum: float = 0.0,
    ) -> float:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise self.fail(prefix + key, value, f"a number >= {minimum:g}")
        return float(value)

    def count(self, data: dict[str, Any], key: str, prefix: str, default: int | None = None) -> int:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(prefix + key, value, "a whole number >= 0")
        return value

    def gpu_index(self, value: Any, key: str, count: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
            raise self.fail(key, value, f"a GPU index 0..{count - 1}")
        return value


def _parse(data: dict[str, Any], source: str, default_name: str) -> Scenario:
    check = _Checker(source)
    check.table(data, "", ("name", "description", "instance", "gpu", "workloads", "faults"))
    name = check.string(data, "name", "", default_name)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise check.fail("description", description, "a string")

    inst = data.get("instance")
    if not isinstance(inst, dict):
        raise check.fail("instance", inst, "a table with provider, type, region, lifecycle")
    check.table(inst, "instance.", ("provider", "type", "region", "lifecycle"))
    lifecycle = inst.get("lifecycle", "on-demand")
    if lifecycle not in LIFECYCLES:
        raise check.fail("instance.lifecycle", lifecycle, " or ".join(LIFECYCLES))
    instance = Instance(
        provider=check.string(inst, "provider", "instance."),
        type=check.string(inst, "type", "instance."),
        region=check.string(inst, "region", "instance."),
        lifecycle=lifecycle,
    )

    g = data.get("gpu")
    if not isinstance(g, dict):
        raise check.fail("gpu", g, "a table with model and count")
    check.table(g, "gpu.", ("model", "count", "memory_gib", "power_idle_w", "power_max_w", "gpm"))
    model = check.string(g, "model", "gpu.")
    known = GPU_MODELS.get(model, {})
    count = g.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
        raise check.fail("gpu.count", count, "an integer 1..64")
    for key in ("memory_gib", "power_idle_w", "power_max_w"):
        if key not in g and key not in known:
            raise check.fail(
                f"gpu.{key}", None,
                f"a number (required for a model not in {', '.join(GPU_MODELS)})",
            )
    gpm = g.get("gpm", known.get("gpm", False))
    if not isinstance(gpm, bool):
        raise check.fail("gpu.gpm", gpm, "true or false")
    gpu = GpuSpec(
        model=model,
        count=count,
        memory_gib=check.number(g, "memory_gib", "gpu.", known.get("memory_gib"), minimum=1),
        power_idle_w=check.number(g, "power_idle_w", "gpu.", known.get("power_idle_w")),
        power_max_w=check.number(g, "power_max_w", "gpu.", known.get("power_max_w"), minimum=1),
        gpm=gpm,
    )
    if gpu.power_max_w < gpu.power_idle_w:
        raise check.fail("gpu.power_max_w", gpu.power_max_w, f"at least power_idle_w ({gpu.power_idle_w:g})")

    raw_workloads = data.get("workloads", [])
    if not isinstance(raw_workloads, list):
        raise check.fail("workloads", raw_workloads, "an array of tables ([[workloads]])")
    programs = workload_programs()
    workloads = []
    for n, w in enumerate(raw_workloads):
        prefix = f"workloads[{n}]."
        if not isinstance(w, dict):
            raise check.fail(f"workloads[{n}]", w, "a table")
        check.table(w, prefix, ("name", "program", "command", "gpus", "options"))
        wname = check.string(w, "name", prefix)
        program, command = w.get("program"), w.get("command")
        if (program is None) == (command is None):
            raise check.fail(prefix + "program", program, "exactly one of program or command")
        if program is not None and program not in programs:
            raise check.fail(prefix + "program", program, f"one of {', '.join(programs)}")
        if command is not None and (
            not isinstance(command, list) or not command
            or not all(isinstance(a, str) for a in command)
        ):
            raise check.fail(prefix + "command", command, "a non-empty list of strings (argv)")
        gpus = w.get("gpus", [])
        if not isinstance(gpus, list) or (program is not None and not gpus):
            raise check.fail(prefix + "gpus", gpus, "a non-empty list of GPU indices")
        gpu_indices = tuple(check.gpu_index(i, prefix + "gpus", count) for i in gpus)
        options = w.get("options", {})
        if not isinstance(options, dict):
            raise check.fail(prefix + "options", options, "a table of --key value options")
        for key, value in options.items():
            if not isinstance(value, (str, int, float, bool)):
                raise check.fail(f"{prefix}options.{key}", value, "a string, number or boolean")
        workloads.append(
            Workload(
                name=wname, gpus=gpu_indices, program=program,
                command=tuple(command) if command is not None else None, options=dict(options),
            )
        )

    raw_faults = data.get("faults", [])
    if not isinstance(raw_faults, list):
        raise check.fail("faults", raw_faults, "an array of tables ([[faults]])")
    faults = [_parse_fault(check, f, n, count) for n, f in enumerate(raw_faults)]
    _check_faults_fire(check, faults)

    return Scenario(
        name=name, description=description, instance=instance, gpu=gpu,
        workloads=tuple(workloads), faults=tuple(faults), source=source,
    )


def _parse_fault(check: _Checker, f: Any, n: int, gpu_count: int) -> Fault:
    prefix = f"faults[{n}]."
    if not isinstance(f, dict):
        raise check.fail(f"faults[{n}]", f, "a table")
    kind = f.get("kind")
    if kind not in FAULT_KINDS:
        raise check.fail(prefix + "kind", kind, f"one of {', '.join(FAULT_KINDS)}")
    check.table(f, prefix, ("kind", *FAULT_KEYS[kind]))
    if any(k in f for k in ("at", "until")) and any(k in f for k in ("at_tick", "until_tick")):
        raise check.fail(f"faults[{n}]", f, "at/until (seconds) or at_tick/until_tick (ticks), "
                         "not both")
    at = check.number(f, "at", prefix, 0.0)
    until = f.get("until")
    if until is not None:
        until = check.number(f, "until", prefix)
        if until <= at:
            raise check.fail(prefix + "until", until, f"a time after at ({at:g})")
    at_tick = check.count(f, "at_tick", prefix, 0)
    until_tick = f.get("until_tick")
    if until_tick is not None:
        until_tick = check.count(f, "until_tick", prefix)
        if until_tick <= at_tick:
            raise check.fail(prefix + "until_tick", until_tick, f"a tick after at_tick ({at_tick})")
    gpu = f.get("gpu")
    if gpu is not None or kind in ("gpu_lost", "hang"):
        gpu = check.gpu_index(gpu, prefix + "gpu", gpu_count)

    def timed(**details: Any) -> Fault:
        return Fault(kind, gpu=gpu, at=at, until=until, at_tick=at_tick, until_tick=until_tick,
                     **details)

    def symbols(key: str, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(
            isinstance(s, str) and s.startswith("nvml") for s in value
        ):
            raise check.fail(prefix + key, value, "NVML symbol names such as nvmlDeviceGetPowerUsage")
        return tuple(value)

    if kind in ("not_supported", "in_use"):
        return timed(symbols=symbols("calls", f.get("calls")))
    if kind == "hang":
        call = symbols("call", f.get("call"))
        if len(call) != 1:
            raise check.fail(prefix + "call", f.get("call"), "one NVML symbol name")
        seconds = check.number(f, "seconds", prefix, minimum=0.001)
        return timed(symbol=call[0], seconds=seconds)
    if kind == "missing_symbol":
        key = "symbols" if "symbols" in f else "symbol"
        return Fault(kind, symbols=symbols(key, f.get(key)))
    return timed()


def _check_faults_fire(check: _Checker, faults: list[Fault]) -> None:
    """A fault that could never fire is refused, not run silently: one on a GPU's call that
    NVML's clients never make (daemon.sim.nvml.why_a_fault_never_fires: a hang on
    nvmlDeviceGetMemoryInfo, when they call nvmlDeviceGetMemoryInfo_v2), and an nvml_missing or
    driver_mismatch that starts after the start (only nvmlInit looks at them, when a client
    starts; mlcostd tries again only while it fails)."""
    from daemon.sim.nvml import why_a_fault_never_fires

    missing = frozenset(s for f in faults if f.kind == "missing_symbol" for s in f.symbols)
    for n, f in enumerate(faults):
        prefix = f"faults[{n}]."
        if f.kind in ("nvml_missing", "driver_mismatch") and (f.at or f.at_tick):
            key, value = ("at", f.at) if f.at else ("at_tick", f.at_tick)
            raise check.fail(prefix + key, value, (
                f"0: a {f.kind} from {key} = {value:g} never fires (only nvmlInit looks for "
                "NVML, when a client starts, and mlcostd tries again only while it fails); for "
                "NVML to come back, leave it out and end the fault with until or until_tick"))
        calls = [("call", f.symbol)] if f.kind == "hang" and f.symbol else \
            [("calls", s) for s in f.symbols] if f.kind in ("not_supported", "in_use") else []
        for key, symbol in calls:
            why = why_a_fault_never_fires(symbol, missing)
            if why is not None:
                raise check.fail(prefix + key, symbol, f"a call that fires: {why}")


# -- the host description readers use -----------------------------------------------------------


def host_description(sc: Scenario, start_epoch: float) -> dict[str, Any]:
    """What host.json holds: everything a reader in another process needs."""
    known = GPU_MODELS.get(sc.gpu.model, {})
    gpus = []
    for i in range(sc.gpu.count):
        gpus.append(
            {
                "index": i,
                "name": sc.gpu.model,
                "uuid": sc.gpu_uuid(i),
                "serial": f"{1320000000000 + (uuid.uuid5(_UUID_NAMESPACE, sc.name).int % 10**9) * 10 + i}",
                "pci_bus": 0x10 + 0x10 * i,
                "pci_device_id": known.get("pci_device_id", 0x000010DE),
                "memory_total": int(sc.gpu.memory_gib * GIB),
                "power_idle_w": sc.gpu.power_idle_w,
                "power_max_w": sc.gpu.power_max_w,
                "power_limit_w": sc.gpu.power_max_w,
                "sm_clock_max_mhz": known.get("sm_clock_max_mhz", 1500),
                "mem_clock_mhz": known.get("mem_clock_mhz", 1500),
                "compute_capability": list(known.get("compute_capability", (8, 0))),
                "gpm": sc.gpu.gpm,
            }
        )
    faults = [
        {
            "kind": f.kind, "gpu": f.gpu, "at": f.at, "until": f.until,
            "at_tick": f.at_tick, "until_tick": f.until_tick,
            "symbols": list(f.symbols), "symbol": f.symbol, "seconds": f.seconds,
        }
        for f in sc.faults
    ]
    return {
        "scenario": sc.name,
        "description": sc.description,
        "instance": {
            "provider": sc.instance.provider, "type": sc.instance.type,
            "region": sc.instance.region, "lifecycle": sc.instance.lifecycle,
        },
        "start_epoch": start_epoch,
        "gpus": gpus,
        "faults": faults,
        "workloads": [],
    }


# -- running --------------------------------------------------------------------------------------


def _workload_argv(w: Workload) -> list[str]:
    if w.command is not None:
        return list(w.command)
    argv = [sys.executable, "-m", f"{WORKLOAD_PACKAGE}.{w.program}", "--gpu", ",".join(map(str, w.gpus))]
    for key, value in w.options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False:
            argv += [flag, str(value)]
    return argv


class Running:
    """A started scenario. stop() ends it; it is also stopped at interpreter exit."""

    def __init__(
        self, scenario: Scenario, state_dir: Path, owns_dir: bool, keep: bool
    ) -> None:
        self.scenario = scenario
        self.state_dir = state_dir
        self.keep = keep
        self._owns_dir = owns_dir
        self._procs: list[tuple[Workload, subprocess.Popen[bytes]]] = []
        self._exited: set[int] = set()  # pids newly_exited has said
        self._stopped = False
        self._lock = threading.Lock()
        self._clock = state.TickClock(state_dir, writable=True)
        self._clock.set(0)  # a reused state dir starts its clock again

    @property
    def workloads(self) -> list[tuple[str, int, tuple[int, ...]]]:
        """(name, pid, gpus) of every workload started."""
        return [(w.name, p.pid, w.gpus) for w, p in self._procs]

    @property
    def log_path(self) -> Path:
        return self.state_dir / state.LOG_FILE

    def newly_exited(self) -> list[tuple[str, int, int]]:
        """(name, pid, exit status) of each workload that has exited since the last call (a
        signal's as -N): a workload that crashed at start (a GPU too small for what it
        allocates) said so only in the log."""
        found = []
        for w, proc in self._procs:
            if proc.pid not in self._exited and proc.poll() is not None:
                self._exited.add(proc.pid)
                found.append((w.name, proc.pid, int(proc.returncode)))
        return found

    @property
    def tick(self) -> int:
        return self._clock.tick

    def set_tick(self, tick: int) -> None:
        """Set the host's clock in ticks: faults with at_tick/until_tick go on and off by it
        (at the next NVML call in any process reading this host)."""
        self._clock.set(tick)

    def wait_ready(self, timeout: float = 10.0) -> bool:
        """Wait until every workload has attached to the GPUs it lists (or exited); False on
        timeout. A `command` workload that never uses daemon.sim.device makes this time out."""
        deadline = time.monotonic() + timeout
        attach_dir = self.state_dir / state.ATTACH_DIR
        while True:
            try:
                present = set(os.listdir(attach_dir))
            except FileNotFoundError:
                present = set()
            missing = [
                (w, p) for w, p in self._procs
                if p.poll() is None
                and not all(state.attach_file_name(g, p.pid) in present for g in w.gpus)
            ]
            if not missing:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def stop(self, keep: bool | None = None) -> None:
        """SIGTERM every workload's process group, SIGKILL what is left after STOP_GRACE_S, reap,
        and remove the state dir (unless keep). Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        atexit.unregister(self.stop)
        groups = [p.pid for _, p in self._procs]  # each workload leads its own group
        for pgid in groups:
            _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for _, proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
            time.sleep(0.05)
        for pgid in groups:
            _signal_group(pgid, signal.SIGKILL)
        for _, proc in self._procs:
            proc.wait()
        kill_deadline = time.monotonic() + 2.0
        while any(_group_alive(g) for g in groups) and time.monotonic() < kill_deadline:
            for pgid in groups:
                _signal_group(pgid, signal.SIGKILL)
            time.sleep(0.02)
        self._clock.close()
        if not (self.keep if keep is None else keep):
            if self._owns_dir:
                shutil.rmtree(self.state_dir, ignore_errors=True)
            else:
                for name in (state.HOST_FILE, state.LOG_FILE, state.CLOCK_FILE):
                    (self.state_dir / name).unlink(missing_ok=True)
                shutil.rmtree(self.state_dir / state.ATTACH_DIR, ignore_errors=True)

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """True while any process of the group is alive (zombies waiting for init do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


# A state dir start() makes: {tempdir}/mlcost-sim-{scenario}-{pid of its maker}-{random}, and
# the file in it that says to keep it.
STATE_DIR_PREFIX = "mlcost-sim-"
KEEP_FILE = "keep"


def remove_stale_state_dirs(folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the state dirs that start() made in `folder` (the temp dir) for a process that is
    gone without removing it (kill -9 of a daemon that ran a simulation): those of this user,
    whose name holds the pid of their maker and no process has it now (or one that started
    after the folder last changed: the pid is another's). Another running simulation's folder,
    another user's, one asked to be kept (`--keep`) and one of a name from before the pid was in
    it are left alone. Returns the folders removed."""
    removed: list[Path] = []
    base = Path(folder if folder is not None else tempfile.gettempdir())
    try:
        names = [n for n in os.listdir(base) if n.startswith(STATE_DIR_PREFIX)]
    except OSError:
        return removed
    for name in names:
        pid = name.rsplit("-", 2)[-2] if name.count("-") >= 4 else ""
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        path = base / name
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() \
                    or os.path.lexists(path / KEEP_FILE):
                continue
            if _alive_since(int(pid), info.st_mtime):
                continue
            shutil.rmtree(path)
        except OSError:
            continue  # (gone meanwhile, or not ours to remove)
        removed.append(path)
    return removed


def _alive_since(pid: int, changed: float) -> bool:
    """Whether process `pid` is running and started before `changed` (a folder it made last
    changed then): not a later process given the same pid."""
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # (there, but not ours to look at: left alone)
    return started <= changed + 1.0  # (create_time is rounded to the clock's tick)


def start(
    sc: Scenario,
    state_dir: str | os.PathLike[str] | None = None,
    *,
    keep: bool = False,
    wait: float = 10.0,
) -> Running:
    """Start a scenario: write the host (start epoch = now) to a state dir, spawn its workloads.

    state_dir: a directory to use (created if missing); a new temp dir when None.
    keep: leave the state dir in place on stop(). wait: seconds to wait for the workloads to
    attach to their GPUs (0: return at once; see Running.wait_ready).
    """
    remove_stale_state_dirs()
    if state_dir is None:
        # (0700; the name says whose it is: remove_stale_state_dirs)
        path = Path(tempfile.mkdtemp(prefix=f"{STATE_DIR_PREFIX}{sc.name}-{os.getpid()}-"))
        owns = True
        if keep:  # `python -m daemon.sim --keep`: kept when it stops, and if it is killed
            os.close(os.open(path / KEEP_FILE, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    else:
        path = Path(state_dir)
        owns = not path.exists()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    (path / state.ATTACH_DIR).mkdir(mode=0o700, exist_ok=True)
    running = Running(sc, path, owns, keep)  # its clock exists before any reader finds the host
    host = host_description(sc, time.time())
    state.write_host(path, host)

    atexit.register(running.stop)
    env = dict(os.environ)
    env[state.STATE_DIR_ENV] = str(path)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    try:
        with open(os.open(path / state.LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND
                          | os.O_CLOEXEC, 0o600), "ab") as log:
            for w in sc.workloads:
                env["MLCOST_SIM_GPUS"] = ",".join(map(str, w.gpus))
                proc = subprocess.Popen(
                    _workload_argv(w), env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=die_with_parent(signal.SIGTERM),
                )
                running._procs.append((w, proc))
    except BaseException:
        running.stop()
        raise
    host["workloads"] = [
        {"name": name, "pid": pid, "gpus": list(gpus)} for name, pid, gpus in running.workloads
    ]
    state.write_host(path, host)
    if wait > 0:
        running.wait_ready(wait)
    return running
