"""/metrics of a real mlcostd (prometheus-client's exposition, checked by the real promtool),
on its own token-free listener and behind the token on the API's TCP listener; and the
collector's bounded workload labels and never-decreasing counters, over a daemon-shaped object."""

from __future__ import annotations

import asyncio
import math
import re
import sqlite3
import subprocess
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import livedaemon
import pytest
from prometheus_client.parser import text_string_to_metric_families
from simhost import poll

from daemon.api.metrics import (
    GPU_LABELS,
    OTHER,
    WORKLOAD_LABELS,
    LabelCap,
    Metrics,
    WorkloadTotals,
)

PROMTOOL = "/usr/bin/promtool"
_METRICS_PORT = re.compile(r"metrics on http://[^:]+:(\d+)/metrics")
# dcgm-exporter's label names (so GPU series join DCGM's): promtool's lint wants snake_case.
DCGM_CAMEL_CASE = {"UUID": "uuid", "modelName": "model_name", "Hostname": "hostname"}


def metrics_port(daemon: livedaemon.LiveDaemon) -> int:
    found = poll(lambda: _METRICS_PORT.search(daemon.log()), 10, "the metrics port logged",
                 explain=daemon.log_tail)
    return int(found.group(1))


def fetch(url: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), \
                response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str, name: str) -> list[Any]:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def promtool_check(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def daemon(shared_daemon):
    """idle-host (a notebook holding its one GPU, doing nothing) with /metrics on its own
    listener and the API on TCP: the session's shared daemon (tests/conftest.py), only read."""
    return shared_daemon


def test_exposition_passes_promtool_but_for_dcgm_label_names(daemon):
    status, content_type, text = fetch(f"http://127.0.0.1:{metrics_port(daemon)}/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=")
    checked = promtool_check(text)
    problems = (checked.stdout + checked.stderr).strip().splitlines()
    # The only lint is the camelCase of dcgm-exporter's names, once per GPU series.
    assert checked.returncode in (0, 3), checked.stderr
    assert all("label names should be written in 'snake_case'" in p for p in problems), problems
    renamed = text
    for camel, snake in DCGM_CAMEL_CASE.items():
        renamed = re.sub(rf"\b{camel}=", f"{snake}=", renamed)
    clean = promtool_check(renamed)
    assert clean.returncode == 0, clean.stdout + clean.stderr


README = livedaemon.ROOT / "README.md"


def test_the_readme_promtool_command_passes_on_a_real_daemons_metrics(daemon):
    """README's "Checking it with promtool" command, run as written on the real /metrics:
    promtool flags only the dcgm-exporter label names (exit 3, its lint status, never 1: a
    malformed exposition), and the command leaves nothing else."""
    command = next(line for line in README.read_text().splitlines()
                   if line.startswith("curl -s ") and "promtool check metrics" in line)
    checking = command.split("|", 1)[1]  # the same pipeline, fed what curl would fetch
    _, _, text = fetch(f"http://127.0.0.1:{metrics_port(daemon)}/metrics")
    raw = promtool_check(text)
    assert raw.returncode == 3, raw.stdout + raw.stderr
    assert {name for name in DCGM_CAMEL_CASE if f"{name}=" in text} == set(DCGM_CAMEL_CASE)
    done = subprocess.run(["bash", "-o", "pipefail", "-c", checking], input=text,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout == "" and done.stderr == "", done.stdout + done.stderr


def _documented_series() -> set[str]:
    """Every series name README's metric tables give: the first cell of each row, where
    `_sm_activity_ratio` after `mlcost_gpu_utilization_ratio` is `mlcost_gpu_sm_activity_ratio`
    (the shorthand keeps the last full name's first word after `mlcost_`)."""
    names = set()
    for line in README.read_text().splitlines():
        if not line.startswith("| `mlcost_"):
            continue
        prefix = ""
        for name in re.findall(r"`([a-z_0-9]+)(?:\{[^}]*\})?`", line.split(" | ", 1)[0]):
            if name.startswith("mlcost_"):
                prefix = "_".join(name.split("_")[:2])
                names.add(name)
            elif name.startswith("_") and prefix:
                names.add(prefix + name)
    return names


def test_every_series_the_daemon_exports_is_in_readmes_tables(daemon):
    """`mlcost_potential_savings_dollars_per_month` was exported and in no table. Every series
    a real daemon serves, and every family the collectors declare (some only appear with a
    config: budgets, latency, Kubernetes), is in one of README's metric tables."""
    documented = _documented_series()
    _, _, text = fetch(f"http://127.0.0.1:{metrics_port(daemon)}/metrics")
    served = {sample.name for family in text_string_to_metric_families(text)
              for sample in family.samples if not sample.name.endswith("_created")}
    assert served and served <= documented, sorted(served - documented)
    source = "\n".join(path.read_text() for path in
                        (livedaemon.ROOT / "daemon" / "api").glob("*.py"))
    declared = set(re.findall(r'"(mlcost_[a-z0-9_]+)"', source))
    missing = {name for name in declared
               if not {name, f"{name}_total", f"{name}_info"} & documented}
    assert not missing, sorted(missing)


def test_gpu_series_carry_dcgm_labels_and_no_series_a_pid(daemon):
    _, _, text = fetch(f"http://127.0.0.1:{metrics_port(daemon)}/metrics")
    now = daemon.now()
    gpu = now["gpus"][0]
    [util] = samples(text, "mlcost_gpu_utilization_ratio")
    assert set(util.labels) == set(GPU_LABELS)
    assert util.labels["gpu"] == "0" and util.labels["UUID"] == gpu["uuid"]
    assert util.labels["modelName"] == gpu["name"] == "NVIDIA A10G"
    assert util.labels["Hostname"] == now["host"]["hostname"]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert not {"pid", "process", "key"} & set(sample.labels), sample
    [memory] = samples(text, "mlcost_gpu_memory_used_bytes")
    assert memory.value >= 12 * (1 << 30)  # the notebook holds 12 GiB
    [info] = samples(text, "mlcost_host_info")
    assert info.labels["instance_type"] == "g5.xlarge" and info.labels["provider"] == "aws"
    assert info.labels["lifecycle"] == "on-demand" and info.labels["price_source"]
    [price] = samples(text, "mlcost_host_price_dollars_per_hour")
    assert price.value == pytest.approx(now["price"]["per_hour"])


def test_burn_is_the_price_and_counters_grow_with_the_ticks(daemon):
    url = f"http://127.0.0.1:{metrics_port(daemon)}/metrics"
    # A process joins the workload series once the ledger has charged it (its second tick).
    first = poll(lambda: (text := fetch(url)[2]) and
                 samples(text, "mlcost_workload_dollars_total") and text, 30,
                 "the notebook's workload series")
    tick = daemon.now()["tick"]
    poll(lambda: daemon.now()["tick"] >= tick + 4, 30, "four more ticks")
    second = fetch(url)[2]
    [burn] = samples(second, "mlcost_host_burn_dollars_per_hour")
    [price] = samples(second, "mlcost_host_price_dollars_per_hour")
    assert burn.value == pytest.approx(price.value)
    [gpu_burn] = samples(second, "mlcost_gpu_burn_dollars_per_hour")
    assert gpu_burn.value == pytest.approx(price.value)  # one GPU: all of it
    for name in ("mlcost_host_burn_dollars_total", "mlcost_gpu_burn_dollars_total",
                 "mlcost_gpu_energy_joules_total", "mlcost_workload_dollars_total",
                 "mlcost_workload_wasted_dollars_total"):
        [before], [after] = samples(first, name), samples(second, name)
        assert after.value > before.value >= 0, name
    # The notebook's GPU is held and idle: the whole GPU is wasted, and it is the workload's.
    [held] = samples(second, "mlcost_gpu_processes")
    [busy] = samples(second, "mlcost_gpu_busy")
    assert held.value == 1 and busy.value == 0
    [workload] = samples(second, "mlcost_workload_burn_dollars_per_hour")
    assert workload.value == pytest.approx(price.value)
    assert {"user", "job_name"} <= set(workload.labels) <= set(WORKLOAD_LABELS)  # empty: absent
    notebook = next(p for p in daemon.now()["processes"] if p["gpus"])
    assert workload.labels["user"] == notebook["user"]
    assert workload.labels["job_name"] == notebook["job"]
    [wasted] = samples(second, "mlcost_workload_wasted_dollars_per_hour")
    assert wasted.value == pytest.approx(price.value)


def test_metrics_on_the_api_listener_need_the_token(daemon):
    base = f"http://127.0.0.1:{daemon.tcp_port()}"
    status, _, body = fetch(f"{base}/metrics")
    assert status == 401 and "bearer token" in body
    token = daemon.socket.with_name("mlcostd.token").read_text().strip()
    status, _, text = fetch(f"{base}/metrics", token)
    assert status == 200 and "mlcost_host_info" in text
    [info] = samples(text, "mlcost_host_info")
    assert info.labels["api_port"] == str(daemon.tcp_port())  # where mlcost-top finds the API


def test_the_metrics_listener_serves_nothing_of_the_api(daemon):
    port = metrics_port(daemon)
    status, content_type, body = fetch(f"http://127.0.0.1:{port}/v1/now")
    assert status == 404 and "only GET /metrics" in body
    assert "application/json" in content_type


def answer_of(url: str, method: str, socket: Any = None) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body) of one request, over TCP or a unix socket."""
    async def main() -> tuple[int, dict[str, str], Any]:
        connector = aiohttp.UnixConnector(path=str(socket)) if socket else None
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.request(method, url) as response:
                return (response.status, dict(response.headers),
                        await response.json(content_type=None))
    return asyncio.run(main())


def allowed(headers: dict[str, str]) -> set[str]:
    return {m.strip() for m in headers.get("Allow", "").split(",") if m.strip()}


def test_a_wrong_method_is_a_405_that_says_what_is_allowed_on_every_route(daemon):
    """`POST /metrics` on --metrics-listen answered 404, as if /metrics were not there (probe
    121 F11): a wrong method on a route is a 405 with the Allow header (RFC 9110), there and on
    the API (every route its OpenAPI document lists, /metrics with them); another path stays a
    404."""
    port = metrics_port(daemon)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, body = answer_of(f"http://127.0.0.1:{port}/metrics", method)
        assert status == 405 and allowed(headers) == {"GET", "HEAD"}, (method, status, headers)
        assert "only GET /metrics" in body["error"], body
    status, headers, body = answer_of(f"http://127.0.0.1:{port}/v1/now", "POST")
    assert status == 404 and "Allow" not in headers and "only GET /metrics" in body["error"]

    spec = answer_of("http://mlcostd/v1/openapi.json", "GET", daemon.socket)[2]
    routes = {path: {m.upper() for m in methods} for path, methods in spec["paths"].items()}
    routes.setdefault("/metrics", {"GET"})
    checked = []
    for path, methods in sorted(routes.items()):
        url = "http://mlcostd" + re.sub(r"\{[^}/]+\}", "x", path)
        wrong = next(m for m in ("PUT", "PATCH", "DELETE", "POST") if m not in methods)
        status, headers, body = answer_of(url, wrong, daemon.socket)
        assert status == 405, (wrong, path, status, body)
        expected = methods | ({"HEAD"} if "GET" in methods else set())
        assert allowed(headers) == expected, (wrong, path, headers)
        assert "not allowed" in body["error"], body
        checked.append(path)
    assert {"/metrics", "/v1/now", "/v1/idle"} <= set(checked), checked


def test_hostname_is_the_node_name_the_daemonset_passes(tmp_path, monkeypatch):
    """MLCOST_HOSTNAME names the host on any machine (this daemon runs in no pod); README's
    fleet section says so (probe 84: two daemons on one VM both read `vm`, and the variable
    was documented for Kubernetes alone)."""
    fleet = README.read_text().split("## On a fleet", 1)[1].split("\n## ", 1)[0]
    said = fleet.split("**`Hostname`.**", 1)[1].split("\n\n", 1)[0]
    assert "`MLCOST_HOSTNAME`" in said and "not only in Kubernetes" in said
    monkeypatch.setenv("MLCOST_HOSTNAME", "gpu-node-17")
    daemon = livedaemon.start(tmp_path / "node", "idle-host",
                              args=["--metrics-listen", "127.0.0.1:0"])
    try:
        text = fetch(f"http://127.0.0.1:{metrics_port(daemon)}/metrics")[2]
        [util] = samples(text, "mlcost_gpu_utilization_ratio")
        assert util.labels["Hostname"] == "gpu-node-17"
        assert daemon.call("health").hostname == "gpu-node-17"
    finally:
        assert daemon.stop() == 0


def test_a_bad_metrics_listen_stops_the_start_with_the_fix(tmp_path):
    daemon = livedaemon.start(tmp_path / "bad", "idle-host", wait=False,
                              args=["--metrics-listen", "no-port-here"])
    assert daemon.wait_exit() == 2  # a refused start (README: mlcostd run)
    # checked with the [api] settings, before anything is created, as --listen is
    assert "--metrics-listen = 'no-port-here': 'no-port-here' is not HOST:PORT" in daemon.log()
    assert not daemon.db.exists()
    assert "Traceback" not in daemon.log()


# -- the collector over a daemon-shaped object: bounded labels, counters that never go down --


class FakeDaemon:
    """What the collector reads of a Daemon: now() and (here) no analyzer."""

    analyzer = None

    def __init__(self) -> None:
        self.processes: list[dict[str, Any]] = []
        self.ts = 1000.0

    def now(self) -> dict[str, Any]:
        return {"host": {"hostname": "gpu-a"}, "ts": self.ts, "gpus": [],
                "processes": self.processes, "price": {"per_hour": 10.0},
                "burn": {"total_per_hour": 10.0}, "cost": {"total": 1.0}}


def process(pid: int, cost: float, user: str = "alice", owner: dict[str, str] | None = None,
            phases: dict[str, float] | None = None) -> dict[str, Any]:
    return {"key": f"{pid}:1.000", "pid": pid, "start_time": 1.0, "user": user, "job": "train.py",
            "gpus": [{"index": 0}], "cost": cost, "burn_per_hour": 1.0,
            "owner": owner or {}, "phases": phases or {}}


def test_the_price_age_is_absent_without_an_as_of_date_and_its_help_says_so():
    """README lists mlcost_price_age_seconds among the host series; a price without a date
    (the demo's catalog price) has no age, and none is made up: the series is absent, and its
    HELP (seen where a dated price exports it) says when it is."""
    fake = FakeDaemon()
    undated = Metrics(fake).render().decode()
    assert "mlcost_price_age_seconds" not in families(undated)


    class Dated(FakeDaemon):
        def now(self) -> dict[str, Any]:
            return dict(super().now(), price={"per_hour": 10.0, "as_of": "2026-01-01"})

    family = families(Metrics(Dated()).render().decode())["mlcost_price_age_seconds"]
    assert family.samples[0].value > 0
    assert "absent when the price has no date" in family.documentation


def test_owner_labels_reach_the_workload_series():
    fake = FakeDaemon()
    fake.processes = [process(1, 2.0, owner={"pod": "trainer-0", "namespace": "ml",
                                             "container": "main"}),
                      process(2, 3.0, owner={"slurm_job": "1234"}, user="bob")]
    text = Metrics(fake).render().decode()
    series = {tuple(s.labels.get(k, "") for k in ("pod", "namespace", "container",
                                                  "slurm_job", "user")): s.value
              for s in samples(text, "mlcost_workload_dollars_total")}
    assert series == {("trainer-0", "ml", "main", "", "alice"): 2.0,
                      ("", "", "", "1234", "bob"): 3.0}


def test_labels_past_the_limit_fold_into_other_and_are_counted():
    fake = FakeDaemon()
    fake.processes = [process(pid, 1.0, user=f"user{pid}") for pid in range(5)]
    text = Metrics(fake, label_values=2).render().decode()
    users = {s.labels["user"]: s.value for s in samples(text, "mlcost_workload_dollars_total")}
    assert users == {"user0": 1.0, "user1": 1.0, OTHER: 3.0}
    folded = {s.labels["label"]: s.value
              for s in samples(text, "mlcost_metrics_folded_values_total")}
    assert folded["user"] == 3 and folded["pod"] == 0


def test_a_workload_keeps_the_dollars_of_its_exited_processes():
    fake = FakeDaemon()
    metrics = Metrics(fake)
    fake.processes = [process(1, 5.0, phases={"compute": 0.5, "data_wait": 0.5}),
                      process(2, 1.0)]
    metrics.render()
    fake.ts += 10
    fake.processes = [process(1, 6.0, phases={"compute": 0.5, "data_wait": 0.5}),
                      process(2, 2.0)]
    metrics.render()
    fake.ts += 10
    fake.processes = [process(2, 3.0)]  # 1 exited with $6 charged
    text = metrics.render().decode()
    [dollars] = samples(text, "mlcost_workload_dollars_total")
    assert dollars.value == pytest.approx(9.0)
    phases = {s.labels["phase"]: s.value
              for s in samples(text, "mlcost_workload_phase_seconds_total")}
    # pid 1: 10 s split half and half; pid 2 had no balance: 20 s unknown
    assert phases == pytest.approx({"compute": 5.0, "data_wait": 5.0, "unknown": 20.0})


def test_a_process_that_changes_owner_leaves_its_dollars_behind():
    totals = WorkloadTotals(limit=8)
    a, b = totals.workload_of({"pod": "a"}, 0.0), totals.workload_of({"pod": "b"}, 0.0)
    totals.update([("1:1.000", a, 4.0, 0.0, {})], None, 0.0)
    totals.update([("1:1.000", b, 7.0, 0.0, {})], None, 1.0)
    result = {w[WORKLOAD_LABELS.index("pod")]: t.dollars for w, t in totals.totals().items()}
    assert result == {"a": 4.0, "b": 3.0}


def test_a_label_value_frees_its_slot_an_hour_after_it_was_last_seen():
    cap = LabelCap(limit=1)
    assert cap.value("first", 0.0) == "first"
    assert cap.value("second", 10.0) == OTHER
    cap.forget(before=3600.0)  # "first" was last seen at 0
    assert cap.value("second", 3700.0) == "second"


def test_a_workloads_labels_are_asked_of_the_caps_again_after_a_minute():
    totals = WorkloadTotals(limit=1)
    assert totals.shown("user", "alice", 0.0) == "alice"
    assert totals.shown("user", "bob", 1.0) == OTHER  # the one slot is alice's
    totals.update([], None, 3700.0)  # alice unseen for an hour: her slot is free
    assert totals.shown("user", "bob", 30.0) == OTHER  # within the minute: the answer kept
    assert totals.shown("user", "bob", 3700.0) == "bob"  # asked again: the free slot
    assert totals.caps["user"].admitted == {"bob": 3700.0}


def test_a_render_that_fails_is_a_500_that_says_so(caplog):
    class Broken(FakeDaemon):
        def now(self) -> dict[str, Any]:
            raise KeyError("price")

    response = asyncio.run(Metrics(Broken()).handle(None))  # type: ignore[arg-type]
    assert response.status == 500
    assert "could not render /metrics: KeyError" in response.text
    assert "rendering /metrics failed" in caplog.text


def test_metrics_on_the_unix_socket_need_no_token(daemon):
    async def get() -> tuple[int, str]:
        connector = aiohttp.UnixConnector(path=str(daemon.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get("http://mlcostd/metrics") as response:
                return response.status, await response.text()

    status, text = asyncio.run(get())
    assert status == 200
    [info] = samples(text, "mlcost_host_info")
    assert info.labels["instance_type"] == "g5.xlarge"


def test_gpu_processes_are_counted_by_kind_with_a_bounded_label():
    fake = FakeDaemon()
    fake.processes = [dict(process(1, 1.0), kind="online_inference"),
                      dict(process(2, 1.0), kind="training"),
                      dict(process(3, 1.0), kind="made-up\x1b[2J"), process(4, 1.0)]
    counts = {s.labels["kind"]: s.value
              for s in samples(Metrics(fake).render().decode(), "mlcost_gpu_processes_by_kind")}
    assert counts == {"training": 1.0, "batch_inference": 0.0, "online_inference": 1.0,
                      "notebook": 0.0, "other": 0.0, "unknown": 2.0}


def test_a_tick_is_rendered_once_and_the_next_tick_renders_again():
    class Ticking(FakeDaemon):
        tick = 1

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def now(self) -> dict[str, Any]:
            self.calls += 1
            return super().now()

    fake = Ticking()
    metrics = Metrics(fake)
    fake.processes = [process(1, 2.0)]
    first = metrics.render()
    fake.processes = [process(1, 5.0)]  # the ledger moved, but the tick did not
    assert metrics.render() == first and fake.calls == 1  # every scrape of a tick: its bytes
    [dollars] = samples(first.decode(), "mlcost_workload_dollars_total")
    assert dollars.value == 2.0
    fake.tick, fake.ts = 2, fake.ts + 1
    [dollars] = samples(metrics.render().decode(), "mlcost_workload_dollars_total")
    assert dollars.value == 5.0 and fake.calls == 2


def test_the_exposition_is_prometheus_clients_byte_for_byte():
    """Each series' labels are written once and kept from scrape to scrape: every scrape is
    still what prometheus-client's generate_latest writes, whatever the labels hold, as series
    come, change and go."""
    from prometheus_client import generate_latest

    fake = FakeDaemon()
    metrics = Metrics(fake)
    hostile = 'a "quoted" back\\slash\nnew line {brace} é'
    fake.processes = [process(1, 2.0, owner={"pod": hostile, "namespace": "ml"}),
                      process(2, 3.0, user=hostile, phases={"compute": 0.25, "idle": 0.75}),
                      process(3, 1e-9, user="carol")]
    first = metrics.render()
    assert first == generate_latest(metrics.registry)
    assert b'pod="a \\"quoted\\" back\\\\slash' in first  # escaped (the line break: a space)
    for step in range(1, 4):
        fake.ts += 10
        fake.processes = [dict(p, cost=p["cost"] * 7.5 ** step) for p in fake.processes[1:]]
        fake.processes.append(process(10 + step, 1.5e7 * step, user=f"user{step}"))
        text = metrics.render()
        assert text == generate_latest(metrics.registry)
        assert text != first
    assert len(metrics.exposition._series) == len(
        [line for line in text.decode().splitlines() if line and not line.startswith("#")])


# -- the typed state (Daemon.metrics_state) against the /v1/now document ------------------------


class TypedHost:
    """A daemon's state built the way mlcostd builds it: an Analyzer fed real Samples (an idle
    notebook in a pod holding GPU 0, a Slurm training job on GPU 1, an unheld GPU 2), a latency
    histogram with its cost, the recommendations found, phase balances and kinds. It offers
    both what /metrics reads, `metrics_state()`, and the /v1/now document, `now()`."""

    def __init__(self) -> None:
        from daemon.analysis.analyzer import Analyzer
        from daemon.analysis.cost import HostPrice
        from daemon.analysis.latency import LatencyMeter

        price = HostPrice(32.77, 3, "on-demand", "p4d.24xlarge", "aws", "us-east-1",
                          "test catalog", "")  # no as-of: no price age, which moves with time
        self.analyzer = Analyzer(price)
        meter = LatencyMeter("train.py", "http://127.0.0.1:9/metrics", "latency_seconds")
        meter.observe({0.1: 10.0, float("inf"): 10.0}, cost=1.0)
        meter.observe({0.1: 50.0, 1.0: 60.0, float("inf"): 60.0}, cost=1.5)
        self.analyzer.ledger.add_latency(meter)
        self.host = {"hostname": "gpu-a\x1b[2J", "instance": {"provider": "aws"},
                     "simulated": "test"}
        self.phases = {"101:2.000": {"compute": {"share": 0.75, "top_stacks": []},
                                     "data_wait": {"share": 0.25, "top_stacks": []}}}
        self.kinds = {"100:1.000": {"kind": "notebook"}, "101:2.000": {"kind": "training"}}
        self.tick = 0
        self.samples: list[Any] = []
        for ts in range(0, 1300, 5):  # long enough for the idle notebook's recommendation
            self.step(float(ts))
        self.analyzer.evaluate()

    def step(self, ts: float) -> None:
        from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

        gib = 1 << 30
        sm = 60.0 + (ts % 7)  # the training job's share moves from tick to tick
        self.tick += 1
        self.samples.append(Sample(
            ts=1_800_000_000.0 + ts, tick=self.tick,
            gpus=tuple(GpuSample(i, f"GPU-{i}", "NVIDIA A100-SXM4-40GB",
                                 utilization=(0.0, sm, 0.0)[i], memory_used_bytes=20 * gib,
                                 memory_total_bytes=40 * gib, power_watts=250.0 + i)
                       for i in range(3)),
            processes=(ProcessSample(100, 1.0, 1, "alice", "jupyter-lab",
                                     gpus=(GpuUse(0, 2 * gib, 0.0),),
                                     owner={"pod": "nb-0", "namespace": "research",
                                            "container": "lab"}),
                       ProcessSample(101, 2.0, 1, "bob\nsmith", "python train.py",
                                     gpus=(GpuUse(1, 8 * gib, sm),),
                                     owner={"slurm_job": "42"}))))
        self.analyzer.update(self.samples[-1])

    def metrics_state(self) -> Any:
        from daemon.api.metrics_state import metrics_state

        return metrics_state(host=self.host, nvml_status="ok", sample=self.samples[-1],
                             idle_utilization_pct=5.0, analyzer=self.analyzer,
                             phases=self.phases, kinds=self.kinds,
                             recommendations=self.analyzer.recommendations())

    def now(self) -> dict[str, Any]:
        from daemon.api.document import CostView, now_document

        snapshot = self.analyzer.snapshot()
        return now_document(
            host=dict(self.host, nvml_status="ok"), sample=self.samples[-1],
            previous=self.samples[-2], tick=self.tick, idle_utilization_pct=5.0,
            cost=CostView.from_snapshot(snapshot, snapshot["recommendations"]),
            phases=self.phases, kinds=self.kinds)


class DocumentOnly:
    """The same host seen only through its /v1/now document (as /metrics read it before)."""

    def __init__(self, host: TypedHost) -> None:
        self.host, self.analyzer = host, host.analyzer

    @property
    def tick(self) -> int:
        return self.host.tick

    def now(self) -> dict[str, Any]:
        return self.host.now()


def test_the_typed_state_renders_what_the_document_rendered_tick_after_tick():
    host = TypedHost()
    typed, documented = Metrics(host), Metrics(DocumentOnly(host))
    for _ in range(4):
        text = typed.render()
        assert text == documented.render()
        host.step(host.samples[-1].ts - 1_800_000_000.0 + 5)
    decoded = text.decode()
    names = {f.name for f in text_string_to_metric_families(decoded)}
    # every family group has series here, so the comparison covers each of them
    assert {"mlcost_host_info", "mlcost_gpu_utilization_ratio", "mlcost_workload_dollars",
            "mlcost_workload_phase_seconds", "mlcost_gpu_usage_hourly_cost",
            "mlcost_recommendations", "mlcost_potential_savings_dollars_per_month",
            "mlcost_gpu_processes_by_kind", "mlcost_latency_seconds",
            "mlcost_latency_cost_per_request_dollars"} <= names
    [rule] = samples(decoded, "mlcost_recommendations")
    assert rule.labels["rule"] == "idle_gpu_held" and rule.value == 1
    users = {s.labels["user"] for s in samples(decoded, "mlcost_workload_dollars_total")}
    assert users == {"alice", "bob\\nsmith"}  # made safe to print, as daemon.wire does
    [info] = samples(decoded, "mlcost_host_info")
    assert info.labels["Hostname"] == "gpu-a\\x1b[2J"


def test_cost_per_request_stands_beside_the_latency_quantiles():
    fake = FakeDaemon()
    document = fake.now()
    document["cost"]["latency"] = [
        {"target": "chat", "p50_seconds": 0.1, "p99_seconds": 2.0, "cost_per_request": 0.004},
        {"target": "1234:1700000000.000", "p50_seconds": 0.2, "p99_seconds": 0.9,
         "cost_per_request": None}]  # not known yet: no series rather than a made-up 0
    fake.now = lambda: document  # type: ignore[method-assign]
    text = Metrics(fake).render().decode()
    per_request = samples(text, "mlcost_latency_cost_per_request_dollars")
    assert [(s.labels, s.value) for s in per_request] == [
        ({"target": "chat", "Hostname": "gpu-a"}, 0.004)]
    quantiles = {(s.labels["target"], s.labels["quantile"]): s.value
                 for s in samples(text, "mlcost_latency_seconds")}
    assert quantiles == {("chat", "0.5"): 0.1, ("chat", "0.99"): 2.0,
                         ("process #2", "0.5"): 0.2, ("process #2", "0.99"): 0.9}
    # Probe 156 F4: as a gauge, the quantile label failed README's promtool check on every
    # host with a [[cost.latency]] target: "non-summary metrics should not have quantile label"
    assert "# TYPE mlcost_latency_seconds summary\n" in text
    checked = promtool_check(text)
    problems = [p for p in (checked.stdout + checked.stderr).strip().splitlines()
                if "label names should be written in 'snake_case'" not in p]
    assert checked.returncode in (0, 3) and not problems, problems


# -- the daemon's own idleness verdict (GET /v1/idle) on /metrics ------------------------------

# A quiet server (a request every 5 s: its GPU idle, under 1 %) on GPU 0 and an idle notebook on
# GPU 1: every GPU idle, and the host active by its server (probe 121 F12: MlcostHostIdle, "stop
# the instance", went pending for a host `mlcostd idle` called active).
QUIET_SERVER = """name = "quiet-server"
[instance]
provider = "aws"
type = "g5.12xlarge"
region = "us-east-1"
lifecycle = "on-demand"
[gpu]
model = "NVIDIA A10G"
count = 2
[[workloads]]
name = "server"
program = "inference_server"
gpus = [0]
options = { memory_gib = 4, rate = 0.2 }
[[workloads]]
name = "notebook"
program = "idle_notebook"
gpus = [1]
options = { memory_gib = 2 }
"""


def verdicts(daemon: livedaemon.LiveDaemon, port: int) -> dict[str, Any]:
    """/v1/idle's answer (for 0) and /metrics' verdict series, read one after the other."""
    answer = daemon.call("idle", 0.0)
    _, _, text = fetch(f"http://127.0.0.1:{port}/metrics")
    busy = {s.labels["gpu"]: s.value for s in samples(text, "mlcost_gpu_busy")}
    held_idle = {s.labels["gpu"]: s.value for s in samples(text, "mlcost_gpu_held_idle")}
    [active] = [s.value for s in samples(text, "mlcost_host_active")] or [None]
    [ts] = [s.value for s in samples(text, "mlcost_last_sample_timestamp_seconds")]
    return {"answer": answer, "active": active, "busy": busy, "held_idle": held_idle, "ts": ts}


def test_the_host_verdict_on_metrics_is_v1_idle_s_on_an_idle_host(daemon):
    """idle-host: a notebook holds its one GPU and does nothing. /v1/idle calls the host idle,
    and so does mlcost_host_active; its GPU is held idle."""
    port = metrics_port(daemon)
    found = poll(lambda: (v := verdicts(daemon, port)) and v["answer"]["active"] is False
                 and v["active"] == 0 and v, 60, "/v1/idle and /metrics calling the host idle",
                 explain=lambda: f"{verdicts(daemon, port)}\n{daemon.log_tail()}")
    assert found["busy"] == {"0": 0.0} and found["held_idle"] == {"0": 1.0}


def test_a_quiet_server_keeps_its_host_active_and_its_idle_gpu_is_not_held_idle(mlcostd,
                                                                                 tmp_path):
    scenario_file = tmp_path / "quiet-server.toml"
    scenario_file.write_text(QUIET_SERVER)
    live = mlcostd(str(scenario_file), interval=0.5, args=["--metrics-listen", "127.0.0.1:0"])
    port = metrics_port(live)

    def serving(after: float = 0.0) -> dict[str, Any] | None:
        """Both GPUs idle, the server seen serving by /v1/idle, and /metrics of a tick after
        `after` (its bytes are its tick's: the tick the server was first seen serving in may
        have been rendered before)."""
        v = verdicts(live, port)
        servers = [p for p in v["answer"]["processes"] if p["serves"] and p["gpus"] == [0]]
        return v if servers and v["busy"] == {"0": 0.0, "1": 0.0} and v["ts"] > after \
            else None

    seen = poll(serving, 120, "the server seen serving with its GPU idle",
                explain=lambda: f"{verdicts(live, port)}\n{live.log_tail()}")
    found = poll(lambda: serving(seen["ts"]), 30, "the next tick's /metrics",
                 explain=lambda: f"{verdicts(live, port)}\n{live.log_tail()}")
    answer = found["answer"]
    assert answer["active"] is True and "serves on a port" in answer["reason"], answer
    assert found["active"] == 1
    # the server's GPU is idle_server's business; the notebook's GPU is held idle
    assert found["held_idle"] == {"0": 0.0, "1": 1.0}
    [notebook] = [p for p in answer["processes"] if p["gpus"] == [1]]
    assert notebook["active"] is False


def test_a_quiet_servers_host_gets_no_host_idle_event_nor_its_snapshot(mlcostd, tmp_path):
    """Every GPU idle past [idle].host_after, the server on GPU 0 waiting for requests: /v1/idle
    calls the host active and the host_idle rule holds back, and so does the host_idle event
    (probe 121 F12: the daemon recorded one, and an incident snapshot followed it). The
    notebook's GPU gets its gpu_held_idle event, so the events are being raised."""
    scenario_file = tmp_path / "quiet-server.toml"
    scenario_file.write_text(QUIET_SERVER)
    host_after_s, round_s = 30.0, 5.0
    live = mlcostd(str(scenario_file), interval=0.5, config={
        "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s",
                 "host_after": f"{host_after_s:g}s"},
        "cost": {"evaluate_every": f"{round_s:g}s"},
        "snapshots": {"after": "1s", "held_idle_after": 0, "recommendation_savings": 0,
                      "html": False}})
    state: dict[str, Any] = {}

    def past_host_after() -> bool:
        """Both GPUs held idle (their events open) since a time host_after and two rounds of
        the rules before the latest tick, and the rules calling the server idle_server."""
        state["now"] = now = live.now()
        held = {e["target"]: e["started_at"] for e in now["events"]
                if e["kind"] == "gpu_held_idle" and e["ended_at"] is None}
        serving = [r for r in now["recommendations"] if r["rule"] == "idle_server"]
        return ({"gpu:0", "gpu:1"} <= set(held) and bool(serving)
                and now["ts"] >= max(held.values()) + host_after_s + 2 * round_s)

    poll(past_host_after, 150, "both GPUs idle past [idle].host_after, idle_server advised",
         every=1.0, explain=lambda: f"{state.get('now', {}).get('events')}\n{live.log_tail()}")
    now = state["now"]
    assert [e for e in now["events"] if e["kind"] == "host_idle"] == [], now["events"]
    assert not [r for r in now["recommendations"] if r["rule"] == "host_idle"]
    answer = live.call("idle", 0.0)
    [server] = [p for p in answer["processes"] if p["gpus"] == [0]]
    assert answer["active"] is True and server["active"] is True, answer
    assert any("serves on a port" in e for e in server["evidence"]), server
    snapshots = live.call("snapshots")["snapshots"]
    assert not [s for s in snapshots if (s.get("trigger") or {}).get("kind") == "host_idle"]
    assert "the host is idle" not in live.log()
    assert live.stop() == 0, live.log_tail()


def test_phase_seconds_count_from_the_daemon_s_start_at_the_first_scrape(tmp_path):
    """mlcost_workload_phase_seconds_total was missing on the first scrape and then counted from
    it, where the README says counters count from the daemon's start (probe 141 L2): the first
    scrape now holds each workload's phase time since the daemon (or its process) started."""
    daemon = livedaemon.start(tmp_path / "phases", "idle-host", interval=0.5,
                              args=["--metrics-listen", "127.0.0.1:0"])
    try:
        port = metrics_port(daemon)
        daemon.wait_for_ticks(12)  # several seconds of recording before anything scrapes it
        with sqlite3.connect(f"file:{daemon.db}?mode=ro", uri=True) as conn:
            first_ms, last_ms = conn.execute("SELECT min(ts), max(ts) FROM ticks").fetchone()
        text = fetch(f"http://127.0.0.1:{port}/metrics")[2]  # its first scrape
        uptime = daemon.call("health").uptime_s
    finally:
        assert daemon.stop() == 0
    phases = samples(text, "mlcost_workload_phase_seconds_total")
    assert phases, text
    total = sum(s.value for s in phases)
    # the notebook (the one process) started before the first tick and lived through the last
    # one read: at least that much of its time is counted, and no more than the daemon ran
    assert (last_ms - first_ms) / 1000 <= total <= uptime + 1.0, (total, first_ms, last_ms)


def test_the_usage_split_of_a_host_nvml_lists_half_of_sums_to_its_burn(mlcostd):
    """Probe 156 F1: the `faults` scenario's p4d.24xlarge is priced for 8 GPUs and NVML lists 4.
    Its burn charges the 4 unseen as idle ($7.35/h in all); the usage split, summed by node
    (node:mlcost_gpu_hourly_cost:sum's inputs too), read half of it and mlcost_node_gpus 4."""
    live = mlcostd("faults", interval=0.5, args=["--metrics-listen", "127.0.0.1:0"])
    port = metrics_port(live)

    def scraped() -> str | None:
        _, _, text = fetch(f"http://127.0.0.1:{port}/metrics")
        return text if samples(text, "mlcost_host_burn_dollars_per_hour") and samples(
            text, "mlcost_gpu_usage_hourly_cost") else None

    text = poll(scraped, 60, "a priced tick on /metrics", explain=live.log_tail)
    [burn] = samples(text, "mlcost_host_burn_dollars_per_hour")
    [price] = samples(text, "mlcost_host_price_dollars_per_hour")
    [hourly] = samples(text, "mlcost_node_gpu_hourly_cost")
    [count] = samples(text, "mlcost_node_gpus")
    usage = samples(text, "mlcost_gpu_usage_hourly_cost")
    listed = {s.labels["gpu"] for s in samples(text, "mlcost_gpu_up")}
    assert burn.value == pytest.approx(price.value)
    assert math.fsum(s.value for s in usage) == pytest.approx(burn.value)
    assert hourly.value * count.value == pytest.approx(burn.value)
    assert {s.labels["gpu"] for s in usage} == listed | {f"unseen-{n}" for n in range(1, 5)}
    [unseen] = samples(text, "mlcost_unseen_gpus")
    assert (len(listed), count.value, unseen.value) == (4, 8.0, 4.0)
