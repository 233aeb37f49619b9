"""A GPU process stopped with SIGSTOP (Ctrl-Z), under a real mlcostd: its phase says it is
stopped, and it gets idle_gpu_held, whose SIGTERM (applied) ends it.

Right after the stop its GPU's tick still read busy and its one repeating line read as a host
sync: 2% of sync was a sign of work, so the held GPU got no advice at all; the rest read
"waiting with its GPU idle and no I/O". And a SIGTERM alone stays pending in a stopped
process: the action sends SIGCONT after it (daemon.api.actions).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psutil
from simhost import poll
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, advice_by_program, rules

from daemon.analysis.phases import STOPPED

WORKLOADS = Path(__file__).parent / "workloads"


def test_a_stopped_loop_reads_stopped_and_its_sigterm_ends_it(mlcostd, tmp_path):
    path = scenario_file(tmp_path, [{"name": "stopped", "command": [
        sys.executable, str(WORKLOADS / "stopped_loop.py"), "--steps", "3"]}])
    daemon = mlcostd("idle-host", interval=1.0, args=["--simulate", str(path)],
                     config={**QUICK, "api": {"allow_actions": True}})
    names = ("stopped_loop",)
    state: dict[str, Any] = {}

    def held() -> Any:
        state["recs"] = found = advice_by_program(daemon, names)
        return next((r for r in found["stopped_loop"] if r.rule == "idle_gpu_held"), None)

    rec = poll(held, 150, "idle_gpu_held for the stopped loop", every=2.0,
               explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n"
               + daemon.log_tail())
    waiting = rec.evidence["no_sign_of_work"]["waiting_in"][0]
    assert waiting["reason"].startswith(STOPPED), waiting
    assert waiting["file"].endswith("stopped_loop.py"), waiting
    assert rec.action["kind"] == "sigterm", rec.action
    pid = rec.action["pid"]
    assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    dry = daemon.call("apply", rec.id, True)
    assert f"SIGTERM to pid {pid} and SIGCONT" in dry.message, dry
    done = daemon.call("apply", rec.id, False)
    assert done.done and "SIGCONT" in done.message, done
    proc = psutil.Process(pid)
    poll(lambda: not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE, 30,
         f"pid {pid} ended by the SIGTERM")
    assert daemon.stop() == 0, daemon.log_tail()
