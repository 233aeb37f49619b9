"""A Python prompt left open in a terminal, holding a GPU, under a real mlcostd (probe 143 F4).

Someone opened `python3` in a terminal, attached the GPU, ran one pass and left the prompt open
(workloads/repl_in_terminal.py: the terminal is a pseudo-terminal of the test's own). The
interpreter reads its next line in C: py-spy shows its main thread idle with no Python frame.
It read `unknown` 0.99, and idle_gpu_held said "no stack sampled to confirm it is waiting".
Its kind (an interactive prompt, stdin a terminal) says what a frameless main thread is doing:
waiting at its prompt (idle), and idle_gpu_held looks first (ask its user to close it when
done), never the SIGTERM that loses what the user loaded.
"""

from __future__ import annotations

import json
from typing import Any

from simhost import poll
from test_corpus import largest, pytestmark, scenario_file  # noqa: F401
from test_peer_ranks_live import balances_by_pid
from test_work_waits_live import QUICK, program

from daemon.analysis.stack_rules import PROMPT_WAIT


def test_a_python_prompt_left_open_in_a_terminal_waits_at_its_prompt(mlcostd, tmp_path):
    path = scenario_file(tmp_path, [{"name": "terminal",
                                     "command": program("repl_in_terminal.py")}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def advised() -> Any:
        procs = [p for p in daemon.now()["processes"] if p.get("gpus")]
        state["procs"] = procs
        if len(procs) != 1:
            return None
        state["phases"] = balances_by_pid(daemon.db).get(procs[0]["pid"]) or {}
        state["recs"] = recs = [r for r in daemon.call("recommendations") if procs[0]["key"] in (
            r.target, r.evidence.get("process", {}).get("id"))]
        held = next((r for r in recs if r.rule == "idle_gpu_held"), None)
        return held if held is not None and largest(state["phases"]) == "idle" else None

    rec = poll(advised, 180, "idle_gpu_held for the prompt, its phase idle", every=2.0,
               explain=lambda: json.dumps({
                   "procs": [(p["command"], p.get("kind"), p.get("kind_evidence"))
                             for p in state.get("procs", [])],
                   "phases": {k: (v.get("share"), [s.get("reason") for s in
                                                   v.get("top_stacks") or []][:2])
                              for k, v in state.get("phases", {}).items()},
                   "recs": [(r.rule, r.action) for r in state.get("recs", [])]})
               + "\n" + daemon.log_tail())
    [repl] = state["procs"]
    assert repl["kind"] == "notebook", repl
    top = state["phases"]["idle"]["top_stacks"][0]
    assert top["reason"].startswith(f"{PROMPT_WAIT}: an interpreter in a terminal"), top
    assert state["phases"]["idle"]["share"] >= 0.5, state["phases"]
    assert "no stack sampled" not in rec.summary, rec.summary
    assert rec.action["kind"] == "copy_commands", rec.action
    assert "interactive Python prompt" in rec.action["text"], rec.action
    assert "close it when done" in rec.action["text"], rec.action
    assert not [r for r in state["recs"] if (r.action or {}).get("kind") == "sigterm"]
    waiting = rec.evidence["no_sign_of_work"]["waiting_in"][0]
    assert waiting["reason"].startswith(PROMPT_WAIT), waiting
    assert daemon.stop() == 0, daemon.log_tail()
