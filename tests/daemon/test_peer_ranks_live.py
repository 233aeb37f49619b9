"""A rank of a job started as torch.multiprocessing.spawn starts them, under a real mlcostd
(probe 109, BUG 4): the slow rank of a two-rank job listens on a TCP port of its own that its
peer connects to (as gloo's pairs do), never waits in a collective (the other waits for it) and
has its rank as a function argument, not on its command line. It read `online_inference` on
that port and its peer's connection, and got idle_server's "scale to zero between requests".
Its port's connections all come from a GPU process of its own job (its sibling): a rank's peer
port, not a service; so is a port nobody connected to of a rank that connected to its peer
(which of the two connects is gloo's choice). The same rank answering a sibling that holds no
GPU (a client started beside a server) is still a server.

Probe 143 F2: a rank of a hand-written all-reduce (its own sockets, no torch) that waits in
`conn.recv` for its sibling, which re-tokenizes its shard on the CPU first, read as a worker
waiting for its next job on a socket ("a job server or a broker with no work for it"), hence
batch_inference and idle_server's "scale the workers with the queue's depth (to zero)". Its one
TCP connection goes to its sibling rank (a GPU process of its own job): it waits for its peer
(comm), stays a training rank, and the straggler advice names the sibling's preprocessing.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

from simhost import poll
from test_corpus import largest, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK

from daemon.analysis.balance import phase_balances
from daemon.store.reader import StoreReader

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


def balances_by_pid(db: Path) -> dict[int, dict[str, Any]]:
    """Each GPU process's phase balance by its pid, as the report reads it."""
    reader = StoreReader(str(db))
    try:
        if len(reader.ticks()) < 2:
            return {}
        summary = reader.window_summary(0, 1e12)
        found = phase_balances(reader, 0, 1e12, 1.0, summary["processes"])
        return {p["pid"]: found.get((p["pid"], p["start_time"])) or {}
                for p in summary["processes"] if p["gpus"]}
    finally:
        reader.close()


def test_a_rank_waiting_in_a_hand_written_allreduce_waits_for_its_peer_not_for_jobs(
        mlcostd, tmp_path):
    """Two ranks of socket_allreduce_ranks.py (GPUs 0 and 1): rank 0 re-tokenizes its shard
    on the CPU before each step, rank 1 waits for it in `conn.recv`. Rank 1's largest phase is
    comm at its recv, its kind training, no advice treats it as a queue consumer (idle_server)
    or offers to stop it, and the straggler finding names rank 0 in host_preprocess."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    path = scenario_file(tmp_path, [
        {"name": "ranks", "gpus": 2, "command": [
            sys.executable, str(WORKLOADS / "socket_allreduce_ranks.py"), str(port)]}])
    daemon = mlcostd("idle-host", interval=1.0, args=["--simulate", str(path)], config=QUICK)
    state: dict[str, Any] = {}

    def look() -> bool:
        by_gpu = {g["index"]: p for p in daemon.now()["processes"]
                  for g in p.get("gpus") or []}
        state["procs"] = by_gpu
        if 0 not in by_gpu or 1 not in by_gpu:
            return False
        state["phases"] = found = balances_by_pid(daemon.db)
        keys = {by_gpu[i]["key"]: i for i in (0, 1)}
        recs: dict[int, list[Any]] = {0: [], 1: []}
        for rec in daemon.call("recommendations"):
            target = rec.target if rec.target in keys else rec.evidence.get(
                "process", {}).get("id")
            if target in keys:
                recs[keys[target]].append(rec)
            elif rec.rule == "straggler":
                recs[0].append(rec)
        state["recs"] = recs
        waiting = found.get(by_gpu[1]["pid"]) or {}
        stragglers = [r for r in recs[0] if r.rule == "straggler"]
        return (largest(waiting) == "comm" and by_gpu[1].get("kind") == "training"
                and bool(stragglers) and stragglers[0].evidence["straggler"]["gpus"] == [0])

    poll(look, 240, "rank 1 waiting for its peer (comm, training), rank 0 named the straggler",
         every=3.0, explain=lambda: json.dumps({
             "kinds": {i: (p.get("kind"), p.get("kind_evidence"))
                       for i, p in state.get("procs", {}).items()},
             "phases": {pid: {k: (v.get("share"), [s.get("reason") for s in
                                                   v.get("top_stacks") or []][:2])
                              for k, v in b.items()}
                        for pid, b in state.get("phases", {}).items()},
             "rules": {i: sorted(r.rule for r in rs) for i, rs in state.get("recs", {}).items()}},
             indent=1) + "\n" + daemon.log_tail())
    waiting = state["phases"][state["procs"][1]["pid"]]["comm"]
    top = waiting["top_stacks"][0]
    assert top["reason"].startswith("waiting for a peer of its own job on a socket"), top
    assert "recv" in top["reason"] and "job server or a broker" not in top["reason"], top
    rank1 = {r.rule for r in state["recs"][1]}
    assert not rank1 & {"idle_server", "idle_gpu_held", "host_idle"}, rank1
    assert not [r for r in state["recs"][1] if (r.action or {}).get("kind") == "sigterm"]
    for rec in state["recs"][1]:  # (communication_bound may speak: it waits in comm)
        said = json.dumps([rec.summary, rec.headline, rec.action])
        assert "queue's depth" not in said and "to zero" not in said, said
        assert "DDP(" not in said, said  # its exchange is its own, not DDP's buckets
    assert not any("waits for its next job" in e for e in state["procs"][1]["kind_evidence"])
    [straggler] = [r for r in state["recs"][0] if r.rule == "straggler"]
    assert straggler.evidence["straggler"]["phase"] == "host_preprocess", straggler.evidence
    assert "retokenize" in json.dumps(straggler.evidence["straggler"]["top_stacks"]), (
        straggler.evidence)
    assert daemon.stop() == 0, daemon.log_tail()
