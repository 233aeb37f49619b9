"""Processes whose GPUs wait on something that works or serves, under a real mlcostd: never the
SIGTERM, never "stop the host", and the advice that fits what they wait for.

Programs in tests/daemon/workloads written as their users would write them. A training loop
whose producer threads decode and augment in plain Python hands batches over a
queue.SimpleQueue, whose get is C (no Python frame), and is told to make them in worker
processes (they hold the GIL: threads would take turns): its GPU works ~1-2% of the time, so every
GPU reads idle, and it read `idle` ("sleeping or waiting" on its get line), which earned it
idle_gpu_held's SIGTERM and the host's stop. So did a loop fed by decoder processes through a
multiprocessing.Queue ("waiting in a multiprocessing pipe"); it is told to run more decoder
processes or make them faster, never a thread pool; so did loops on a ProcessPoolExecutor's
futures or map (Condition.wait under Future.result, no multiprocessing frame). GPU workers
that take jobs from a multiprocessing Manager's queue or from a job server's socket read `idle` (a multiprocessing pipe: SIGTERM) or
`data_wait` (dataloader_starvation, prefetch worth nearly all their burn); a worker waiting
for its next job is a queue consumer, to be scaled with its queue like a server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from simhost import poll
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401

from daemon.analysis.stack_rules import WORKER_PROCESSES_FEED_IT

WORKLOADS = Path(__file__).parent / "workloads"
# Short waits so the rules find idleness in seconds: held idle 10 s, the host 20 s, a round
# of the rules every 5 s.
QUICK = {**FAST_STACKS, "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s",
                                 "host_after": "20s"},
         "cost": {"evaluate_every": "5s"}}
# This file's starved loops: a GPU below 10% is idle. Their GPUs read 5.0% (a short kernel a
# second), the default threshold, where a GPU reads busy: no GPU idle event opened, and the
# wait for every GPU idle past host_after ran out, on a quiet machine too. (QUICK, which other
# files import, keeps the default.)
STARVED = {**QUICK, "idle": {**QUICK["idle"], "utilization": 10}}
HOST_AFTER_S, ROUND_S = 20.0, 5.0
# What would stop a process or its host.
STOPS = {"idle_gpu_held", "host_idle"}


def program(name: str, *args: str) -> list[str]:
    return [sys.executable, str(WORKLOADS / name), *args]


def advice_by_program(daemon: Any, names: tuple[str, ...]) -> dict[str, list[Any]]:
    """The recommendations about each named program's process (by its command line), and
    those about the host under "host"."""
    keys = {p["key"]: next((n for n in names if n in p["command"]), "?")
            for p in daemon.now()["processes"] if p.get("gpus")}
    found: dict[str, list[Any]] = {name: [] for name in (*names, "host")}
    for rec in daemon.call("recommendations"):
        target = rec.target if rec.target in keys or rec.target == "host" else (
            rec.evidence.get("process", {}).get("id"))
        found.setdefault(keys.get(target, target), []).append(rec)
    return found


def rules(found: dict[str, list[Any]]) -> dict[str, list[str]]:
    return {name: sorted(r.rule for r in recs) for name, recs in found.items()}


def gpus_idle_since(daemon: Any) -> float | None:
    """When every GPU of the host had last gone idle, by its open GPU idle events (the latest
    start of the gpu_held_idle or gpu_unheld_idle event of each GPU); None while a GPU has
    none. The marker of "every GPU idle past [idle].host_after" for a host whose processes
    work or serve: the host_idle event holds back for them, as the host_idle rule does."""
    now = daemon.now()
    open_since = {e["target"]: e["started_at"] for e in now["events"]
                  if e["kind"] in ("gpu_held_idle", "gpu_unheld_idle") and e["ended_at"] is None}
    gpus = {f"gpu:{g['index']}" for g in now["gpus"]}
    return max(open_since[g] for g in gpus) if gpus and gpus <= set(open_since) else None


def starved_past_host_after(daemon: Any, names: tuple[str, ...]) -> dict[str, list[Any]]:
    """The advice about each named program once each has dataloader_starvation from a round of
    the rules whose window ends past the host's idle threshold: every GPU has read idle past
    [idle].host_after (each GPU's idle event open: gpus_idle_since) and a round of the rules has seen that."""
    state: dict[str, Any] = {}

    def starved() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        starved = [r for name in names for r in found[name]
                   if r.rule == "dataloader_starvation"]
        since = gpus_idle_since(daemon)
        return len(starved) == len(names) and since is not None and all(
            r.evidence["window"]["end"] >= since + HOST_AFTER_S + 2 * ROUND_S
            for r in starved)

    poll(starved, 150,
         f"dataloader_starvation for all of {names}, in a round past [idle].host_after",
         every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
         + "\n" + daemon.log_tail())
    return state["recs"]


def test_loops_fed_by_producer_threads_or_decoder_processes_are_starved_not_idle(
        mlcostd, tmp_path):
    """Their phase is data wait (at the producers' line for the threads), their advice the
    pipeline's, and neither they nor their host are offered to be stopped, also once every GPU
    has read idle past [idle].host_after."""
    path = scenario_file(tmp_path, [
        {"name": "augment", "command": program("augment_pipeline.py")},
        {"name": "decode", "command": program("decode_processes.py")}])
    daemon = mlcostd("idle-host", interval=1.0, config=STARVED, args=["--simulate", str(path)])
    names = ("augment_pipeline", "decode_processes")
    found = starved_past_host_after(daemon, names)
    for name in names:
        assert not {r.rule for r in found[name] + found["host"]} & STOPS, rules(found)
        assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
    [starved] = [r for r in found["augment_pipeline"] if r.rule == "dataloader_starvation"]
    assert "augment_pipeline.py" in starved.evidence["where"], starved.evidence["where"]
    top = starved.evidence["top_stacks"][0]
    assert top["function"].split(".<locals>.")[0] in ("augment", "decode_sample", "produce"), top
    assert "queue.SimpleQueue" in top["reason"], top
    # its producers run Python holding the GIL: worker processes, not a thread pool
    assert "holding the GIL" in top["reason"], top
    patch = starved.action["patch"]
    assert "ProcessPoolExecutor" in patch and "ThreadPoolExecutor" not in patch, patch
    [fed] = [r for r in found["decode_processes"] if r.rule == "dataloader_starvation"]
    assert "child processes run" in fed.evidence["top_stacks"][0]["reason"], fed.evidence
    # its one decoder process cannot keep up: more of them or faster ones, not a thread pool
    assert fed.headline.startswith("more worker processes, or faster ones"), fed.headline
    patch = fed.action["patch"]
    assert "decode_processes.py:48: " in patch and "It has 1 worker process now." in patch, patch
    assert "multiprocessing.Queue(maxsize=" in patch and "ThreadPoolExecutor" not in patch, patch
    # the line its decoder spends its time on, from the decoder's own stacks
    assert "its workers spend the most samples at " in patch, patch
    assert "decode_processes.py:32 (decode_batches)" in patch, patch
    assert daemon.stop() == 0, daemon.log_tail()


EXECUTOR_FED = WORKLOADS / "executor_fed.py"
# the line make_batch's worker processes spend their time on
MAKE_BATCH_LINE = next(n for n, text in enumerate(EXECUTOR_FED.read_text().splitlines(), start=1)
                       if "frame = [[min(255" in text)


def test_loops_fed_by_a_process_pool_executor_are_starved_not_idle(mlcostd, tmp_path):
    """A loop that waits on its ProcessPoolExecutor's futures (Future.result) and one on its
    executor.map: their main threads wait in Condition.wait, no multiprocessing frame, and
    read idle (idle_gpu_held's SIGTERM, the host's stop) while their worker processes made
    batches. They are data wait that worker processes feed: more or faster workers, from the
    line the workers spend their time on, and never a stop."""
    path = scenario_file(tmp_path, [
        {"name": "result",
         "command": program("executor_fed.py", "--take", "result", "--workers", "1")},
        {"name": "map", "command": program("executor_fed.py", "--take", "map", "--workers", "1")}])
    daemon = mlcostd("idle-host", interval=1.0, config=STARVED, args=["--simulate", str(path)])
    names = ("--take result", "--take map")
    found = starved_past_host_after(daemon, names)
    for name, waits_in in zip(names, ("Future.result", "result_iterator"), strict=True):
        assert not {r.rule for r in found[name] + found["host"]} & STOPS, rules(found)
        assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
        [fed] = [r for r in found[name] if r.rule == "dataloader_starvation"]
        reason = fed.evidence["top_stacks"][0]["reason"]
        assert "ProcessPoolExecutor" in reason and waits_in in reason, reason
        assert reason.endswith(WORKER_PROCESSES_FEED_IT), reason
        assert fed.headline.startswith("more worker processes, or faster ones"), fed.headline
        patch = fed.action["patch"]
        assert "(a ProcessPoolExecutor), and they cannot keep up. It has 1 worker process " \
            "now." in patch, patch
        assert "+pool = concurrent.futures.ProcessPoolExecutor(max_workers=" in patch, patch
        assert "ThreadPoolExecutor" not in patch, patch
        # the line its worker spends its time on, from the worker's own stacks
        assert f"executor_fed.py:{MAKE_BATCH_LINE} (make_batch)" in patch, patch
    assert daemon.stop() == 0, daemon.log_tail()


def test_workers_waiting_for_jobs_get_scale_to_zero_advice_not_a_sigterm_nor_prefetch(
        mlcostd, tmp_path):
    """A worker on a Manager().Queue() and one on a job server's TCP socket, a job every 30 s:
    both get idle_server's advice as queue consumers (scale the workers with the queue), and no
    idle_gpu_held, SIGTERM or dataloader_starvation."""
    server = subprocess.Popen(program("job_server.py", "30"), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        path = scenario_file(tmp_path, [
            {"name": "embed", "command": program("embed_job_worker.py", "--every", "30")},
            {"name": "render",
             "command": program("render_worker.py", "--server", f"127.0.0.1:{port}")}])
        daemon = mlcostd("idle-host", interval=1.0, config=QUICK,
                         args=["--simulate", str(path)])
        names = ("embed_job_worker", "render_worker")
        state: dict[str, Any] = {}

        def both_advised_as_consumers() -> bool:
            state["recs"] = found = advice_by_program(daemon, names)
            return all(any(r.rule == "idle_server" and r.evidence.get("waits_for_jobs")
                           for r in found[name]) for name in names)

        poll(both_advised_as_consumers, 240, "idle_server advice for both job workers",
             every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
             + "\n" + daemon.log_tail())
        found = state["recs"]
        for name in names:
            assert not {r.rule for r in found[name]} & {*STOPS, "dataloader_starvation"}, \
                rules(found)
            assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
            [rec] = [r for r in found[name] if r.rule == "idle_server"]
            assert rec.action["kind"] == "advice" and "queue" in rec.action["text"]
            assert f"{name}.py" in rec.evidence["waits_for_jobs"]["file"], rec.evidence
        manager = next(r for r in found["embed_job_worker"] if r.rule == "idle_server")
        assert "manager's queue" in manager.evidence["waits_for_jobs"]["reason"]
        socket = next(r for r in found["render_worker"] if r.rule == "idle_server")
        assert "socket" in socket.evidence["waits_for_jobs"]["reason"]
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        server.kill()
        server.wait()
