"""Helpers for the sim tests: scenario text for small hosts, tiny workload programs, and the
bounded poll every test waits with."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

GIB = 1 << 30


def host_toml(
    gpus: int = 2,
    model: str = "NVIDIA A100-SXM4-40GB",
    workloads: list[dict] | None = None,
    faults: str = "",
    gpm: bool | None = None,
) -> str:
    """Scenario text; each workload is {name, gpus, code} run as `python -c code`."""
    text = (
        '[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
        f'[gpu]\nmodel = "{model}"\ncount = {gpus}\n'
    )
    if gpm is not None:
        text += f"gpm = {'true' if gpm else 'false'}\n"
    for w in workloads or []:
        argv = [sys.executable, "-c", w["code"]]
        text += (
            f'[[workloads]]\nname = "{w["name"]}"\ngpus = {json.dumps(w["gpus"])}\n'
            f"command = {json.dumps(argv)}\n"
        )
    return text + faults


def attach_code(gpu: int, alloc_gib: float, loop: str = "time.sleep(60)") -> str:
    """A small real program: attach to a GPU, hold memory, then run `loop` forever."""
    return (
        "import time\nfrom daemon.sim.device import Device\n"
        f"dev = Device(gpu_index={gpu})\ndev.alloc(int({alloc_gib} * (1 << 30)))\n"
        f"while True:\n    {loop}\n"
    )


def attached(running: Any, gpu: int, alloc_gib: float = 0.0, sm: float | None = None) -> Any:
    """This test process on a simulated GPU, as a workload would be, without spawning one:
    holding `alloc_gib` GiB and, with `sm`, running a kernel on that share of the SMs until it
    is closed (a Device: use it in a `with`). For tests of what NVML reports, not of how a
    workload behaves."""
    from daemon.sim.device import Device

    device = Device(gpu_index=gpu, state_dir=running.state_dir)
    device.alloc(int(alloc_gib * GIB))
    if sm is not None:
        device.launch(sm)
    return device


def poll(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.2,
         explain: Callable[[], str] | None = None) -> Any:
    """Call predicate() until it returns something truthy (returned), or fail the test naming
    `what` (and what `explain()` says). The one bounded wait of the tests: never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            pytest.fail(f"{what}: not within {timeout:g} s{detail}")
        time.sleep(every)


async def pilot_wait_for(pilot: Any, predicate: Callable[[], object], timeout: float = 120.0,
                         what: str = "condition") -> None:
    """poll() for a Textual test: the app runs (pilot.pause) between checks; fails the test
    naming `what` after `timeout` (a bound for a loaded machine, not a speed figure). Checks
    every 0.2 s, as poll() does: each pause first waits for every widget of the screen to
    process its messages, and at 0.05 s that walk cost a waiting test 0.09 CPU-s a second
    (mlcost-top at 80x24), at 0.2 s 0.04 - on a CPU-bound suite, waits are not free."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s")
        await pilot.pause(0.2)


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, every: float = 0.05):
    """Poll until predicate() is truthy; return its value (or fail the test)."""
    return poll(predicate, timeout, "condition", every)


def run_concurrently(workers: list[Callable[[], None]], stop: threading.Event, seconds: float,
                     failed: list[Any]) -> None:
    """A bounded stress run: each worker in its own thread (looping until `stop` is set), with
    threads switching as often as the interpreter allows so conflicting paths interleave; ends
    after `seconds` or as soon as `failed` holds something, and always joins its threads."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    threads = [threading.Thread(target=f, daemon=True) for f in workers]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not failed:
            stop.wait(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        sys.setswitchinterval(switch)
