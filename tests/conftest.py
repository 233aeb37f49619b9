"""Shared fixtures: a simulated host started from TOML text, with pynvml reading it, and real
mlcostd daemons on simulated hosts (tests/livedaemon.py)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import lifeline
import livedaemon
import pynvml
import pytest

from daemon.sim import nvml as sim_nvml
from daemon.sim import scenario

# The fault suite's table of faults tried; a plugin so the xdist controller prints it too.
pytest_plugins = ["faulttable"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (`-n N`, `--dist loadgroup` from pyproject.toml), a worker takes a
    whole module at a time, so a module-scoped daemon starts once, not once per worker; tests
    marked `xdist_group("serial")` (those that cannot share the machine with each other) all go
    to one worker, one after another."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ByModuleOrGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):  # "path::test[param]@group"
                return nodeid.split("@")[-1]
            return nodeid.split("::", 1)[0]

    return ByModuleOrGroup(config, log)


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


@pytest.fixture(scope="module")
def mlcostd(tmp_path_factory) -> Iterator[Callable[..., livedaemon.LiveDaemon]]:
    """Start real daemons: `mlcostd(scenario, interval=..., config=..., args=...)` runs
    `mlcostd run --simulate` with its own db and socket and returns once /v1/health says ok.
    Every daemon still running at the end of the module is stopped with SIGTERM, and the
    module fails if it did not exit 0 or left any process of its own tree running; whatever is
    left in its process group is then killed. Should pytest itself be killed, the daemons get
    a parent-death SIGKILL (tests/lifeline.py)."""
    started: list[livedaemon.LiveDaemon] = []

    def start(scenario_name: str = "idle-host", **kwargs) -> livedaemon.LiveDaemon:
        folder = tmp_path_factory.mktemp(f"mlcostd-{scenario_name}")
        daemon = livedaemon.start(folder, scenario_name, **kwargs)
        started.append(daemon)
        return daemon

    yield start
    problems = []
    try:
        for daemon in started:
            if daemon.returncode is None:
                code = daemon.stop(check_tree=False)
                if code != 0:
                    problems.append(f"mlcostd pid {daemon.pid} exited {code}\n{daemon.log_tail()}")
        for daemon in started:
            daemon.wait_tree_gone()
    finally:
        for daemon in started:  # after the check, so a leak still fails the module
            lifeline.kill_group(daemon.pid)
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture(scope="session")
def shared_daemon(tmp_path_factory) -> Iterator[livedaemon.LiveDaemon]:
    """One real daemon for the whole session (per xdist worker), for the tests that only read
    it: `mlcostd run --simulate idle-host --interval 0.5` with the API on its unix socket and
    on TCP (its token beside the socket) and /metrics on a listener of its own. No actions
    are allowed, and no idle event fires within a day, so what it serves does not change in
    kind over the session (no recommendation, no incident snapshot). A test that changes what
    it records or serves (actions, snoozes, faults, stopping it) starts its own with `mlcostd`.
    Stopped at the end of the session; the session fails if it did not exit 0 or left any of
    its processes running."""
    daemon = livedaemon.start(
        tmp_path_factory.mktemp("mlcostd-shared"), "idle-host", interval=0.5,
        config={"idle": {"gpu_held_after": "24h", "gpu_unheld_after": "24h", "host_after": "24h"}},
        args=["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
    try:
        daemon.wait_for_ticks(3)
        yield daemon
        code = daemon.stop()  # checks that its process tree is gone
        if code != 0:
            pytest.fail(f"the shared mlcostd pid {daemon.pid} exited {code}\n{daemon.log_tail()}")
    finally:
        if daemon.returncode is None:
            daemon.stop(signal.SIGKILL, check_tree=False)
        lifeline.kill_group(daemon.pid)


@pytest.fixture
def fresh_catalog() -> Iterator[None]:
    """The price catalog is cached per process (pricing.catalog): a test that prices anything
    starts and ends with that cache cleared, so it never sees another test's cache file or
    extra catalogs. The one copy of this fixture (tests/pricing uses it for every test)."""
    from pricing.catalog import clear_catalog_cache

    clear_catalog_cache()
    yield
    clear_catalog_cache()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """One standalone moto server for the session, on a free localhost port: EC2 (spot price
    history, the resize action) and S3/KMS (snapshot uploads). Tests keep apart by what they
    create (their own bucket, their own instances)."""
    from moto.server import ThreadedMotoServer  # moto[server] is in the test extra

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    yield f"http://127.0.0.1:{port}"
    server.stop()
