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


def test_a_worker_that_reopens_its_fifo_waits_in_the_open_for_its_next_batch(mlcostd, tmp_path):
    """Probe 132 L2: a worker opens its job FIFO again after each batch (`while True: with
    open(fifo) as batch: for line in batch:`) and waits in the open until its scheduler writes
    the next batch. Its open read as data wait ("reading a file or socket") and got
    dataloader_starvation's "prefetch its input in parallel". It did its batch and is a queue
    consumer between batches: idle_server's advice at its open, naming the FIFO; no prefetch
    advice, no idle_gpu_held, no SIGTERM."""
    fifo = tmp_path / "jobs.fifo"
    os.mkfifo(fifo)
    name = "fifo_job_worker"
    path = scenario_file(tmp_path, [
        {"name": "fifo", "command": program("fifo_job_worker.py", "--fifo", str(fifo),
                                            "--reopen")}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])

    def worker_opened() -> int | None:  # the scheduler's end, once the worker's open waits
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            return None

    writer = poll(worker_opened, 60, "the worker's open of its FIFO", every=0.5)
    with os.fdopen(writer, "w") as batch:  # its one batch, then the scheduler closes its end
        batch.write(json.dumps({"id": 0, "audio": "x" * 4000}) + "\n")
    state: dict[str, Any] = {}

    def advised_as_consumer() -> bool:
        state["recs"] = found = advice_by_program(daemon, (name,))
        return any(r.rule == "idle_server" and r.evidence.get("waits_for_jobs")
                   for r in found[name])

    poll(advised_as_consumer, 240, "idle_server advice for the worker waiting in its open",
         every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + json.dumps(
             {n: [(r.rule, r.summary) for r in rs] for n, rs in state.get("recs", {}).items()})
         + "\n" + daemon.log_tail())
    found = state["recs"]
    assert not {r.rule for r in found[name]} & {*STOPS, "dataloader_starvation"}, rules(found)
    assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
    [rec] = [r for r in found[name] if r.rule == "idle_server"]
    waits = rec.evidence["waits_for_jobs"]
    assert f"{name}.py" in waits["file"], waits
    assert waits["reason"].startswith("waiting for its next job on a named pipe (FIFO) nothing "
                                      "came to (`with open(args.fifo) as batch"), waits
    assert daemon.stop() == 0, daemon.log_tail()


def test_a_fifo_opened_through_pathlib_or_os_is_waited_on_as_the_builtin_open_is(
        mlcostd, tmp_path):
    """The same worker reopening its FIFO through `Path(fifo).open()`, `os.open(fifo, ...)` or
    `Path(fifo).read_text()`: /proc says each waits in the FIFO's open (wchan wait_for_partner)
    as the builtin open() does, whatever Python call made it. The pathlib ones, whose stacks
    hold pathlib's frames below the user's line, read as a blocked main thread and were offered
    idle_gpu_held's SIGTERM; now each is a queue consumer between batches (idle_server at its
    own line), never a SIGTERM, a stop or prefetch advice."""
    hows = {"pathlib": "with Path(args.fifo).open() as batch",
            "os": "fd = os.open(args.fifo, os.O_RDONLY)",
            "read_text": "batch = Path(args.fifo).read_text()"}
    fifos = {how: tmp_path / f"{how}.fifo" for how in hows}
    for fifo in fifos.values():
        os.mkfifo(fifo)
    names = tuple(f"--open-with {how}" for how in hows)
    path = scenario_file(tmp_path, [
        {"name": how, "command": program("fifo_job_worker.py", "--fifo", str(fifo), "--reopen",
                                         "--open-with", how)} for how, fifo in fifos.items()])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])

    def worker_opened(fifo: Path) -> int | None:  # the scheduler's end, once the open waits
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            return None

    for how, fifo in fifos.items():
        writer = poll(lambda fifo=fifo: worker_opened(fifo), 60, f"the {how} worker's open",
                      every=0.5)
        with os.fdopen(writer, "w") as batch:  # its one batch, then the scheduler closes it
            batch.write(json.dumps({"id": 0, "audio": "x" * 4000}) + "\n")
    state: dict[str, Any] = {"stops": []}

    def all_advised_as_consumers() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        state["stops"] += [(n, r.rule, r.action) for n in names for r in found[n]
                           if r.rule in STOPS or (r.action or {}).get("kind") == "sigterm"]
        return all(any(r.rule == "idle_server" and r.evidence.get("waits_for_jobs")
                       for r in found[name]) for name in names)

    poll(all_advised_as_consumers, 240, "idle_server advice for the three workers waiting in "
         "their opens", every=2.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + json.dumps(
             {n: [(r.rule, r.summary, (r.evidence.get("no_sign_of_work") or {}).get(
                 "waiting_in")) for r in rs] for n, rs in state.get("recs", {}).items()})
         + "\n" + daemon.log_tail())
    assert state["stops"] == [], state["stops"]
    found = state["recs"]
    for how, line in hows.items():
        name = f"--open-with {how}"
        assert not {r.rule for r in found[name]} & {*STOPS, "dataloader_starvation"}, rules(found)
        [rec] = [r for r in found[name] if r.rule == "idle_server"]
        waits = rec.evidence["waits_for_jobs"]
        assert "fifo_job_worker.py" in waits["file"], waits
        assert waits["reason"].startswith("waiting for its next job on a named pipe (FIFO) "
                                          f"nothing came to (`{line}"), waits
    assert daemon.stop() == 0, daemon.log_tail()
