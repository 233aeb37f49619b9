"""Processes whose GPUs wait for an external tool they started, under a real mlcostd: never the
SIGTERM, never "stop the host", and the advice says to look at the child first.

Programs in tests/daemon/workloads written as their users would write them: a clip tagger that
re-encodes each clip with an encoder process (subprocess.run with captured output: its main
thread waits in a select inside subprocess) and a shard scorer that fetches each shard with a
download tool (subprocess.check_call: it waits in waitpid), each with a short GPU step between.
Their main threads read `idle` ("waiting in a subprocess", nothing else), so the one whose
window held a single GPU run was offered idle_gpu_held's SIGTERM, and with both GPUs idle the
host was offered its stop, which stops both tools mid-way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from simhost import poll
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import (
    HOST_AFTER_S,
    QUICK,
    ROUND_S,
    STOPS,
    advice_by_program,
    gpus_idle_since,
    rules,
)

from daemon.analysis.stack_rules import CHILD_WAIT

WORKLOADS = Path(__file__).parent / "workloads"


def program(name: str, *args: str) -> list[str]:
    return [sys.executable, str(WORKLOADS / name), *args]


def test_jobs_waiting_for_their_encoder_or_download_tool_are_never_stopped(mlcostd, tmp_path):
    """Both get idle_gpu_held with the look-at-the-child action (no SIGTERM, no kill command),
    their reason names the child wait (and the encoder's child at work on a CPU), and the host,
    every GPU of it idle past [idle].host_after, is not offered its stop: also in a round of the
    rules past it."""
    path = scenario_file(tmp_path, [
        {"name": "encode", "command": program("encode_then_infer.py", "--encode-s", "300")},
        {"name": "fetch", "command": program("fetch_then_infer.py", "--fetch-s", "300")}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    names = ("encode_then_infer", "fetch_then_infer")
    state: dict[str, Any] = {}

    def held_past_host_after() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        held = [r for name in names for r in found[name] if r.rule == "idle_gpu_held"]
        since = gpus_idle_since(daemon)
        return len(held) == len(names) and since is not None and all(
            r.evidence["window"]["end"] >= since + HOST_AFTER_S + 2 * ROUND_S
            for r in held)

    poll(held_past_host_after, 150,
         f"idle_gpu_held for both of {names}, in a round past [idle].host_after",
         every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
         + "\n" + daemon.log_tail())
    found = state["recs"]
    assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
    for name in names:
        [held] = [r for r in found[name] if r.rule == "idle_gpu_held"]
        assert held.action["kind"] == "copy_commands", held.action
        assert "waits for a child process it started" in held.action["text"], held.action
        assert f"{name}.py:" in held.action["text"], held.action
        assert "subprocess.Popen ahead of the step" in held.action["text"], held.action
        assert not any("kill" in c for c in held.action["commands"]), held.action
        waiting = held.evidence["no_sign_of_work"]["waiting_in"][0]
        assert waiting["reason"].startswith(CHILD_WAIT), waiting
        assert waiting["function"] in ("reencode", "fetch"), waiting
    encoder = found["encode_then_infer"][0].evidence["no_sign_of_work"]["waiting_in"][0]
    assert "its child processes run on a CPU" in encoder["reason"], encoder
    # /v1/idle, which autostop tools read, says active for the same reason
    answer = daemon.call("idle")
    assert answer["active"] is True, answer
    assert daemon.stop() == 0, daemon.log_tail()
