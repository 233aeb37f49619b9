"""GPU processes that wait on a child process or a network thread of their own, under a real
mlcostd (probe 109): never the SIGTERM, never "stop the host", and GET /v1/idle agrees.

Programs in tests/daemon/workloads written as their users would write them. An index
rebuilder embeds on the GPU, then rebuilds its index in a multiprocessing.Process and waits
for it in join(): its main thread waits in multiprocessing's Popen.wait, which read as no
child wait ("waiting with its GPU idle and no I/O: not a sync"), so it got idle_gpu_held's
SIGTERM while the child computed, and, alone on its host, "stop the host" while /v1/idle said
active (the child's CPU). A render worker whose network thread reads jobs from its connection
to a dispatcher and hands them over a queue.Queue read "waiting in Condition.wait" between jobs
(a thread on a bare socket was no work): idle_gpu_held's SIGTERM, the host's stop, /v1/idle
"idle". The one whose child stalls (it waits on a pipe the parent never writes) is still found,
as a stalled subprocess wait is: idle_gpu_held, with the look at the child first.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

from simhost import poll
from test_broker_waits_live import check_consumer, consumer_advice, consumers_are_batch_inference
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import (
    HOST_AFTER_S,
    QUICK,
    ROUND_S,
    STOPS,
    advice_by_program,
    gpus_idle_since,
    program,
    rules,
)

from daemon.analysis.stack_rules import CHILD_WAIT, JOB_WAIT


def past_host_after(daemon: Any, names: tuple[str, ...], rule: Any, what: str,
                    seconds: float = 240.0) -> dict[str, list[Any]]:
    """The advice about each named program once `rule(found, name)` gives a recommendation for
    each from a round of the rules whose window ends past the host's idle threshold (the
    GPUs' idle events open: gpus_idle_since, and a round of the rules has seen that)."""
    state: dict[str, Any] = {}

    def advised() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        recs = [rule(found, name) for name in names]
        since = gpus_idle_since(daemon)
        return all(recs) and since is not None and all(
            r.evidence["window"]["end"] >= since + HOST_AFTER_S + 2 * ROUND_S
            for r in recs)

    poll(advised, seconds, f"{what}, in a round past [idle].host_after", every=2.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + daemon.log_tail())
    return state["recs"]


def held(found: dict[str, list[Any]], name: str) -> Any | None:
    return next((r for r in found[name] if r.rule == "idle_gpu_held"), None)


def idle_answer_for(daemon: Any, name: str) -> dict[str, Any]:
    """GET /v1/idle: the whole answer, and its entry for the named program's process."""
    answer = daemon.call("idle")
    [proc] = [p for p in answer["processes"] if name in (p.get("command") or "")
              and p.get("gpus")]
    return {"answer": answer, "proc": proc}


def test_parents_joining_their_multiprocessing_children_wait_for_a_child(mlcostd, tmp_path):
    """Both parents (one whose child builds on a CPU, one whose child waits for ever on a pipe)
    get idle_gpu_held with the look-at-the-child action, no SIGTERM and no kill command; the
    host, every GPU idle past [idle].host_after, is not offered its stop; /v1/idle says active,
    each parent for its child wait."""
    names = ("index_rebuild.py --build", "index_rebuild.py --stall")
    path = scenario_file(tmp_path, [
        {"name": "build", "command": program("index_rebuild.py", "--build-s", "400")},
        {"name": "stall", "command": program("index_rebuild.py", "--stall")}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    found = past_host_after(daemon, names, held, "idle_gpu_held for both parents")
    assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
    for name in names:
        # its join() line is no host sync: the GPU is idle, the child is what it waits for
        assert "host_sync" not in rules(found)[name], rules(found)
        rec = held(found, name)
        assert rec.action["kind"] == "copy_commands", rec.action
        assert "waits for a child process it started" in rec.action["text"], rec.action
        assert "index_rebuild.py:" in rec.action["text"], rec.action
        # how to overlap it follows how it was started (it said subprocess.Popen)
        assert "multiprocessing.Pool" in rec.action["text"], rec.action
        assert "subprocess" not in rec.action["text"], rec.action
        assert not any("kill" in c for c in rec.action["commands"]), rec.action
        waiting = rec.evidence["no_sign_of_work"]["waiting_in"][0]
        assert waiting["reason"].startswith(f"{CHILD_WAIT} (process.py:"), waiting
        assert waiting["function"] == "main", waiting
    building = held(found, names[0]).evidence["no_sign_of_work"]["waiting_in"][0]
    assert "its child processes run on a CPU" in building["reason"], building
    stalled = held(found, names[1]).evidence["no_sign_of_work"]["waiting_in"][0]
    assert "no child of it seen on a CPU" in stalled["reason"], stalled
    for name in names:
        idle = idle_answer_for(daemon, name)
        assert idle["answer"]["active"] is True, idle["answer"]
        assert any("waits for a child process it started" in e
                   for e in idle["proc"]["evidence"]), idle["proc"]
    assert daemon.stop() == 0, daemon.log_tail()


@contextlib.contextmanager
def dispatcher() -> Iterator[dict[str, Any]]:
    """A job dispatcher on a port of its own: it sends the worker that connects "job-1" at once,
    then each job put on `jobs`; the worker's answers land in `done`."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(1.0)
    state: dict[str, Any] = {"port": listener.getsockname()[1], "done": [],
                             "send": threading.Event(), "stop": threading.Event()}

    def serve() -> None:
        while not state["stop"].is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"job-1\n")
                answers = conn.makefile("r", encoding="utf-8")
                state["done"].append(answers.readline().strip())
                while not state["send"].wait(1.0):
                    if state["stop"].is_set():
                        return
                conn.sendall(b"job-2\n")
                state["done"].append(answers.readline().strip())
                state["stop"].wait()
            return

    thread = threading.Thread(target=serve, name="dispatcher", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state["stop"].set()
        thread.join(30)
        listener.close()


def test_a_worker_fed_by_its_network_thread_through_a_queue_is_a_consumer(mlcostd, tmp_path):
    """The worker did its first job and waits for the next: idle_server's consumer advice at
    its queue's get (the network thread's socket read named), no SIGTERM, no prefetch advice,
    no host_idle in a round past the event; GET /v1/idle answers active for it; and it takes
    the next job when one comes. Beside it a job whose main thread waits on a queue that its two
    deadlocked threads never fill is still a stalled job, no consumer: idle_gpu_held, whose
    action looks first (its threads wait on locks: test_lock_waits_live.py) and never names it
    a consumer."""
    name, stalled = "socket_fed_worker", "deadlocked_eval"
    with dispatcher() as jobs:
        path = scenario_file(tmp_path, [
            {"name": "render", "command": program("socket_fed_worker.py",
                                                  f"127.0.0.1:{jobs['port']}")},
            {"name": "eval", "command": program("deadlocked_eval.py")}])
        daemon = mlcostd("idle-host", interval=1.0, config=QUICK,
                         args=["--simulate", str(path)])
        found = past_host_after(daemon, (name,), consumer_advice,
                                "idle_server's consumer advice for the worker")
        assert jobs["done"] == ["done job-1"], jobs["done"]
        check_consumer(found, name, "reads from a socket")
        assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
        consumers_are_batch_inference(daemon, (name,))
        idle = idle_answer_for(daemon, name)
        assert idle["answer"]["active"] is True, idle["answer"]
        assert any(JOB_WAIT in e or "waits for its next job" in e
                   for e in idle["proc"]["evidence"]), idle["proc"]
        state: dict[str, Any] = {}

        def on_a_lock() -> Any:
            state["recs"] = found = advice_by_program(daemon, (name, stalled))
            rec = held(found, stalled)
            return rec if rec is not None and "waits on a lock" in rec.action.get(
                "text", "") else None

        rec = poll(on_a_lock, 120, "idle_gpu_held's look first at the deadlocked job's locks",
                   every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {}))))
        waiting = rec.evidence["no_sign_of_work"]["waiting_in"][0]
        assert waiting["reason"].startswith(
            "waiting on a lock: its main thread waiting in Condition.wait"), waiting
        assert consumer_advice(state["recs"], stalled) is None, rules(state["recs"])
        jobs["send"].set()
        poll(lambda: jobs["done"] == ["done job-1", "done job-2"], 60,
             "the worker's answer to its second job", explain=lambda: str(jobs["done"]))
        assert daemon.stop() == 0, daemon.log_tail()
