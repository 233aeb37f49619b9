"""CPU seconds by test module, printed at the end of the run beside pytest's --durations.

The suite is CPU-bound on the 2-core machine (wall time follows the CPU it spends, not the
waits), so the figure that decides `make test`'s minutes is CPU, and --durations shows only
wall seconds, which a loaded machine inflates. Each test's CPU is measured from before its
setup to after its teardown, the test process's own and its reaped children's (the daemons,
workloads and commands a test starts, once they have been reaped), so a module-scoped daemon
counts in the module that started it. A child is counted where it is reaped: a session-scoped
daemon (tests/conftest.py shared_daemon) in whichever module ran last on its worker, which can
make a small module look costly (test_savings.py: 29.5 CPU-s in a run, 0.7 alone). Under pytest-xdist each worker measures and the figure travels
to the controller on the report's user_properties (as tests/faulttable.py's marker does).
"""

from __future__ import annotations

import resource
from typing import Any

import pytest

_PROPERTY = "cpu_s"
_SHOWN = 15
_started: dict[str, float] = {}  # nodeid -> CPU seconds used so far when its setup began
_by_module: dict[str, float] = {}  # module path -> CPU seconds, where the run is reported


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid: str) -> None:
    _started[nodeid] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    if call.when == "teardown" and item.nodeid in _started:
        report = outcome.get_result()
        report.user_properties.append(
            (_PROPERTY, round(_cpu_seconds() - _started.pop(item.nodeid), 3)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    cpu = next((value for name, value in report.user_properties if name == _PROPERTY), None)
    if report.when == "teardown" and isinstance(cpu, float | int):
        module = report.nodeid.split("::", 1)[0]
        _by_module[module] = _by_module.get(module, 0.0) + cpu


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workerinput") or not _by_module:
        return
    terminalreporter.section(f"CPU seconds by module (top {_SHOWN}; tests/cputable.py)")
    for module, cpu in sorted(_by_module.items(), key=lambda kv: -kv[1])[:_SHOWN]:
        terminalreporter.write_line(f"{cpu:8.1f}  {module}")
    terminalreporter.write_line(f"{sum(_by_module.values()):8.1f}  all {len(_by_module)} modules "
                                "(pytest's own start and collection not counted)")
