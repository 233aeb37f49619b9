"""GPU workers that wait for files in an inbox folder the ways their authors write them, under a
real mlcostd with a real py-spy: watched with inotify (read directly, or through the selectors
module), with the watchdog library, or polled by an asyncio coroutine between
`await asyncio.sleep(1)`s. None is offered a SIGTERM while it watches; asyncio jobs that stall
beside them still are, where nothing wakes them.

Programs in tests/daemon/workloads, written without mlcost in mind:
- inotify_inbox_worker.py blocks reading its inotify descriptor (ctypes) between files: it read
  "reading" (data wait) and got dataloader_starvation's prefetch patch; with `--selector` it
  waits in selectors.select on the descriptor and got idle_gpu_held's SIGTERM ("waiting in
  select").
- watchdog_inbox_worker.py runs its handler in watchdog's observer thread while its main thread
  joins the observer (watchdog's documented loop): "waiting in Thread.join", and the SIGTERM.
- aio_inbox_worker.py lists its inbox in a thread (asyncio.to_thread, os.scandir), runs each
  file in a thread, and awaits asyncio.sleep(1): its stacks show the event loop alone, as a
  stalled asyncio job's, and it got the SIGTERM after its files, or with none.
- aio_stalled_job.py runs three steps, then awaits an Event nothing sets (no timer: the
  SIGTERM stays), or with `--poll 1` looks for a resume file nobody writes every second (a timer
  wakes it as one wakes the poller: mlcostd cannot tell them apart, and looks first).
"""

from __future__ import annotations

import json
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
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, STOPS, advice_by_program, program, rules

from daemon.analysis.stack_rules import TIMER_WAIT


def folders(tmp_path: Path, names: tuple[str, ...]) -> dict[str, tuple[Path, Path]]:
    """An inbox and an outbox for each of `names`, and a staging folder under "staging"."""
    made = {name: (tmp_path / f"{name}-in", tmp_path / f"{name}-out") for name in names}
    made["staging"] = (tmp_path / "staging", tmp_path / "staging")
    for inbox, outbox in made.values():
        inbox.mkdir(exist_ok=True)
        outbox.mkdir(exist_ok=True)
    return made


def uploader(boxes: dict[str, tuple[Path, Path]], fed: dict[str, str]):
    """An uploader's file n for each fed worker (name -> suffix), written aside and renamed
    into its inbox (a worker never sees half a file)."""
    def drop(n: int) -> None:
        for name, suffix in fed.items():
            aside = boxes["staging"][0] / f"{name}-{n}{suffix}"
            aside.write_bytes(b"\x00" * 64)
            aside.rename(boxes[name][0] / f"{n}{suffix}")
    return drop


def stopped_offers(found: dict[str, list[Any]], names: tuple[str, ...],
                   stops: frozenset[str] | set[str] = STOPS) -> dict[str, list[str]]:
    """What would stop each of `names`: a SIGTERM action, or one of the rules `stops`."""
    return {name: [f"{r.rule}:{(r.action or {}).get('kind')}" for r in found[name]
                   if (r.action or {}).get("kind") == "sigterm" or r.rule in stops]
            for name in names}


def watched(command: list[str], boxes: dict[str, tuple[Path, Path]], name: str,
            *args: str) -> dict[str, Any]:
    inbox, outbox = boxes[name]
    return {"name": name, "command": program(*command, "--inbox", str(inbox), "--outbox",
                                             str(outbox), *args)}


def test_workers_watching_a_folder_with_inotify_or_watchdog_wait_for_their_next_file(
        mlcostd, tmp_path):
    """Three workers watch their inbox folders: one blocked reading its inotify descriptor and
    one on watchdog's observer, each fed a file every JOB_EVERY_S, and one in selectors.select
    on its inotify descriptor whose inbox stays empty. Each gets idle_server's consumer advice
    ("from a folder it watches"), never a SIGTERM, idle_gpu_held, host_idle or prefetch advice,
    at any round of the rules while they watch; each is batch_inference; the fed ones did their
    files."""
    names = ("inotify-fed", "watchdog-fed", "selector-empty")
    boxes = folders(tmp_path, names)
    path = scenario_file(tmp_path, [
        watched(["inotify_inbox_worker.py"], boxes, "inotify-fed"),
        watched(["watchdog_inbox_worker.py"], boxes, "watchdog-fed"),
        watched(["inotify_inbox_worker.py"], boxes, "selector-empty", "--selector")])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {"stops": {}}

    def consumers_advised() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        for name, offers in stopped_offers(found, names).items():
            if offers:
                state["stops"].setdefault(name, offers)
        state["done"] = {n: len(list(boxes[n][1].glob("*.json"))) for n in names[:2]}
        return (bool(state["stops"]) or min(state["done"].values()) >= 2
                and all(consumer_advice(found, n) for n in names))

    with feeding(uploader(boxes, {"inotify-fed": ".png", "watchdog-fed": ".jpg"}), "uploader"):
        poll(consumers_advised, 240,
             "idle_server's consumer advice for the three folder watchers (the fed ones with 2 "
             "files done), or an offer to stop one", every=2.0,
             explain=lambda: json.dumps(rules(state.get("recs", {})))
             + f"\nfiles done: {state.get('done')}\n" + daemon.log_tail())
    assert not state["stops"], state["stops"]
    found = state["recs"]
    for name in names:
        check_consumer(found, name, "from a folder it watches")
    assert "inotify" in consumer_advice(found, "inotify-fed").evidence["waits_for_jobs"]["reason"]
    assert "inotify" in consumer_advice(found, "selector-empty").evidence[
        "waits_for_jobs"]["reason"]
    assert "watchdog" in consumer_advice(found, "watchdog-fed").evidence[
        "waits_for_jobs"]["reason"]
    consumers_are_batch_inference(daemon, names)
    assert daemon.stop() == 0, daemon.log_tail()


def test_an_asyncio_inbox_poller_is_looked_at_first_and_a_stalled_asyncio_job_is_stopped(
        mlcostd, tmp_path):
    """Two asyncio workers poll their inboxes between `await asyncio.sleep(1)`s, one fed a file
    every JOB_EVERY_S, one whose inbox stays empty: neither is offered a SIGTERM (nor host_idle)
    at any round of the rules while they watch, and the empty one's idle_gpu_held says to look
    at what it awaits first (TIMER_WAIT: a timer wakes its loop within a minute). Beside them
    an asyncio job that awaits an Event nothing sets (its loop has no timer) still gets the
    SIGTERM, and one that looks for a resume file every second (a timer wakes it too) the same
    look first as the empty poller."""
    names = ("aio-fed", "aio-empty")
    boxes = folders(tmp_path, names)
    path = scenario_file(tmp_path, [
        watched(["aio_inbox_worker.py"], boxes, "aio-fed"),
        watched(["aio_inbox_worker.py"], boxes, "aio-empty"),
        {"name": "stalled", "command": program("aio_stalled_job.py", "--step-ms", "200")},
        {"name": "heartbeat", "command": program("aio_stalled_job.py", "--poll", "1", "--resume",
                                                 str(tmp_path / "resume-file"))}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    programs = (*names, "aio_stalled_job.py --step-ms", "--poll")
    state: dict[str, Any] = {"stops": {}}

    def looked_at(found: dict[str, list[Any]], name: str) -> Any | None:
        return next((r for r in found[name] if r.rule == "idle_gpu_held"
                     and (r.action or {}).get("kind") == "copy_commands"
                     and "asyncio event loop" in r.action["text"]), None)

    def settled() -> bool:
        state["recs"] = found = advice_by_program(daemon, programs)
        # idle_gpu_held is the poller's advice (look first): only a SIGTERM would stop it
        for name, offers in stopped_offers(found, programs[:2], {"host_idle"}).items():
            if offers:
                state["stops"].setdefault(name, offers)
        state["done"] = len(list(boxes["aio-fed"][1].glob("*.json")))
        return (bool(state["stops"]) or state["done"] >= 2
                and looked_at(found, "aio-empty") is not None
                and looked_at(found, "--poll") is not None
                and sigterm_for(found, programs[2]) is not None)

    with feeding(uploader(boxes, {"aio-fed": ".wav"}), "uploader"):
        poll(settled, 240,
             "a look-first idle_gpu_held for the empty asyncio poller and the heartbeat job, "
             "the SIGTERM for the stalled job (2 files done by the fed poller), or an offer to "
             "stop a poller", every=2.0,
             explain=lambda: json.dumps(rules(state.get("recs", {})))
             + f"\nfiles done: {state.get('done')}\n" + daemon.log_tail())
    assert not state["stops"], state["stops"]
    found = state["recs"]
    for name in ("aio-empty", "--poll"):
        waiting = looked_at(found, name).evidence["no_sign_of_work"]["waiting_in"]
        assert waiting and waiting[0]["reason"].startswith(TIMER_WAIT), waiting
    stalled = sigterm_for(found, programs[2])
    waiting = stalled.evidence["no_sign_of_work"]["waiting_in"]
    assert waiting and not waiting[0]["reason"].startswith(TIMER_WAIT), waiting
    assert daemon.stop() == 0, daemon.log_tail()
