"""What a request says is what the API does, against a real daemon on its unix socket (probe
142 L1, L3): a POST body's unknown key (a typo), a value of the wrong type or a key given
twice is a 400 naming it and the keys the route takes, where a default had been taken silently
(`{"sinse": "2h"}` took a 30-minute snapshot); a repeated query parameter is a 400, where the
first had been used silently; a client that closes its connection in the middle of a snapshot
download is one quiet line in the log, not an ERROR with a traceback."""

from __future__ import annotations

import asyncio
import json
import os
import socket

import aiohttp
import pytest
from simhost import poll

SNAPSHOT_KEYS = "since, until, html, upload"


async def _post(socket_path, path: str, body: bytes) -> tuple[int, dict]:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.post("http://mlcostd" + path, data=body,
                                headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.json()


async def _get(socket_path, path: str) -> tuple[int, dict]:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get("http://mlcostd" + path) as response:
            return response.status, await response.json()


def _snapshot_names(daemon) -> list[str]:
    return [s["name"] for s in daemon.call("snapshots")["snapshots"]]


@pytest.mark.parametrize("path, body, words", [
    # the probe's three: each took a default 30-minute snapshot (201)
    ("/v1/snapshots", b'{"hours": -1}', ["'hours'", SNAPSHOT_KEYS]),
    ("/v1/snapshots", b'{"dry_run": "no"}', ["'dry_run'", SNAPSHOT_KEYS]),
    ("/v1/snapshots", b'{"hours": 1e308}', ["'hours'", SNAPSHOT_KEYS]),
    ("/v1/snapshots", b'{"sinse": "2h"}', ["unknown key 'sinse'", "POST /v1/snapshots takes "
                                           + SNAPSHOT_KEYS]),
    ("/v1/snapshots", b'{"since": "2h", "html": false, "Since": "1s"}', ["'Since'"]),
    # a key twice: json.loads kept the last, silently
    ("/v1/snapshots", b'{"since": "1h", "since": "2s"}', ["'since' twice", SNAPSHOT_KEYS]),
    # wrongly typed: null took the default range
    ("/v1/snapshots", b'{"until": null}', ["until=None must be a time"]),
    ("/v1/snapshots", b'{"since": [7200]}', ["since=[7200] must be a duration"]),
    ("/v1/snapshots", b'{"since": true}', ["since=True must be a duration"]),
    ("/v1/recommendations/no-such/apply", b'{"dryrun": false}',
     ["unknown key 'dryrun'", "POST /v1/recommendations/{id}/apply takes dry_run, "
                              "accept_preliminary"]),
    ("/v1/recommendations/no-such/snooze", b'{"hour": 2}',
     ["unknown key 'hour'", "POST /v1/recommendations/{id}/snooze takes hours"]),
    ("/v1/recommendations/no-such/snooze", b'{"hours": 2, "hours": 3}', ["'hours' twice"]),
])
def test_a_post_body_with_an_unknown_key_or_a_wrong_type_is_a_400_naming_it(shared_daemon, path,
                                                                           body, words):
    before = _snapshot_names(shared_daemon)
    status, answer = asyncio.run(_post(shared_daemon.socket, path, body))
    assert status == 400, answer
    message = answer["error"]
    assert "\n" not in message and len(message) < 300, message
    for word in words:
        assert word in message, message
    assert _snapshot_names(shared_daemon) == before  # nothing was taken in its place


def test_a_body_of_known_keys_is_still_taken(shared_daemon):
    status, answer = asyncio.run(_post(shared_daemon.socket, "/v1/snapshots",
                                       json.dumps({"since": "2s", "html": False}).encode()))
    assert status == 201, answer
    assert answer["name"] in _snapshot_names(shared_daemon)
    # an empty body and an empty object take the defaults, as before
    status, answer = asyncio.run(_post(shared_daemon.socket, "/v1/recommendations/no-such/"
                                                             "snooze", b"{}"))
    assert status == 404 and "no active recommendation" in answer["error"], answer


@pytest.mark.parametrize("query, key", [
    ("/v1/history?metric=utilization&gpu=0&gpu=1", "'gpu' is given 2 times"),
    ("/v1/history?gpu=0&metric=utilization&metric=power_w&metric=x", "'metric' is given 3 times"),
    ("/v1/history?metric=utilization&gpu=0" + "&since=6" * 500, "'since' is given 500 times"),
    ("/v1/idle?for=0&for=600", "'for' is given 2 times"),
    ("/v1/compare?previous=a&previous=b", "'previous' is given 2 times"),
    ("/v1/processes/1:2.0/phases?since=5&since=6", "'since' is given 2 times"),
], ids=["gpu", "metric", "since-500", "idle", "compare", "phases"])
def test_a_repeated_query_parameter_is_a_400_that_says_so(shared_daemon, query, key):
    status, answer = asyncio.run(_get(shared_daemon.socket, query))
    assert status == 400, answer
    assert key in answer["error"] and "takes it once" in answer["error"], answer
    assert len(answer["error"]) < 200, answer


def test_a_query_of_parameters_given_once_is_still_answered(shared_daemon):
    status, answer = asyncio.run(_get(shared_daemon.socket,
                                      "/v1/history?metric=utilization&gpu=0&since=60"))
    assert status == 200 and answer["target"] == "gpu:0", answer


BIG_BYTES = 64 << 20  # far more than a unix socket's buffers hold


def test_a_client_that_closes_in_the_middle_of_a_snapshot_download_is_one_quiet_line(mlcostd):
    """A client reads part of a large snapshot and closes: the daemon logged `ERROR API GET
    /v1/snapshots/{name} failed` with a traceback (ConnectionResetError); it is a normal client
    event. The snapshot is the daemon's own file (in its index, the same inode), made large by
    appending to it: a store of 64 MB would take hours of recording."""
    daemon = mlcostd("idle-host", interval=0.5)
    daemon.wait_for_ticks(3)
    taken = daemon.call("take_snapshot", 60)
    path = taken["path"]
    with open(path, "ab") as f:
        f.truncate(BIG_BYTES)
    assert os.path.getsize(path) == BIG_BYTES

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(daemon.socket))
        sock.sendall(f"GET /v1/snapshots/{taken['name']} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        received = b""
        while len(received) < 256 << 10:
            chunk = sock.recv(65536)
            assert chunk, "the daemon closed the download before the client did"
            received += chunk
        assert received.startswith(b"HTTP/1.1 200")
    # the daemon meets the closed connection on a later write: the first of the two lines
    poll(lambda: "the client closed the connection" in daemon.log()
         or "GET /v1/snapshots/{name} failed" in daemon.log(), 60,
         "the daemon's line about the cut download", explain=daemon.log_tail)
    log = daemon.log()
    assert "Traceback" not in log, daemon.log_tail()
    lines = [line for line in log.splitlines() if "/v1/snapshots/{name}" in line]
    assert len(lines) == 1 and " INFO " in f" {lines[0]} ", lines
    assert "ERROR" not in lines[0] and "failed" not in lines[0], lines
    assert "internal error" not in log and "refused a request" not in log, daemon.log_tail()
    assert daemon.call("health").ok  # and it serves on
    assert taken["name"] in [s["name"] for s in daemon.call("snapshots")["snapshots"]]
