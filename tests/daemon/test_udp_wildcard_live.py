"""A UDP server on all addresses on a port inside the ephemeral range (probe 143 F10: the
probe's camdetect_udp.py, an asyncio datagram endpoint on 0.0.0.0:47151) has the row a statsd
client's socket has: no table tells them apart, so mlcostd read it as a client and offered it
SIGTERM between datagrams, and the live check before a signal let it through. Its stacks wait
on its sockets: idle_gpu_held looks first, saying where it may serve, and the live check
refuses a SIGTERM the rules would not have offered. A job that reported its start to statsd
and sleeps in time.sleep holds the same socket and keeps its SIGTERM (its dry run would send
it); a statsd job that waits on its sockets gets the look first too: mlcostd cannot tell it
from the server.

A real mlcostd on the simulated host, the test's own programs (tests/daemon/workloads), a real
datagram sent by the test as the service's client. (The test's name, which its temporary
folder and so the programs' command lines carry, says no "serve": a hint of the kind.)"""

from __future__ import annotations

import json
import sys
from typing import Any

import psutil
import pytest
from simhost import poll
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_udp_listeners_live import QUICK, ask, ports_in, sigterms
from test_work_waits_live import WORKLOADS, advice_by_program

from daemon.api import actions
from daemon.api.actions import ActionError
from daemon.sources.kindfacts import ephemeral_range

# (by their port files, on their command lines: statsd_job.py runs twice)
DETECTOR, SLEEPER, SELECTS = "camdetect.port", "sleeper.port", "selects.port"


def test_udp_on_an_ephemeral_port_looks_first_and_a_sleeping_statsd_job_gets_sigterm(
        mlcostd, tmp_path):
    files = {name: tmp_path / name for name in (DETECTOR, SLEEPER, SELECTS)}
    path = scenario_file(tmp_path, [
        {"name": "camdetect", "command": [sys.executable, str(WORKLOADS / "udp_detector.py"),
                                          "--port-file", str(files[DETECTOR]), "--loop",
                                          "asyncio", "--ephemeral"]},
        {"name": "sleeper", "command": [sys.executable, str(WORKLOADS / "statsd_job.py"),
                                        "--port-file", str(files[SLEEPER]), "--sleep"]},
        {"name": "selects", "command": [sys.executable, str(WORKLOADS / "statsd_job.py"),
                                        "--port-file", str(files[SELECTS])]}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    bound = poll(lambda: all(ports_in(f) for f in files.values()) and
                 {name: ports_in(f)[0] for name, f in files.items()}, 60, "the programs bound")
    low, high = ephemeral_range()
    assert all(low <= port <= high for port in bound.values()), bound  # the client's row
    port = bound[DETECTOR]
    assert poll(lambda: ask(port), 60, "the detector answers").startswith(b'{"frame"')
    state: dict[str, Any] = {}
    names = (DETECTOR, SLEEPER, SELECTS)

    def settled() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        state["procs"] = {name: next((p for p in daemon.now()["processes"]
                                      if name in p["command"] and p.get("gpus")), {})
                          for name in names}
        held = {name: [r for r in found[name] if r.rule == "idle_gpu_held"] for name in names}
        return all(held.values())

    poll(settled, 240, "idle_gpu_held advice about each program", every=2.0,
         explain=lambda: json.dumps(
             {n: [(r.rule, r.action) for r in rs]
              for n, rs in state.get("recs", {}).items()}) + "\n" + daemon.log_tail())
    found, procs = state["recs"], state["procs"]
    for name in (DETECTOR, SELECTS):  # waiting on its sockets: it may serve datagrams
        assert not sigterms(found[name]), (name, [r.action for r in found[name]])
        [rec] = [r for r in found[name] if r.rule == "idle_gpu_held"]
        pid = procs[name]["pid"]
        assert rec.action["kind"] == "copy_commands", rec.action
        assert f"holds UDP port {bound[name]} on all addresses: it may be serving datagrams" \
            in rec.action["text"], rec.action["text"]
        assert rec.action["commands"][0].startswith(f"ss -uanp | grep 'pid={pid},'")
        assert rec.evidence["no_sign_of_work"]["udp_wildcard_ports"] == [bound[name]]
        assert procs[name]["serves"] is False  # (no more than "may": not a server either)
        # the live check before a signal: refused with what the rules saw, or without it
        for seen in (rec.evidence.get("no_sign_of_work"), None):
            with pytest.raises(ActionError) as refused:
                actions._refuse_a_server(pid, psutil.Process(pid), seen)
            assert refused.value.status == 409
            assert f"may be serving datagrams (it holds UDP port {bound[name]} on all " \
                   "addresses" in str(refused.value), str(refused.value)
    assert ask(port)  # still serving
    # The statsd job that sleeps: its SIGTERM stands, and the dry run of it would send it.
    [rec] = sigterms(found[SLEEPER])
    assert rec.evidence["no_sign_of_work"]["udp_wildcard_ports"] == [bound[SLEEPER]]
    dry = daemon.call("apply", rec.id, dry_run=True)
    assert dry.dry_run and dry.refused is None, dry
    assert daemon.stop() == 0, daemon.log_tail()
