"""A rank of a job started as torch.multiprocessing.spawn starts them, under a real mlcostd
(probe 109, BUG 4): the slow rank of a two-rank job listens on a TCP port of its own that its
peer connects to (as gloo's pairs do), never waits in a collective (the other waits for it) and
has its rank as a function argument, not on its command line. It read `online_inference` on
that port and its peer's connection, and got idle_server's "scale to zero between requests".
Its port's connections all come from a GPU process of its own job (its sibling): a rank's peer
port, not a service; so is a port nobody connected to of a rank that connected to its peer
(which of the two connects is gloo's choice). The same rank answering a sibling that holds no
GPU (a client started beside a server) is still a server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from simhost import poll
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK

WORKLOADS = Path(__file__).parent / "workloads"
RANKS = [sys.executable, str(WORKLOADS / "spawned_peer_ranks.py")]
PEER_PORT = "is connected to its own job's GPU processes only"


def test_a_spawned_ranks_peer_port_is_no_service_and_a_sibling_clients_is(mlcostd, tmp_path):
    path = scenario_file(tmp_path, [
        {"name": "ranks", "command": RANKS, "gpus": 2},  # GPUs 0, 1: rank 1 (slow) on 1
        {"name": "served", "command": [*RANKS, "--rank0-without-gpu"], "gpus": 2},  # 2, 3
        {"name": "connects", "command": [*RANKS, "--slow-rank-connects"], "gpus": 2}])  # 4, 5
    daemon = mlcostd("idle-host", interval=1.0, args=["--simulate", str(path)], config=QUICK)
    state: dict[str, Any] = {}

    def by_gpu() -> dict[int, dict[str, Any]]:
        return {g["index"]: p for p in daemon.now()["processes"] for g in p.get("gpus") or []}

    def settled() -> bool:
        state["procs"] = procs = by_gpu()
        rank, served, connects = procs.get(1), procs.get(3), procs.get(5)
        if rank is None or served is None or connects is None:
            return False
        return (all(any(PEER_PORT in e for e in p.get("kind_evidence", []))
                    for p in (rank, connects))
                and served.get("kind") == "online_inference" and served.get("serves") is True
                and any(e.startswith("accepted connections on its port")
                        for e in served.get("kind_evidence", [])))

    poll(settled, 150, "the slow rank's port read as its peers', the sibling client's server "
         "read as a server", every=2.0,
         explain=lambda: json.dumps({i: {k: p.get(k) for k in (
             "command", "kind", "kind_confidence", "kind_evidence", "serves")} for i, p in state.get("procs", {}).items()},
             indent=1) + "\n" + daemon.log_tail())
    rank = state["procs"][1]
    for slow in (rank, state["procs"][5]):  # it accepted its peer's connection / it connected
        assert slow["kind"] != "online_inference" and slow["serves"] is False, slow
        assert not any(e.startswith("listens on TCP port") and PEER_PORT not in e
                       for e in slow["kind_evidence"]), slow["kind_evidence"]
    served = state["procs"][3]
    assert any(e.startswith("listens on TCP port ") and e[20:].isdigit()
               for e in served["kind_evidence"]), served
    assert not any(PEER_PORT in e for e in served["kind_evidence"]), served

    def advice_for(key: str) -> list[Any]:
        return [r for r in daemon.call("recommendations") if key in (
            r.target, r.evidence.get("process", {}).get("id"))]

    # No server's advice for the rank once rules rounds have read it as a rank (a round made
    # before its kind settled may still stand in the book for a while: wait it out).
    poll(lambda: not [r for r in advice_for(rank["key"]) if r.rule == "idle_server"], 60,
         "no idle_server advice for the rank", every=2.0)
    for rec in advice_for(rank["key"]):
        assert "the server" not in json.dumps(rec.action or {}), rec
    assert daemon.stop() == 0, daemon.log_tail()
