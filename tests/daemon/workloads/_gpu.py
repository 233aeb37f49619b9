"""The "GPU" of the test workloads: a simulated device from daemon.sim.device.

When MLCOST_SIM_DIR points at a simulated host the workload attaches to it; otherwise it makes a
private one-GPU host in a temp dir, so a workload also runs on its own. Everything else a
workload does (torch code, file I/O, sleeping) is real.
"""

from __future__ import annotations

import os
import sys
import tempfile

from daemon.sim import state
from daemon.sim.device import Device


def attach(gpu_index: int = 0) -> Device:
    """A Device on the simulated host named by MLCOST_SIM_DIR, or on a private one."""
    state_dir = os.environ.get(state.STATE_DIR_ENV)
    if not state_dir:
        state_dir = tempfile.mkdtemp(prefix="mlcost-workload-sim-")
        state.write_host(state_dir, {"scenario": "test-workload", "gpus": [{"memory_total": 80 << 30}]})
    return Device(gpu_index=gpu_index, state_dir=state_dir)


def ready() -> None:
    """Tell the test that started us that we are in our steady loop."""
    print("READY", flush=True)
    sys.stdout.flush()
