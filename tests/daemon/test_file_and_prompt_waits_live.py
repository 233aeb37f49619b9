"""A job waiting for a file another process writes, and a script asking its person at input()
in a terminal, under a real mlcostd with a real py-spy (probe 152 H2 and M1).

workloads/waits_for_marker.py puts its model on the GPU and sleeps in
`while not os.path.exists(marker): time.sleep(5)` until a preprocessing job's done-marker
appears; workloads/asks_in_terminal.py runs a script on a pseudo-terminal that waits at
`input("... Start the 12 h fine-tune now? [y/N] ")`. Both read as plain sleeps: idle_gpu_held
offered the SIGTERM, and `mlcostd idle` answered idle (a host stop killed the preprocessing
job the trainer waited for). Now: the file wait and the prompt are looked at first, never the
SIGTERM, the host is not offered its stop, and GET /v1/idle answers active for each.
"""

from __future__ import annotations

from pathlib import Path

from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_parent_and_reader_waits_live import held, idle_answer_for, past_host_after
from test_work_waits_live import QUICK, STOPS, program, rules

from daemon.analysis.stack_rules import FILE_WAIT, PROMPT_WAIT, SCRIPT_PROMPT


def test_a_wait_for_a_done_marker_and_an_input_prompt_keep_their_host(mlcostd, tmp_path):
    marker = Path(tmp_path) / "prep" / "_SUCCESS"  # the preprocessing job has not written it
    names = ("waits_for_marker.py", "asks_in_terminal.py")
    path = scenario_file(tmp_path, [
        {"name": "trainer", "command": program("waits_for_marker.py", "--marker", str(marker))},
        {"name": "terminal", "command": program("asks_in_terminal.py")}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])

    def looked_at_first(found, name):
        rec = held(found, name)
        waiting = rec.evidence["no_sign_of_work"]["waiting_in"] if rec is not None else []
        return rec if waiting and waiting[0]["reason"].startswith((FILE_WAIT, PROMPT_WAIT)) \
            else None

    found = past_host_after(daemon, names, looked_at_first,
                            "idle_gpu_held's look first for the trainer and the prompt")
    assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
    trainer, prompt = (held(found, name) for name in names)
    assert trainer.action["kind"] == "copy_commands", trainer.action
    assert "until a file appears" in trainer.action["text"], trainer.action
    waiting = trainer.evidence["no_sign_of_work"]["waiting_in"][0]
    assert waiting["reason"].startswith(FILE_WAIT), waiting
    assert "os.path.exists(args.marker)" in waiting["reason"], waiting
    assert prompt.action["kind"] == "copy_commands", prompt.action
    assert "input() prompt of its script" in prompt.action["text"], prompt.action
    waiting = prompt.evidence["no_sign_of_work"]["waiting_in"][0]
    assert waiting["reason"].startswith(f"{PROMPT_WAIT}: {SCRIPT_PROMPT}"), waiting
    assert "Start the 12 h fine-tune" in waiting["reason"], waiting
    for name in names:
        assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"], rules(
            found)
    for name, said in ((names[0], "until a file appears"), (names[1], "input() prompt")):
        idle = idle_answer_for(daemon, name)
        assert idle["answer"]["active"] is True, idle["answer"]
        assert any(said in e for e in idle["proc"]["evidence"]), idle["proc"]
    assert daemon.stop() == 0, daemon.log_tail()
