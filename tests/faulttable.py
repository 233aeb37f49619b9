"""The fault suite's table: each fault-suite test is marked `@pytest.mark.fault("class", "what
is done")`; at the end of the session a table lists every fault tried and whether the daemon
survived it (the test passed).

A plugin (tests/conftest.py loads it), not tests/faults/conftest.py: under pytest-xdist the
controller, which prints the summary, never collects, so it never loads a sub-folder's conftest.
The marker travels to it on each report's user_properties.
"""

from __future__ import annotations

from typing import Any

import pytest

_TRIED: dict[str, dict[str, Any]] = {}  # nodeid -> {"fault", "how", "outcome"}, in run order
_PROPERTY = "fault"  # each case's report carries ("fault", [kind, how]) in its user_properties


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fault(kind, how): a fault-suite case, listed in the table of faults tried")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The marker travels on the test's reports, so the table is built from what is reported:
    # under pytest-xdist the workers collect and run the tests, the controller prints the table.
    for item in items:
        marker = item.get_closest_marker("fault")
        if marker is not None:
            kind, how = (list(marker.args) + ["", ""])[:2]
            item.user_properties.append((_PROPERTY, [kind, how]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    fault = next((value for name, value in report.user_properties if name == _PROPERTY), None)
    if fault is None:
        return
    kind, how = fault
    entry = _TRIED.setdefault(report.nodeid, {"fault": kind, "how": how, "outcome": "not run"})
    if report.when == "call" or report.outcome != "passed":
        if entry["outcome"] in ("passed", "not run"):  # a failure in any phase sticks
            entry["outcome"] = report.outcome


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workerinput"):  # an xdist worker: the controller prints
        return
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
