"""UDP servers serve (probe 143 F10, F7): a detection service on UDP (an asyncio datagram
endpoint; selectors over two UDP sockets; a bare recvfrom loop) waiting for its next datagram
read as a job with "no port it serves" (mlcostd read the TCP and unix tables only) and was
offered SIGTERM, also right after answering one; the live check before a signal read the same
tables and would have sent it. Beside them, a job that holds its GPU idle, sent statsd
datagrams from an unbound socket (an ephemeral port) and sleeps is no server: it keeps its
SIGTERM advice (one that waits on its sockets instead may be a server on that port:
test_udp_wildcard_live.py).

A real mlcostd on the simulated host, the test's own programs (tests/daemon/workloads), real
datagrams sent by the test as the services' clients."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from simhost import poll
from test_corpus import FAST_STACKS, pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import WORKLOADS, advice_by_program

from daemon.api import actions
from daemon.api.actions import ActionError

QUICK = {**FAST_STACKS, "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s",
                                 "host_after": "1h"},
         "cost": {"evaluate_every": "5s"}, "api": {"allow_actions": True}}
LOOPS = ("asyncio", "selectors", "recvfrom")
JOB = "statsd_job.py"


def ports_in(path: Path) -> list[int] | None:
    try:
        return [int(p) for p in path.read_text().split()]
    except (OSError, ValueError):
        return None


def ask(port: int) -> bytes | None:
    """One datagram as the camera gateway sends it, and the answer (None: not yet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(5)
        try:
            client.sendto(b"frame:cam7/000123", ("127.0.0.1", port))
            return client.recvfrom(2048)[0]
        except OSError:
            return None


def sigterms(recs: list[Any]) -> list[Any]:
    return [r for r in recs if (r.action or {}).get("kind") == "sigterm"]


def test_udp_detectors_listen_never_get_sigterm_and_a_statsd_client_does(
        mlcostd, tmp_path):
    files = {loop: tmp_path / f"{loop}.port" for loop in LOOPS}
    job_file = tmp_path / "job.port"
    path = scenario_file(tmp_path, [
        *({"name": f"udp-{loop}", "command": [
            sys.executable, str(WORKLOADS / "udp_detector.py"), "--port-file",
            str(files[loop]), "--loop", loop]} for loop in LOOPS),
        {"name": "job", "command": [sys.executable, str(WORKLOADS / JOB), "--port-file",
                                    str(job_file), "--sleep"]}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    bound = poll(lambda: all(ports_in(f) for f in [*files.values(), job_file]) and
                 {loop: ports_in(f) for loop, f in files.items()}, 60, "the services bound")
    for loop in LOOPS:  # each one answers (the selectors one on its requests port)
        assert poll(lambda loop=loop: ask(bound[loop][0]), 60, f"{loop} answers") \
            .startswith(b'{"frame"')
    names = tuple(f"--loop {loop}" for loop in LOOPS)
    state: dict[str, Any] = {}

    def kind_of(name: str) -> dict[str, Any]:
        return next((p for p in daemon.now()["processes"]
                     if name in p["command"] and p.get("gpus")), {})

    def settled() -> bool:
        state["recs"] = found = advice_by_program(daemon, (*names, JOB))
        state["procs"] = procs = {name: kind_of(name) for name in (*names, JOB)}
        servers = all(
            procs[f"--loop {loop}"].get("serves") is True
            and f"listens on UDP port{'s' if len(bound[loop]) > 1 else ''} "
            f"{', '.join(map(str, sorted(bound[loop])))}"
            in procs[f"--loop {loop}"].get("kind_evidence", [])
            and any(r.rule == "idle_server" for r in found[f"--loop {loop}"])
            for loop in LOOPS)
        return servers and bool(sigterms(found[JOB]))

    poll(settled, 240, "the UDP services served, idle_server advice for each, and the statsd "
         "job's SIGTERM advice", every=2.0, explain=lambda: json.dumps(
             {n: {k: p.get(k) for k in ("kind", "serves", "kind_evidence")}
              for n, p in state.get("procs", {}).items()}) + "\n" + json.dumps(
             {n: [(r.rule, (r.action or {}).get("kind")) for r in rs]
              for n, rs in state.get("recs", {}).items()}) + "\n" + daemon.log_tail())
    found = state["recs"]
    for loop in LOOPS:
        name = f"--loop {loop}"
        assert not sigterms(found[name]), (loop, found[name])
        assert "idle_gpu_held" not in {r.rule for r in found[name]}, (loop, found[name])
        [advice] = [r for r in found[name] if r.rule == "idle_server"]
        assert "serves (UDP port" in advice.summary and "TCP" not in advice.summary, \
            advice.summary
        assert "waits_for_jobs" not in advice.evidence or not advice.evidence["waits_for_jobs"]
        # the live check before a signal refuses it, as the rules do
        pid = state["procs"][name]["pid"]
        with pytest.raises(ActionError) as refused:
            actions._refuse_a_server(pid, psutil.Process(pid))
        assert refused.value.status == 409
        assert f"is serving (it listens on UDP port {bound[loop][0]}" in str(refused.value) or \
            f"is serving (it listens on UDP ports {', '.join(map(str, sorted(bound[loop])))})" \
            in str(refused.value), str(refused.value)
        assert ask(bound[loop][0])  # still serving
    # The statsd job is no server: its SIGTERM stands, and the dry run of it would send it.
    job = state["procs"][JOB]
    assert job.get("serves") is False and not any(
        "UDP" in e for e in job.get("kind_evidence", [])), job
    rec = sigterms(found[JOB])[0]
    # not refused: the rules saw its socket while it slept (the recommendation's evidence)
    actions._refuse_a_server(job["pid"], psutil.Process(job["pid"]),
                             rec.evidence["no_sign_of_work"])
    dry = daemon.call("apply", rec.id, dry_run=True)
    assert dry.dry_run and dry.refused is None, dry
    assert daemon.stop() == 0, daemon.log_tail()
