"""Workload kinds under a real mlcostd, on a program written without the classifier in mind:
a standard-library HTTP scoring service (tests/daemon/corpus/tiny_http_scorer.py) with
`serve_forever` in a thread (the main thread in Thread.join), and the same on the main thread,
each on a simulated GPU, answering sparse requests sent by the test. Each comes out
`online_inference` with its listening socket as evidence, and no rule offers it SIGTERM; an idle
notebook-like job beside them still gets the SIGTERM advice.
"""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from simhost import poll
from test_corpus import CORPUS, FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, WORKLOADS, advice_by_program

from daemon.analysis.ledger import JobLabeler

SERVER = str(CORPUS / "tiny_http_scorer.py")


def port_of(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


SENT = {"requests": 0}  # answered requests, as the service's load balancer would count them


def score(port: int) -> None:
    """One request, as a client would send it (the server may be busy starting: errors pass)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/score", body=json.dumps([1, 2, 3, 4]),
                     headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        SENT["requests"] += 1
    except OSError:
        pass
    finally:
        conn.close()


class RequestCounterPage(http.server.BaseHTTPRequestHandler):
    """The Prometheus counter of the service's requests, as its load balancer exports it."""

    def do_GET(self) -> None:
        body = (f"# TYPE scorer_requests counter\n"
                f"scorer_requests_total {SENT['requests']}\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def request_counter() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving the requests counter; its /metrics URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RequestCounterPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_http_servers_are_online_inference_and_never_offered_sigterm(mlcostd, tmp_path,
                                                                     request_counter):
    """... and the idle server's advice quotes its request rate and cost per 1k requests from
    the request counter configured for its job ([[cost.unit_costs]], unit "requests")."""
    ports = {"threaded": tmp_path / "threaded.port", "main": tmp_path / "main.port"}
    path = scenario_file(tmp_path, [
        {"name": "threaded", "command": [sys.executable, SERVER, "--port-file",
                                         str(ports["threaded"])]},
        {"name": "main", "command": [sys.executable, SERVER, "--port-file", str(ports["main"]),
                                     "--main-thread"]},
        {"name": "notebook", "program": "idle_notebook"}])
    daemon = mlcostd("idle-host", interval=1.0, args=["--simulate", str(path)], config={
        **FAST_STACKS, "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s"},
        "cost": {"evaluate_every": "5s", "unit_costs": [
            {"target": JobLabeler(None).label(f"{sys.executable} {SERVER}", {}),
             "url": request_counter, "metric": "scorer_requests", "unit": "requests",
             "per": 1000}]}})
    bound = poll(lambda: all(port_of(p) for p in ports.values()) and
                 {name: port_of(p) for name, p in ports.items()}, 60, "both servers bound")

    def name_of(proc: dict[str, Any]) -> str | None:
        if "tiny_http_scorer" in proc["command"]:
            return "main" if "--main-thread" in proc["command"] else "threaded"
        return "notebook" if proc.get("gpus") else None

    state: dict[str, Any] = {}

    def settled() -> bool:
        for port in bound.values():  # sparse traffic: one request per server per look
            score(port)
        procs = {name_of(p): p for p in daemon.now()["processes"] if name_of(p)}
        recs: dict[str, list[Any]] = {name: [] for name in procs}
        keys = {p["key"]: name for name, p in procs.items()}
        for rec in daemon.call("recommendations"):
            target = rec.target if rec.target in keys else rec.evidence.get(
                "process", {}).get("id")
            if target in keys:
                recs[keys[target]].append(rec)
        state.update(procs=procs, recs=recs)
        servers_known = all(
            procs.get(name, {}).get("kind") == "online_inference"
            and procs[name].get("serves")
            and f"listens on TCP port {bound[name]}" in procs[name].get("kind_evidence", [])
            # serve_forever seen in the stacks: in a thread while the main thread joins it
            and any(e.startswith("serving frames in a thread (")
                    and "serve_forever" in e for e in procs[name].get("kind_evidence", []))
            and any(r.rule == "idle_server" and "per 1k requests (counter scorer_requests"
                    in r.summary for r in recs.get(name, []))
            for name in ("threaded", "main"))
        return servers_known and any(r.rule == "idle_gpu_held" and (r.action or {}).get("kind")
                                     == "sigterm" for r in recs.get("notebook", []))

    poll(settled, 150, "both servers online_inference (socket evidence, idle_server advice) and "
         "the notebook's SIGTERM advice", every=2.0,
         explain=lambda: json.dumps({n: {k: p.get(k) for k in ("kind", "kind_confidence",
                                                               "kind_evidence", "serves")}
                                     for n, p in state.get("procs", {}).items()})
         + "\n" + str({n: [r.rule for r in v] for n, v in state.get("recs", {}).items()})
         + "\n" + daemon.log_tail())
    for name in ("threaded", "main"):
        assert not [r for r in state["recs"][name] if (r.action or {}).get("kind") == "sigterm"]
        assert not [r for r in state["recs"][name] if r.rule == "idle_gpu_held"]
        [advice] = [r for r in state["recs"][name] if r.rule == "idle_server"]
        requests = advice.evidence["requests"]
        assert requests["source"] == "request counter" and requests["requests"] > 0
        assert requests["requests_per_minute"] > 0 and requests["cost_per_1k_requests"] > 0
    wire = {p.key: p for p in daemon.call("now").processes}  # the parsed daemon.wire.Process
    for name in ("threaded", "main"):
        proc = wire[state["procs"][name]["key"]]
        assert proc.kind == "online_inference" and proc.serves
        assert f"listens on TCP port {bound[name]}" in proc.kind_evidence


def test_a_rank_holding_its_peers_connection_is_not_told_to_scale_to_zero(mlcostd, tmp_path):
    """Probe 132 L1: a hand-rolled rank (its own sockets, no torch) listens, accepts its peer
    (here this test, standing in for the rank on another host) and blocks in conn.recv(). It
    read as a server and got "scale pid N to zero between requests". It stays a server (never
    the SIGTERM: a server with one client holding its connection reads the same), but
    idle_server says both and asks to look at who is at the other end first."""
    port_file = tmp_path / "rank.port"
    name = "socket_rank.py"
    path = scenario_file(tmp_path, [
        {"name": "rank0", "command": [sys.executable, str(WORKLOADS / name), "--port-file",
                                      str(port_file)]}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    poll(port_file.exists, 60, "the rank's port", every=0.5)
    peer = socket.create_connection(("127.0.0.1", int(port_file.read_text())), timeout=30)
    try:
        state: dict[str, Any] = {}

        def advised() -> Any:
            state["recs"] = found = advice_by_program(daemon, (name,))
            return next((r for r in found[name] if r.rule == "idle_server"
                         and r.evidence.get("one_held_connection")), None)

        rec = poll(advised, 240, "idle_server's advice for the rank, one connection held",
                   every=2.0, explain=lambda: json.dumps(
                       {n: [(r.rule, r.headline, r.evidence.get("kind")) for r in rs]
                        for n, rs in state.get("recs", {}).items()}) + "\n" + daemon.log_tail())
        found = state["recs"]
        assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
        assert "idle_gpu_held" not in {r.rule for r in found[name]}, found[name]
        assert "to zero" not in rec.headline and rec.headline.endswith(
            "with one connection open: a rank waiting for its peer, or a server with one "
            "client?"), rec.headline
        assert "a distributed job's rank waiting for its peer" in rec.summary, rec.summary
        assert rec.evidence["kind"]["serves"] is True, rec.evidence["kind"]
        assert any(e.startswith("all it accepted is one connection, held open")
                   for e in rec.evidence["kind"]["kind_evidence"]), rec.evidence["kind"]
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        peer.close()
