"""Shared fixtures: a simulated host started from TOML text, with pynvml reading it, and real
mlcostd daemons on simulated hosts (tests/livedaemon.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lifeline
import livedaemon
import pynvml
import pytest
from hypothesis import HealthCheck, settings

from daemon.sim import nvml as sim_nvml
from daemon.sim import scenario

# Property tests assert what holds, never how fast: no per-example deadline and no "too slow"
# health check (a loaded 2-core CI machine tripped both, and shrinking a "flaky" deadline then
# ran past the test timeout); CI replays the same examples every run (derandomize).
settings.register_profile("mlcost", deadline=None, derandomize=bool(os.environ.get("CI")),
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
settings.load_profile("mlcost")

# The fault suite's table of faults tried and the CPU seconds by module; plugins, so the
# xdist controller prints them too.
pytest_plugins = ["faulttable", "cputable"]


# Textual's pilot gives the app 30 s to handle what a key press or pause queued and then
# raises WaitForScreenTimeout: on a loaded machine (load 30-90) whole TUI tests failed so. That
# bound is for a hang, not a speed figure: the pilot waits up to the test's own bound instead
# (pytest-timeout's, pyproject.toml).
PILOT_WAIT_S = 300.0


def pytest_configure(config: pytest.Config) -> None:
    from textual.pilot import Pilot

    wait = Pilot._wait_for_screen
    if getattr(wait, "patient", False):
        return

    async def patient_wait(self: Pilot, timeout: float = PILOT_WAIT_S) -> bool:
        return await wait(self, max(timeout, PILOT_WAIT_S))

    patient_wait.patient = True  # type: ignore[attr-defined]
    Pilot._wait_for_screen = patient_wait  # type: ignore[method-assign]


def work_unit(nodeid: str) -> str:
    """What an xdist worker takes whole: the test's xdist_group ("path::test@serial") or its
    module."""
    if nodeid.rfind("@") > nodeid.rfind("]"):  # "path::test[param]@group"
        return nodeid.split("@")[-1]
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (`-n N`, `--dist loadgroup` from pyproject.toml), a worker takes a
    whole module at a time, so a module-scoped daemon starts once, not once per worker; tests
    marked `xdist_group("serial")` (those that cannot share the machine with each other) all go
    to one worker, one after another. Work units are handed out in collection order, which
    pytest_collection_modifyitems below makes the longest first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    # xdist would hand out the units with the most tests first: a module of one 80 s test
    # went last and alone set the run's end.
    config.option.loadscopereorder = False

    class ByModuleOrGroup(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByModuleOrGroup(config, log)


# Seconds each work unit took in a 4-worker `make test` (setup, call and teardown of its tests;
# measured 2026-12-02 16:37 on the 2-core machine; "serial" is the xdist_group("serial") tests
# together), for a checkout with no recorded figures yet (a fresh clone, CI): only the order
# matters, and only for the units long enough to set the run's end. A unit missing here counts
# as 0 s and starts last: the new live modules (compare, corpus, profile, snoozes, the serial
# group) were missing, and in a fresh clone each of these 60-120 s units started last and ran on
# alone. A run records its own figures per test in pytest's cache (.pytest_cache,
# "mlcost/test_seconds"), and those win.
# 2026-12-03: "serial", test_compare.py and test_hostile_client.py less what their changed
# tests were measured to save (the demo's resize 79.6 -> 24.5 s, the compared runs' recording
# 82.9 -> 51.7 s, the slowloris 22.0 -> 6.5 s).
UNIT_SECONDS = {
    "tests/daemon/test_corpus.py": 98, "tests/daemon/test_profile.py": 96, "serial": 77,
    "tests/daemon/test_snapshot_live.py": 76, "tests/daemon/test_compare.py": 72,
    "tests/daemon/test_service.py": 65, "tests/daemon/test_snoozes.py": 62,
    "tests/daemon/test_store.py": 52,
    "tests/tui/test_app.py": 49, "tests/daemon/test_openapi.py": 45,
    "tests/daemon/test_idle_answer_live.py": 41, "tests/faults/test_gpu_faults.py": 40,
    "tests/tui/test_new_user_screens.py": 40, "tests/daemon/test_api.py": 40,
    "tests/daemon/test_startup_errors.py": 38, "tests/faults/test_hostile_client.py": 35,
    "tests/daemon/test_replay_texts.py": 34,
    "tests/tui/test_sizes.py": 33, "tests/daemon/test_hostile_stores.py": 32,
    "tests/daemon/test_kinds_live.py": 28, "tests/tui/test_keyed_table.py": 27,
    "tests/faults/test_clock_and_processes.py": 27, "tests/faults/test_store_faults.py": 26,
    "tests/deploy/test_fleet.py": 25, "tests/daemon/test_owners_live.py": 25,
    "tests/daemon/test_snapshot_html.py": 22, "tests/tui/test_modes.py": 22,
    "tests/tui/test_snapshots.py": 22, "tests/daemon/test_canaries.py": 22,
    "tests/daemon/test_time_ranges.py": 21, "tests/daemon/test_cli_edges.py": 21,
    "tests/deploy/test_prometheus_rules.py": 21, "tests/daemon/test_replay.py": 17,
    "tests/daemon/test_snapshot_s3.py": 17, "tests/daemon/test_long_arguments_live.py": 16,
    "tests/daemon/test_report_parity.py": 16, "tests/tui/test_hangup.py": 16,
    "tests/daemon/test_report_range.py": 16,
    # 2026-12-06, measured alone (-n 0) on the loaded 2-core machine: 72-101 s, its three
    # profiles recorded at once
    "tests/daemon/test_compare_stalls.py": 80,
}
_CACHE_KEY = "mlcost/test_seconds"


@pytest.hookimpl(trylast=True)  # after xdist has added "@group" to the grouped tests' ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, the longest work units first (longest-processing-time order), so the last
    unit to start is a short one; tests keep their order within a unit."""
    if not hasattr(config, "workerinput") or getattr(config, "cache", None) is None:
        return
    recorded: dict[str, float] = config.cache.get(_CACHE_KEY, {})
    units: dict[str, float] = {}
    for item in items:
        unit = work_unit(item.nodeid)
        units[unit] = units.get(unit, 0.0) + recorded.get(item.nodeid.split("@")[0], 0.0)
    for unit, seen in units.items():
        if seen == 0.0:
            units[unit] = UNIT_SECONDS.get(unit, 0.0)
    items.sort(key=lambda item: -units[work_unit(item.nodeid)])


_test_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's seconds (setup, call, teardown), recorded where the run is reported: the
    xdist controller, or the one process without -n."""
    nodeid = report.nodeid.split("@")[0]
    _test_seconds[nodeid] = _test_seconds.get(nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput") or getattr(config, "cache", None) is None \
            or not _test_seconds:
        return
    recorded = config.cache.get(_CACHE_KEY, {})
    recorded.update({nodeid: round(seconds, 2) for nodeid, seconds in _test_seconds.items()})
    config.cache.set(_CACHE_KEY, recorded)


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
        folder = tmp_path_factory.mktemp(f"mlcostd-{Path(scenario_name).stem}")  # a name or a file
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
