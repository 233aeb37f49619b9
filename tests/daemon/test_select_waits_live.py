"""A GPU worker that waits on its job server's socket with select() and a timeout, under a real
mlcostd: never the SIGTERM, its advice says to look at what it is connected to.

tests/daemon/workloads/select_job_worker.py, written as its users would write it: select() on
the socket with a 1 s timeout (its main thread wakes every second, so it never "slept through a
tick" as a worker blocked in recv does), a job from job_server.py at once and then every 60 s.
Between its first and second job it read idle ("sleeping or waiting: `select.select(...)`"),
one run of kernels in the window, and got idle_gpu_held's SIGTERM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from simhost import poll
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, STOPS, advice_by_program, rules

from daemon.analysis.stack_rules import FD_WAIT

WORKLOADS = Path(__file__).parent / "workloads"


def program(name: str, *args: str) -> list[str]:
    return [sys.executable, str(WORKLOADS / name), *args]


def test_a_worker_selecting_on_its_job_servers_socket_is_looked_at_not_stopped(
        mlcostd, tmp_path):
    server = subprocess.Popen(program("job_server.py", "60"), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        path = scenario_file(tmp_path, [{"name": "select", "command": program(
            "select_job_worker.py", "--server", f"127.0.0.1:{port}")}])
        daemon = mlcostd("idle-host", interval=1.0, config=QUICK,
                         args=["--simulate", str(path)])
        names = ("select_job_worker",)
        state: dict[str, Any] = {}

        def held() -> Any:
            state["recs"] = found = advice_by_program(daemon, names)
            return next((r for r in found["select_job_worker"] if r.rule == "idle_gpu_held"),
                        None)

        rec = poll(held, 150, "idle_gpu_held for the select worker", every=2.0,
                   explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n"
                   + daemon.log_tail())
        found = state["recs"]
        assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
        assert rec.action["kind"] == "copy_commands", rec.action
        assert "TCP connection it opened" in rec.action["text"], rec.action
        assert "select_job_worker.py:" in rec.action["text"], rec.action
        assert not any("kill" in c for c in rec.action["commands"]), rec.action
        waiting = rec.evidence["no_sign_of_work"]["waiting_in"][0]
        assert waiting["reason"].startswith(FD_WAIT), waiting
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        server.kill()
        server.wait()
