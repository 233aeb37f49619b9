"""A periodic job between its runs under a real mlcostd (probe 109's nightly scorer): never
"stop the host" nor a SIGTERM, and GET /v1/idle agrees with the host rule.

A program in tests/daemon/workloads written as its user would write it. A scorer keeps its
model loaded and scores new rows every few seconds (probe 109's nightly scorer: 5 s of kernels,
then time.sleep(300)): once its kernels ran in separate runs of the window, idle_gpu_held told
it "a periodic job ... release the GPU between runs; stop it only if it is done", while
host_idle said "stop the host" through every interval and /v1/idle answered idle.
"""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import time
from typing import Any

import livedaemon
import psutil
from simhost import poll
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_parent_and_reader_waits_live import held, idle_answer_for
from test_work_waits_live import STOPS, advice_by_program, gpus_idle_since, program, rules

# Idle held and the host after 10 s (the shortest the config takes), a round every 5 s, and no
# recommendation held past the round that last found it: each round's advice as it found it.
# A run every 30 s idles the host for ~29 s between runs, past [idle].host_after and two rounds.
PERIODIC = {**FAST_STACKS, "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s",
                                    "host_after": "10s"},
            "cost": {"evaluate_every": "5s", "recommendation_hold": "0s"}}
EVERY_S, HOST_AFTER_S, ROUND_S = 30.0, 10.0, 5.0


def test_a_periodic_job_between_its_runs_keeps_its_host_and_v1_idle_says_active(
        mlcostd, tmp_path):
    """Once idle_gpu_held calls the scorer periodic (its kernels ran in two or more separate
    runs), a round whose window ends with the host idle past [idle].host_after (the host_idle
    GPU event open) has no host_idle, and GET /v1/idle, asked with the GPU idle between runs,
    answers active for the scorer because it is periodic."""
    name = "periodic_scorer.py"
    path = scenario_file(tmp_path, [
        {"name": "scorer", "command": program(name, "--every", f"{EVERY_S:g}", "--run-s", "1")}])
    daemon = mlcostd("idle-host", interval=1.0, config=PERIODIC, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def between_runs_past_host_after() -> bool:
        state["recs"] = found = advice_by_program(daemon, (name,))
        rec = held(found, name)
        since = gpus_idle_since(daemon)
        if rec is None or "separate runs" not in rec.action.get("text", "") or since is None:
            return False
        end = rec.evidence["window"]["end"]
        if end < since + HOST_AFTER_S + ROUND_S:
            return False
        state["idle"] = idle = idle_answer_for(daemon, name)  # between runs: its GPU idle now
        return idle["answer"]["gpus"][0]["busy"] is False

    poll(between_runs_past_host_after, 4 * EVERY_S + 60,
         "idle_gpu_held's periodic advice in a round past [idle].host_after, the GPU idle",
         every=1.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
         + "\n" + daemon.log_tail())
    found = state["recs"]
    rec = held(found, name)
    assert rec.action["kind"] == "copy_commands", rec.action
    assert "Release the GPU between runs" in rec.action["text"], rec.action
    assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
    idle = state["idle"]
    assert idle["answer"]["active"] is True, idle["answer"]
    assert any("a periodic job between runs" in e for e in idle["proc"]["evidence"]), idle
    assert idle["proc"]["sm_share"] in (None, 0, 0.0), idle["proc"]  # not by kernels now
    assert daemon.stop() == 0, daemon.log_tail()



def test_one_run_seen_then_a_sleep_is_looked_at_first_a_warm_up_then_a_sleep_is_stopped(
        mlcostd, tmp_path):
    """Probe 132 M1: a periodic eval in its first interval (one run of kernels seen, then
    `time.sleep` until the next, an hour away: its period outlasts the window) was offered the
    SIGTERM. Now idle_gpu_held looks first and says one run was seen; it is never offered the
    SIGTERM in any round. The same program whose run is a warm-up pass (0.2 s of kernels) keeps
    the SIGTERM."""
    run, warm = "--run-s 8", "--run-s 0.2"
    path = scenario_file(tmp_path, [
        {"name": "eval", "command": program("periodic_scorer.py", "--every", "3600",
                                            *run.split())},
        {"name": "warm", "command": program("periodic_scorer.py", "--every", "3600",
                                            *warm.split())}])
    daemon = mlcostd("idle-host", interval=1.0, config=PERIODIC, args=["--simulate", str(path)])
    state: dict[str, Any] = {"stops": []}

    def both_advised() -> bool:
        state["recs"] = found = advice_by_program(daemon, (run, warm))
        ran, warmed = held(found, run), held(found, warm)
        if ran is not None and ran.action.get("kind") == "sigterm":
            state["stops"].append(ran.action)
        return (ran is not None and "one run seen" in ran.action.get("text", "")
                and warmed is not None and warmed.action.get("kind") == "sigterm")

    poll(both_advised, 180, "idle_gpu_held's look first (one run seen) for the eval and its "
         "SIGTERM for the warm-up", every=1.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + json.dumps(
             {n: [(r.action, r.evidence.get("no_sign_of_work")) for r in rs]
              for n, rs in state.get("recs", {}).items()}) + "\n" + daemon.log_tail())
    assert state["stops"] == [], state["stops"]
    ran = held(state["recs"], run)
    assert ran.action["kind"] == "copy_commands", ran.action
    assert "periodic_scorer.py:" in ran.action["text"], ran.action["text"]
    assert "a periodic job between its runs looks the same" in ran.action["text"]
    evidence = ran.evidence["no_sign_of_work"]
    assert evidence["work_runs"] == 1 and evidence["kernel_s_before_idle"] >= 2.0, evidence
    assert evidence["waiting_in"][0]["reason"].startswith("sleeping or waiting"), evidence
    assert daemon.stop() == 0, daemon.log_tail()


def test_one_run_seen_keeps_its_host_and_v1_idle_says_active(mlcostd, tmp_path):
    """A periodic eval in its first interval (8 s of kernels, then `time.sleep` for an hour):
    idle_gpu_held looks first (one run seen), yet in the same rounds, the host idle past
    [idle].host_after, host_idle said "stop the host" and GET /v1/idle (`mlcostd idle`, the
    autostop scripts' check) answered idle. The one fact holds all three now: no host_idle in
    any round, and /v1/idle active, naming the run."""
    name = "periodic_scorer.py"
    path = scenario_file(tmp_path, [
        {"name": "eval", "command": program(name, "--every", "3600", "--run-s", "8")}])
    daemon = mlcostd("idle-host", interval=1.0, config=PERIODIC, args=["--simulate", str(path)])
    state: dict[str, Any] = {"stops": []}

    def one_run_past_host_after() -> bool:
        state["recs"] = found = advice_by_program(daemon, (name,))
        state["stops"] += [r.summary for r in found["host"] if r.rule in STOPS]
        rec = held(found, name)
        since = gpus_idle_since(daemon)
        if rec is None or "one run seen" not in rec.action.get("text", "") or since is None:
            return False
        if rec.evidence["window"]["end"] < since + HOST_AFTER_S + 2 * ROUND_S:
            return False
        state["idle"] = idle = idle_answer_for(daemon, name)
        return idle["answer"]["gpus"][0]["busy"] is False

    poll(one_run_past_host_after, 180, "idle_gpu_held's one-run look first in a round past "
         "[idle].host_after, the GPU idle", every=1.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + json.dumps(
             state.get("idle", {}).get("answer"))[:2000] + "\n" + daemon.log_tail())
    assert state["stops"] == [], state["stops"]
    rec = held(state["recs"], name)
    assert rec.action["kind"] == "copy_commands", rec.action
    idle = state["idle"]
    assert idle["answer"]["active"] is True, idle["answer"]
    assert any("one run seen" in e for e in idle["proc"]["evidence"]), idle["proc"]
    assert daemon.stop() == 0, daemon.log_tail()


def test_a_process_running_before_mlcostd_started_is_looked_at_first_then_stopped(
        mlcostd, tmp_path):
    """A scorer whose model has been loaded since before mlcostd started, its last run unseen,
    asleep until its next: the window shows it idle since mlcostd's first tick, and it was
    offered the SIGTERM after [idle].gpu_held_after, its host the stop. Now it gets the look
    first ("seen only since mlcostd started at ...; it ran ... before that unseen"), its host is
    not stopped and GET /v1/idle answers active, until mlcostd has watched it idle for
    [idle].longest_period (40 s here): a job hung before mlcostd started then gets the SIGTERM.
    No SIGTERM in any round before that."""
    longest_s = 40.0
    config = {**PERIODIC, "idle": {**PERIODIC["idle"], "longest_period": f"{longest_s:g}s"}}
    told = tmp_path / "sim_dir"
    before = subprocess.Popen(program("running_before_mlcostd.py", "--dir-file", str(told)))
    try:
        started = psutil.Process(before.pid).create_time()
        # older than mlcostd's start by more than STARTED_BEFORE_MIN_S (2 s) once mlcostd starts
        poll(lambda: time.time() - started > 5.0, 30, "the process is 5 s old", every=0.2)
        path = scenario_file(tmp_path, [
            {"name": "tell", "command": program("tell_sim_dir.py", str(told))}])
        daemon = mlcostd("idle-host", interval=1.0, config=config,
                         args=["--simulate", str(path)])
        name = "running_before_mlcostd.py"
        state: dict[str, Any] = {"early": [], "stops": []}

        def looked_at_first_past_host_after() -> bool:
            state["recs"] = found = advice_by_program(daemon, (name,))
            rec = held(found, name)
            if rec is None:
                return False
            evidence = rec.evidence["no_sign_of_work"]
            state["early"] += [(rec.action, evidence.get("idle_watched_s"))
                               for _ in [0] if rec.action.get("kind") == "sigterm"]
            state["stops"] += [r.summary for r in found["host"] if r.rule in STOPS]
            since = gpus_idle_since(daemon)
            if "seen only since mlcostd started" not in rec.action.get("text", "") or \
                    since is None or rec.evidence["window"]["end"] < since + HOST_AFTER_S + \
                    2 * ROUND_S:
                return False
            state["idle"] = idle_answer_for(daemon, name)
            return True

        poll(looked_at_first_past_host_after, 120, "idle_gpu_held's look first for the process "
             "running before mlcostd, in a round past [idle].host_after", every=1.0,
             explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + json.dumps(
                 {n: [(r.rule, r.action) for r in rs] for n, rs in state.get("recs", {}).items()}
             )[:3000] + "\n" + daemon.log_tail())
        assert state["early"] == [] and state["stops"] == [], state
        rec = held(state["recs"], name)
        assert rec.action["kind"] == "copy_commands", rec.action
        assert "before that unseen" in rec.action["text"], rec.action["text"]
        assert rec.evidence["no_sign_of_work"]["unseen_s"] >= 5.0, rec.evidence
        idle = state["idle"]
        assert idle["answer"]["active"] is True, idle["answer"]
        assert any("held its GPU before mlcostd started" in e
                   for e in idle["proc"]["evidence"]), idle["proc"]

        def stopped() -> bool:
            state["recs"] = found = advice_by_program(daemon, (name,))
            rec = held(found, name)
            return rec is not None and rec.action.get("kind") == "sigterm"

        poll(stopped, longest_s + 60, "the SIGTERM once watched idle past the longest period",
             every=1.0, explain=lambda: json.dumps(
                 {n: [(r.rule, r.action) for r in rs] for n, rs in state["recs"].items()})[:3000])
        watched = held(state["recs"], name).evidence["no_sign_of_work"]["idle_watched_s"]
        assert watched >= longest_s, watched
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        before.kill()
        before.wait()


def test_a_periodic_job_asleep_through_a_restart_keeps_its_run_from_the_store(tmp_path):
    """A scorer ran 5 s of kernels under one mlcostd, then slept; mlcostd restarted during its
    sleep (an upgrade) on the same store. The new run's window showed no run and offered it the
    SIGTERM, its host the stop. The new run takes over the store's record of the same pid and
    start time: the look first says the run it saw before the restart ("ran 4 s of kernels (its
    run last seen at ..."), watched since the first run's reading; no SIGTERM, no host stop."""
    told = tmp_path / "sim_dir"
    name = "running_before_mlcostd.py"
    scorer = subprocess.Popen(program(name, "--dir-file", str(told), "--run-s", "5"))
    path = scenario_file(tmp_path, [
        {"name": "tell", "command": program("tell_sim_dir.py", str(told))}])
    folder = tmp_path / "mlcostd"
    started: list[Any] = []
    try:
        first = livedaemon.start(folder, str(path), interval=1.0, config=PERIODIC)
        started.append(first)
        state: dict[str, Any] = {}

        def run_seen() -> bool:
            state["recs"] = found = advice_by_program(first, (name,))
            rec = held(found, name)
            return rec is not None and "one run seen" in rec.action.get("text", "")

        poll(run_seen, 120, "the first run's look first (its run seen)", every=1.0,
             explain=lambda: json.dumps(rules(state.get("recs", {}))) + first.log_tail())
        first_reading = held(state["recs"], name).evidence["no_sign_of_work"].get(
            "watched_since")
        assert first.stop() == 0, first.log_tail()
        told.unlink()
        pathlib.Path(f"{told}.attached").unlink()
        restart = time.time()
        second = livedaemon.start(folder, str(path), interval=1.0, config=PERIODIC, wait=False)
        started.append(second)
        poll(told.exists, 60, "the restarted mlcostd's simulated host", every=0.2)
        scorer.send_signal(signal.SIGUSR1)  # it goes on holding its GPU on the new host
        poll(second.healthy, 60, "the restarted mlcostd healthy", every=0.5)
        state["stops"] = []

        def advised_after_restart() -> bool:
            state["recs"] = found = advice_by_program(second, (name,))
            rec = held(found, name)
            if rec is not None and rec.action.get("kind") == "sigterm":
                state["stops"].append(rec.action)
            state["stops"] += [r.summary for r in found["host"] if r.rule in STOPS]
            since = gpus_idle_since(second)
            return (rec is not None and "one run seen" in rec.action.get("text", "")
                    and since is not None
                    and rec.evidence["window"]["end"] >= since + HOST_AFTER_S + 2 * ROUND_S)

        poll(advised_after_restart, 120, "the restarted run's look first, past host_after",
             every=1.0, explain=lambda: json.dumps(
                 {n: [(r.rule, r.action) for r in rs] for n, rs in state["recs"].items()}
             )[:3000] + second.log_tail())
        assert state["stops"] == [], state["stops"]
        rec = held(state["recs"], name)
        assert "(its run last seen at" in rec.action["text"], rec.action["text"]
        evidence = rec.evidence["no_sign_of_work"]
        assert evidence["kernel_s_seen"] >= 2.0 and evidence["kernel_s_before_idle"] == 0, evidence
        # (the store's first reading of it; the window's first tick of it stands for the ticks
        # of its 5 s step, the store's for its own)
        assert first_reading is not None and abs(
            evidence["watched_since"] - first_reading) <= 6.0, (evidence, first_reading)
        assert evidence["watched_since"] < restart, evidence
        assert second.stop() == 0, second.log_tail()
    finally:
        for daemon in started:
            if daemon.returncode is None:
                daemon.stop(check_tree=False)
        scorer.kill()
        scorer.wait()
