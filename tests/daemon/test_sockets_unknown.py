"""Probe 139 F1: a TCP table cut at its read cap hides a server's port, and "no port seen" must
then read as "not known", never as "no port": the kind is not a job's for it, the rules never
offer SIGTERM, the host is not called idle, and the action refuses.

A /proc/net/tcp table is the network namespace's: any local user can grow it past what mlcostd
reads (1 MiB, ~6,800 sockets) by opening listeners. Here the cap is made small and this test's
own listeners fill the table ahead of a real server process's row."""

import os
import socket
import subprocess
import sys

import psutil
import pytest
from simhost import poll
from test_rules import CATALOG, P4D, by_rule, phases_for, pid_id, window

from daemon.analysis.kinds import TRAINING, Kind, classify_kind
from daemon.analysis.rules import build_analysis, evaluate
from daemon.api import actions
from daemon.sources import kindfacts
from daemon.sources.kindfacts import KindFacts, KindFactsReader, read_kind_facts

SERVER = """
import socket, sys, time
s = socket.create_server(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
time.sleep(300)
"""


@pytest.fixture
def server():
    child = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        yield child.pid, port
    finally:
        child.kill()
        child.wait()


def _rows_read(pid):
    rows, cut = kindfacts._tcp_rows(pid, None)
    return {row[0] for row in rows if row[1] == kindfacts.TCP_LISTEN}, cut


@pytest.fixture
def hidden(server, monkeypatch):
    """The server's listening row past a small read cap: listeners of this test's own are
    opened until the part read no longer holds the server's port (rows are listed by hash
    bucket, so where it lands is not known in advance)."""
    pid, port = server
    monkeypatch.setattr(kindfacts, "MAX_NET_BYTES", 2048)  # ~13 rows
    fillers = []
    try:
        def cut_before_it():
            for _ in range(50):
                fillers.append(socket.create_server(("127.0.0.1", 0)))
            ports, cut = _rows_read(pid)
            return cut and port not in ports
        poll(cut_before_it, 60, "the server's row past the cap", every=0)
        yield pid, port
    finally:
        for s in fillers:
            s.close()


def test_a_cut_table_that_hides_a_servers_port_leaves_whether_it_listens_unknown(hidden):
    pid, port = hidden
    facts = KindFactsReader()._read(pid, None, 0.0, {})
    assert facts.listening_ports == ()  # the cut hid it ...
    assert facts.sockets_unknown  # ... and the reading says so
    kind = classify_kind("python serve.py", facts, gpu_use="steady")
    assert kind.sockets_unknown and not kind.serves
    assert not any("no port it serves" in e for e in kind.evidence)
    assert any("not known" in e for e in kind.evidence)


def test_the_whole_table_read_finds_the_port_and_nothing_unknown(server):
    pid, port = server
    facts = KindFactsReader()._read(pid, None, 0.0, {})
    assert facts.listening_ports == (port,) and not facts.sockets_unknown


def test_a_cut_table_leaves_a_process_with_unix_sockets_only_known(server, monkeypatch):
    """A CUDA process holds unix sockets, in no TCP table: found in the unix table, they do not
    make it unknown however long the TCP table (else a busy host would never be told to
    release an idle GPU)."""
    monkeypatch.setattr(kindfacts, "MAX_NET_BYTES", 2048)
    whole = kindfacts._read_capped  # the unix table read whole: this host's may be long

    def tcp_capped(path, limit):
        return whole(path, 1 << 24 if path.endswith("/net/unix") else limit)
    monkeypatch.setattr(kindfacts, "_read_capped", tcp_capped)
    fillers = [socket.create_server(("127.0.0.1", 0)) for _ in range(40)]
    a, b = socket.socketpair()
    code = ("import socket, sys, time\n"
            "a, b = socket.socketpair()\n"
            "print('ready', flush=True)\n"
            "time.sleep(300)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        _, cut = _rows_read(child.pid)
        assert cut  # the TCP table was cut
        facts = KindFactsReader()._read(child.pid, None, 0.0, {})
        assert not facts.sockets_unknown
    finally:
        child.kill()
        child.wait()
        for s in (*fillers, a, b):
            s.close()


def test_a_job_whose_sockets_are_unknown_is_never_offered_sigterm_nor_its_host_a_stop():
    quiet = [0.0] * 8
    samples = window(n=181, utils=quiet, holders={0: 0.0}, command="python persist.py")
    unknown = classify_kind("python persist.py", KindFacts(sockets_unknown=True),
                            gpu_use="idle")
    assert unknown.sockets_unknown and not unknown.serves
    found = evaluate(build_analysis(samples, phases_for(samples, idle=0.95), P4D, CATALOG,
                                    host_cpus=32, kinds={pid_id(samples): unknown}))
    [rec] = by_rule(found, "idle_gpu_held")
    assert rec.action["kind"] == "copy_commands"
    assert "not known" in rec.action["text"]
    assert all(r.action.get("kind") != "sigterm" for r in found)
    assert by_rule(found, "host_idle") == []
    # the same process with its sockets read whole: SIGTERM, and the host may stop
    known = Kind(TRAINING, 0.4)
    found = evaluate(build_analysis(samples, phases_for(samples, idle=0.95), P4D, CATALOG,
                                    host_cpus=32, kinds={pid_id(samples): known}))
    [rec] = by_rule(found, "idle_gpu_held")
    assert rec.action["kind"] == "sigterm"
    assert by_rule(found, "host_idle") != []


def test_the_action_refuses_a_process_whose_port_a_cut_table_hides(hidden):
    pid, _ = hidden
    with pytest.raises(actions.ActionError) as refused:
        actions._refuse_a_server(pid, psutil.Process(pid))
    assert refused.value.status == 409
    assert "may be serving" in str(refused.value)
    assert os.path.exists(f"/proc/{pid}")  # and nothing was sent


def test_a_worker_of_a_parent_whose_port_a_cut_table_hides_is_refused(monkeypatch):
    """The front end forks a GPU worker (a pipe between them); the front end's port is past
    the cut: the worker may be a server's, and is refused too."""
    code = ("import os, socket, sys, time\n"
            "s = socket.create_server(('127.0.0.1', 0))\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    s.close(); time.sleep(300); os._exit(0)\n"
            "print(s.getsockname()[1], pid, flush=True)\n"
            "time.sleep(300)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    fillers = []
    try:
        port, worker = (int(x) for x in parent.stdout.readline().split())
        monkeypatch.setattr(kindfacts, "MAX_NET_BYTES", 2048)

        def cut_before_it():
            for _ in range(50):
                fillers.append(socket.create_server(("127.0.0.1", 0)))
            ports, cut = _rows_read(parent.pid)
            return cut and port not in ports
        poll(cut_before_it, 60, "the front end's row past the cap", every=0)
        assert read_kind_facts(parent.pid, 0.0).sockets_unknown
        with pytest.raises(actions.ActionError) as refused:
            actions._refuse_a_server(worker, psutil.Process(worker))
        assert refused.value.status == 409
        assert f"its parent, pid {parent.pid}" in str(refused.value)
    finally:
        for s in fillers:
            s.close()
        for child in psutil.Process(parent.pid).children():  # the worker, while it is ours
            child.kill()
        parent.kill()
        parent.wait()
