"""GPU workers that take their jobs from a pipe, under a real mlcostd: queue consumers, never
the SIGTERM, and no host-sync advice.

Programs in tests/daemon/workloads written as their users would write them: a worker reading
job lines from a named pipe its scheduler writes (`for line in jobs:`) and one whose parent
writes jobs to its stdin (`sys.stdin.readline()`), a job every 30 s. Their reads are C: no
Python frame below the line. The FIFO's read `idle` ("waiting with its GPU idle and no I/O")
and earned idle_gpu_held's SIGTERM; in the dumps right after a job, with its GPU's tick still
busy, the same line repeated and read as a host sync, which earned host_sync's patch on its
`for` line. The stdin worker's read was data wait ("reading a file or socket").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from simhost import poll
from test_broker_waits_live import consumers_are_batch_inference
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, STOPS, advice_by_program, rules

WORKLOADS = Path(__file__).parent / "workloads"


def program(name: str, *args: str) -> list[str]:
    return [sys.executable, str(WORKLOADS / name), *args]


def test_workers_reading_jobs_from_a_pipe_are_queue_consumers_not_idle_nor_syncing(
        mlcostd, tmp_path):
    """Both get idle_server's advice as queue consumers, naming the pipe and their line, and no
    idle_gpu_held, SIGTERM, host_sync or dataloader_starvation."""
    fifo = tmp_path / "jobs.fifo"
    os.mkfifo(fifo)
    scheduler = subprocess.Popen(program("fifo_scheduler.py", str(fifo), "30"))
    try:
        path = scenario_file(tmp_path, [
            {"name": "fifo", "command": program("fifo_job_worker.py", "--fifo", str(fifo))},
            {"name": "stdin", "command": program("stdin_job_worker.py", "--parent",
                                                 "--every", "30")}])
        daemon = mlcostd("idle-host", interval=1.0, config=QUICK,
                         args=["--simulate", str(path)])
        names = ("fifo_job_worker", "stdin_job_worker")
        state: dict[str, Any] = {}

        def both_advised_as_consumers() -> bool:
            state["recs"] = found = advice_by_program(daemon, names)
            return all(any(r.rule == "idle_server" and r.evidence.get("waits_for_jobs")
                           for r in found[name]) for name in names)

        poll(both_advised_as_consumers, 240, "idle_server advice for both pipe workers",
             every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
             + "\n" + daemon.log_tail())
        found = state["recs"]
        for name, pipe, line in (("fifo_job_worker", "a named pipe (FIFO)", "for line in jobs"),
                                 ("stdin_job_worker", "a pipe", "line = sys.stdin.readline()")):
            assert not {r.rule for r in found[name]} & {
                *STOPS, "host_sync", "dataloader_starvation"}, rules(found)
            assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
            [rec] = [r for r in found[name] if r.rule == "idle_server"]
            waits = rec.evidence["waits_for_jobs"]
            assert f"{name}.py" in waits["file"], waits
            assert waits["reason"].startswith(f"waiting for its next job on {pipe} nothing "
                                              f"came to (`{line}"), waits
            assert rec.action["kind"] == "advice" and "queue" in rec.action["text"]
        consumers_are_batch_inference(daemon, names)
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        scheduler.kill()
        scheduler.wait()
