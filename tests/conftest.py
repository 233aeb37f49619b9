"""Shared fixtures: a simulated host started from TOML text, with pynvml reading it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pynvml
import pytest

from daemon.sim import nvml as sim_nvml
from daemon.sim import scenario


@pytest.fixture
def sim_host(tmp_path) -> Iterator[Callable[..., scenario.Running]]:
    """Start a host from TOML text, install the sim NVML, nvmlInit; all undone afterwards."""
    started: list[scenario.Running] = []

    def start(text: str, init: bool = True, wait: float = 10.0) -> scenario.Running:
        sc = scenario.loads(text, default_name=f"test-{len(started)}")
        running = scenario.start(sc, tmp_path / f"host{len(started)}", wait=wait)
        started.append(running)
        sim_nvml.install(running.state_dir)
        if init:
            pynvml.nvmlInit()
        return running

    yield start
    sim_nvml.uninstall()
    for running in started:
        running.stop()
