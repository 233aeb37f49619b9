"""GPU workers that another process feeds through multiprocessing, under a real mlcostd (probe
143 F1, F6): never the SIGTERM, before their first job, across a job or between jobs.

Programs in tests/daemon/workloads written as their users would write them. The GPU child of a
pipeline blocks in its parent's multiprocessing.Queue get between jobs (mpq_pipeline.py); a
worker that dialled its coordinator with multiprocessing.connection.Client blocks in
conn.recv() (mp_client_worker.py). Both read "waiting in a multiprocessing pipe", a plain wait:
idle_gpu_held offered them the SIGTERM before their first job and again right after a job
("a: stop process" in mlcost-top). Each waits for its next job: idle_server's consumer advice.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

import pytest
from simhost import poll
from test_broker_waits_live import JOB_EVERY_S, check_consumer, consumer_advice
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, advice_by_program, program, rules

NAMES = ("mpq_pipeline.py", "mp_client_worker.py")


@pytest.fixture
def coordinator() -> Iterator[tuple[str, list[float]]]:
    """A multiprocessing.connection Listener on a free loopback port, in a thread: it takes
    one worker and sends it a work item every JOB_EVERY_S, taking its answer. Its address and
    the times the worker answered."""
    listener = Listener(("127.0.0.1", 0), authkey=b"mlcost-test")
    answered: list[float] = []
    stop = threading.Event()

    def serve() -> None:
        try:
            conn = listener.accept()
        except OSError:
            return  # closed before any worker came
        with conn:
            n = 0
            while not stop.wait(JOB_EVERY_S):
                n += 1
                try:
                    conn.send({"item": n})
                    conn.recv()
                except (EOFError, OSError):
                    return
                answered.append(time.time())

    thread = threading.Thread(target=serve, name="coordinator", daemon=True)
    thread.start()
    host, port = listener.address
    try:
        yield f"{host}:{port}", answered
    finally:
        stop.set()
        listener.close()
        thread.join(30)


def sigterms(found: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [{"program": name, "rule": r.rule, "status": r.status,
             "text": (r.action or {}).get("text")}
            for name in NAMES for r in found.get(name, [])
            if (r.action or {}).get("kind") == "sigterm"]


def test_workers_fed_through_multiprocessing_are_never_offered_the_sigterm(
        mlcostd, tmp_path: Path, coordinator):
    """Both workers wait for a job every JOB_EVERY_S (past [idle].gpu_held_after, 10 s in
    QUICK): at no round of the rules, before the first job, right after one or between two,
    is either offered a SIGTERM (active or held); each gets idle_server's consumer advice in
    a round after its second job."""
    address, answered = coordinator
    done_file = tmp_path / "mpq-done.txt"
    path = scenario_file(tmp_path, [
        {"name": "pipeline", "command": program("mpq_pipeline.py", "--every", str(JOB_EVERY_S),
                                                "--done-file", str(done_file))},
        {"name": "client", "command": program("mp_client_worker.py", "--coordinator", address)},
    ])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {"sigterms": []}

    def jobs_done() -> dict[str, float | None]:
        lines = done_file.read_text().split("\n") if done_file.exists() else []
        mpq = [float(x.split()[1]) for x in lines if x.strip()]
        return {"mpq_pipeline.py": mpq[1] if len(mpq) >= 2 else None,
                "mp_client_worker.py": answered[1] if len(answered) >= 2 else None}

    def advised_after_two_jobs_or_a_sigterm() -> bool:
        state["recs"] = found = advice_by_program(daemon, NAMES)
        state["sigterms"] += sigterms(found)
        if state["sigterms"]:
            return True  # fails below, with what was offered
        second = jobs_done()
        return all(
            second[n] is not None and (rec := consumer_advice(found, n)) is not None
            and rec.evidence["window"]["end"] >= second[n] for n in NAMES)

    poll(advised_after_two_jobs_or_a_sigterm, 300,
         "idle_server's consumer advice for both workers after their second job",
         every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
         + f"\njobs: {jobs_done()}\n" + daemon.log_tail())
    assert not state["sigterms"], json.dumps(state["sigterms"])
    found = state["recs"]
    for name in NAMES:
        check_consumer(found, name, "multiprocessing queue or pipe")
    assert daemon.stop() == 0, daemon.log_tail()
