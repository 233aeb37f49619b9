"""A SIGTERM is never held past its condition (probe 143 F8): a re-ranker waiting in
signal.pause() with its model on the GPU was offered SIGTERM; poked, it worked, and
/v1/recommendations and `mlcostd report --json` kept listing the SIGTERM ("holding", its
evidence frozen at its last idle window) for the book's 5-minute hold while it worked again and
again. Now the evaluation that sees it work drops the SIGTERM with a notice, and the report says
it was resolved, its kill withdrawn. (An evaluation that catches it as it begins may look first
instead: that advice holds, with no kill in it.)

A real mlcostd on the simulated host, the test's own program (tests/daemon/workloads), the
test as the catalog service that pokes it; the report read from the daemon's store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

from simhost import poll
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_udp_listeners_live import QUICK
from test_work_waits_live import WORKLOADS

from tests.livedaemon import MLCOSTD, ROOT


def test_a_sigterm_goes_once_its_process_works_again(mlcostd, tmp_path):
    ready = tmp_path / "ready"
    path = scenario_file(tmp_path, [{"name": "reranker", "command": [
        sys.executable, str(WORKLOADS / "reload_on_signal.py"), "--ready-file", str(ready)]}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    pid = int(poll(lambda: ready.exists() and ready.read_text(), 60, "its model on the GPU"))

    def kill_of(recs: list[Any]) -> list[Any]:
        return [r for r in recs if r.rule == "idle_gpu_held" and r.action.get("pid") == pid
                and r.action.get("kind") == "sigterm"]

    [rec] = poll(lambda: kill_of(daemon.call("recommendations")), 120,
                 "the SIGTERM while it waits in signal.pause()", every=0.5,
                 explain=daemon.log_tail)
    assert rec.status == "active"
    os.kill(pid, signal.SIGUSR1)  # the catalog service's poke: it re-ranks from now on

    def gone() -> tuple[list[Any]] | None:
        recs = daemon.call("recommendations")
        return None if any(r.id == rec.id and r.status == "active" for r in recs) else (recs,)

    # the first evaluation that does not find it idle as it was (it worked)
    [listed] = poll(gone, 60, "an evaluation that saw it work", every=0.5,
                    explain=daemon.log_tail)
    assert not kill_of(listed), [(r.status, r.condition_false_since) for r in kill_of(listed)]
    [held] = [r for r in listed if r.id == rec.id] or [None]
    if held is None:  # dropped at once, and the notice says why
        notices = poll(lambda: [e for e in daemon.now()["events"]
                                if e["kind"] == "recommendation_resolved"
                                and e.get("recommendation_id") == rec.id], 30, "its notice")
        assert "a SIGTERM is never held past its condition" in notices[-1]["detail"]
    else:  # an evaluation caught it as it began and looked first: held as that, no kill
        assert held.action["kind"] == "copy_commands", held.action
    assert daemon.stop() == 0, daemon.log_tail()
    done = subprocess.run(MLCOSTD + ["report", "--db", str(daemon.db), "--since", "1h",
                                     "--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    [reported] = [r for r in json.loads(done.stdout)["recommendations"] if r["id"] == rec.id]
    assert reported["action"]["kind"] != "sigterm", reported["action"]
    if held is None:  # the report says it went, its kill withdrawn
        assert reported["status"] == "resolved", reported
        assert "no SIGTERM: withdrawn" in reported["action"]["text"]
