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
from collections.abc import Callable, Iterator
from dataclasses import replace

import psutil
import pytest

from daemon.analysis.kinds import ONLINE_INFERENCE, TRAINING, classify_kind
from daemon.sources.kindfacts import (
    MAX_UNSETTLED,
    PARENT_START,
    JobPeers,
    KindFacts,
    KindFactsReader,
    _AcceptedEnds,
    judged_ends,
    parse_tcp_rows,
)

NOW = 1_000_000.0
PEER_PORT = "is connected to its own job's GPU processes only"
RANK = KindFacts(listening_ports=(41179,), accepted_connections=1, accepted_seen_at=NOW,
                 accepted_reads=3, job_connected_seen_at=NOW)


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
    assert first.served_others and first.job_connected_seen_at is None
    known = JobPeers([])
    known.owned_by_job = lambda pid, inodes: set(inodes)  # type: ignore[method-assign]
    later = judged_ends(first, 1, local, known, NOW + 10)
    assert not later.served_others and later.job_connected_seen_at == NOW + 10
    remote = judged_ends(later, 1, _AcceptedEnds(remote=frozenset({30})), known, NOW + 20)
    assert remote.served_others and remote.foreign_accepted_at == NOW + 20
    never = JobPeers([])  # served others for good: its local connections are not looked up
    never.owned_by_job = lambda pid, inodes: pytest.fail("looked up")  # type: ignore[method-assign]
    assert judged_ends(remote, 1, local, never, NOW + 30) is remote
    own = judged_ends(facts, 1, _AcceptedEnds(own=frozenset({40})), known, NOW)
    assert own.job_connected_seen_at is None and not own.served_others  # neither
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


# One program for both ranks, the rank and numbers as arguments (command lines that differ in
# their numbers only, as mp.spawn's children's do): rank 1 listens and accepts N connections,
# rank 0 connects to PORT.  python -c RANK_CODE RANK PORT N
# Rank 2 also listens (nobody connects to it) and connects to PORT.
RANK_CODE = ("import socket, sys\n"
             "rank, port, n = map(int, sys.argv[1:4])\n"
             "if rank >= 1:\n"
             "    s = socket.create_server(('127.0.0.1', 0)); print(s.getsockname()[1], flush=True)\n"
             "if rank == 1:\n"
             "    conns = [s.accept()[0] for _ in range(n)]; print('accepted', flush=True)\n"
             "else:\n"
             "    c = socket.create_connection(('127.0.0.1', port)); print('connected', flush=True)\n"
             "sys.stdin.read()\n")
CLIENT = ("import socket, sys\n"
          "c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
          "print('connected', flush=True); sys.stdin.read()\n")


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts children of this test (siblings of one another), killed at the end."""
    procs: list[subprocess.Popen[str]] = []

    def run(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    try:
        yield run
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def said(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def key(proc: subprocess.Popen[str]) -> tuple[int, float]:
    return proc.pid, psutil.Process(proc.pid).create_time()


def test_a_connection_from_a_sibling_rank_is_its_jobs_and_from_others_not(start):
    listener = start(RANK_CODE, "1", "0", "3")
    port = said(listener)
    rank0 = start(RANK_CODE, "0", port, "0")
    client = start(CLIENT, port)  # a sibling holding a GPU that runs another program
    assert said(rank0) == said(client) == "connected"
    with socket.create_connection(("127.0.0.1", int(port))):  # this test: its parent, no GPU
        assert said(listener) == "accepted"
        reader = KindFactsReader(sockets_every_s=0.0)
        reader.refresh([key(listener), key(rank0), key(client)], NOW)
        facts = reader.get(key(listener))
    assert facts is not None and int(port) in facts.listening_ports
    assert facts.job_connected_seen_at == NOW  # rank 0's
    assert len(facts.unsettled_accepted) == 2 and facts.served_others  # the client's, the test's


def test_a_parent_read_for_its_sockets_is_not_one_of_its_childs_job(start):
    """The kinds round reads each GPU process's parent beside it (its sockets, for
    Kind.serving_parent; keyed with a start time below 0): that no-GPU parent is not one of the
    job's GPU processes, so its connection to its child's port is served to someone else, as
    it was before parents were read (probe 138: JobPeers had counted it)."""
    listener = start(RANK_CODE, "1", "0", "1")
    port = said(listener)
    with socket.create_connection(("127.0.0.1", int(port))):  # this test: its parent, no GPU
        assert said(listener) == "accepted"
        reader = KindFactsReader(sockets_every_s=0.0)
        reader.refresh([key(listener), (os.getpid(), PARENT_START)], NOW)
        facts = reader.get(key(listener))
    assert facts is not None and facts.job_connected_seen_at is None
    assert len(facts.unsettled_accepted) == 1 and facts.served_others


def test_a_sibling_rank_seen_holding_a_gpu_later_settles_its_connection(start):
    """A rank whose peer was no GPU process yet at its first read (gloo connects before the
    GPU is touched) is its job's once the peer is: its connection is judged again."""
    listener = start(RANK_CODE, "1", "0", "1")
    port = said(listener)
    rank0 = start(RANK_CODE, "0", port, "0")
    assert said(rank0) == "connected" and said(listener) == "accepted"
    reader = KindFactsReader(sockets_every_s=0.0)
    reader.refresh([key(listener)], NOW)  # rank 0 holds no GPU yet
    first = reader.get(key(listener))
    assert first is not None and first.served_others and first.job_connected_seen_at is None
    reader.refresh([key(listener), key(rank0)], NOW + 2)  # now it does
    later = reader.get(key(listener))
    assert later is not None and not later.served_others
    assert later.job_connected_seen_at == NOW + 2
    kind = classify_kind("python -c from multiprocessing.spawn import spawn_main", later, {},
                         now=NOW + 2, gpu_use="steady")
    assert kind.kind != ONLINE_INFERENCE and not kind.serves, kind


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
    assert facts.job_connected_seen_at is None and not facts.served_others


def test_a_rank_that_connected_to_its_peer_listens_for_its_peers(start):
    """Of a pair of gloo ranks, either may be the one that connects: the slow rank listening
    on a port nobody connected to, connected to its sibling rank's port, is a rank too."""
    peer = start(RANK_CODE, "1", "0", "1")
    port = said(peer)
    slow = start(RANK_CODE, "2", port, "0")
    own_port = said(slow)
    assert said(slow) == "connected" and said(peer) == "accepted"
    reader = KindFactsReader(sockets_every_s=0.0)
    reader.refresh([key(slow), key(peer)], NOW)
    facts = reader.get(key(slow))
    assert facts is not None and int(own_port) in facts.listening_ports
    assert facts.job_connected_seen_at == NOW and not facts.served_others
    kind = classify_kind("python -c from multiprocessing.spawn import spawn_main", facts, {},
                         now=NOW, gpu_use="steady")
    assert kind.kind == TRAINING and not kind.serves, kind
    assert any(PEER_PORT in e and own_port in e for e in kind.evidence), kind.evidence
    alone = KindFactsReader(sockets_every_s=0.0)  # its peer holding no GPU: no sign of a job
    alone.refresh([key(slow)], NOW)
    assert (got := alone.get(key(slow))) is not None and got.job_connected_seen_at is None


def test_a_rank_that_only_connected_to_its_sibling_rank_is_connected_to_its_job_only(start):
    """Probe 143 F2: a rank of a hand-written all-reduce that connects to its sibling's port
    and listens on none: its one connection ends at a GPU process of its own job, which the
    phase classifier reads as a wait for its peer (Kind.job_peers_only). A sibling running
    another program (a client) is no process of its job; nor is this test (no GPU)."""
    listener = start(RANK_CODE, "1", "0", "2")
    port = said(listener)
    rank0 = start(RANK_CODE, "0", port, "0")  # connects, listens on nothing
    client = start(CLIENT, port)
    assert said(rank0) == said(client) == "connected" and said(listener) == "accepted"
    reader = KindFactsReader(sockets_every_s=0.0)
    reader.refresh([key(listener), key(rank0), key(client)], NOW)
    facts, other = reader.get(key(rank0)), reader.get(key(client))
    assert facts is not None and not facts.listening_ports and facts.other_connections == 1
    assert (facts.job_connections, facts.outside_connections) == (1, 0), facts
    command = "python -c from multiprocessing.spawn import spawn_main"
    assert classify_kind(command, facts, {}, now=NOW, gpu_use="bursty").job_peers_only
    # A socket wait sampled in its first seconds, before a sockets read found its peer, read
    # "waiting for its next job": its kind stays training (a CI run read batch_inference).
    early = classify_kind(command, facts, {"job_wait:socket": NOW}, now=NOW, gpu_use="bursty")
    assert early.kind == TRAINING and not any("next job" in e for e in early.evidence), early
    assert classify_kind(command, other, {"job_wait:socket": NOW}, now=NOW,
                         gpu_use="bursty").kind == "batch_inference"
    assert other is not None and (other.job_connections, other.outside_connections) == (0, 1)
    assert not classify_kind(command, other, {}, now=NOW, gpu_use="bursty").job_peers_only
    served = reader.get(key(listener))  # the rank 0's connection, and the client's
    assert served is not None and (served.job_connections, served.outside_connections) == (1, 1)
    assert not classify_kind(command, served, {}, now=NOW).job_peers_only
    alone = KindFactsReader(sockets_every_s=0.0)  # its peer holding no GPU: not its job's
    alone.refresh([key(rank0)], NOW)
    assert (got := alone.get(key(rank0))) is not None and not classify_kind(
        command, got, {}, now=NOW).job_peers_only


def test_judged_ends_counts_its_jobs_connections_and_the_others():
    known = JobPeers([])
    known.owned_by_job = lambda pid, inodes: {20}  # type: ignore[method-assign]
    opened = judged_ends(KindFacts(), 1, _AcceptedEnds(opened={10: 20, 11: 21}, established=4,
                                                       to_self=1), known, NOW)
    assert (opened.job_connections, opened.outside_connections) == (1, 2)  # 21 and a remote
    same = judged_ends(opened, 1, _AcceptedEnds(opened={10: 20, 11: 21}, established=4,
                                                to_self=1), known, NOW + 10)
    assert (same.job_connections, same.outside_connections) == (1, 2)
    only = judged_ends(KindFacts(), 1, _AcceptedEnds(opened={10: 20}, established=2, to_self=1),
                       known, NOW)
    assert (only.job_connections, only.outside_connections) == (1, 0)
    none = judged_ends(only, 1, _AcceptedEnds(), known, NOW + 10)  # its connection closed
    assert (none.job_connections, none.outside_connections) == (0, 0)
