"""A test run killed midway leaves nothing running: a pytest run holding a live daemon (with
its simulated workload) and a simulated host of its own is SIGKILLed, as a CI timeout or the OOM
killer would, and every process it had started must go (tests/lifeline.py: parent-death signals
and process groups). Only the process tree this test started is looked at, so the check holds
while other daemons or `mlcost-top --demo` run on the machine."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from lifeline import spawn_options
from simhost import poll

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# The run to kill: the suite's own fixtures (tests/conftest.py, loaded with -p conftest) start a
# daemon and a host, then the test says which pids it holds and waits to be killed.
INNER = '''
import os, signal
from pathlib import Path
from simhost import attach_code, host_toml

def test_holds_a_daemon_and_a_simulated_host_until_killed(mlcostd, sim_host):
    daemon = mlcostd("idle-host")
    host = sim_host(host_toml(gpus=1, workloads=[
        {"name": "holder", "gpus": [0], "code": attach_code(0, 1)}]))
    pids = [daemon.pid, *daemon.workload_pids(), *(pid for _, pid, _ in host.workloads)]
    Path(os.environ["MLCOST_TEST_HOLDING"]).write_text(" ".join(map(str, pids)))
    signal.pause()
'''


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.mark.fault("test run killed", "pytest SIGKILLed while it holds a daemon and a "
                   "simulated host: everything it started dies with it")
def test_a_killed_test_run_leaves_no_daemon_or_workload_running(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    holding = tmp_path / "holding"
    # What the killed run's processes leave (the daemon's simulated host folder: a SIGKILL
    # leaves no time to remove it) goes into a folder of this test's, removed at its end: the
    # inner run's temp dir and basetemp. A short one: its daemon's socket path must fit.
    temp = Path(tempfile.mkdtemp(prefix="mlcost-killed-run-"))
    env = dict(os.environ, MLCOST_TEST_HOLDING=str(holding), TMPDIR=str(temp),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    log = open(tmp_path / "inner.log", "wb")
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
         "--rootdir", str(tmp_path), "--basetemp", str(temp / "b"),
         str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        **spawn_options())
    tree: list[psutil.Process] = []
    try:
        poll(lambda: holding.exists() and holding.read_text(), 120, "the inner run holding its "
             "daemon and host", explain=lambda: (tmp_path / "inner.log").read_text(errors="replace"))
        held = {int(pid) for pid in holding.read_text().split()}
        tree = psutil.Process(inner.pid).children(recursive=True)
        assert len(held) >= 3, held  # the daemon, its notebook workload, the host's workload
        assert held <= {p.pid for p in tree}, (held, [p.cmdline() for p in tree])

        inner.send_signal(signal.SIGKILL)
        inner.wait()
        poll(lambda: not alive(tree), 30, "every process of the killed run gone",
             explain=lambda: "\n".join(f"  pid {p.pid}: {' '.join(p.cmdline())}"
                                       for p in alive(tree)))
    finally:
        for proc in alive(tree) + alive([psutil.Process(inner.pid)] if inner.poll() is None
                                        else []):
            proc.kill()
        inner.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
