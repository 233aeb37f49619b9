"""A rank's peer port told from a service's (probe 109, BUG 4): where the connections accepted
on a process's TCP port come from (daemon.sources.kindfacts: _AcceptedEnds, JobPeers), and
what the classifier makes of it (daemon.analysis.kinds.peer_ports_only). A port whose
connections all came from the process itself or a GPU process of its own job on this host (its
parent, a child, a sibling) is a rank's; one served to anyone else is a service's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace

import psutil
import pytest

from daemon.analysis.kinds import ONLINE_INFERENCE, TRAINING, classify_kind
from daemon.sources.kindfacts import (
    MAX_UNSETTLED,
    JobPeers,
    KindFacts,
    KindFactsReader,
    _AcceptedEnds,
    judged_ends,
    parse_tcp_rows,
)

NOW = 1_000_000.0
PEER_PORT = "whose connections all came from its own job's GPU processes"
RANK = KindFacts(listening_ports=(41179,), accepted_connections=1, accepted_seen_at=NOW,
                 accepted_reads=3, job_accepted_seen_at=NOW)


def test_a_port_only_its_jobs_processes_connected_to_is_a_ranks_not_a_service():
    kind = classify_kind("python -c from multiprocessing.spawn import spawn_main", RANK, {},
                         now=NOW, gpu_use="steady")
    assert kind.kind == TRAINING and not kind.serves, kind
    assert any(PEER_PORT in e and "41179" in e for e in kind.evidence), kind.evidence
    assert not any(e.startswith("accepted connections") for e in kind.evidence)


@pytest.mark.parametrize("served", [
    {"foreign_accepted_at": NOW - 600},  # a client from another host or namespace, once
    {"unsettled_accepted": frozenset({77})},  # a process of this host outside its job
    {"unix_listening": 1},  # and it serves on a unix socket too
])
def test_a_port_anyone_else_connected_to_is_a_service(served):
    kind = classify_kind("python app.py", replace(RANK, **served), {}, now=NOW,
                         gpu_use="steady")
    assert kind.kind == ONLINE_INFERENCE and kind.serves, kind
    assert not any(PEER_PORT in e for e in kind.evidence)


def test_serving_frames_keep_a_server_whose_only_client_is_its_jobs():
    """A model server started beside its trainer (both GPU processes of one launcher), called
    by it alone: its serving frames say what it is."""
    kind = classify_kind("python app.py", RANK, {"server_loop": NOW}, now=NOW, gpu_use="bursty")
    assert kind.kind == ONLINE_INFERENCE and kind.serves


def test_a_port_nobody_connected_to_is_read_as_before():
    kind = classify_kind("python app.py", KindFacts(listening_ports=(8000,)), {}, now=NOW)
    assert kind.kind == ONLINE_INFERENCE and not kind.serves
    assert not any(PEER_PORT in e for e in kind.evidence)


def test_judged_ends_settles_a_connection_once_its_owner_is_seen_in_the_job():
    facts = KindFacts(listening_ports=(41179,))
    local = _AcceptedEnds(local={10: 20})
    first = judged_ends(facts, 1, local, None, NOW)  # its peer not (yet) known as its job's
    assert first.served_others and first.job_accepted_seen_at is None
    known = JobPeers([])
    known.owned_by_job = lambda pid, inodes: set(inodes)  # type: ignore[method-assign]
    later = judged_ends(first, 1, local, known, NOW + 10)
    assert not later.served_others and later.job_accepted_seen_at == NOW + 10
    remote = judged_ends(later, 1, _AcceptedEnds(remote=frozenset({30})), known, NOW + 20)
    assert remote.served_others and remote.foreign_accepted_at == NOW + 20
    own = judged_ends(facts, 1, _AcceptedEnds(own=frozenset({40})), known, NOW)
    assert own.job_accepted_seen_at is None and not own.served_others  # neither
    many = judged_ends(facts, 1, _AcceptedEnds(local={i: i + 1000 for i in range(
        MAX_UNSETTLED + 1)}), None, NOW)
    assert many.foreign_accepted_at == NOW and not many.unsettled_accepted  # bounded


def test_parse_tcp_rows_keeps_both_ends_as_the_kernel_wrote_them():
    data = (b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
            b"   uid  timeout inode\n"
            b"   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000"
            b"     0        0 4343 1 0000000000000000 20 4 30 10 -1\n"
            b"   1: garbage\n")
    assert parse_tcp_rows(data) == [(8080, "01", 4343, b"0100007F:1F90", b"0100007F:C350")]


LISTENER = ("import socket, sys\n"
            "s = socket.create_server(('127.0.0.1', 0)); print(s.getsockname()[1], flush=True)\n"
            "conns = [s.accept()[0] for _ in range(int(sys.argv[1]))]\n"
            "print('accepted', flush=True); sys.stdin.read()\n")
CLIENT = ("import socket, sys\n"
          "c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
          "print('connected', flush=True); sys.stdin.read()\n")


@pytest.fixture
def siblings() -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str], int]]:
    """Two children of this test (siblings): one listens, the other connects to it, and
    this test (their parent) connects too. Yields (listener, client, port)."""
    procs: list[subprocess.Popen[str]] = []

    def start(code: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    try:
        listener = start(LISTENER, "2")
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        client = start(CLIENT, str(port))
        assert client.stdout is not None and client.stdout.readline().strip() == "connected"
        with socket.create_connection(("127.0.0.1", port)):
            assert listener.stdout.readline().strip() == "accepted"
            yield listener, client, port
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def key(proc: subprocess.Popen[str]) -> tuple[int, float]:
    return proc.pid, psutil.Process(proc.pid).create_time()


def test_a_connection_from_a_sibling_gpu_process_is_its_jobs_and_from_others_not(siblings):
    listener, client, port = siblings
    # The client holds a GPU (the reader is given it): its connection is the job's; this
    # test's own (the listener's parent, holding no GPU) is not.
    reader = KindFactsReader(sockets_every_s=0.0)
    reader.refresh([key(listener), key(client)], NOW)
    facts = reader.get(key(listener))
    assert facts is not None and port in facts.listening_ports
    assert facts.job_accepted_seen_at == NOW
    assert len(facts.unsettled_accepted) == 1 and facts.served_others  # this test's connection


def test_a_sibling_seen_holding_a_gpu_later_settles_its_connection():
    """A rank whose peer was no GPU process yet at its first read (gloo connects before the
    GPU is touched) is its job's once the peer is: its connection is judged again."""
    listener = subprocess.Popen([sys.executable, "-c", LISTENER, "1"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    client = None
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert listener.stdout.readline().strip() == "accepted"
        reader = KindFactsReader(sockets_every_s=0.0)
        reader.refresh([key(listener)], NOW)  # the client holds no GPU yet
        first = reader.get(key(listener))
        assert first is not None and first.served_others and first.job_accepted_seen_at is None
        reader.refresh([key(listener), key(client)], NOW + 2)  # now it does
        later = reader.get(key(listener))
        assert later is not None and not later.served_others
        assert later.job_accepted_seen_at == NOW + 2
        kind = classify_kind("python -c from multiprocessing.spawn import spawn_main", later,
                             {}, now=NOW + 2, gpu_use="steady")
        assert kind.kind != ONLINE_INFERENCE and not kind.serves, kind
    finally:
        for proc in (listener, client):
            if proc is not None:
                proc.kill()
                proc.wait(10)


def test_a_connection_from_its_own_socket_says_nothing_of_whom_it_serves():
    """rank 0 of torch.distributed connects to the store it hosts, and a server may call
    itself: its own connection is neither its job's nor anyone else's."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = server.accept()
            with accepted:
                reader = KindFactsReader()
                me = (os.getpid(), psutil.Process().create_time())
                reader.refresh([me], NOW)
                facts = reader.get(me)
    assert facts is not None and facts.accepted_seen_at == NOW
    assert facts.job_accepted_seen_at is None and not facts.served_others
