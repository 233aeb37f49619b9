"""The audit trail of recommendation actions (issue 10, item 6): every apply — dry run, real
run, refusal — is in the log and in the store's events with who asked; a real run needs a dry
run first; ten concurrent real applies send one SIGTERM.

A real Daemon (its store, its analyzer, its tick) with its real API server on a unix socket;
the recommendation is injected into the analyzer's snapshot, and names a real child process
that counts the SIGTERMs it receives instead of exiting."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil
import pytest
from simhost import poll

from daemon import config as config_module
from daemon.api.audit import ActionGate, ActionRefused, peer
from daemon.api.server import ApiServer
from daemon.commands import report
from daemon.store.reader import StoreReader
from tests.daemon.scripted import recording_daemon

CONCURRENT = 10
COUNTER = """
import signal, sys, time
def counted(*_):
    with open(sys.argv[1], "a") as out:
        out.write("TERM\\n")
signal.signal(signal.SIGTERM, counted)
open(sys.argv[2], "w").write("ready")
while True:
    time.sleep(1)
"""


@pytest.fixture
def counter(tmp_path: Path):
    """A real process that writes a line per SIGTERM it receives and keeps running."""
    terms, ready = tmp_path / "terms", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", COUNTER, str(terms), str(ready)])
    poll(ready.exists, 30, "the SIGTERM counter to start")
    yield proc, terms
    proc.kill()
    proc.wait()


def sigterm_rec(proc: subprocess.Popen) -> dict:
    return {"id": "rec-stop", "rule": "idle_gpu_held", "target": f"process:{proc.pid}",
            "summary": "stop it", "savings_per_month": 100.0, "method": "m", "evidence": {},
            "action": {"kind": "sigterm", "pid": proc.pid,
                       "start_time": psutil.Process(proc.pid).create_time()}}


def run_api(tmp_path: Path, rec: dict, requests,
            allow_actions: bool = True) -> tuple[list, list[dict]]:
    """A recording daemon that lists `rec`, its API on a real socket; `requests(post)` runs
    against it (post(body) -> (status, json)). Returns what it returned and the action events
    in the store afterwards."""
    daemon = recording_daemon(tmp_path, idle_utilization=5.0, t0=time.time() - 30)  # a 600 s report
    daemon.config = config_module.with_overrides(daemon.config, "api",
                                                 allow_actions=allow_actions)
    daemon.analyzer.recommendations = lambda: [rec]  # the active ones, as the API reads them
    # The counter is not a process of the recorded sample, and the daemon drops advice about a
    # process its last sample does not show (it exited): no sample here, so the gate is tested.
    daemon.last_sample = None

    async def main():
        server = ApiServer(daemon, tmp_path / "run" / "mlcostd.sock")
        await server.start()
        connector = aiohttp.UnixConnector(path=str(server.socket_path))
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                async def post(body: dict) -> tuple[int, dict]:
                    async with session.post(f"http://x/v1/recommendations/{rec['id']}/apply",
                                            json=body) as response:
                        return response.status, await response.json()

                return await asyncio.wait_for(requests(post), 60)
        finally:
            await server.stop()

    try:
        results = asyncio.run(main())
    finally:
        daemon.store.close()
    reader = StoreReader(str(daemon.db))
    try:
        events = reader.query("SELECT target, detail FROM events WHERE kind = 'action' "
                              "ORDER BY started_at")
    finally:
        reader.close()
    return results, [dict(json.loads(e["detail"]), target=e["target"]) for e in events]


def test_the_dry_run_says_when_the_real_run_will_be_refused(tmp_path, counter):
    """With [api].allow_actions = false the dry run answered 200 "would send SIGTERM to pid
    ..." and only the real run, after the user confirmed, was refused (403). The dry run now
    says it will be (`refused`, and its text), with the reason the 403 gives; the 403 stays."""
    proc, terms = counter
    rec = sigterm_rec(proc)

    async def requests(post):
        return [await post({"dry_run": True}), await post({"dry_run": False})]

    (dry, real), _ = run_api(tmp_path, rec, requests, allow_actions=False)
    assert dry[0] == 200 and dry[1]["dry_run"] and not dry[1]["done"]
    reason = dry[1]["refused"]
    assert "[api].allow_actions = true" in reason and f"SIGTERM to pid {proc.pid}" in reason
    assert dry[1]["message"].startswith(f"would send SIGTERM to pid {proc.pid}")
    assert f"the real run will be refused (403): {reason}" in dry[1]["message"]
    assert real == (403, {"error": reason})  # the same words, as before the change
    assert not terms.exists() and proc.poll() is None

    (dry, real), _ = run_api(tmp_path / "allowed", rec, requests)  # allowed: nothing said
    assert dry[1]["refused"] is None and "refused" not in dry[1]["message"]
    assert real[0] == 200
    poll(terms.exists, 10, "the SIGTERM to arrive")


def test_ten_concurrent_applies_send_one_sigterm_and_each_is_audited(tmp_path, counter, caplog):
    proc, terms = counter
    rec = sigterm_rec(proc)

    async def requests(post):
        dry = await post({"dry_run": True})
        real = await asyncio.gather(*(post({"dry_run": False}) for _ in range(CONCURRENT)))
        return [dry, *real]

    with caplog.at_level(logging.INFO, logger="daemon.api.audit"):
        (dry, *real), events = run_api(tmp_path, rec, requests)
    assert dry[0] == 200 and dry[1]["dry_run"] and not dry[1]["done"]
    statuses = sorted(status for status, _ in real)
    assert statuses == [200] + [409] * (CONCURRENT - 1), real
    poll(terms.exists, 10, "the SIGTERM to arrive")
    assert terms.read_text() == "TERM\n"  # exactly one SIGTERM
    assert proc.poll() is None
    # The store: the dry run first, then one done and nine refused (the order of those depends
    # on when the SIGTERM's thread returns), each with who and what.
    me = f"uid {os.geteuid()}"
    assert sorted(e["outcome"] for e in events) == sorted(
        ["dry run", "done"] + ["refused"] * (CONCURRENT - 1))
    assert events[0]["outcome"] == "dry run" and events[0]["dry_run"] is True
    assert all(e["who"] == me and e["recommendation"] == "rec-stop" and e["action"] == "sigterm"
               and e["target"] == f"process:{proc.pid}" for e in events), events
    done = next(e for e in events if e["outcome"] == "done")
    assert done["dry_run"] is False and f"sent SIGTERM to pid {proc.pid}" in done["message"]
    # The log: the same trail, one line per record.
    audit = [r.getMessage() for r in caplog.records if r.name == "daemon.api.audit"]
    assert any(f"{me} dry run of sigterm on recommendation rec-stop" in m for m in audit), audit
    assert sum(f"{me} action sigterm on recommendation rec-stop" in m and m.endswith(
        f"done: sent SIGTERM to pid {proc.pid}") for m in audit) == 1, audit


def test_a_real_run_without_a_dry_run_is_refused_and_audited(tmp_path, counter):
    proc, terms = counter
    rec = sigterm_rec(proc)

    async def requests(post):
        first = await post({"dry_run": False})
        dry = await post({"dry_run": True})
        real = await post({"dry_run": False})
        again = await post({"dry_run": False})  # one dry run allows one real run
        return [first, dry, real, again]

    (first, dry, real, again), events = run_api(tmp_path, rec, requests)
    assert first[0] == 409 and "dry run first" in first[1]["error"]
    assert dry[0] == 200 and real[0] == 200 and real[1]["done"]
    assert again[0] == 409 and "dry run first" in again[1]["error"]
    poll(terms.exists, 10, "the SIGTERM to arrive")
    assert terms.read_text() == "TERM\n"
    assert [e["outcome"] for e in events] == ["refused", "dry run", "done", "refused"]
    # The cost review lists the trail with the other events.
    reader = StoreReader(str(tmp_path / "mlcost.db"))
    try:
        text = report.render_text(report.build(reader, 600))
    finally:
        reader.close()
    me = f"uid {os.geteuid()}"
    assert f"{me}: dry run of sigterm on process:{proc.pid}: dry run" in text, text
    assert f"{me}: action sigterm on process:{proc.pid}: done" in text, text


def test_the_gate_keys_dry_runs_by_caller_and_forgets_nothing_it_must_not():
    recorded: list[dict] = []
    gate = ActionGate(record=recorded.append)
    rec = {"id": "r1", "target": "gpu:0", "action": {"kind": "copy_commands"}}
    gate.begin(rec, "uid 1000", dry_run=True)
    gate.end(rec, "uid 1000", dry_run=True, result={"done": True, "message": "m"})
    with pytest.raises(ActionRefused, match="dry run first"):  # another caller's dry run
        gate.begin(rec, "token", dry_run=False)
    gate.begin(rec, "uid 1000", dry_run=False)
    with pytest.raises(ActionRefused, match="being applied now"):  # while it runs
        gate.begin(rec, "uid 1000", dry_run=False)
    gate.end(rec, "uid 1000", dry_run=False, error="boom", status=502)
    assert [r["detail"]["outcome"] for r in recorded] == ["dry run", "refused", "refused",
                                                          "failed"]
    assert len({r["started_at"] for r in recorded}) == len(recorded)  # one event each
    assert peer(None) == "unknown"
