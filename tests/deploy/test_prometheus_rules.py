"""deploy/prometheus/: the recording rules and alerts load in the real promtool, their unit
tests (deploy/prometheus/tests/) pass, and those tests catch a rule that is wrong."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus"
PROMTOOL = "/usr/bin/promtool"


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def copy_with_one_test_group(tmp_path: Path, name_starts: str) -> Path:
    """deploy/prometheus/ copied into tmp_path, its unit tests cut to the one group whose name
    starts with `name_starts` (the group that must catch a mutation): the other groups pass or
    fail the same with or without it, and evaluating them all took most of the time."""
    copy = tmp_path / "prometheus"
    shutil.copytree(RULES, copy)
    tests = copy / "tests" / "mlcost-rules.test.yml"
    document = yaml.safe_load(tests.read_text())
    groups = [g for g in document["tests"] if g["name"].startswith(name_starts)]
    assert len(groups) == 1, [g["name"] for g in document["tests"]]
    document["tests"] = groups
    tests.write_text(yaml.safe_dump(document, sort_keys=False))
    return copy


def test_the_rules_are_valid():
    checked = promtool("check", "rules", str(RULES / "mlcost-rules.yml"),
                       str(RULES / "mlcost-alerts.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 21 rules found" in checked.stdout
    assert "SUCCESS: 11 rules found" in checked.stdout


def test_the_rules_unit_tests_pass():
    tested = promtool("test", "rules", str(RULES / "tests" / "mlcost-rules.test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_unit_tests_catch_an_alert_that_fires_too_soon(tmp_path):
    copy = copy_with_one_test_group(tmp_path, "a held idle GPU alerts after 30 minutes")
    alerts = copy / "mlcost-alerts.yml"
    text = alerts.read_text()
    assert text.count("for: 30m") == 1
    alerts.write_text(text.replace("for: 30m", "for: 10m"))  # held idle: 10 min, not 30
    tested = promtool("test", "rules", str(copy / "tests" / "mlcost-rules.test.yml"))
    assert tested.returncode == 1
    assert "MlcostGpuHeldIdle" in tested.stdout + tested.stderr


def test_the_unit_tests_catch_a_fleet_burn_that_is_not_a_sum(tmp_path):
    copy = copy_with_one_test_group(tmp_path, "fleet burn, waste and idle are the sums")
    rules = copy / "mlcost-rules.yml"
    text = rules.read_text()
    right = "          sum(\n              mlcost_host_burn_dollars_per_hour\n"
    assert text.count(right) == 1
    rules.write_text(text.replace(right, right.replace("sum(", "max("), 1))
    tested = promtool("test", "rules", str(copy / "tests" / "mlcost-rules.test.yml"))
    assert tested.returncode == 1
    assert "mlcost:fleet_burn_dollars_per_hour" in tested.stdout + tested.stderr


def test_the_unit_tests_catch_a_per_namespace_usage_cost_that_drops_the_usage(tmp_path):
    copy = copy_with_one_test_group(tmp_path, "per-namespace used, idle and unallocated")
    rules = copy / "mlcost-rules.yml"
    text = rules.read_text()
    wrong = "expr: sum by (namespace) (mlcost_gpu_usage_hourly_cost)\n"
    rules.write_text(text.replace(
        "expr: sum by (namespace, usage) (mlcost_gpu_usage_hourly_cost)\n", wrong, 1))
    assert wrong in rules.read_text()
    tested = promtool("test", "rules", str(copy / "tests" / "mlcost-rules.test.yml"))
    assert tested.returncode == 1
    assert "namespace_usage:mlcost_gpu_usage_hourly_cost:sum" in tested.stdout + tested.stderr


def test_the_unit_tests_catch_a_budget_projection_that_forgets_what_was_spent(tmp_path):
    """The run-rate alert this replaced: the burn times the whole period, whatever the period
    had already spent and however much of it was left."""
    said = budget_tests_with(tmp_path, (
        "mlcost_budget_spent_dollars\n          + mlcost:budget_burn_dollars_per_hour * on (period)"
        " group_left mlcost:budget_period_hours_left"), (
        "0 * mlcost_budget_spent_dollars\n          + mlcost:budget_burn_dollars_per_hour"
        " * on (period) group_left () (0 * mlcost:budget_period_hours_left + 24)"))
    assert "MlcostBudgetRunRate" in said


def budget_tests_with(tmp_path, right: str, wrong: str) -> str:
    """The budget alerts' promtool tests, run as alert_tests_with runs them."""
    return alert_tests_with(tmp_path, "a budget whose spend so far", right, wrong)


def alert_tests_with(tmp_path, group: str, right: str, wrong: str) -> str:
    """The promtool test group named by `group` run on a copy of the alerts with `right`
    (there once) replaced by `wrong`: it must fail; what promtool said."""
    copy = copy_with_one_test_group(tmp_path, group)
    alerts = copy / "mlcost-alerts.yml"
    text = alerts.read_text()
    assert text.count(right) == 1
    alerts.write_text(text.replace(right, wrong))
    tested = promtool("test", "rules", str(copy / "tests" / "mlcost-rules.test.yml"))
    assert tested.returncode == 1
    return tested.stdout + tested.stderr


def test_the_unit_tests_catch_a_user_budget_joined_on_a_hostname_the_workloads_lack(tmp_path):
    """Probe 121: the user and job budgets' burn was joined on a Hostname that the workload
    series never carry, so only the host budget had a projection and a run-rate alert; the
    unit tests fed workload series a Hostname no scrape gives them, and passed."""
    said = budget_tests_with(
        tmp_path,
        'on (instance, name) group_left\n              label_replace(sum by (instance, user) ',
        'on (instance, Hostname, name) group_left\n'
        '              label_replace(sum by (instance, Hostname, user) ')
    assert 'name="alice", period="daily", scope="user"' in said


def test_the_unit_tests_catch_a_host_idle_alert_that_ignores_the_daemons_verdict(tmp_path):
    """Probe 121: MlcostHostIdle ("stop the instance") went pending for a host whose server
    waited for requests, which `mlcostd idle` called active: it read the GPUs alone."""
    said = alert_tests_with(tmp_path, "a host idle for an hour alerts",
                            "\n          unless on (instance) (mlcost_host_active == 1)\n", "\n")
    assert 'Hostname="c"' in said  # the serving host paged


def test_the_unit_tests_catch_a_held_idle_alert_on_a_servers_gpu(tmp_path):
    """A server's GPU idle at night is the idle_server advice's business, not MlcostGpuHeldIdle's
    (whose text sends to idle_gpu_held): the alert follows mlcost_gpu_held_idle where a daemon
    exports it."""
    said = alert_tests_with(tmp_path, "a held idle GPU alerts after 30 minutes",
                            "\n            unless on (instance, gpu, UUID) mlcost_gpu_held_idle\n",
                            "\n")
    assert 'UUID="GPU-b1"' in said  # the server's GPU alerted


def test_the_unit_tests_catch_a_lost_gpu_alert_that_a_flapping_gpu_resets(tmp_path):
    """Probe 156 F2: `mlcost_gpu_up == 0` for 5m never fired for a GPU whose reads time out on
    every other tick: each answer restarted the `for`."""
    said = alert_tests_with(tmp_path, "a GPU down on half its scrapes",
                            "expr: 1 - avg_over_time(mlcost_gpu_up[5m]) > 0.1",
                            "expr: mlcost_gpu_up == 0")
    assert 'UUID="GPU-b3"' in said


def test_the_unit_tests_catch_a_fleet_burn_that_drops_a_host_whose_daemon_is_down(tmp_path):
    """Probe 156 F3: a kill -9 of a $32.77/h host's daemon took the fleet's $/h from 34.78 to
    2.01 at the next scrape, while the cloud still billed the host."""
    copy = copy_with_one_test_group(tmp_path, "a host whose daemon is down stays")
    rules = copy / "mlcost-rules.yml"
    text = rules.read_text()
    start = text.index("      - record: mlcost:fleet_burn_dollars_per_hour\n")
    end = text.index("      - record: mlcost:fleet_unreported_dollars_per_hour\n")
    rules.write_text(text[:start] + "      - record: mlcost:fleet_burn_dollars_per_hour\n"
                     "        expr: sum(mlcost_host_burn_dollars_per_hour)\n" + text[end:])
    tested = promtool("test", "rules", str(copy / "tests" / "mlcost-rules.test.yml"))
    assert tested.returncode == 1
    assert "mlcost:fleet_burn_dollars_per_hour" in tested.stdout + tested.stderr
