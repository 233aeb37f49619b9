"""Helpers of the fault suite: a small simulated host with faults, what the store holds, what
health says."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from livedaemon import LiveDaemon
from simhost import attach_code, host_toml

from daemon.sources.sample import Sample
from daemon.store.reader import StoreReader

# "simulating 'x': ..., workloads a (pid 12), b (pid 13)" (runtime/simulation.py)
_WORKLOAD = re.compile(r"(\S+) \(pid (\d+)\)")
# A kernel, a little work on the CPU (~15 ms a second, so that a process whose GPU is sick is
# seen to run on within a few ticks), a pause.
BUSY = "dev.kernel(0.05, sm=0.6); sum(range(100_000)); time.sleep(0.05)"


def scenario(folder: Path, gpus: int, faults: str = "", name: str = "faults") -> str:
    """A scenario file: `gpus` GPUs, one busy workload `wN` on each GPU N, and `faults` (TOML
    [[faults]] tables). Returns its path, for --simulate."""
    text = host_toml(gpus=gpus, workloads=[
        {"name": f"w{i}", "gpus": [i], "code": attach_code(i, 2, BUSY)} for i in range(gpus)],
        faults=faults)
    path = folder / f"{name}.toml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(f'name = "{name}"\n' + text)
    return str(path)


def workloads(daemon: LiveDaemon) -> dict[str, int]:
    """name -> pid of the simulated workloads, as the daemon logged them."""
    for line in daemon.log().splitlines():
        if "simulating " in line and "workloads" in line:
            return {name: int(pid) for name, pid in _WORKLOAD.findall(line)}
    return {}


def recorded(db: Path) -> list[Sample]:
    """Every raw tick in the store, oldest first."""
    reader = StoreReader(str(db))
    try:
        return reader.samples(0, 1e12, max_samples=1_000_000)
    finally:
        reader.close()


def ticks_of(db: Path) -> list[int]:
    reader = StoreReader(str(db))
    try:
        return reader.ticks()
    finally:
        reader.close()


def contiguous(ticks: list[int]) -> bool:
    return ticks == list(range(ticks[0], ticks[-1] + 1)) if ticks else True


def health(daemon: LiveDaemon) -> dict[str, Any]:
    """/v1/health as the raw document."""
    import asyncio

    async def main() -> dict[str, Any]:
        async with daemon.client() as client:
            return await client._request("GET", "/v1/health")

    return asyncio.run(main())


def gpu_status(daemon: LiveDaemon, index: int) -> str | None:
    for gpu in daemon.now().get("gpus") or []:
        if gpu.get("index") == index:
            return gpu.get("status")
    return None


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
