"""Processes whose threads wait on locks, under a real mlcostd (probe 143 F5).

A training script whose step thread and stats-logger thread deadlock on two locks
(workloads/logger_deadlock.py), its main thread in Thread.join, read 'waiting in Thread.join'
and got idle_gpu_held's SIGTERM, nothing saying its threads wait on locks; a process whose main
thread waits on a lock itself gets a look first (whoever holds the lock decides when it goes
on). The verdict hung on which thread holds the lock wait. Now the main thread that waits for
threads that wait on locks waits on a lock too: its reason names those threads' lines and a
deadlock where no other thread of its code is left to release one, and idle_gpu_held looks
first, with py-spy's dump of the threads to find the lock order (stopping it loses the stacks
that show the bug). So does deadlocked_eval.py, whose main thread waits on a queue.Queue its
two deadlocked threads never fill.
"""

from __future__ import annotations

import json
from typing import Any

from simhost import poll
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, advice_by_program, program, rules

from daemon.analysis.stack_rules import LOCK_WAIT


def test_a_job_whose_threads_deadlock_on_locks_waits_on_a_lock_and_is_looked_at_first(
        mlcostd, tmp_path):
    names = ("logger_deadlock", "deadlocked_eval")
    path = scenario_file(tmp_path, [{"name": name, "command": program(f"{name}.py")}
                                    for name in names])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    stopped: list[Any] = []  # any SIGTERM offered to either, at any look

    def decided(rec: Any) -> bool:
        """idle_gpu_held's action once the lock decides it, or a SIGTERM (a look first for
        the compute before its threads stopped, "between batches", decides nothing)."""
        return rec is not None and (rec.action["kind"] == "sigterm"
                                    or "waits on a lock" in rec.action.get("text", ""))

    def held_both() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        stopped.extend(r for name in names for r in found[name]
                       if (r.action or {}).get("kind") == "sigterm")
        state["held"] = held = {name: next((r for r in found[name]
                                            if r.rule == "idle_gpu_held"), None)
                                for name in names}
        return all(decided(rec) for rec in held.values())

    poll(held_both, 240, "idle_gpu_held for both deadlocked jobs, decided", every=2.0,
         explain=lambda: json.dumps({n: (r.action if r else None) for n, r in
                                     state.get("held", {}).items()}) + "\n"
         + json.dumps(rules(state.get("recs", {}))) + "\n" + daemon.log_tail())
    assert not stopped, [(r.target, r.action) for r in stopped]
    for name, lines in (("logger_deadlock", ("logger_deadlock.py:31 train_steps",
                                             "logger_deadlock.py:40 log_stats")),
                        ("deadlocked_eval", ("evaluator", "saver"))):
        rec = state["held"][name]
        assert rec.action["kind"] == "copy_commands", (name, rec.action)
        assert any("py-spy dump" in c for c in rec.action["commands"]), rec.action
        [waiting, *_] = rec.evidence["no_sign_of_work"]["waiting_in"]
        reason = waiting["reason"]
        assert reason.startswith(f"{LOCK_WAIT}: its main thread waiting in "), (name, reason)
        assert "for threads that wait on locks" in reason and "deadlock?" in reason, reason
        for line in lines:
            assert line in reason, (name, line, reason)
        assert "waits on a lock" in rec.action["text"], rec.action["text"]
    assert daemon.stop() == 0, daemon.log_tail()
