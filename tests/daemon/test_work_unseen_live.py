"""Processes at work in ways the GPU and the main thread's stacks do not show, under a real
mlcostd with a real py-spy (probe 132 H1, H2, H3, H5, H6): never the SIGTERM, never "stop the
host", and GET /v1/idle counts each as at work.

Programs in tests/daemon/workloads written as their users would write them. A job whose main
thread joins a thread that hashes its shards on the CPU read `phase idle` and got idle_gpu_held's
SIGTERM (its CPU time was never read); so did a stream scorer running a 30 ms kernel every 3 s
(0.2% SM on average, under the 1% lines), a worker polling a SQLite job table between sleeps
(its stacks show the sleep alone), and the GPU worker of an HTTP front end, fed over a pipe
(the front end serves, the worker waits on its pipe); with them on it, the host read idle.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from simhost import poll
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_parent_and_reader_waits_live import idle_answer_for
from test_work_waits_live import STOPS, advice_by_program, gpus_idle_since, program, rules

QUICK = {**FAST_STACKS, "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s",
                                 "host_after": "20s"},
         "cost": {"evaluate_every": "5s", "recommendation_hold": "0s"}}
HOST_AFTER_S, ROUND_S = 20.0, 5.0
NAMES = ("thread_preprocess.py", "sensor_stream.py", "sqlite_job_worker.py",
         "pipe_front_end.py")


def sigterms(found: dict[str, list[Any]], name: str) -> list[Any]:
    return [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]


def test_work_in_a_thread_small_kernels_a_poller_and_a_servers_worker_are_at_work(
        mlcostd, tmp_path):
    """Each of the four gets no SIGTERM in a round whose window ends past [idle].host_after
    (every GPU idle), the poller at most the look-first, the front end's worker idle_server's
    advice; the host is not offered its stop; /v1/idle answers active with each process at
    work, for the reason the rules found."""
    port_file = tmp_path / "front-end.port"
    path = scenario_file(tmp_path, [
        {"name": "thread", "command": program("thread_preprocess.py")},
        {"name": "stream", "command": program("sensor_stream.py")},
        {"name": "poller", "command": program("sqlite_job_worker.py", "--db",
                                              str(tmp_path / "jobs.db"), "--every", "0.2")},
        {"name": "front", "command": program("pipe_front_end.py", "--port-file",
                                             str(port_file))}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    poll(port_file.exists, 60, "the front end's port", every=0.5)
    # a client of the front end keeps its connection open (as a load balancer does), and asks
    # once: the worker served
    client = socket.create_connection(("127.0.0.1", int(port_file.read_text())), timeout=30)
    try:
        client.sendall(b"GET /predict HTTP/1.1\r\nHost: x\r\n\r\n")
        assert client.recv(1024).startswith(b"HTTP/1.1 200"), "the front end did not answer"
        state: dict[str, Any] = {}

        def past_host_after() -> bool:
            state["recs"] = found = advice_by_program(daemon, NAMES)
            since = gpus_idle_since(daemon)
            if since is None or daemon.now()["ts"] < since + HOST_AFTER_S + 3 * ROUND_S:
                return False  # rounds of the rules past [idle].host_after, every GPU idle
            front = [r for r in found["pipe_front_end.py"] if r.rule == "idle_server"]
            if not front:
                return False
            state["idle"] = idle = {name: idle_answer_for(daemon, name) for name in NAMES}
            return all(i["proc"]["active"] for i in idle.values())

        poll(past_host_after, 300, "a round past [idle].host_after with each process at work",
             every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n"
             + json.dumps({n: i["proc"] for n, i in state.get("idle", {}).items()})
             + "\n" + daemon.log_tail())
        found = state["recs"]
        for name in NAMES:
            assert not sigterms(found, name), (name, rules(found), [
                (r.summary, r.evidence.get("no_sign_of_work")) for r in found[name]])
        assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
        for name in ("thread_preprocess.py", "sensor_stream.py", "pipe_front_end.py"):
            assert "idle_gpu_held" not in rules(found)[name], rules(found)
        [front] = [r for r in found["pipe_front_end.py"] if r.rule == "idle_server"]
        assert "works for a server (its parent, pid" in front.summary, front.summary
        idle = state["idle"]
        assert idle["thread_preprocess.py"]["answer"]["active"] is True
        evidence = {name: " | ".join(i["proc"]["evidence"]) for name, i in idle.items()}
        assert "of a CPU core while its GPU idles" in evidence["thread_preprocess.py"] or (
            "CPU:" in evidence["thread_preprocess.py"]), evidence
        assert "its kernels ran at" in evidence["sensor_stream.py"] or (
            "kernels:" in evidence["sensor_stream.py"]), evidence
        assert "polls for work between sleeps" in evidence["sqlite_job_worker.py"], evidence
        assert "its parent (pid" in evidence["pipe_front_end.py"], evidence
    finally:
        client.close()
    assert daemon.stop() == 0, daemon.log_tail()
