"""The fleet, for real: three mlcostd on three simulated hosts (different instance types and
prices) on loopback ports, a real Prometheus scraping them every second with the repository's
rules loaded, asserted through Prometheus's HTTP API; the Grafana dashboard's every query run
against it; and mlcost-top --prometheus reading the fleet from it.

The tests run in file order on one fleet: the last ones kill a daemon and look at what the
others and Prometheus do.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import pwd
import re
import signal
from contextlib import ExitStack
from pathlib import Path

import kubelet
import livedaemon
import pytest
import yaml
from promserver import Prometheus
from simhost import pilot_wait_for, poll

from daemon.api.metrics import WORKLOAD_LABELS
from daemon.client import read_token_file
from daemon.sim import scenario
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.processes import ProcessPanel
from mlcost_tui.prometheus import PrometheusFleet
from mlcost_tui.screens.prometheus_fleet import PrometheusFleetScreen, PrometheusFleetTable

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "mlcost-fleet.json"
_METRICS_PORT = re.compile(r"metrics on http://[^:]+:(\d+)/metrics")
_API_PORT = re.compile(r"API on http://[^:]+:(\d+) ")
WAIT_S = 120.0  # a loaded machine: starting daemons and Prometheus takes a while

# name -> (scenario text): one held idle GPU, four unheld idle GPUs, one busy GPU.
HOSTS = {
    "notebook": """name = "fleet-notebook"
[instance]
provider = "aws"
type = "g5.xlarge"
region = "us-east-1"
lifecycle = "on-demand"
[gpu]
model = "NVIDIA A10G"
count = 1
[[workloads]]
name = "notebook"
program = "idle_notebook"
gpus = [0]
options = { memory_gib = 6 }
""",
    "empty": """name = "fleet-empty"
[instance]
provider = "aws"
type = "g5.12xlarge"
region = "us-east-1"
lifecycle = "on-demand"
[gpu]
model = "NVIDIA A10G"
count = 4
""",
    "training": """name = "fleet-training"
[instance]
provider = "aws"
type = "g5.2xlarge"
region = "us-east-1"
lifecycle = "on-demand"
[gpu]
model = "NVIDIA A10G"
count = 1
[[workloads]]
name = "train"
program = "healthy_train"
gpus = [0]
options = { memory_gib = 8, step-seconds = 0.5 }
""",
}
# Each host's kubelet: name -> [(namespace, pod, [(container, [GPU indexes])])]. The notebook
# and the trainer are their GPU's pod; the empty host's GPU 0 is time-sliced between two pods
# that run nothing yet, its other three GPUs are unallocated.
PODS = {
    "notebook": [("research", "notebook-0", [("notebook", [0])])],
    "empty": [("ml", "eval-0", [("eval", [0])]), ("research", "notebook-1", [("notebook", [0])])],
    "training": [("ml", "train-0", [("trainer", [0])])],
}
# Short waits so the daemons advise (host_idle, idle_gpu_held) within seconds.
CONFIG = {"idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"},
          "cost": {"evaluate_every": "5s"}}

# The trainer's host has spent its day's budget at its first charged tick; its month's is out of
# reach. The trainer's user (the simulated workloads run as us) has $0.50 a day: at the host's
# price an hour, on course to cross it but for the last half hour of the UTC day.
USER = pwd.getpwuid(os.getuid()).pw_name
USER_DAILY = 0.5
BUDGETS = {"training": {"cost.budgets.host": {"daily": 0.0001, "monthly": 1e9},
                        f"cost.budgets.user.{json.dumps(USER)}": {"daily": USER_DAILY}}}
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests" / "mlcost-rules.test.yml"


class Fleet:
    def __init__(self, daemons: dict[str, livedaemon.LiveDaemon], prometheus: Prometheus,
                 token_file: Path, instances: dict[str, str]) -> None:
        self.daemons = daemons
        self.prometheus = prometheus
        self.token_file = token_file
        self.instances = instances  # name -> the scrape target (the metrics listener)

    def explain(self) -> str:
        return self.prometheus.log_tail() + "\n" + "\n".join(
            d.log_tail(1500) for d in self.daemons.values())


def port_of(daemon: livedaemon.LiveDaemon, pattern: re.Pattern[str]) -> int:
    found = poll(lambda: pattern.search(daemon.log()), 30, f"{pattern.pattern} in the log",
                 explain=daemon.log_tail)
    return int(found.group(1))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fleet")
    token_file = folder / "fleet.token"  # one token for the fleet, as config management would
    token_file.write_text("fleet-token-" + "x" * 32 + "\n")
    os.chmod(token_file, 0o600)
    daemons: dict[str, livedaemon.LiveDaemon] = {}
    prometheus = None
    kubelets = ExitStack()
    try:
        for name, text in HOSTS.items():
            host = folder / f"{name}.toml"
            host.write_text(text)
            uuid = scenario.load(host).gpu_uuid
            socket = folder / f"pods-{name}" / "kubelet.sock"
            socket.parent.mkdir()
            kubelets.enter_context(kubelet.pod_resources_server(socket, kubelet.list_response(
                [(namespace, pod, [(container, [uuid(i) for i in gpus])
                                   for container, gpus in containers])
                 for namespace, pod, containers in PODS[name]])))
            config = {**CONFIG, "owners": {"pod_resources_socket": str(socket)},
                      **BUDGETS.get(name, {})}
            daemons[name] = livedaemon.start(folder / name, str(host), interval=0.5,
                                             config=config, args=[
                "--metrics-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0",
                "--token-file", str(token_file)])
        instances = {name: f"127.0.0.1:{port_of(d, _METRICS_PORT)}"
                     for name, d in daemons.items()}
        prometheus = Prometheus(folder / "prometheus", list(instances.values()))
        fleet = Fleet(daemons, prometheus, token_file, instances)
        poll(lambda: prometheus.values('up{job="mlcost"} == 1').keys() == set(instances.values()),
             WAIT_S, "Prometheus scraping all three daemons", explain=fleet.explain)
        yield fleet
    finally:
        if prometheus is not None:
            prometheus.stop()
        codes = {name: d.stop(check_tree=False) for name, d in daemons.items()
                 if d.returncode is None}
        for daemon in daemons.values():
            daemon.wait_tree_gone()
        kubelets.close()
        assert all(code == 0 for code in codes.values()), codes


def price_of(daemon: livedaemon.LiveDaemon) -> float:
    return float(daemon.now()["price"]["per_hour"])


def test_fleet_burn_is_the_sum_of_the_host_prices(fleet):
    prices = {name: price_of(d) for name, d in fleet.daemons.items()}
    assert len(set(prices.values())) == 3  # three instance types, three prices
    expected = sum(prices.values())

    def fleet_burn() -> float | None:
        found = fleet.prometheus.values("mlcost:fleet_burn_dollars_per_hour")
        return found.get("")

    burn = poll(lambda: (value := fleet_burn()) is not None
                and abs(value - expected) < 1e-6 and value, WAIT_S,
                f"mlcost:fleet_burn_dollars_per_hour == {expected}", explain=fleet.explain)
    assert burn == pytest.approx(expected)
    per_host = fleet.prometheus.values("mlcost_host_burn_dollars_per_hour")
    assert per_host == pytest.approx({fleet.instances[n]: p for n, p in prices.items()})
    types = fleet.prometheus.values("mlcost_host_info", by="instance_type")
    assert set(types) == {"g5.xlarge", "g5.12xlarge", "g5.2xlarge"}


def test_per_namespace_used_idle_and_unallocated_gpu_cost_sum_to_each_node_gpu_cost(fleet):
    """Issue 26's acceptance: the recording rules over mlcost_gpu_usage_hourly_cost give each
    namespace's used, idle and unallocated GPU cost, summing to the node's GPU cost."""
    prices = {fleet.instances[name]: price_of(d) for name, d in fleet.daemons.items()}
    rule = "node_namespace_usage:mlcost_gpu_usage_hourly_cost:sum"

    def split() -> dict[str, dict[tuple[str, str], float]]:
        out: dict[str, dict[tuple[str, str], float]] = {}
        for row in fleet.prometheus.query(rule):
            labels = row["metric"]
            out.setdefault(labels["instance"], {})[
                (labels.get("namespace", ""), labels["usage"])] = float(row["value"][1])
        return out

    def summed() -> dict[str, dict[tuple[str, str], float]] | None:
        found = split()
        ok = found.keys() == prices.keys() and all(
            abs(math.fsum(found[i].values()) - price) < 1e-6 for i, price in prices.items())
        training = found.get(fleet.instances["training"], {})
        return found if ok and training.get(("ml", "used"), 0) > 0 else None

    found = poll(summed, WAIT_S, f"{rule} summing to each host's price, ml using its GPU",
                 explain=lambda: f"{split()}\n{fleet.explain()}")
    notebook, empty, training = (found[fleet.instances[n]]
                                 for n in ("notebook", "empty", "training"))
    # held, its SMs quiet: its used series reads 0 (probe 156 F6: it came and went)
    assert notebook.get(("research", "used")) == 0
    assert set(notebook) == {("research", "idle"), ("research", "used")}
    assert set(training) <= {("ml", "used"), ("ml", "idle")}
    gpu = prices[fleet.instances["empty"]] / 4  # time-sliced GPU 0: half each, held idle
    assert empty == pytest.approx({("ml", "idle"): gpu / 2, ("research", "idle"): gpu / 2,
                                   ("", "unallocated"): 3 * gpu})
    # beside OpenCost's allocation cost: the notebook's namespace pays for the GPU either way
    fleet_split = {(r["metric"].get("namespace", ""), r["metric"]["usage"]): float(r["value"][1])
                   for r in fleet.prometheus.query(
                       "namespace_usage:mlcost_gpu_usage_hourly_cost:sum")}
    allocation = fleet.prometheus.values("namespace:mlcost_gpu_allocation_hourly_cost:sum",
                                         by="namespace")
    assert set(allocation) == {"ml", "research"}
    assert allocation["research"] == pytest.approx(
        prices[fleet.instances["notebook"]] + gpu / 2)
    assert fleet_split[("research", "idle")] == pytest.approx(allocation["research"])
    node_cost = fleet.prometheus.values("node:mlcost_gpu_hourly_cost:sum")
    assert node_cost == pytest.approx(prices)


SERVICE_MONITOR = ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml"
# The target labels the Prometheus Operator gives a pod behind a ServiceMonitor's Service (its
# generated relabel_configs: namespace, service, pod, container from the pod; endpoint the port's
# name): mlcostd's own pod's, before the endpoint's own relabelings run.
OPERATOR_TARGET_LABELS = {"namespace": "mlcost", "service": "mlcostd", "pod": "mlcostd-7xk2p",
                          "container": "mlcostd", "endpoint": "metrics"}
# A ServiceMonitor's RelabelConfig fields -> Prometheus's relabel_config keys
RELABEL_KEYS = {"action": "action", "sourceLabels": "source_labels", "separator": "separator",
                "targetLabel": "target_label", "regex": "regex", "modulus": "modulus",
                "replacement": "replacement"}


def operator_scrape_config() -> dict:
    """The scrape config the Operator makes of servicemonitor.yaml's endpoint, for labels:
    its honorLabels and its relabelings (camelCase to Prometheus's keys, the action in lower
    case, as the Operator writes them)."""
    monitor = next(d for d in yaml.safe_load_all(SERVICE_MONITOR.read_text())
                   if d and d["kind"] == "ServiceMonitor")
    [endpoint] = monitor["spec"]["endpoints"]
    relabel = []
    for rule in endpoint.get("relabelings") or []:
        assert set(rule) <= set(RELABEL_KEYS), rule
        relabel.append({RELABEL_KEYS[k]: (v.lower() if k == "action" else v)
                        for k, v in rule.items()})
    return {"honor_labels": bool(endpoint.get("honorLabels")), "relabel_configs": relabel}


def test_through_the_servicemonitor_unallocated_cost_has_no_namespace(fleet, tmp_path):
    """Probe 121: the Operator's target labels (mlcostd's own namespace, pod, container) landed
    on every series that has none of its own: the unallocated GPUs and every process outside a
    pod were charged to namespace "mlcost". A second real Prometheus scrapes the fleet with those
    target labels and servicemonitor.yaml's honorLabels and relabelings."""
    second = Prometheus(tmp_path / "operator", list(fleet.instances.values()), job="mlcostd",
                        target_labels=OPERATOR_TARGET_LABELS, scrape=operator_scrape_config())
    try:
        empty = fleet.instances["empty"]
        gpu = price_of(fleet.daemons["empty"]) / 4

        def split() -> dict[tuple[str, str], float]:
            return {(r["metric"].get("namespace", ""), r["metric"]["usage"]):
                    float(r["value"][1]) for r in second.query(
                        f'node_namespace_usage:mlcost_gpu_usage_hourly_cost:sum{{instance='
                        f'"{empty}"}}')}

        found = poll(lambda: (s := split()) and math.isclose(math.fsum(s.values()), 4 * gpu)
                     and s, WAIT_S, "the empty host's usage split through the ServiceMonitor",
                     explain=lambda: f"{split()}\n{second.log_tail()}")
        # the three GPUs no pod is allocated: no namespace; the time-sliced one its pods'
        assert found == pytest.approx({("", "unallocated"): 3 * gpu, ("ml", "idle"): gpu / 2,
                                       ("research", "idle"): gpu / 2})
        # a pod's GPU keeps its own pod, namespace and container (the training host's target:
        # the split above waited for the empty host's alone, and each target is scraped at its
        # own offset in the interval)
        poll(lambda: second.query('mlcost_gpu_usage_hourly_cost{namespace="ml", pod="train-0", '
                                  'container="trainer"}'), WAIT_S,
             "train-0's usage through the ServiceMonitor", explain=second.log_tail)
        # the simulated processes are in no pod's cgroup: their workloads have no namespace
        teams = poll(lambda: second.query("namespace_user:mlcost_workload_burn_dollars_per_hour"
                                          ":sum"), WAIT_S, "the burn per team",
                     explain=second.log_tail)
        assert {r["metric"].get("namespace", "") for r in teams} == {""}
        # and nothing of mlcostd's own pod is on any series, scraped or recorded
        for label, value in OPERATOR_TARGET_LABELS.items():
            matched = value if label in {"namespace", "pod", "container"} else ".+"
            assert not second.query(f'{{__name__=~".*mlcost.*", {label}=~"{matched}"}}'), label
        [info] = [r for r in second.query("mlcost_host_info") if r["metric"]["instance"] == empty]
        assert not {"namespace", "pod", "container", "service", "endpoint"} & info["metric"].keys()
        assert info["metric"]["job"] == "mlcostd"
    finally:
        second.stop()


def test_a_held_idle_gpu_alert_goes_pending(fleet):
    notebook = fleet.instances["notebook"]

    def pending() -> list[dict]:
        return [a for a in fleet.prometheus.alerts() if a["labels"]["alertname"]
                == "MlcostGpuHeldIdle" and a["state"] == "pending"]

    found = poll(pending, WAIT_S, "MlcostGpuHeldIdle pending", explain=fleet.explain)
    assert [a["labels"]["instance"] for a in found] == [notebook]  # not the busy or unheld GPUs
    assert found[0]["labels"]["gpu"] == "0" and found[0]["labels"]["modelName"] == "NVIDIA A10G"
    # the whole host idle: the notebook's and the empty host's, not the training one
    expected = {notebook, fleet.instances["empty"]}

    def hosts_idle() -> set[str]:
        return {a["labels"]["instance"] for a in fleet.prometheus.alerts()
                if a["labels"]["alertname"] == "MlcostHostIdle"}

    poll(lambda: hosts_idle() >= expected, WAIT_S, "MlcostHostIdle pending for both idle hosts",
         explain=fleet.explain)
    assert hosts_idle() == expected


def test_a_crossed_budget_alerts_and_the_projection_adds_the_burn_to_what_was_spent(fleet):
    training = fleet.instances["training"]

    def crossed() -> list[dict]:
        return [a for a in fleet.prometheus.alerts()
                if a["labels"]["alertname"] == "MlcostBudgetCrossed" and a["state"] == "firing"
                and a["labels"]["scope"] == "host"]

    found = poll(crossed, WAIT_S, "MlcostBudgetCrossed firing", explain=fleet.explain)
    assert [(a["labels"]["instance"], a["labels"]["period"]) for a in found] == [
        (training, "daily")]  # not the month's, nor a host without budgets
    assert not [a for a in fleet.prometheus.alerts()
                if a["labels"]["alertname"] == "MlcostBudgetRunRate"
                and a["labels"]["scope"] == "host"]  # crossed, not on course
    # Every series as the rules saw them when they last ran: the projection is what was spent
    # plus the burn to the end of the UTC day or month.
    evaluated = fleet.prometheus.values(
        f'timestamp(mlcost:budget_projected_dollars{{instance="{training}", scope="host", '
        f'period="daily"}})')
    at = str(evaluated[training])

    def at_once(expr: str) -> dict[str, float]:
        return {r["metric"]["period"]: float(r["value"][1]) for r in fleet.prometheus.api(
            "query", query=expr, time=at)["result"]}

    host = f'instance="{training}", scope="host"'  # (its user has a budget too)
    spent = at_once(f"mlcost_budget_spent_dollars{{{host}}}")
    projected = at_once(f"mlcost:budget_projected_dollars{{{host}}}")
    hours_left = at_once("mlcost:budget_period_hours_left")
    burn = fleet.prometheus.api("query", query=f'mlcost_host_burn_dollars_per_hour{{instance='
                                f'"{training}"}}', time=at)["result"]
    assert set(spent) == set(projected) == {"daily", "monthly"} and spent["daily"] > 0
    per_hour = float(burn[0]["value"][1])
    assert per_hour == pytest.approx(price_of(fleet.daemons["training"]))
    for period in ("daily", "monthly"):
        assert projected[period] == pytest.approx(spent[period] + per_hour * hours_left[period])
    assert 0 < hours_left["daily"] <= 24 and hours_left["daily"] <= hours_left["monthly"] <= 744


def test_a_user_budget_gets_its_workloads_burn_its_projection_and_its_alert(fleet):
    """Probe 121: the workload series carry no Hostname, and the rule joined a user's burn to
    its budget on one: a user budget had no burn, no projection and never alerted."""
    training = fleet.instances["training"]
    where = f'instance="{training}", scope="user", name="{USER}"'

    def burn_of_the_rule() -> dict[str, float]:
        return fleet.prometheus.values(f"mlcost:budget_burn_dollars_per_hour{{{where}}}")

    poll(lambda: burn_of_the_rule().get(training, 0) > 0, WAIT_S,
         f"mlcost:budget_burn_dollars_per_hour for user {USER}", explain=fleet.explain)
    evaluated = fleet.prometheus.values(f"timestamp(mlcost:budget_projected_dollars{{{where}}})")
    at = str(evaluated[training])

    def at_once(expr: str) -> float:
        [row] = fleet.prometheus.api("query", query=expr, time=at)["result"]
        return float(row["value"][1])

    workloads = at_once(f'sum(mlcost_workload_burn_dollars_per_hour{{instance="{training}", '
                        f'user="{USER}"}})')
    assert at_once(f"mlcost:budget_burn_dollars_per_hour{{{where}}}") == pytest.approx(workloads)
    spent = at_once(f'mlcost_budget_spent_dollars{{{where}, period="daily"}}')
    hours_left = at_once('mlcost:budget_period_hours_left{period="daily"}')
    projected = at_once(f'mlcost:budget_projected_dollars{{{where}, period="daily"}}')
    assert projected == pytest.approx(spent + workloads * hours_left)
    assert at_once(f'mlcost_budget_limit_dollars{{{where}}}') == USER_DAILY
    if projected > USER_DAILY > spent:  # on course to cross it: the alert goes pending

        def run_rate() -> list[dict]:
            return [a for a in fleet.prometheus.alerts()
                    if a["labels"]["alertname"] == "MlcostBudgetRunRate"
                    and a["labels"].get("scope") == "user"]

        [alert] = poll(run_rate, WAIT_S, f"MlcostBudgetRunRate for user {USER}",
                       explain=fleet.explain)
        assert alert["labels"]["name"] == USER and alert["labels"]["instance"] == training
        [info] = fleet.prometheus.query(f'mlcost_host_info{{instance="{training}"}}')
        assert alert["labels"]["Hostname"] == info["metric"]["Hostname"]


def fixture_series() -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every input series of the promtool unit tests (empty labels dropped:
    to PromQL an empty label is an absent one)."""
    found = []
    for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for series in group["input_series"]:
            name, _, rest = series["series"].partition("{")
            labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', rest))
            found.append((name, {k: v for k, v in labels.items() if v}))
    return found


def test_the_rules_unit_tests_label_their_series_as_a_real_scrape_does(fleet):
    """Probe 121: the promtool tests gave the workload series a Hostname that mlcostd never
    writes, and so passed a budget rule that never matched a real scrape. Each input series has
    every label its name has on every real series here, and none that no real series has (a
    workload's owner labels come and go with its owner)."""
    series = fixture_series()
    names = {name for name, _ in series}
    assert {"mlcost_workload_burn_dollars_per_hour", "mlcost_budget_spent_dollars",
            "mlcost_host_burn_dollars_per_hour"} <= names

    def real() -> dict[str, list[set[str]]]:
        return {name: [{k for k, v in row["metric"].items() if v and k != "__name__"}
                       for row in fleet.prometheus.query(name)] for name in sorted(names)}

    scraped = poll(lambda: (found := real()) and all(found.values()) and found, WAIT_S,
                   "a real series of every name the unit tests use",
                   explain=lambda: str({n: len(v) for n, v in real().items()}))
    for name, labels in series:
        required = set.intersection(*scraped[name])
        allowed = set.union(*scraped[name])
        if name.startswith("mlcost_workload_"):
            allowed |= set(WORKLOAD_LABELS)
        assert required <= set(labels) <= allowed, (name, sorted(labels), sorted(required),
                                                    sorted(allowed))


def fleet_section() -> str:
    return (ROOT / "README.md").read_text().split("## On a fleet", 1)[1].split("\n## ", 1)[0]


def scraped_names(fleet: Fleet) -> dict[str, set[str]]:
    """Each mlcost_ series name Prometheus holds now -> its label names (all its series)."""
    names: dict[str, set[str]] = {}
    for row in fleet.prometheus.query('{__name__=~"mlcost_.+"}'):
        labels = dict(row["metric"])
        names.setdefault(labels.pop("__name__"), set()).update(labels)
    return names


def test_the_readme_says_which_series_name_their_host_by_hostname(fleet):
    """Probe 121: README said every series carries `Hostname`; the workload, energy-per-job and
    Kubernetes usage series do not (their host is the scrape's instance), and the shipped budget
    rule made the mistake the sentence invites. Every series a real scrape holds is in one of
    the two lists, the right one."""
    said = " ".join(fleet_section().split("Not every series carries it.", 1)[1]
                    .split("```promql", 1)[0].split())
    carry, lack = said.split("The most numerous do not", 1)

    def patterns(text: str) -> list[str]:
        return re.findall(r"`(mlcost_[a-z0-9_*]+)`", text)

    with_hostname, without = patterns(carry), patterns(lack)
    assert "mlcost_workload_*" in without and "mlcost_host_info" in with_hostname
    poll(lambda: {"mlcost_workload_burn_dollars_per_hour", "mlcost_gpu_usage_hourly_cost",
                  "mlcost_energy_joules_total", "mlcost_budget_spent_dollars"}
         <= scraped_names(fleet).keys(), WAIT_S, "the workload, usage, energy, budget series",
         explain=lambda: str(sorted(scraped_names(fleet))))
    wrong = []
    for name, labels in sorted(scraped_names(fleet).items()):
        lacks = any(fnmatch.fnmatchcase(name, p) for p in without)
        listed = lacks or any(fnmatch.fnmatchcase(name, p) for p in with_hostname)
        if not listed or lacks == ("Hostname" in labels):
            wrong.append((name, "listed" if listed else "unlisted", sorted(labels)))
    assert not wrong, wrong
    # and the join the section gives works: one row per workload, each with its host's name
    [join] = re.findall(r"```promql\n(.*?)```", fleet_section(), re.S)
    rows = fleet.prometheus.query(join)
    assert rows and all(r["metric"].get("Hostname") for r in rows), rows


def test_every_metric_the_fleet_section_names_exists(fleet):
    """Probe 121: README named `mlcost_info`, which no daemon exports (`mlcost_host_info`).
    Every mlcost_ name in "On a fleet" is a series a real scrape holds here, or one the daemon
    declares that needs what this fleet lacks (DCGM, [[cost.latency]])."""
    section = fleet_section()
    named = set(re.findall(r"\b(mlcost_[a-z0-9_]*[a-z0-9])\b(?![*])", section))
    source = "\n".join(path.read_text() for path in (ROOT / "daemon" / "api").glob("*.py"))
    declared = {f"{name}{suffix}" for name in re.findall(r'"(mlcost_[a-z0-9_]+)"', source)
                for suffix in ("", "_total", "_info")}
    scraped = scraped_names(fleet)
    assert len(named & scraped.keys()) > 20
    assert not named - scraped.keys() - declared, sorted(named - scraped.keys() - declared)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, with Grafana's variables as a
    dashboard opened on "All" hosts would send them."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = (target["expr"].replace("$instance", ".*")
                    .replace("$__rate_interval", "1m").replace("$__range", "1h"))
            queries.append((panel["title"], expr))
    return queries


def test_every_dashboard_query_returns_data(fleet):
    queries = dashboard_queries()
    assert len(queries) >= 15
    # The counters need two scrapes inside their range and the advice one evaluation.
    poll(lambda: fleet.prometheus.query("mlcost_recommendation_savings_dollars_per_month > 0"),
         WAIT_S, "recommendations with savings", explain=fleet.explain)

    def empty() -> list[str]:
        return [f"{title}: {expr}" for title, expr in queries
                if not fleet.prometheus.query(expr)]

    poll(lambda: not empty(), WAIT_S, "every dashboard query returning data",
         explain=lambda: "empty:\n" + "\n".join(empty()))
    variable = json.loads(DASHBOARD.read_text())["templating"]["list"][1]
    assert variable["query"]["query"] == "label_values(mlcost_host_info, instance)"
    values = fleet.prometheus.api("label/instance/values", **{"match[]": "mlcost_host_info"})
    assert set(values) == set(fleet.instances.values())


def test_the_team_and_job_panels_follow_the_host_picker(fleet):
    """Probe 121 F13: "Burn by team now", "Spent by team" and "Idle dollars by job" read the
    fleet's recorded sums, so picking one host still showed every host's teams."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = {p["title"]: p["targets"][0]["expr"] for p in dashboard["panels"]}
    host = fleet.instances["training"]
    burn = panels["Burn by team now ($/h)"].replace("$instance", host)  # (anchored: one)

    def picked() -> float:
        return sum(float(r["value"][1]) for r in fleet.prometheus.query(burn))

    whole = f'sum(mlcost_workload_burn_dollars_per_hour{{instance="{host}"}})'
    poll(lambda: picked() > 0, WAIT_S, "the training host's burn by team",
         explain=fleet.explain)
    fleet_wide = sum(float(r["value"][1]) for r in fleet.prometheus.query(
        "sum(mlcost_workload_burn_dollars_per_hour)"))
    assert picked() == pytest.approx(float(fleet.prometheus.query(whole)[0]["value"][1]),
                                     rel=0.05)
    assert picked() < fleet_wide  # the other hosts' workloads are left out
    for title in ("Spent by team, last 24 h", "Idle (wasted) dollars by job, last 24 h"):
        assert 'instance=~"$instance"' in panels[title], title


def test_a_killed_daemon_shows_down_while_the_others_go_on(fleet):
    victim = fleet.daemons["empty"]
    prices = {name: price_of(d) for name, d in fleet.daemons.items()}  # (before the kill)
    victim.record_tree()
    os.kill(victim.pid, signal.SIGKILL)  # a crash: no clean exit
    victim.stop(check_tree=False)  # reaps it
    for proc in victim.still_running():  # its simulated workloads: ours to stop
        proc.kill()
    victim.wait_tree_gone()
    down = fleet.instances["empty"]
    poll(lambda: fleet.prometheus.values('up{job="mlcost"}').get(down) == 0, WAIT_S,
         f"up == 0 for {down}", explain=fleet.explain)
    others = {fleet.instances["notebook"], fleet.instances["training"]}
    assert {i for i, v in fleet.prometheus.values('up{job="mlcost"}').items() if v == 1} == others
    # the dead host's series go stale with its failed scrape: only the others' remain
    before = poll(lambda: (found := fleet.prometheus.values(
        "mlcost_last_sample_timestamp_seconds")) and set(found) == others and found, WAIT_S,
        "only the live hosts' samples", explain=fleet.explain)
    poll(lambda: all(fleet.prometheus.values("mlcost_last_sample_timestamp_seconds").get(i, 0)
                     > before[i] for i in others), WAIT_S, "the others' samples going on",
         explain=fleet.explain)
    # Probe 156 F3: the cloud still bills the host whose daemon died: the fleet's burn keeps it
    # at its last price (it fell to the others' sum), and says that part and who reports.
    fleet_rules = ("mlcost:fleet_burn_dollars_per_hour", "mlcost:fleet_unreported_dollars_per_hour",
                   "mlcost:fleet_hosts_reporting", "mlcost:fleet_hosts")

    def fleet_figures() -> list[float | None]:
        return [fleet.prometheus.values(rule).get("") for rule in fleet_rules]

    expected = [sum(prices.values()), prices["empty"], 2.0, 3.0]
    poll(lambda: (found := fleet_figures()) and None not in found
         and found == pytest.approx(expected, abs=1e-6), WAIT_S,
         f"{fleet_rules} == {expected} with the dead host at its last price",
         explain=lambda: f"{fleet_figures()}")
    live = fleet.prometheus.values("sum(mlcost_host_burn_dollars_per_hour)").get("")
    assert live == pytest.approx(prices["notebook"] + prices["training"])


@pytest.mark.asyncio
async def test_mlcost_top_prometheus_shows_the_fleet_and_opens_a_reachable_host(fleet):
    """After the kill above (when it ran): two hosts up, one down, from Prometheus alone."""
    screen = PrometheusFleetScreen(PrometheusFleet(fleet.prometheus.url),
                                   token=read_token_file(fleet.token_file), interval_s=0.5)
    app = MlcostTop([], interval_s=0.5, prometheus=screen)
    notices: list[str] = []
    shown = app.notify

    def notify(message: str, **kwargs: object) -> None:
        notices.append(message)
        shown(message, **kwargs)  # type: ignore[arg-type]

    app.notify = notify  # type: ignore[method-assign]
    up = {i for i, v in fleet.prometheus.values('up{job="mlcost"}').items() if v == 1}
    down = fleet.instances["empty"]
    async with app.run_test(size=(200, 40)) as pilot:
        table = screen.query_one(PrometheusFleetTable)
        await pilot_wait_for(pilot, lambda: table.row_count == 3 and screen.view is not None
                             and {h.instance for h in screen.view.hosts if h.up} == up,
                             what="the fleet table")
        assert str(table.get_row(down)[2]) == ("up" if down in up else "down")
        if down not in up:  # its last known name and type, marked so (probe 121: "-")
            [seen] = fleet.prometheus.query(f'last_over_time(mlcost_host_info{{instance='
                                            f'"{down}"}}[1h])')
            row = table.get_row(down)
            assert str(row[0]) == f'{seen["metric"]["Hostname"]} (last seen)'
            assert str(row[3]) == "g5.12xlarge" == seen["metric"]["instance_type"]
        notebook = fleet.instances["notebook"]
        price = fleet.prometheus.values("mlcost_host_price_dollars_per_hour")[notebook]
        await pilot_wait_for(pilot, lambda: str(table.get_row(notebook)[4]) == fmt.money(price),
                             what="the notebook host's burn")
        row = table.get_row(notebook)
        assert str(row[3]) == "g5.xlarge" and str(row[6]) == "1" and str(row[7]) == "1"
        await pilot_wait_for(pilot, lambda: str(table.get_row(notebook)[8]) != fmt.DASH,
                             what="the notebook host's top recommendation")
        assert str(table.get_row(notebook)[8]) in {"host_idle", "idle_gpu_held"}
        assert app.check_action("filter", ()) is False  # no host's panels behind the table
        header = str(screen.query_one("#prometheus-summary").render())
        assert f"{len(up)}/3 up" in header
        if down not in up:
            # the fleet's burn keeps the dead host at its last price, as the recording rule
            # does, and says so (probe 156 F3: it fell to the live hosts' sum, unsaid)
            prices = fleet.prometheus.values(
                'last_over_time(mlcost_host_price_dollars_per_hour{job="mlcost"}[1h])')
            assert f"burn {fmt.money(sum(prices.values()))}/h" in header, (header, prices)
            assert "(1 not reporting, at its last price)" in header, header
        if down not in up:  # enter on the dead host: the notice, and the table stays
            table.move_cursor(row=table.get_row_index(down))
            await pilot.press("enter")
            await pilot_wait_for(pilot, lambda: any(
                f"is down: Prometheus cannot scrape its mlcostd at {down}" in n
                for n in notices), timeout=10, what="the notice that it is down")
            assert app.screen is screen
        # enter on the notebook host: its daemon's full view, through its TCP API
        table.move_cursor(row=table.get_row_index(notebook))
        await pilot.press("enter")
        processes = app.query_one(ProcessPanel)
        await pilot_wait_for(pilot, lambda: app.screen is not screen and processes.row_count >= 1,
                             what="the notebook host's processes")
        api_port = port_of(fleet.daemons["notebook"], _API_PORT)
        assert app.client is not None and app.client.name == f"http://127.0.0.1:{api_port}"
        await pilot.press("escape")
        await pilot_wait_for(pilot, lambda: app.screen is screen, what="back to the fleet table")


@pytest.mark.asyncio
async def test_mlcost_top_says_the_job_it_reads_and_marks_the_last_answer(fleet, tmp_path):
    """Probe 121: a Prometheus scraping mlcostd as job "gpus" showed "0 daemons" and nothing
    more; and once Prometheus stopped answering, the rows stayed under "check the URL", with no
    time. A second real Prometheus scrapes the fleet as "gpus", then stops."""
    second = Prometheus(tmp_path / "gpus", list(fleet.instances.values()), job="gpus")
    try:
        poll(lambda: second.values("mlcost_host_info").keys() & set(fleet.instances.values()),
             WAIT_S, "the second Prometheus scraping mlcostd", explain=second.log_tail)
        screen = PrometheusFleetScreen(PrometheusFleet(second.url), interval_s=0.5)
        app = MlcostTop([], interval_s=0.5, prometheus=screen)
        async with app.run_test(size=(200, 40)) as pilot:
            summary = screen.query_one("#prometheus-summary")
            await pilot_wait_for(pilot, lambda: screen.view is not None, what="an answer")
            await pilot.pause()
            said = " ".join(str(summary.render()).split())
            assert "0/0 up" in said and "idle GPUs -" in said, said
            assert "No mlcostd under the scrape jobs job=~'mlcost.*'" in said, said
            assert (f"scraped as job 'gpus': run mlcost-top --prometheus {second.url} "
                    "--prometheus-job 'gpus'") in said, said
        screen = PrometheusFleetScreen(PrometheusFleet(second.url, job="gpus"), interval_s=0.5)
        app = MlcostTop([], interval_s=0.5, prometheus=screen)
        async with app.run_test(size=(200, 40)) as pilot:
            summary = screen.query_one("#prometheus-summary")
            table = screen.query_one(PrometheusFleetTable)
            await pilot_wait_for(pilot, lambda: table.row_count == 3, what="the three hosts")
            await pilot_wait_for(pilot, lambda: screen.view is not None and screen.view.up >= 2,
                                 what="the live hosts up")
            assert "No mlcostd" not in str(summary.render())
            second.stop()  # Prometheus goes away under the table
            await pilot_wait_for(pilot, lambda: screen.error is not None, timeout=60,
                                 what="the error")
            await pilot.pause()
            said = " ".join(str(summary.render()).split())
            answered = screen.answered_at
            assert answered and f"the table is its last answer, at {answered}" in said, said
            assert "did not answer" in said and "check the URL" not in said, said
            assert f"(as at {answered})" in said
            assert table.row_count == 3 and f"as at {answered}, its last answer" in str(
                table.border_title)
    finally:
        second.stop()
