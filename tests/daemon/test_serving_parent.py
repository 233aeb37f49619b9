"""A GPU process whose parent serves is that server's worker (probe 132 H5): Kind.serving_parent
from the parent's sockets, read as the kinds are (runtime/kinds.py), with a real parent that
listens and has served a connection from outside its job, and a real child."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil

from daemon.analysis.kinds import NOTEBOOK, TRAINING, Kind, serving_parent
from daemon.runtime.kinds import KindTracker, with_serving_parent
from daemon.sources.kindfacts import KindFacts

# A parent that listens on a loopback port (printed), accepts a connection and keeps it, and
# whose child sleeps (standing for its GPU worker, fed over a pipe).
PARENT = """
import socket, subprocess, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(srv.getsockname()[1], child.pid, flush=True)
conn, _ = srv.accept()
sys.stdin.read()
child.kill()
"""


def test_the_child_of_a_parent_that_listens_and_has_served_is_its_servers_worker():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        port, child_pid = map(int, parent.stdout.readline().split())
        child = psutil.Process(child_pid)
        key = (child_pid, child.create_time())
        procs = [(*key, "python worker.py", {})]
        tracker = KindTracker()
        now = time.time()
        tracker.refresh(procs, {}, now, parents={key: parent.pid})
        [kind] = tracker.kinds.values()
        assert kind.serving_parent == 0, kind  # it listens, but has served no one yet
        with socket.create_connection(("127.0.0.1", port)):
            # (a connection from this test: outside the parent's job)
            def served() -> Kind:
                tracker.refresh(procs, {}, time.time() + 60, parents={key: parent.pid})
                return next(iter(tracker.kinds.values()))
            deadline = time.monotonic() + 30
            while (kind := served()).serving_parent == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
        assert kind.serving_parent == parent.pid, kind
        assert any(f"its parent (pid {parent.pid}) listens" in e for e in kind.evidence), kind
    finally:
        parent.stdin.close()
        parent.wait(30)


def test_no_job_launcher_and_no_notebook_makes_a_servers_worker():
    served = KindFacts(listening_ports=(8888,), foreign_accepted_at=1.0)
    assert serving_parent(77, served, KindFacts()) == 77
    for launcher in ("jupyter", "torchrun", "slurmstepd", "mpirun"):
        assert serving_parent(77, served, KindFacts(parent=launcher)) == 0, launcher
    assert serving_parent(77, KindFacts(listening_ports=(8888,)), KindFacts()) == 0
    assert serving_parent(1, served, KindFacts()) == 0
    assert with_serving_parent(Kind(NOTEBOOK, 0.8), 77).serving_parent == 0
    assert with_serving_parent(Kind(TRAINING, 0.3), 77).serving_parent == 77
