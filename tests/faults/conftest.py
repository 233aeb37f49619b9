"""The fault suite: the real daemon on the simulated host against each fault class.

Each test is marked `@pytest.mark.fault("class", "what is done")`; at the end of the session a
table lists every fault tried and whether the daemon survived it (the test passed). Shared
helpers for these tests are in tests/faults/faultkit.py.
"""

from __future__ import annotations

from typing import Any

import pytest

_TRIED: dict[str, dict[str, Any]] = {}  # nodeid -> {"fault", "how", "outcome"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fault(kind, how): a fault-suite case, listed in the table of faults tried")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _TRIED.get(report.nodeid)
    if entry is None:
        return
    if report.when == "call" or report.outcome != "passed":
        if entry["outcome"] in ("passed", "not run"):  # a failure in any phase sticks
            entry["outcome"] = report.outcome


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("fault")
        if marker is not None:
            kind, how = (list(marker.args) + ["", ""])[:2]
            _TRIED[item.nodeid] = {"fault": kind, "how": how, "outcome": "not run"}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # one row per fault, its parametrized cases counted together, in the order they ran
    rows: dict[tuple[str, str], list[str]] = {}
    for entry in _TRIED.values():
        if entry["outcome"] != "not run":
            rows.setdefault((entry["fault"], entry["how"]), []).append(entry["outcome"])
    if not rows:
        return
    width = max(len(fault) for fault, _ in rows)
    terminalreporter.section("faults tried")
    for (fault, how), outcomes in rows.items():
        passed = outcomes.count("passed")
        verdict = "survived" if passed == len(outcomes) else "FAILED"
        cases = f" ({passed} of {len(outcomes)} cases)" if len(outcomes) > 1 else ""
        terminalreporter.write_line(f"{fault:<{width}}  {verdict:<8}  {how}{cases}")
    survived = sum(all(o == "passed" for o in outcomes) for outcomes in rows.values())
    terminalreporter.write_line(f"{survived} of {len(rows)} faults survived")
