"""Serving latency beside cost ([[cost.latency]]): p50/p99 from a real server's Prometheus
histogram, read over HTTP from a real aiohttp server that exports it with prometheus-client, in
the analysis, in /v1/now and in /metrics of a running daemon."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Iterator

import livedaemon
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from simhost import poll
from test_metrics import fetch, metrics_port, samples

from daemon import config
from daemon.analysis.latency import LatencyMeter, quantile, read_histogram

BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0)


class Server:
    """A model server's /metrics: an aiohttp app on a real socket in its own thread, with a
    request-latency histogram made by prometheus-client."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram("request_latency_seconds", "End-to-end request latency",
                                 ["model"], buckets=BUCKETS, registry=self.registry)
        self.lock = threading.RLock()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.ready.wait(30)
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def metrics(_: web.Request) -> web.Response:
            with self.lock:
                body = generate_latest(self.registry)
            return web.Response(body=body, content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        self.loop.run_forever()

    def observe(self, seconds: float, times: int, model: str = "llama") -> None:
        with self.lock:  # a page shows all of a call's requests or none of them
            for _ in range(times):
                self.latency.labels(model=model).observe(seconds)

    def observe_all(self, *batches: tuple[float, int]) -> None:
        """Several observe() calls that a reader sees at once."""
        with self.lock:
            for seconds, times in batches:
                self.observe(seconds, times)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def server() -> Iterator[Server]:
    found = Server()
    yield found
    found.stop()


def test_quantiles_interpolate_inside_the_bucket_like_prometheus():
    buckets = {0.1: 90.0, 0.5: 90.0, 1.0: 90.0, 2.5: 100.0, 5.0: 100.0, float("inf"): 100.0}
    assert quantile(0.5, buckets) == pytest.approx(0.1 * 50 / 90)
    assert quantile(0.99, buckets) == pytest.approx(1.0 + 1.5 * 9 / 10)
    assert quantile(0.99, {0.1: 0.0, float("inf"): 0.0}) is None
    assert quantile(0.99, {0.1: 1.0, float("inf"): 10.0}) == 0.1  # in +Inf: the last bound


def test_p50_and_p99_from_a_real_server(server):
    server.observe(0.05, 90)
    server.observe(2.0, 10)
    server.observe(4.0, 50, model="other")
    buckets = read_histogram(server.url, "request_latency_seconds", {"model": "llama"})
    assert buckets[float("inf")] == 100
    assert quantile(0.99, buckets) == pytest.approx(2.35)
    with pytest.raises(ValueError, match="no histogram"):
        read_histogram(server.url, "tokens_total")
    meter = LatencyMeter("chat", server.url, "request_latency_seconds", {"model": "llama"})
    meter.poll()
    first = meter.as_dict()
    assert first["p99_seconds"] == pytest.approx(2.35) and first["error"] is None
    # p99 swings while p50 stays: the next poll shows the requests since the last one only
    server.observe(0.05, 50)
    server.observe(4.0, 50)
    meter.poll()
    now = meter.as_dict()
    assert now["requests"] == 100
    assert now["p50_seconds"] < 0.5 and now["p99_seconds"] > 2.5
    assert now["p99_seconds_since_server_start"] < now["p99_seconds"]
    assert now["requests_since_server_start"] == 200
    down = LatencyMeter("chat", "http://127.0.0.1:9/metrics", "request_latency_seconds")
    down.poll(timeout_s=0.5)
    assert down.error and down.as_dict()["p99_seconds"] is None


def test_a_token_in_a_metrics_urls_query_is_hidden_wherever_the_url_is_shown_or_kept():
    """[[cost.latency]] and [[cost.unit_costs]] url = ".../metrics?access_token=..." showed the
    token in /v1/now's url and error (and kept it in the store's meter readings)."""
    from daemon.analysis.latency import reading
    from daemon.analysis.ledger import CostLedger
    from daemon.analysis.meters import UnitCostMeter

    url = "http://127.0.0.1:1/metrics?access_token=SUPERSECRETL"  # nothing listens on port 1
    meter = LatencyMeter("serve.py", url, "latency_seconds")
    meter.poll(timeout_s=2.0)
    shown = meter.as_dict()
    assert meter.error and "SUPERSECRETL" not in json.dumps(shown)
    assert shown["url"].startswith("http://127.0.0.1:1/metrics?access_token=")
    meter.observe({0.1: 5.0, float("inf"): 9.0})
    assert "SUPERSECRETL" not in json.dumps(reading(meter))
    ledger = CostLedger()
    ledger.meters.append(UnitCostMeter("serve.py", url.replace("L", "Q"), "tokens_total"))
    (counter,) = ledger.poll_unit_costs(timeout_s=2.0)
    assert counter.error and "SUPERSECRETQ" not in json.dumps(counter.as_dict())


def test_config_checks_each_latency_table(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[cost.latency]]\ntarget = "chat"\nurl = "ftp://x"\nmetric = "m"\n')
    with pytest.raises(config.ConfigError, match=r"\[\[cost.latency\]\] #1: url"):
        config.load(path)
    path.write_text('[[cost.latency]]\ntarget = "chat"\nurl = "http://x/metrics"\n'
                    'metric = "m"\nquantile = 0.9\n')
    with pytest.raises(config.ConfigError, match="unknown key 'quantile'"):
        config.load(path)


def test_the_daemon_shows_latency_in_now_and_metrics(server, tmp_path):
    server.observe(0.05, 90)
    server.observe(2.0, 10)
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "mlcostd.toml").write_text(
        '[cost]\nevaluate_every = "5s"\n[[cost.latency]]\ntarget = "chat"\n'
        f'url = {json.dumps(server.url)}\nmetric = "request_latency_seconds"\n'
        'labels = { model = "llama" }\n')
    daemon = livedaemon.start(folder, "idle-host", args=[
        "--config", str(folder / "mlcostd.toml"), "--metrics-listen", "127.0.0.1:0"])
    try:
        def latency() -> dict | None:
            found = (daemon.now().get("cost") or {}).get("latency") or []
            return found[0] if found and found[0].get("p99_seconds") is not None else None

        shown = poll(latency, 60, "p99 in /v1/now", explain=daemon.log_tail)
        assert shown["target"] == "chat" and shown["p99_seconds"] == pytest.approx(2.35)
        text = fetch(f"http://127.0.0.1:{metrics_port(daemon)}/metrics")[2]
        exported = {s.labels["quantile"]: s.value
                    for s in samples(text, "mlcost_latency_seconds")}
        assert exported["0.99"] == pytest.approx(2.35)
        assert exported["0.5"] == pytest.approx(0.1 * 50 / 90)
    finally:
        assert daemon.stop() == 0


def _latency_requests(db) -> list[float]:
    """The request counts of the latency readings the daemon recorded, oldest first."""
    from daemon.store import queries
    from daemon.store.reader import StoreReader

    reader = StoreReader(str(db))
    try:
        found = queries.meter_readings(reader, 0, 2e9)
    finally:
        reader.close()
    return [value for (kind, _), rows in found.items() if kind == "latency"
            for _, value, _ in rows]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Iterator[livedaemon.LiveDaemon]:
    """A daemon that recorded three readings of a server's histogram for the job "chat": 100
    requests before it started, then a window where p99 swings (90 fast, 10 slow), then one
    where it does not (100 fast). Stopped (and the server with it) after the module."""
    server = Server()
    server.observe(0.05, 100)  # before the daemon: not in any range it reports
    folder = tmp_path_factory.mktemp("latency") / "d"
    folder.mkdir()
    (folder / "mlcostd.toml").write_text(
        '[cost]\nevaluate_every = "5s"\n[cost.jobs]\nchat = "idle_notebook"\n'
        f'[[cost.latency]]\ntarget = "chat"\nurl = {json.dumps(server.url)}\n'
        'metric = "request_latency_seconds"\nlabels = { model = "llama" }\n')
    daemon = livedaemon.start(folder, "idle-host", args=["--config", str(folder / "mlcostd.toml")])
    try:
        poll(lambda: 100 in _latency_requests(daemon.db), 60, "the first reading recorded",
             explain=daemon.log_tail)
        server.observe_all((0.05, 90), (2.0, 10))  # a window where p99 swings ...
        poll(lambda: 200 in _latency_requests(daemon.db), 60, "the second reading recorded",
             explain=daemon.log_tail)
        server.observe(0.05, 100)  # ... and one where it does not
        poll(lambda: 300 in _latency_requests(daemon.db), 60, "the third reading recorded",
             explain=daemon.log_tail)
        yield daemon
    finally:
        try:
            assert daemon.stop() == 0
        finally:
            server.stop()


def test_the_report_takes_p50_and_p99_over_its_range_from_the_recorded_buckets(recorded,
                                                                               tmp_path):
    daemon = recorded

    def report(*form: str) -> str:
        done = subprocess.run(livedaemon.MLCOSTD + ["report", "--db", str(daemon.db),
                                                    "--since", "5m", *form],
                              capture_output=True, text=True, timeout=120,
                              cwd=livedaemon.ROOT)
        assert done.returncode == 0, done.stderr
        return done.stdout

    document = json.loads(report("--json"))
    (entry,) = document["spend"]["latency"]
    assert entry["target"] == "chat" and entry["requests"] == 200
    assert entry["p50_seconds"] == pytest.approx(0.1 * 100 / 190)
    assert entry["p99_seconds"] == pytest.approx(1.0 + 1.5 * (198 - 190) / 10)
    assert entry["processes"] and entry["cost"] > 0 and entry["cost_per_request"] > 0
    assert entry["gpu_utilization"] is not None and entry["sm_share"] is not None
    windows = [w for b in document["timeline"]["buckets"] for w in b.get("latency", [])]
    assert [w["requests"] for w in windows] == [100, 100]
    assert windows[0]["p99_seconds"] == pytest.approx(2.35)  # p99 swings ...
    assert windows[1]["p99_seconds"] < 0.1  # ... then it does not
    assert [w["p50_seconds"] for w in windows] == pytest.approx([0.1 * 50 / 90, 0.05])
    text = report()
    assert "Serving latency" in text and "chat: p50 52.6 ms, p99 2.20 s over 200 requests" in text
    page = tmp_path / "report.html"
    report("--html", str(page))
    assert 'data-table="latency"' in page.read_text() and "2.20 s" in page.read_text()


def test_the_cost_per_request_is_the_same_over_any_range_that_holds_the_same_readings(
        recorded):
    """Probe 126 F6: the report's cost per request was the target's dollars over the whole
    range times the share of the range the histogram's readings spanned ($0.0115 per 1k
    requests over 1 hour, $0.043 over 10 minutes, where /v1/now said $0.079). Over a 5-minute
    and a 1-hour range ending at the same instant (the recording is younger than either): the
    same cost per request, the job's dollars between the readings its requests were counted
    between."""
    until = time.time()

    def latency(since: str) -> dict:
        done = subprocess.run(livedaemon.MLCOSTD + ["report", "--db", str(recorded.db),
                                                    "--since", since, "--until", str(until),
                                                    "--json"],
                              capture_output=True, text=True, timeout=120,
                              cwd=livedaemon.ROOT)
        assert done.returncode == 0, done.stderr
        (entry,) = json.loads(done.stdout)["spend"]["latency"]
        return entry

    short, long = latency("5m"), latency("1h")
    assert short["requests"] == long["requests"] == 200
    assert short["cost_per_request"] > 0
    # (the live store hands its spend over between the two reads: the same dollars, rounded)
    assert long["cost_per_request"] == pytest.approx(short["cost_per_request"], rel=1e-3)
    # the job's dollars between its first and last reading (as the store recorded them)
    from daemon.analysis.recorded_spend import recorded_cost_between
    from daemon.store import queries
    from daemon.store.reader import StoreReader

    reader = StoreReader(str(recorded.db))
    try:
        (rows,) = [rows for (kind, _), rows in queries.meter_readings(reader, 0, until).items()
                   if kind == "latency"]
        first, last = rows[0][0], max(ts for ts, _, _ in rows if ts <= until)
        job = recorded_cost_between(reader, {"chat": "idle_notebook"})("chat", first, last)
    finally:
        reader.close()
    assert job is not None and job > 0
    assert short["cost_per_request"] == pytest.approx(job / 200, rel=1e-3)


def test_a_replay_shows_p50_and_p99_where_the_live_view_did(recorded):
    """mlcost-top --replay: at each recorded tick, each histogram over the requests between its
    last two readings then (as the live meter said), on the job's processes' details."""
    from daemon.replay import Replay
    from daemon.store import queries
    from daemon.wire import Now

    with Replay(recorded.db) as replay:
        found = queries.meter_readings(replay.reader, 0, 2e9)
        (rows,) = [rows for (kind, _), rows in found.items() if kind == "latency"]
        # the first reading, the one after the swing, the one after the calm (later readings
        # of an unchanged histogram follow: the daemon reads it every round)
        first, swings, steady = (min(ts for ts, count, _ in rows if count == requests)
                                 for requests in (100, 200, 300))

        def after(ts: float) -> Now:  # the state at the first tick at or after a reading
            return Now.from_dict(replay.state_at(min(t for t in replay.times() if t >= ts)))

        before = after(first)
        assert [(h.requests, h.p99_seconds) for h in before.latency] == [
            (100, pytest.approx(0.1 * 99 / 100))]  # one reading: all the server counted
        at_swing = after(swings)
        (chat,) = [p for p in at_swing.processes if at_swing.latency_of(p)]
        assert chat.job == "chat"
        (shown,) = at_swing.latency_of(chat)
        assert shown.requests == 100 and shown.p99_seconds == pytest.approx(2.35)
        assert shown.p50_seconds == pytest.approx(0.1 * 50 / 90)
        assert shown.cost_per_request is not None and shown.cost_per_request > 0
        later = after(steady)
        assert [(h.requests, h.p99_seconds) for h in later.latency] == [
            (100, pytest.approx(0.1 * 99 / 100))]


def test_a_range_sums_the_bucket_deltas_and_a_restart_counts_what_the_new_server_counted():
    from daemon.analysis.latency import recorded_latency, recorded_windows

    def at(ts: float, fast: float, slow: float) -> tuple[float, float, dict]:
        return (ts, fast + slow, {"target": "chat", "url": "u", "metric": "m", "buckets": [
            ["0.1", fast], ["2.5", fast + slow], ["+Inf", fast + slow]]})

    found = [at(90, 500, 0), at(110, 590, 10), at(130, 10, 0), at(150, 100, 0)]
    entry = recorded_latency(found, 100, 200)
    # 90 + 10 before the restart, then the new server's 10 and 90 more
    assert entry["requests"] == 200 and entry["readings"] == 4 and entry["error"] is None
    assert entry["span_s"] == 50  # from the range's start to its last reading
    assert entry["p99_seconds"] == pytest.approx(0.1 + 2.4 * (198 - 190) / 10)
    windows = recorded_windows(found, 100, 200, 20)
    assert {i: w["requests"] for i, w in windows.items()} == {0: 100, 1: 10, 2: 90}
    assert windows[0]["p99_seconds"] > 2 > 0.1 > windows[2]["p99_seconds"]
    one = recorded_latency(found[:1], 100, 200)
    assert one["requests"] == 0 and one["p99_seconds"] is None and one["error"]
