"""A hostile client against a real mlcostd (issue 10, items 3, 5 and 12, and the fault suite),
on loopback only: malformed requests that carry the right token, a flood of idle connections, a
descriptor flood past the daemon's file limit, a slowloris, a lying Content-Length, API inputs
that used to end in a 500; and headers never reach the log."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import resource
import socket
import subprocess
import time
from pathlib import Path

import aiohttp
import faultkit
import livedaemon
import psutil
import pytest
from simhost import poll

from daemon.api.limits import MAX_CONNECTIONS, MAX_HEADERS, REQUEST_TIMEOUT_S, RateLimitedLog

SLOW_TIMEOUT_S = 3.0  # the slowloris daemon's request timeout: a loaded machine's stall of a
# second or two between connecting and sending must not close a connection before it has sent
FLOOD = MAX_CONNECTIONS + 44  # idle connections, past the per-listener bound (bounded count)


@pytest.fixture(scope="module")
def daemon(shared_daemon):
    """The session's shared daemon (tests/conftest.py): these clients send it bad bytes and
    idle connections, which change nothing it records; the tests that need a daemon under a
    descriptor limit or at debug logging start their own."""
    return shared_daemon


@pytest.fixture(scope="module")
def token(daemon) -> str:
    path = daemon.socket.with_name("mlcostd.token")
    return poll(lambda: path.exists() and path.read_text().strip(), 30,
                f"the token file {path}", explain=daemon.log_tail)


@pytest.fixture(scope="module")
def port(daemon) -> int:
    return poll(daemon.tcp_port, 30, "the daemon's TCP port in its log", explain=daemon.log_tail)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT_S * 3)


def exchange(port: int, request: bytes) -> tuple[int, bytes]:
    """Send raw bytes, read the answer until the server closes: (status, body)."""
    with connect(port) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def health_over_tcp(port: int, token: str) -> dict:
    status, body = exchange(port, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: "
                            b"Bearer " + token.encode() + b"\r\nConnection: close\r\n\r\n")
    assert status == 200, body
    return json.loads(body)


def malformed(token: str) -> dict[str, bytes]:
    auth = b"Authorization: Bearer " + token.encode()
    return {
        "trailing control byte": b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + auth + b"\x01\r\n\r\n",
        "folded header": b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n  folded\r\n\r\n",
        "bare LF": b"GET /v1/health HTTP/1.1\nHost: x\n" + auth + b"\n\n",
        "oversized header": (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\nX-Big: "
                             + b"a" * 20000 + b"\r\n\r\n"),
        "token in the request line": b"GET /v1/" + token.encode() + b"\x00 HTTP/1.1\r\n\r\n",
    }


@pytest.mark.fault("malformed requests", "control bytes, folded headers, bare LF, oversized "
                   "headers, the token in the request line")
@pytest.mark.parametrize("case", list(malformed("t" * 32)))
def test_a_malformed_request_with_the_token_is_a_400_that_does_not_echo_it(daemon, token, port,
                                                                           case):
    status, body = exchange(port, malformed(token)[case])
    assert status == 400
    assert token.encode() not in body
    assert "error" in json.loads(body)


def test_parser_errors_log_one_line_per_kind_and_never_the_token(daemon, token, port):
    started = time.monotonic()
    for _ in range(200):  # bounded: 200 bad requests of one kind
        assert exchange(port, malformed(token)["trailing control byte"])[0] == 400
    minutes = int((time.monotonic() - started) // 60) + 1
    exchange(port, malformed(token)["oversized header"])
    poll(lambda: "longer than" in daemon.log(), 30, "the oversized header's log line",
         explain=daemon.log_tail)
    log = daemon.log()
    assert token not in log
    assert "Traceback" not in log and "Error handling request" not in log
    bad = [line for line in log.splitlines() if "malformed HTTP request (BadHttpMessage" in line]
    # one line for the first, then at most one a minute ("N more like this")
    assert 1 <= len(bad) <= minutes + 1, bad


@pytest.mark.parametrize("count", [MAX_HEADERS + 1, 5000])
def test_more_headers_than_the_limit_is_a_400_that_says_so(daemon, token, port, count):
    """More than 128 headers was answered `malformed HTTP request (BadHttpMessage: a control
    byte, a folded header, a bare LF or a bad header)` (probe 142 L2): none of those."""
    head = [b"Host: x", b"Authorization: Bearer " + token.encode()]
    head += [b"X-H%d: v" % i for i in range(count - len(head))]
    status, body = exchange(port, b"GET /v1/health HTTP/1.1\r\n" + b"\r\n".join(head)
                            + b"\r\n\r\n")
    error = json.loads(body)["error"]
    assert status == 400 and error == f"the request has more than {MAX_HEADERS} headers; send " \
                                      "fewer", error
    assert token.encode() not in body
    poll(lambda: f"more than {MAX_HEADERS} headers" in daemon.log(), 30,
         "the log line about too many headers", explain=daemon.log_tail)
    assert health_over_tcp(port, token)["ok"]


@pytest.mark.parametrize("name", [b"Host", b"content-length"])
def test_a_header_sent_twice_that_may_come_once_is_a_400_that_names_it(daemon, token, port,
                                                                       name):
    """A second Host (or Content-Length) header was answered the generic `malformed HTTP
    request (BadHttpMessage: ...)`; it now names the header (note61 left it)."""
    head = [b"Host: x", b"Authorization: Bearer " + token.encode(), b"Content-Length: 0",
            name + b": 0"]
    status, body = exchange(port, b"GET /v1/health HTTP/1.1\r\n" + b"\r\n".join(head)
                            + b"\r\n\r\n")
    shown = {b"Host": "Host", b"content-length": "Content-Length"}[name]
    assert status == 400
    assert json.loads(body)["error"] == f"the request has the {shown} header more than once; " \
                                        "send it once"
    assert token.encode() not in body
    poll(lambda: f"the {shown} header more than once" in daemon.log(), 30,
         "the log line about the header sent twice", explain=daemon.log_tail)
    assert health_over_tcp(port, token)["ok"]


def test_a_kind_held_back_is_counted_in_its_next_line_a_minute_later(caplog):
    now = [1000.0]
    limited = RateLimitedLog(logging.getLogger("test.limits"), every_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.limits"):
        for _ in range(5):
            limited(logging.WARNING, "bad", "bad request")
        limited(logging.WARNING, "other", "another kind")
        now[0] += 61
        limited(logging.WARNING, "bad", "bad request")
    assert [r.getMessage() for r in caplog.records] == [
        "bad request", "another kind", "bad request (4 more like this in the last 61 s)"]


@pytest.mark.fault("connection flood", f"{FLOOD} idle TCP connections, past the bound")
def test_an_idle_flood_leaves_the_api_answering_and_descriptors_bounded(daemon, token, port):
    proc = psutil.Process(daemon.pid)
    before = proc.num_fds()
    flood: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            flood.append(connect(port))
        # every flood connection was accepted (then the longest-open ones closed); the API
        # still answers, on TCP and on the unix socket
        assert health_over_tcp(port, token)["ok"]
        assert daemon.call("health").ok
        assert proc.num_fds() <= before + MAX_CONNECTIONS + 8
        poll(lambda: "connections open (the limit)" in daemon.log(), 30,
             "the log line about the connection limit", explain=daemon.log_tail)
        # the evicted connections were closed by the daemon: they read EOF
        closed = sum(1 for sock in flood[:FLOOD - MAX_CONNECTIONS] if _closed_by_peer(sock))
        assert closed == FLOOD - MAX_CONNECTIONS
    finally:
        for sock in flood:
            sock.close()
    log = daemon.log()
    assert len([line for line in log.splitlines() if "connections open" in line]) <= 2


@pytest.mark.fault("slowloris", "a header never finished, a silent connection, a lying "
                   "Content-Length")
def test_slowloris_idle_and_lying_content_length_connections_are_closed(tmp_path):
    """Its own daemon, whose [api] request_timeout is the config's shortest few seconds rather
    than the default 20 s the shared daemon waits (the same deadline, read from the config)."""
    daemon = livedaemon.start(tmp_path, "idle-host", interval=0.5,
                              config={"api": {"request_timeout": f"{SLOW_TIMEOUT_S:g}s"}},
                              args=["--listen", "127.0.0.1:0"])
    try:
        port = poll(daemon.tcp_port, 30, "the TCP port", explain=daemon.log_tail)
        token = daemon.socket.with_name("mlcostd.token").read_text().strip()
        _slowloris(port, token)
    finally:
        assert daemon.stop() == 0, daemon.log_tail()


def _slowloris(port: int, token: str) -> None:
    slow = connect(port)
    slow.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finishes
    idle = connect(port)  # sends nothing at all
    lying = connect(port)
    lying.sendall(b"POST /v1/recommendations/x/snooze HTTP/1.1\r\nHost: x\r\nAuthorization: "
                  b"Bearer " + token.encode() + b"\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"hours\": 1")
    try:
        for sock in (slow, idle):
            assert _closed_by_peer(sock), "the daemon left a connection open past its timeout"
        data = b""
        while chunk := lying.recv(65536):
            data += chunk
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert b"Content-Length" in data and token.encode() not in data
    finally:
        for sock in (slow, idle, lying):
            sock.close()
    assert health_over_tcp(port, token)["ok"]


def _closed_by_peer(sock: socket.socket) -> bool:
    """True once the daemon closes the connection (EOF or reset); waits at most the socket's
    timeout (three times the daemon's request timeout)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


async def _raw(socket_path: Path, method: str, path: str, data: bytes | None = None,
               headers: dict | None = None) -> tuple[int, dict]:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        async with session.request(method, "http://x" + path, data=data,
                                   headers=headers or {}) as response:
            return response.status, await response.json(content_type=None)


BAD_INPUTS = [
    ("POST", "/v1/recommendations/x/snooze", b"[" * 60000, {}, "nested too deeply"),
    ("POST", "/v1/recommendations/x/apply", b'{"a":' * 9000 + b"1" + b"}" * 9000, {},
     "nested too deeply"),
    ("POST", "/v1/recommendations/x/snooze", b"not gzip at all",
     {"Content-Encoding": "gzip"}, "Content-Encoding"),
    ("GET", "/v1/history?metric=utilization&gpu=99999999999999999999", None, {},
     "GPU index"),
    ("GET", "/v1/history?metric=sm_share&process=99999999999999999999:1.0", None, {},
     "pid"),
    ("GET", "/v1/history?metric=sm_share&process=1:nan", None, {}, "start time"),
    ("GET", "/v1/processes/1:inf/phases", None, {}, "start time"),
    ("GET", "/v1/processes/99999999999999999999:1.5/phases", None, {}, "pid"),
    ("GET", "/v1/history?metric=sm_share&process=1:1e400", None, {}, "start time"),
]


@pytest.mark.fault("huge ids and bad bodies", "ids past SQLite's integers, nan/inf keys, "
                   "deep JSON, bad gzip")
@pytest.mark.parametrize("method, path, body, headers, message", BAD_INPUTS,
                         ids=[f"{m} {p[:40]} {(b or b'')[:8]!r}" for m, p, b, _h, _x in
                              BAD_INPUTS])
def test_inputs_that_were_500s_are_400s_that_say_why(daemon, method, path, body, headers,
                                                      message):
    status, answer = asyncio.run(_raw(daemon.socket, method, path, body, headers))
    assert status == 400, answer
    assert message in answer["error"]
    assert daemon.call("health").ok
    assert not re.search(r"Traceback|internal error", daemon.log())


def test_a_handler_bug_logs_its_traceback_once_per_route_and_kind(caplog):
    """A 500 (a bug in a handler) logs its traceback once, then holds the repeats back."""
    from aiohttp.test_utils import TestClient, TestServer

    from daemon.api.server import make_app

    class Broken:
        def now(self):
            raise RuntimeError("a bug in the document builder")

        def now_body(self):  # what the route asks for: the document, encoded
            return self.now()

    async def main() -> list[int]:
        async with TestClient(TestServer(make_app(Broken()), host="127.0.0.1")) as client:
            statuses = []
            for _ in range(20):  # bounded
                async with client.get("/v1/now") as response:
                    statuses.append(response.status)
            return statuses

    with caplog.at_level(logging.ERROR, logger="daemon.api.server"):
        assert set(asyncio.run(main())) == {500}
    failed = [r for r in caplog.records if "API GET /v1/now failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None


# ----------------------------------------------- a descriptor flood at a 1024-file limit

FD_LIMIT = 1024
FD_FLOOD = 1100  # the reproduction: more idle connections than the daemon may open


@pytest.mark.fault("descriptor flood", f"{FD_FLOOD} idle TCP connections at a {FD_LIMIT}-file "
                   "limit")
def test_a_descriptor_flood_leaves_health_answering_and_every_gpu_recorded(tmp_path):
    scenario = faultkit.scenario(tmp_path, gpus=2)
    flooded = livedaemon.start(tmp_path / "run", scenario, interval=0.5,
                               args=["--listen", "127.0.0.1:0"])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        subprocess.run(["prlimit", f"--pid={flooded.pid}", f"--nofile={FD_LIMIT}:{FD_LIMIT}"],
                       check=True)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FD_FLOOD + 200), hard))
        port = poll(flooded.tcp_port, 30, "the TCP port", explain=flooded.log_tail)
        log_before = flooded.log_path.stat().st_size
        first_tick = flooded.call("health").tick
        flood: list[socket.socket] = []
        latencies = []
        try:
            for _ in range(FD_FLOOD):
                try:
                    flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                except OSError:
                    break  # the backlog is full: the flood is as big as it gets
            for _ in range(3):
                started = time.monotonic()
                assert flooded.call("health").ok
                latencies.append(time.monotonic() - started)
            flooded.wait_for_ticks(len(flooded.ticks()) + 6)
            last_tick = flooded.call("health").tick
            log_growth = flooded.log_path.stat().st_size - log_before
        finally:
            for sock in flood:
                sock.close()
        assert flooded.call("health").ok
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        code = flooded.stop()
    # how fast health answers is a figure of bench/flood.py (no timed assertions here)
    print(f"\ndescriptor flood: {len(flood)} connections; health answered in "
          f"{', '.join(f'{s * 1000:.0f} ms' for s in latencies)}; log grew {log_growth} bytes")
    assert code == 0, flooded.log_tail()
    assert len(flood) >= FD_LIMIT  # past the daemon's own file limit
    assert log_growth < 1 << 20
    samples = [s for s in faultkit.recorded(flooded.db) if first_tick <= s.tick <= last_tick]
    assert faultkit.contiguous([s.tick for s in samples]) and len(samples) >= 6
    assert all([g.status for g in s.gpus] == ["ok", "ok"] for s in samples), [
        [g.status for g in s.gpus] for s in samples]
    assert "Traceback" not in flooded.log()


# ----------------------------------------------------------- headers never reach the log

CANARY = "canary-5f2a9d-header-value"


def test_aiohttp_never_logs_a_header_even_at_debug(tmp_path):
    """At --log-level debug, requests good and bad (a 404, a 401, malformed ones, an oversized
    header, a handler's 400) carrying a canary in headers: no log line holds the canary or the
    token, whatever aiohttp's access and error logs do."""
    daemon = livedaemon.start(tmp_path, "idle-host", interval=0.5,
                              args=["--listen", "127.0.0.1:0", "--log-level", "debug"])
    try:
        port = poll(daemon.tcp_port, 30, "the TCP port", explain=daemon.log_tail)
        token = daemon.socket.with_name("mlcostd.token").read_text().strip()
        canary = f"X-Canary: {CANARY}\r\nUser-Agent: {CANARY}\r\nCookie: c={CANARY}\r\n"
        auth = f"Authorization: Bearer {token}\r\n"
        requests = [
            f"GET /v1/health HTTP/1.1\r\nHost: x\r\n{auth}{canary}Connection: close\r\n\r\n",
            f"GET /v1/nowhere HTTP/1.1\r\nHost: x\r\n{auth}{canary}Connection: close\r\n\r\n",
            f"GET /v1/now HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {CANARY}\r\n"
            f"{canary}Connection: close\r\n\r\n",
            f"GET /v1/history?gpu=nan HTTP/1.1\r\nHost: x\r\n{auth}{canary}Connection: "
            "close\r\n\r\n",
            f"GET /v1/health HTTP/1.1\r\nHost: x\r\n{auth}{canary}X-Bad: a\x01\r\n\r\n",
            f"GET /v1/health HTTP/1.1\r\nHost: x\r\n{auth}{canary}  folded\r\n\r\n",
            f"GET /v1/health HTTP/1.1\r\nHost: x\r\n{auth}{canary}X-Big: {'a' * 20000}"
            "\r\n\r\n",
            f"POST /v1/recommendations/x/apply HTTP/1.1\r\nHost: x\r\n{auth}{canary}"
            "Content-Type: application/json\r\nContent-Length: 3\r\nConnection: close"
            "\r\n\r\n{{{",
        ]
        statuses = [exchange(port, request.encode())[0] for request in requests]
        assert statuses[0] == 200 and statuses[1] == 404 and statuses[2] == 401, statuses
        assert all(status >= 400 for status in statuses[3:]), statuses
        assert daemon.healthy()
    finally:
        assert daemon.stop() == 0
    log = daemon.log()
    assert " DEBUG " in log  # debug logging was on
    assert CANARY not in log and token not in log
    assert "Authorization" not in log and "Cookie" not in log


async def _raw_bytes(socket_path: Path, method: str, path: str,
                     body: dict | None = None) -> tuple[int, bytes]:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.request(method, "http://x" + path, json=body) as response:
            return response.status, await response.read()


LONG = "A" * 7000
DIGITS = "9" * 4000
# An error that names its parameter and what is allowed fits in this, whatever was sent (the
# longest, "not a GPU metric; one of ...", lists the metrics: about 350 bytes).
ERROR_BYTES = 600
# (method, path, JSON body, status, what the error names): a request value each handler quotes.
LONG_VALUES = [
    ("GET", f"/v1/history?gpu=0&metric={LONG}", None, 400, "metric="),
    ("GET", f"/v1/history?process=1:1&metric={LONG}", None, 400, "metric="),
    ("GET", f"/v1/history?gpu=0&since={DIGITS}", None, 400, "since="),
    ("GET", f"/v1/history?gpu=0&points={DIGITS}", None, 400, "points="),
    ("GET", f"/v1/history?gpu={DIGITS}", None, 400, "gpu="),
    ("GET", f"/v1/history?metric=sm_share&process={DIGITS}:1", None, 400, "pid"),
    ("GET", f"/v1/processes/{DIGITS}:1/phases", None, 400, "pid"),
    ("GET", f"/v1/processes/{'9' * 5000}:1/phases", None, 400, "pid"),  # past int()'s limit
    ("GET", f"/v1/processes/1:{'1' * 5000}/phases", None, 400, "start time"),
    ("GET", f"/v1/processes/1:0.{'0' * 5000}/phases", None, 404, "no process"),
    ("GET", f"/v1/processes/{LONG}/phases", None, 400, "process key"),
    ("GET", f"/v1/processes/1:1/phases?since={DIGITS}", None, 400, "since="),
    ("POST", "/v1/recommendations/x/apply", {"dry_run": LONG * 8}, 400, "dry_run="),
    ("POST", "/v1/recommendations/x/apply", {"dry_run": [LONG] * 8}, 400, "dry_run="),
    ("POST", f"/v1/recommendations/{LONG}/apply", {"dry_run": True}, 404,
     "no active recommendation"),
    ("POST", "/v1/recommendations/x/snooze", {"hours": LONG * 8}, 400, "hours="),
    ("POST", "/v1/recommendations/x/snooze", {"hours": int(DIGITS)}, 400, "hours="),
    ("POST", f"/v1/recommendations/{LONG}/snooze", {"hours": 1}, 404,
     "no active recommendation"),
    ("DELETE", f"/v1/recommendations/{LONG}/snooze", None, 404, "is not snoozed"),
    ("GET", f"/v1/idle?for={DIGITS}", None, 400, "for="),
    ("GET", f"/v1/snapshots/{LONG}.db", None, 400, "is not a snapshot file name"),
    ("POST", "/v1/snapshots", {"since": LONG * 8}, 400, "since="),
    ("POST", "/v1/snapshots", {"since": "1h", "until": LONG * 8}, 400, "until="),
    ("POST", "/v1/snapshots", {"upload": LONG * 8}, 400, "upload="),
]


@pytest.mark.fault("long request values", "7,000-character parameters, 4,000-digit pids, "
                   "60 KiB JSON strings quoted in errors")
@pytest.mark.parametrize("method, path, body, status, names", LONG_VALUES,
                         ids=[f"{m} {p[:28]} {str(b)[:16]}" for m, p, b, _s, _n in LONG_VALUES])
def test_an_error_quotes_a_long_request_value_cut_and_still_names_it(daemon, method, path, body,
                                                                     status, names):
    """Errors name the bad value, but a client's value came back whole: a 7,141-byte error for
    a 7,000-character metric, a pid's 4,000 digits. Each is quoted cut (daemon.api.echo)."""
    answered, raw = asyncio.run(_raw_bytes(daemon.socket, method, path, body))
    assert answered == status, raw[:300]
    assert len(raw) <= ERROR_BYTES, (len(raw), raw[:300])
    assert names in json.loads(raw)["error"], raw
    assert LONG[:200].encode() not in raw and DIGITS[:200].encode() not in raw


def _first_line(sock: socket.socket, data: bytes = b"") -> tuple[bytes, bytes]:
    """The next line the server sends back (a 100 Continue or the final status), after what
    was read already (`data`), and what came after it in the same reads."""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    line, _, rest = data.partition(b"\r\n")
    return line, rest


def _rest_of_response(sock: socket.socket, rest: bytes = b"") -> tuple[bytes, bytes]:
    """The rest of a response's head after its first line, and its body (by Content-Length:
    a refused request's connection may linger open for the body the server never reads)."""
    while b"\r\n\r\n" not in rest and (chunk := sock.recv(65536)):
        rest += chunk
    head, _, body = rest.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length: *([0-9]+)", head)[1])
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return head, body


SNOOZE_BODY = b'{"hours": 1}'


def _expecting(path: str, auth: bytes = b"") -> bytes:
    """A POST that waits for 100 Continue before its body (RFC 9110 10.1.1), body not sent."""
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth
            + b"Content-Type: application/json\r\nContent-Length: %d\r\n"
              b"Expect: 100-continue\r\n\r\n" % len(SNOOZE_BODY))


def _invited_then_answered(sock: socket.socket, auth: bytes = b"") -> tuple[bytes, dict]:
    """Send an expecting POST; after the 100 Continue, its body: (final status line, JSON)."""
    sock.sendall(_expecting("/v1/recommendations/x/snooze", auth))
    line, rest = _first_line(sock)
    assert line == b"HTTP/1.1 100 Continue", line + rest
    while len(rest) < 2 and (chunk := sock.recv(65536)):
        rest += chunk
    assert rest[:2] == b"\r\n", rest  # a 100 has no header fields
    sock.sendall(SNOOZE_BODY)
    final, rest = _first_line(sock, rest[2:])
    return final, json.loads(_rest_of_response(sock, rest)[1])


@pytest.mark.parametrize("path", ["/v1/recommendations/x/snooze", "/v1/no-such-endpoint",
                                  "/metrics"])
def test_a_request_without_the_token_that_expects_100_continue_is_refused_before_its_body(
        daemon, port, path):
    """aiohttp answers `Expect: 100-continue` before any middleware runs: a client without the
    token was invited to send its body, then refused. The 401 comes first, and alone."""
    with connect(port) as sock:
        sock.sendall(_expecting(path))
        line, rest = _first_line(sock)
        assert line == b"HTTP/1.1 401 Unauthorized", line + rest
        head, body = _rest_of_response(sock, rest)
    assert b"Connection: close" in head  # it never reads the body: the client must not reuse
    assert "bearer token" in json.loads(body)["error"]


def test_a_request_with_the_token_that_expects_100_continue_is_invited_and_answered(
        daemon, token, port):
    with connect(port) as sock:
        status, answer = _invited_then_answered(
            sock, b"Authorization: Bearer " + token.encode() + b"\r\n")
    assert status == b"HTTP/1.1 404 Not Found", answer  # the body was read: no such one
    assert "no active recommendation" in answer["error"]


def test_the_unix_socket_needs_no_token_and_invites_the_body(daemon):
    """The unix socket's permissions are its access control: no token, so 100 Continue."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(REQUEST_TIMEOUT_S * 3)
        sock.connect(str(daemon.socket))
        status, answer = _invited_then_answered(sock)
    assert status == b"HTTP/1.1 404 Not Found", answer
    assert "no active recommendation" in answer["error"]
