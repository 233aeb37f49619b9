"""GPU workers that watch an inbox folder for their jobs, under a real mlcostd with a real
py-spy: a worker between files is waiting for its next file, never an idle process to stop; a
job that waits for a go-file (the corpus's await_trigger.py) beside them is no consumer either:
it waits for a file another process writes, looked at first (probe 152 H2).

tests/daemon/workloads/watch_folder_worker.py, written as its users would write it: it lists
its inbox every 2 s (`for name in sorted(os.listdir(inbox))`), runs each file on the GPU and
moves it out, and sleeps in its loop between looks. Its stacks show the sleep's line alone, and
it read "sleeping or waiting": after a file, idle_gpu_held offered the SIGTERM before the next.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from simhost import poll
from test_broker_polls_live import sigterm_for
from test_broker_waits_live import (
    check_consumer,
    consumer_advice,
    consumers_are_batch_inference,
    feeding,
)
from test_corpus import CORPUS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, advice_by_program, program, rules

from daemon.analysis.stack_rules import FILE_WAIT


def drop_scan(inbox: Path, staging: Path, n: int) -> None:
    """An uploader's scan n into `inbox`, written aside and renamed in (a worker never sees
    half a file)."""
    aside = staging / f"scan-{n}.npy"
    aside.write_bytes(b"\x93NUMPY" + bytes(64))
    aside.rename(inbox / aside.name)


def trigger_advice(found: dict[str, list[Any]]) -> Any | None:
    """await_trigger.py's idle_gpu_held with the file wait's look-first."""
    return next((r for r in found["await_trigger"] if r.rule == "idle_gpu_held"
                 and "until a file appears" in str((r.action or {}).get("text", ""))), None)


def test_workers_watching_an_inbox_folder_are_consumers_and_a_go_file_wait_is_looked_at_first(
        mlcostd, tmp_path):
    """Two workers watch their inbox folders, sleeping 2 s between looks: an uploader drops a
    scan into one every JOB_EVERY_S, the other's stays empty. Both get idle_server's consumer
    advice at their sleep, never idle_gpu_held, a SIGTERM or prefetch advice, and neither reads
    online_inference; the fed one did its files. Beside them the corpus's await_trigger.py,
    which holds its GPU until a go-file appears (`while not os.path.exists(flag)`), gets
    idle_gpu_held and no consumer advice: the look-first of a wait for a file another process
    writes (probe 152 H2: a trainer waiting so for a preprocessing job's done-marker got the
    SIGTERM, and the host's stop), never the SIGTERM."""
    folders = {name: tmp_path / name for name in ("fed-in", "fed-out", "empty-in", "empty-out",
                                                  "staging")}
    for folder in folders.values():
        folder.mkdir()
    names = ("fed-in", "empty-in", "await_trigger")
    path = scenario_file(tmp_path, [
        {"name": "fed", "command": program("watch_folder_worker.py", "--inbox",
                                           str(folders["fed-in"]), "--outbox",
                                           str(folders["fed-out"]))},
        {"name": "empty", "command": program("watch_folder_worker.py", "--inbox",
                                             str(folders["empty-in"]), "--outbox",
                                             str(folders["empty-out"]))},
        {"name": "trigger", "command": [sys.executable, str(CORPUS / "await_trigger.py")]}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def consumers_advised_and_trigger_wait_flagged() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        state["done"] = len(list(folders["fed-out"].glob("*.json")))
        return (state["done"] >= 2 and all(consumer_advice(found, n) for n in names[:2])
                and trigger_advice(found) is not None)

    with feeding(lambda n: drop_scan(folders["fed-in"], folders["staging"], n), "uploader"):
        poll(consumers_advised_and_trigger_wait_flagged, 240,
             "idle_server's consumer advice for both watch-folder workers (the fed one with 2 "
             "files done) and idle_gpu_held's file-wait look-first for await_trigger.py", every=2.0,
             explain=lambda: json.dumps(rules(state.get("recs", {})))
             + f"\nfiles done: {state.get('done')}\n" + daemon.log_tail())
    found = state["recs"]
    for name in names[:2]:
        check_consumer(found, name, "from a folder it polls")
        assert "os.listdir(args.inbox)" in consumer_advice(found, name).evidence[
            "waits_for_jobs"]["reason"]
    trigger = trigger_advice(found)
    assert trigger is not None
    assert consumer_advice(found, "await_trigger") is None, rules(found)
    assert sigterm_for(found, "await_trigger") is None, rules(found)
    assert trigger.action["kind"] == "copy_commands", trigger.action
    waiting = trigger.evidence["no_sign_of_work"]["waiting_in"]
    assert waiting and waiting[0]["reason"].startswith(FILE_WAIT), waiting
    assert "os.path.exists(flag)" in waiting[0]["reason"], waiting
    consumers_are_batch_inference(daemon, names[:2])
    assert daemon.stop() == 0, daemon.log_tail()
