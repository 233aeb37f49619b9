"""Idle means idle, at the moment of the signal (probe 125 F0): a notebook holds its GPU idle
until the daemon advises SIGTERM for it, then goes back to work. The advice stays listed
through its hold (the rules look every [cost].evaluate_every), and `a` in mlcost-top sent
SIGTERM to a process at 95% SM. The daemon now checks, right before the dry run and the real
run, that the process still holds only idle GPUs and that the advice still holds (a SIGTERM is
no longer held at all: the evaluation that does not find it drops it, probe 143 F8).

A real mlcostd on the simulated host; the workload is the test's own program, which counts the
SIGTERMs it receives instead of exiting and starts running kernels on SIGUSR1."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from simhost import poll

from daemon.client import ApiError

ADVICE_TIMEOUT_S = 150.0
CONFIG = {  # advice about the idle holder within seconds, evaluated every 5 s, kept 5 min
    "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "1h"},
    "cost": {"evaluate_every": "5s", "recommendation_hold": "5m"},
    "api": {"allow_actions": True},
}
# Holds 8 GiB of simulated GPU 0 idle, waiting on input like a notebook; SIGUSR1: kernels back
# to back; SIGUSR2: a thread hashing on a CPU while the main thread goes on waiting; SIGTERM: a
# line in the file, and it goes on.
TOGGLE = """
import hashlib, selectors, signal, socket, sys, threading
from daemon.sim.device import Device
dev = Device(gpu_index=0)
dev.alloc(8 << 30)
working = False
def work(*_):
    global working
    working = True
def hashing():
    digest = b""
    while True:
        digest = hashlib.sha256(digest).digest()
signal.signal(signal.SIGUSR2, lambda *_: threading.Thread(target=hashing, daemon=True).start())
def counted(*_):
    with open(sys.argv[1], "a") as out:
        out.write(f"TERM working={working}\\n")
signal.signal(signal.SIGUSR1, work)
signal.signal(signal.SIGTERM, counted)
shell, frontend = socket.socketpair()
waiting = selectors.DefaultSelector()
waiting.register(shell, selectors.EVENT_READ)
while True:
    if working:
        dev.kernel(0.5, sm=0.95)
    else:
        waiting.select(timeout=0.5)
"""


def scenario(folder: Path, terms: Path) -> Path:
    argv = [sys.executable, "-c", TOGGLE, str(terms)]
    path = folder / "toggle.toml"
    path.write_text('description = "a notebook that holds its GPU idle, then works"\n'
                    '[instance]\nprovider = "aws"\ntype = "g5.xlarge"\nregion = "us-east-1"\n'
                    'lifecycle = "on-demand"\n[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n'
                    f'[[workloads]]\nname = "toggle"\ngpus = [0]\ncommand = {json.dumps(argv)}\n')
    return path


def stop_advice(now: dict) -> dict | None:
    return next((r for r in now.get("recommendations") or []
                 if (r.get("action") or {}).get("kind") == "sigterm"), None)


def test_a_process_back_at_work_is_not_signalled_while_its_advice_is_held(mlcostd, tmp_path):
    terms = tmp_path / "terms"
    daemon = mlcostd(str(scenario(tmp_path, terms)), interval=0.5, config=CONFIG)
    poll(lambda: stop_advice(daemon.now()) is not None, ADVICE_TIMEOUT_S,
         "SIGTERM advice for the idle holder", every=0.5, explain=daemon.log_tail)
    rec = stop_advice(daemon.now())
    assert rec is not None and rec["status"] == "active"
    pid = rec["action"]["pid"]
    dry = daemon.call("apply", rec["id"], dry_run=True)  # idle now: it would be sent
    assert dry.dry_run and dry.refused is None, dry

    os.kill(pid, signal.SIGUSR1)  # back to work

    def working() -> bool:
        proc = next((p for p in daemon.now()["processes"] if p["pid"] == pid), None)
        return proc is not None and (proc.get("sm_share") or 0) > 0

    poll(working, 60, "the holder's kernels in a tick", every=0.5, explain=daemon.log_tail)
    # Within the tick it went back to work, before any evaluation saw it: refused, live.
    for dry_run in (True, False):
        with pytest.raises(ApiError) as refused:
            daemon.call("apply", rec["id"], dry_run=dry_run)
        assert refused.value.status == 409
        assert f"pid {pid}" in str(refused.value) and "nothing done" in str(refused.value)

    # The next evaluation does not find the advice: a SIGTERM is not held past its condition
    # (probe 143 F8), it goes at once, and applying it finds no such advice.
    def gone() -> list | None:
        recs = daemon.now()["recommendations"] or []
        return None if any(r["id"] == rec["id"] for r in recs) else [recs]

    poll(gone, 60, "the advice gone", every=0.5, explain=daemon.log_tail)
    for dry_run in (True, False):
        with pytest.raises(ApiError) as refused:
            daemon.call("apply", rec["id"], dry_run=dry_run)
        assert refused.value.status == 404, refused.value
    assert not terms.exists()  # never signalled
    os.kill(pid, 0)  # still running


def test_a_process_whose_thread_works_on_a_cpu_is_not_signalled(mlcostd, tmp_path):
    """Work on a CPU is work (probe 132 H3, H4): a thread hashing while the main thread waits,
    as a job's CPU phase, before any evaluation sees it."""
    terms = tmp_path / "terms"
    daemon = mlcostd(str(scenario(tmp_path, terms)), interval=0.5, config=CONFIG)
    poll(lambda: stop_advice(daemon.now()) is not None, ADVICE_TIMEOUT_S,
         "SIGTERM advice for the idle holder", every=0.5, explain=daemon.log_tail)
    rec = stop_advice(daemon.now())
    assert rec is not None
    pid = rec["action"]["pid"]
    os.kill(pid, signal.SIGUSR2)  # a thread at work on a CPU

    def on_a_cpu() -> bool:
        proc = next((p for p in daemon.now()["processes"] if p["pid"] == pid), None)
        return proc is not None and (proc.get("cpu_percent") or 0) >= 10

    poll(on_a_cpu, 60, "the holder's thread on a CPU in a tick", every=0.5,
         explain=daemon.log_tail)
    with pytest.raises(ApiError) as refused:
        daemon.call("apply", rec["id"], dry_run=True)
    assert refused.value.status == 409
    # The live check at the action says so; on a loaded host an evaluation may see the CPU
    # work first (a sign of work to the rules too), and the advice, in its hold, is refused
    # as such: never signalled either way.
    said = str(refused.value)
    assert (f"pid {pid} used" in said and "of a CPU" in said) or "no longer holds" in said, said
    assert not terms.exists()
