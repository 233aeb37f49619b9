"""A job between batches under a real mlcostd keeps its host: no "stop the host", and GET
/v1/idle answers active, while idle_gpu_held looks first at it.

A program in tests/daemon/workloads written as its user would write it: it computes a batch,
then waits for the next one on a threading.Event with a timeout (an interruptible sleep, so
its SIGTERM handler ends it at once). idle_gpu_held looked first ("computed 25% of the window
before it went idle: a job between batches?"), yet host_idle, in the same rounds, said "stop
the host" and /v1/idle answered idle: the host's test counted a look first only where the wait
was a plain `time.sleep` after a run. Every look first keeps the host now (rules/idle.py's
idle_verdict, the one test of both).
"""

from __future__ import annotations

import json
from typing import Any

from simhost import poll
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_parent_and_reader_waits_live import held, idle_answer_for
from test_periodic_job_live import HOST_AFTER_S, PERIODIC, ROUND_S
from test_work_waits_live import STOPS, advice_by_program, gpus_idle_since, program, rules


def test_a_job_waiting_between_batches_keeps_its_host_and_v1_idle_says_active(mlcostd, tmp_path):
    """The job computes a 15 s batch, then waits on its Event for the next, an hour away. In
    every round, no host_idle and no SIGTERM; in a round whose window ends with every GPU idle
    past [idle].host_after (its idle events open), idle_gpu_held's look first says it computed
    part of the window, and GET /v1/idle, asked with its GPU idle, answers active for it."""
    name = "batches_then_waits.py"
    path = scenario_file(tmp_path, [
        {"name": "batches", "command": program(name, "--batch-s", "15", "--every", "3600")}])
    daemon = mlcostd("idle-host", interval=1.0, config=PERIODIC, args=["--simulate", str(path)])
    state: dict[str, Any] = {"stops": [], "sigterms": []}

    def between_batches_past_host_after() -> bool:
        state["recs"] = found = advice_by_program(daemon, (name,))
        state["stops"] += [r.summary for r in found["host"] if r.rule in STOPS]
        rec = held(found, name)
        if rec is not None and rec.action.get("kind") == "sigterm":
            state["sigterms"].append(rec.action)
        since = gpus_idle_since(daemon)
        if rec is None or "between batches" not in rec.action.get("text", "") or since is None:
            return False
        if rec.evidence["window"]["end"] < since + HOST_AFTER_S + 2 * ROUND_S:
            return False
        state["idle"] = idle = idle_answer_for(daemon, name)
        return idle["answer"]["gpus"][0]["busy"] is False

    poll(between_batches_past_host_after, 180, "idle_gpu_held's between-batches look first in a "
         "round past [idle].host_after, the GPU idle", every=1.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + json.dumps(
             {n: [(r.rule, r.action) for r in rs] for n, rs in state.get("recs", {}).items()}
         )[:3000] + "\n" + json.dumps(state.get("idle", {}).get("answer"))[:2000] + "\n"
         + daemon.log_tail())
    assert state["stops"] == [] and state["sigterms"] == [], state
    rec = held(state["recs"], name)
    assert rec.action["kind"] == "copy_commands", rec.action
    assert "of the window before it went idle" in rec.action["text"], rec.action["text"]
    waiting = rec.evidence["no_sign_of_work"]["waiting_in"][0]
    # (the Event's wait, in threading's Condition.wait: no plain sleep after a run)
    assert waiting["file"].endswith(name) and waiting["reason"].startswith("waiting in"), waiting
    idle = state["idle"]
    assert idle["answer"]["active"] is True, idle["answer"]
    assert any("a job between batches may compute again" in e
               for e in idle["proc"]["evidence"]), idle["proc"]
    assert daemon.stop() == 0, daemon.log_tail()
