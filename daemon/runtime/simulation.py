"""`mlcostd run --simulate`: start a scenario's workloads and point pynvml at the simulated GPUs.

Only the NVML library is replaced (daemon/sim/); everything else the daemon does runs as on a
real host. Kept apart from the tick loop so the loop reads the same with or without it.
"""

from __future__ import annotations

import logging
from typing import Any

from daemon.analysis.stack_rules import register_runtime
from daemon.wire import COMPUTE

log = logging.getLogger(__name__)

EXITS_EVERY_TICKS = 5  # how often the workloads are looked at for an exit


class SimulationError(RuntimeError):
    """The scenario cannot be loaded; the message names it and what exists."""


class Simulation:
    """One running scenario: its workloads and the simulated NVML they drive."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._running: Any = None
        self._loaded: Any = None
        self.host: dict[str, Any] = {}  # what the daemon records as this host

    def load(self) -> None:
        """Read the scenario, starting nothing: a bad name is refused before the daemon creates
        its store. Raises SimulationError."""
        from daemon.sim import scenario

        try:
            self._loaded = scenario.load(self.name)
        except scenario.ScenarioError as exc:
            raise SimulationError(str(exc)) from None

    @property
    def scenario_name(self) -> str | None:
        """The loaded scenario's name, as the store's host records it (None: not loaded)."""
        return self._loaded.name if self._loaded is not None else None

    def start(self) -> None:
        from daemon.sim import nvml as sim_nvml
        from daemon.sim import scenario

        if self._loaded is None:
            self.load()
        loaded = self._loaded
        self._running = scenario.start(loaded)
        sim_nvml.install(self._running.state_dir)
        # The simulated GPU's kernel call blocks while the GPU works, as a CUDA kernel would:
        # a stack inside it is compute, and its frames are not the user's code.
        register_runtime("*/daemon/sim/device.py", "*kernel", COMPUTE,
                                "running a kernel on the (simulated) GPU")
        self.host = {
            "simulated": loaded.name,
            "instance": {
                "provider": loaded.instance.provider,
                "type": loaded.instance.type,
                "region": loaded.instance.region,
                "lifecycle": loaded.instance.lifecycle,
                "source": f"simulated scenario {loaded.name!r}",
            },
        }
        log.info("simulating %r: %d x %s, workloads %s", loaded.name, loaded.gpu_count,
                 loaded.gpu_model,
                 ", ".join(f"{name} (pid {pid})" for name, pid, _ in self._running.workloads))

    @property
    def state_dir(self) -> str | None:
        """The running scenario's state dir: a process started with it in
        daemon.sim.state.STATE_DIR_ENV attaches to the simulated GPUs (None: not running)."""
        return str(self._running.state_dir) if self._running is not None else None

    def ticked(self, ticks: int) -> None:
        """The daemon has recorded `ticks` ticks since the simulation started: the simulated
        host's clock, by which faults with at_tick/until_tick go on and off."""
        if self._running is not None:
            self._running.set_tick(ticks)
            if ticks % EXITS_EVERY_TICKS == 0:
                self._say_exits()

    def _say_exits(self) -> None:
        """Log each workload that exited: one that crashed (its traceback is in the scenario's
        log) left an empty GPU and no word of why."""
        for name, pid, status in self._running.newly_exited():
            if status == 0:
                log.info("simulated workload %r (pid %d) finished", name, pid)
            else:
                log.warning("simulated workload %r (pid %d) exited with status %d; its output "
                            "is in %s", name, pid, status, self._running.log_path)

    def stop(self) -> None:
        if self._running is None:
            return
        from daemon.sim import nvml as sim_nvml

        sim_nvml.uninstall()
        self._running.stop()
        self._running = None
