"""Which UDP sockets make a process a server (probe 143 F10, F7): an unconnected socket bound to
a port outside the host's ephemeral range, on any address, IPv4 or IPv6. A client's socket
(statsd, DNS: a sendto from an unbound socket gets an ephemeral port) or a connected one does
not. The tables are the namespace's, read as hostile data: malformed rows are skipped, a table
past the read cap makes "no port seen" unknown."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil
import pytest
from simhost import poll
from test_idle_means_idle import WAITING, advice, held

from daemon.analysis.kinds import (
    ONLINE_INFERENCE,
    TRAINING,
    Kind,
    classify_kind,
    recorded_kind,
    served_on,
    serving_parent,
)
from daemon.api import actions
from daemon.runtime.kinds import configured_kind
from daemon.sources import kindfacts
from daemon.sources.kindfacts import (
    EPHEMERAL_DEFAULT,
    KindFacts,
    parse_ephemeral_range,
    parse_tcp_rows,
    read_kind_facts,
    udp_sockets,
)

HEADER = (b"   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
          b"timeout inode ref pointer drops\n")
ZERO6 = b"00000000000000000000000000000000"


def row(local: bytes, remote: bytes, state: bytes, inode: int) -> bytes:
    return (b"  1: " + local + b" " + remote + b" " + state
            + b" 00000000:00000000 00:00000000 00000000     0        0 "
            + str(inode).encode() + b" 2 0000000000000000 0\n")


TABLE = HEADER + b"".join((
    row(b"00000000:270F", b"00000000:0000", b"07", 11),  # 0.0.0.0:9999, unconnected
    row(b"0100007F:270E", b"00000000:0000", b"07", 12),  # 127.0.0.1:9998, unconnected
    row(b"0100007F:5208", b"0100007F:0035", b"01", 13),  # 127.0.0.1:21000 connected to :53
    row(b"00000000:AD7D", b"00000000:0000", b"07", 14),  # 0.0.0.0:44413 (ephemeral): a client
    row(ZERO6 + b":14E9", ZERO6 + b":0000", b"07", 15),  # [::]:5353
    row(b"0000000000000000FFFF00000100007F:1F40", ZERO6 + b":0000", b"07", 16),  # v4-mapped 8000
    row(b"00000000:2710", b"00000000:0000", b"07", 99),  # 0.0.0.0:10000, not its socket
    row(b"00000000:0000", b"00000000:0000", b"07", 17),  # port 0: not bound
    row(b"0100007F:B82F", b"00000000:0000", b"07", 18),  # 127.0.0.1:47151 (ephemeral): bound
    row(ZERO6 + b":B830", ZERO6 + b":0000", b"07", 19),  # [::]:47152 (ephemeral): a client's
    row(b"00000000000000000000000001000000:B831", ZERO6 + b":0000", b"07", 20),  # [::1]:47153
))


def test_unconnected_sockets_on_fixed_ports_are_listening_and_the_rest_not():
    rows = parse_tcp_rows(TABLE)
    mine = {11, 12, 13, 14, 15, 16, 17}
    assert udp_sockets(mine, rows, EPHEMERAL_DEFAULT).listening == (5353, 8000, 9998, 9999)
    assert udp_sockets({13, 14, 17, 19}, rows, EPHEMERAL_DEFAULT).listening == ()  # connected, clients
    assert udp_sockets(set(), rows, EPHEMERAL_DEFAULT).listening == ()
    # a host whose ephemeral range starts low takes 9999 on 0.0.0.0 as a client's port, not
    # 9998 bound on 127.0.0.1 (or 8000 on a v4-mapped 127.0.0.1)
    assert udp_sockets(mine, rows, (9000, 65000)).listening == (5353, 8000, 9998)
    assert udp_sockets({14}, rows, (1024, 40000)).listening == (44413,)
    # an ephemeral port bound on an address of its own: only bind() names one
    assert udp_sockets({18, 19, 20}, rows, EPHEMERAL_DEFAULT).listening == (47151, 47153)


def test_unconnected_sockets_on_all_addresses_on_ephemeral_ports_are_kept_apart():
    """What UdpSockets.listening leaves out as a client's, a server's too where it bound such a port
    (probe 143 F10: camdetect_udp.py on 0.0.0.0:47151): kept apart, the rules look first."""
    rows = parse_tcp_rows(TABLE)
    mine = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
    assert udp_sockets(mine, rows, EPHEMERAL_DEFAULT).wildcard == (44413, 47152)
    assert not set(udp_sockets(mine, rows, EPHEMERAL_DEFAULT).wildcard) & set(
        udp_sockets(mine, rows, EPHEMERAL_DEFAULT).listening)
    assert udp_sockets({13, 17}, rows, EPHEMERAL_DEFAULT).wildcard == ()  # connected, not bound
    assert udp_sockets({11, 15}, rows, (1024, 65000)).wildcard == (5353, 9999)
    assert udp_sockets({14, 19}, rows, (1024, 40000)).wildcard == ()  # 44413, 47152 above it now


def test_malformed_and_huge_rows_are_skipped():
    hostile = HEADER + b"".join((
        b"garbage\n", b"\xff\xfe" * 40 + b"\n", b"  1: 00000000:ZZZZ 00000000:0000 07 0 0 0 0 0 "
        b"21 2\n", b"  1: 00000000:270F 00000000:0000 07 0 0 0 0 0 notanumber 2\n",
        b"  1: 00000000:" + b"F" * 5000 + b" 00000000:0000 07 0 0 0 0 0 22 2\n",  # port > 65535
        b"  1: 00000000:270F 00000000 07 0 0 0 0 0 23 2\n",  # remote with no port
        b"  1: 00000000:270F :0000 07 0 0 0 0 0 24 2\n",  # remote with no address
        b"  1: 00000000:270F 00000000:0000 07 0 0 0 0 0 " + b"9" * 4000 + b" 2\n",
        row(b"00000000:270F", b"00000000:0000", b"07", 25)))
    rows = parse_tcp_rows(hostile)
    assert udp_sockets({21, 22, 23, 24, 25}, rows, EPHEMERAL_DEFAULT).listening == (9999,)
    assert udp_sockets({21, 22, 23, 24, 25}, rows, (1024, 65000)).wildcard == (9999,)
    # many rows: bounded to MAX_PORTS ports, sorted
    many = HEADER + b"".join(row(b"00000000:%04X" % (1000 + i), b"00000000:0000", b"07", i)
                             for i in range(1, 200))
    ports = udp_sockets(set(range(1, 200)), parse_tcp_rows(many), EPHEMERAL_DEFAULT).listening
    assert ports == tuple(range(1001, 1001 + kindfacts.MAX_PORTS))
    assert udp_sockets(set(range(1, 200)), parse_tcp_rows(many), (1000, 2000)).wildcard == ports


@pytest.mark.parametrize("text, expected", [
    (b"32768\t60999\n", (32768, 60999)), (b"1024 65000", (1024, 65000)),
    (b"", EPHEMERAL_DEFAULT), (b"abc def", EPHEMERAL_DEFAULT), (b"5000 3000", EPHEMERAL_DEFAULT),
    (b"1 2 3", EPHEMERAL_DEFAULT), (b"0 100", EPHEMERAL_DEFAULT),
    (b"1024 70000", EPHEMERAL_DEFAULT), (b"9" * 60, EPHEMERAL_DEFAULT)])
def test_the_ephemeral_range_read_or_linuxs_default(text, expected):
    assert parse_ephemeral_range(text) == expected


def fixed_port_socket(family: int, host: str) -> socket.socket:
    """A UDP socket bound to a free port below this host's ephemeral range."""
    low = kindfacts.ephemeral_range()[0]
    for port in range(max(low - 12000, 1024), low):
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((host, port))
            return sock
        except OSError:
            sock.close()
    raise AssertionError("no free UDP port below the ephemeral range")


def test_this_processs_own_sockets_read_from_proc():
    """Real sockets of this process, read from /proc as the daemon reads any process's."""
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # statsd-like: unbound, sendto
    client.sendto(b"job.step:1|c", ("127.0.0.1", 8125))
    v4, v6 = fixed_port_socket(socket.AF_INET, "0.0.0.0"), fixed_port_socket(
        socket.AF_INET6, "::")
    loopback = fixed_port_socket(socket.AF_INET, "127.0.0.1")
    connected = fixed_port_socket(socket.AF_INET, "127.0.0.1")
    connected.connect(("127.0.0.1", 53))
    named = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the kernel's port, our address
    named.bind(("127.0.0.1", 0))
    wildcard = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the kernel's port, any address
    wildcard.bind(("0.0.0.0", 0))
    try:
        facts = read_kind_facts(os.getpid(), time.time())
        ports = set(facts.udp_ports)
        assert {v4.getsockname()[1], v6.getsockname()[1], loopback.getsockname()[1],
                named.getsockname()[1]} <= ports
        assert client.getsockname()[1] not in ports
        assert connected.getsockname()[1] not in ports
        # the client's port, and one a server bound there, are kept apart: no table tells them
        assert client.getsockname()[1] in facts.udp_wildcard_ports
        assert wildcard.getsockname()[1] in facts.udp_wildcard_ports
        assert not ports & set(facts.udp_wildcard_ports)
        assert connected.getsockname()[1] not in facts.udp_wildcard_ports
    finally:
        for sock in (client, v4, v6, loopback, connected, named, wildcard):
            sock.close()


def test_a_udp_listener_is_a_server_and_a_statsd_client_a_job():
    facts = KindFacts(udp_ports=(9999,))
    kind = classify_kind("python3 detect.py", facts, gpu_use="bursty")
    assert kind.kind == ONLINE_INFERENCE and kind.serves and kind.udp_ports == (9999,)
    assert "listens on UDP port 9999" in kind.evidence
    assert not any("no port it serves" in e for e in kind.evidence)
    job = classify_kind("python3 train.py", KindFacts(), gpu_use="bursty")
    assert job.kind == TRAINING and not job.serves


def test_where_a_server_serves_in_words():
    assert served_on((8000,), (), 0) == "TCP port 8000"
    assert served_on((8000, 8001), (9999,), 1) == \
        "TCP ports 8000, 8001; UDP port 9999; 1 unix socket"
    assert served_on((), (), 2) == "2 unix sockets"  # probe 143 F3: not "TCP no port seen"
    assert served_on((), (), 0) == "no port seen"


def test_a_child_of_a_udp_server_is_its_worker():
    assert serving_parent(50, KindFacts(udp_ports=(9999,)), KindFacts()) == 50
    assert serving_parent(50, KindFacts(udp_ports=(9999,)), KindFacts(parent="torchrun")) == 0


LISTENER = """
import socket, sys, time
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for port in range(max(low - 12000, 1024), low):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("0.0.0.0", port))
        break
    except OSError:
        s.close()
print(port, flush=True)
time.sleep(300)
"""
CLIENT = """
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b"job.step:1|c", ("127.0.0.1", 8125))
print(s.getsockname()[1], flush=True)
time.sleep(300)
"""


@pytest.fixture
def child():
    started = []

    def start(program: str) -> tuple[int, int]:
        proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE,
                                text=True)
        started.append(proc)
        return proc.pid, int(proc.stdout.readline())

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


WILDCARD_LISTENER = """
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 0))  # the kernel's port: inside the ephemeral range, as 47151 is
print(s.getsockname()[1], flush=True)
time.sleep(300)
"""
SELECT_WAIT = "waiting in select (selectors.py:468 EpollSelector.select)"
SLEEP_WAIT = "sleeping or waiting: `time.sleep(30)` with the GPU idle"


def seen(ports: list[int], reason: str) -> dict:
    """What idle_gpu_held's evidence says the rules saw when they offered the SIGTERM."""
    return {"udp_wildcard_ports": ports, "waiting_in": [
        {"file": "/srv/job.py", "line": 9, "function": "main", "reason": reason}]}


def test_the_action_refuses_a_udp_listener_and_not_a_statsd_client(child):
    pid, port = child(LISTENER)
    with pytest.raises(actions.ActionError) as refused:
        actions._refuse_a_server(pid, psutil.Process(pid))
    assert refused.value.status == 409
    assert f"is serving (it listens on UDP port {port})" in str(refused.value)
    client, client_port = child(CLIENT)
    # a client the rules offered the SIGTERM while it slept with this socket: not refused
    actions._refuse_a_server(client, psutil.Process(client), seen([client_port], SLEEP_WAIT))


def test_the_action_looks_first_where_the_rules_would_at_a_udp_port_on_all_addresses(child):
    """Probe 143 F10: the live check before a SIGTERM let camdetect_udp.py (0.0.0.0:47151)
    through. A socket on all addresses on an ephemeral port is a client's or a server's; the
    rules look first where the stacks wait on sockets, and so does this check: it refuses
    unless the rules saw that socket with stacks that do not wait on it."""
    pid, port = child(WILDCARD_LISTENER)
    assert kindfacts.ephemeral_range()[0] <= port <= kindfacts.ephemeral_range()[1]
    for said in (seen([port], SELECT_WAIT), seen([], SLEEP_WAIT), None,
                 {"waiting_in": "hostile", "udp_wildcard_ports": [port]}):
        with pytest.raises(actions.ActionError) as refused:
            actions._refuse_a_server(pid, psutil.Process(pid), said)
        assert refused.value.status == 409, said
        assert (f"may be serving datagrams (it holds UDP port {port} on all addresses"
                in str(refused.value)), str(refused.value)
        assert f"ss -uanp | grep 'pid={pid},'" in str(refused.value)
    actions._refuse_a_server(pid, psutil.Process(pid), seen([port], SLEEP_WAIT))


def test_the_sigterm_action_reads_what_the_rules_saw_from_its_recommendation(child):
    """apply() hands the recommendation's evidence to the live check (a dry run, as the API's)."""
    pid, port = child(WILDCARD_LISTENER)
    start = psutil.Process(pid).create_time()

    def rec(reason: str) -> dict:
        return {"id": "r1", "action": {"kind": "sigterm", "pid": pid, "start_time": start},
                "evidence": {"no_sign_of_work": seen([port], reason)}}

    with pytest.raises(actions.ActionError) as refused:
        actions.apply(rec(SELECT_WAIT), dry_run=True, allow_actions=True)
    assert refused.value.status == 409 and "may be serving datagrams" in str(refused.value)
    dry = actions.apply(rec(SLEEP_WAIT), dry_run=True, allow_actions=True)
    assert dry.dry_run and dry.refused is None, dry
    assert f"would send SIGTERM to pid {pid}" in dry.message, dry
    assert psutil.pid_exists(pid)


def test_a_cut_udp_table_that_hides_a_listener_leaves_it_unknown(child, monkeypatch):
    pid, port = child(LISTENER)
    monkeypatch.setattr(kindfacts, "MAX_NET_BYTES", 2048)  # ~13 rows
    fillers: list[socket.socket] = []

    def hidden() -> bool:
        for _ in range(50):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            fillers.append(sock)
        rows, cut, _ = kindfacts._udp_rows(pid, None)
        return bool(cut) and port not in {r[0] for r in rows}

    try:
        poll(hidden, 60, "the listener's row past the cap", every=0)
        facts = read_kind_facts(pid, time.time())
        assert facts.udp_ports == () and facts.sockets_unknown
        # (its evidence names no TCP table alone: the table cut was UDP's; probe 146)
        evidence = classify_kind("python serve.py", facts, {}).evidence
        assert any("(TCP or UDP)" in e for e in evidence), evidence
        with pytest.raises(actions.ActionError) as refused:
            actions._refuse_a_server(pid, psutil.Process(pid))
        assert refused.value.status == 409 and "may be serving" in str(refused.value)
    finally:
        for sock in fillers:
            sock.close()


def test_waiting_on_sockets_with_a_udp_port_on_all_addresses_looks_first_and_a_sleeper_not():
    """Probe 143 F10: camdetect_udp.py (an asyncio datagram endpoint on 0.0.0.0:47151, a port
    in the ephemeral range) waiting for its next datagram was offered SIGTERM. Its stacks wait
    on its sockets: look first, saying where it may serve. A statsd client sleeping in
    time.sleep holds the same socket and keeps its SIGTERM."""
    kind = Kind(TRAINING, 0.5, ("bursty",), udp_wildcard_ports=(47151,))
    [rec] = advice(held(), {"idle": WAITING}, kind=kind)["idle_gpu_held"]
    assert rec.action["kind"] == "copy_commands", rec.action
    text = rec.action["text"]
    assert "holds UDP port 47151 on all addresses" in text and "serving datagrams" in text
    assert "nb.py:12" in text, text  # where it waits
    assert rec.action["commands"][0].startswith("ss -uanp | grep 'pid=42,'"), rec.action
    assert rec.evidence["no_sign_of_work"]["udp_wildcard_ports"] == [47151]
    sleeping = {"share": 1.0, "seconds": 600.0, "top_stacks": [
        {"file": "/home/me/job.py", "line": 7, "function": "main", "samples": 40,
         "reason": "sleeping or waiting: `time.sleep(30)` with the GPU idle"}]}
    [rec] = advice(held(), {"idle": sleeping}, kind=kind)["idle_gpu_held"]
    assert rec.action["kind"] == "sigterm", rec.action
    [rec] = advice(held(), {"idle": WAITING}, kind=Kind(TRAINING, 0.5, ("bursty",)))[
        "idle_gpu_held"]
    assert rec.action["kind"] == "sigterm", rec.action  # no such socket: as before


def test_the_udp_ports_on_all_addresses_are_carried_and_stored():
    kind = classify_kind("python3 detect.py", KindFacts(udp_wildcard_ports=(47151, 47152)),
                         gpu_use="bursty")
    assert kind.udp_wildcard_ports == (47151, 47152) and not kind.serves
    assert kind.as_dict()["udp_wildcard_ports"] == [47151, 47152]
    assert configured_kind("training", "job", kind).udp_wildcard_ports == (47151, 47152)
    assert recorded_kind(kind.as_dict())["udp_wildcard_ports"] == [47151, 47152]
    hostile = {"udp_wildcard_ports": [True, -1, 0, 70000, "47151", 47151.0, 47153, *[1] * 40]}
    assert recorded_kind(hostile)["udp_wildcard_ports"] == [47153] + [1] * 9  # of 16 read
    assert recorded_kind({"udp_wildcard_ports": "47151"})["udp_wildcard_ports"] == []


@pytest.mark.parametrize("kind, said", [
    (Kind(ONLINE_INFERENCE, 0.8, serves=True, udp_ports=(9999,)), "serves (UDP port 9999)"),
    # probe 143 F3: a unix-socket server read "serves (TCP no port seen)"
    (Kind(ONLINE_INFERENCE, 0.8, serves=True, unix_listening=1), "serves (1 unix socket)"),
    (Kind(ONLINE_INFERENCE, 0.8, serves=True, listening_ports=(8000,)),
     "serves (TCP port 8000)")])
def test_an_idle_servers_advice_says_where_it_serves_and_never_the_sigterm(kind, said):
    found = advice(held(), {"idle": WAITING}, kind=kind)
    assert "idle_gpu_held" not in found, sorted(found)
    [rec] = found["idle_server"]
    assert said in rec.summary and "no port seen" not in rec.summary, rec.summary
