"""daemon.client over the standard library: a daemon that is there but silent is told apart from
one that is not there, within the request's deadline, and a request left waiting never holds the
caller (it runs in a daemon thread). A target with a user and password in it is refused without
showing them (the API takes a bearer token)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from daemon.client import Client, ClientError, DaemonUnavailable


@pytest.fixture
def silent_socket(tmp_path):
    """A unix socket that accepts connections and never answers."""
    path = tmp_path / "silent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    yield path
    server.close()


def test_a_silent_daemon_did_not_answer_within_the_deadline(silent_socket):
    async def ask() -> DaemonUnavailable:
        with pytest.raises(DaemonUnavailable) as raised:
            await Client(f"unix:{silent_socket}", timeout_s=0.3).now()
        return raised.value

    error = asyncio.run(ask())
    assert str(error) == f"mlcostd at unix:{silent_socket} did not answer within 0.3 s"
    assert error.timed_out  # there and silent (hung, stopped), not gone


def test_a_stalled_daemon_is_said_as_not_answering_not_as_gone(silent_socket):
    """A daemon stopped with SIGSTOP read "✕ no daemon" in mlcost-top, the header's word for
    one that is not running."""
    from mlcost_tui.panels.header import connection_text
    from mlcost_tui.sources import LiveSource

    source = LiveSource([Client(f"unix:{silent_socket}", timeout_s=0.3)], 1.0)
    stalled = asyncio.run(source.fetch(0))
    assert stalled.stalled and stalled.error
    assert connection_text(stalled, False, 2.0).plain == "● daemon not answering · retrying in 2s"


def test_no_daemon_says_how_to_start_one(tmp_path):
    async def ask() -> DaemonUnavailable:
        with pytest.raises(DaemonUnavailable) as raised:
            await Client(f"unix:{tmp_path}/none.sock").health()
        return raised.value

    message = str(asyncio.run(ask()))
    assert message.startswith(f"no mlcostd at unix:{tmp_path}/none.sock: start it with")
    assert "FileNotFoundError" in message


def test_a_path_that_is_not_a_socket_is_said_to_be_one(tmp_path):
    """`mlcostd idle --connect unix:/etc/passwd` said to start a daemon with `--socket
    /etc/passwd`: a file or a folder given for the socket is named as such."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a socket\n")

    async def ask(target: str) -> str:
        with pytest.raises(DaemonUnavailable) as raised:
            await Client(target).health()
        return str(raised.value)

    for path, what in ((notes, "a file"), (tmp_path, "a folder")):
        message = asyncio.run(ask(f"unix:{path}"))
        assert f"{path} is {what}, not a socket: give the daemon's API socket" in message
        assert "--socket" not in message


def test_a_request_given_up_on_does_not_keep_the_loop_from_closing(silent_socket):
    # Only this test's request thread: an earlier test's (a 0.3 s request on its own silent
    # socket) may still be ending in this worker, and taken for this one it let the request be
    # cancelled before its thread started (CI, under load: no thread left at the assert).
    before = set(threading.enumerate())

    async def give_up() -> None:
        request = asyncio.ensure_future(Client(f"unix:{silent_socket}", timeout_s=30).now())
        while not waiting():
            await asyncio.sleep(0.01)
        request.cancel()

    def waiting() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t.name == "mlcost-client" and t not in before]

    asyncio.run(give_up())
    # the loop has closed without joining it: the request still waits on the silent socket,
    # in a thread that cannot keep the process from exiting
    assert waiting() and all(t.daemon for t in waiting())


@pytest.mark.parametrize("target", ["http://alice:s3cret-pw@127.0.0.1:9347",
                                    "https://s3cret-pw@gpu1:9347/api"])
def test_a_target_with_a_password_is_refused_without_showing_it(target):
    with pytest.raises(ClientError) as refused:
        Client(target)
    message = str(refused.value)
    assert "has a user or password" in message and "--token-file" in message, message
    assert "s3cret" not in message and "<redacted>@" in message, message


@pytest.fixture
def older_daemon(tmp_path):
    """A daemon on a unix socket whose /v1/health answers what the test puts in `bodies`."""
    from aiohttp import web

    bodies: list[bytes] = []

    async def health(request: web.Request) -> web.Response:
        return web.Response(body=bodies[-1], content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/health", health)
    return tmp_path / "older.sock", app, bodies


def test_a_body_python_json_writes_but_orjson_refuses_is_still_read(older_daemon):
    """mlcostd before 2026-12 wrote its answers with json.dumps, which writes a NaN as `NaN`
    (not JSON; orjson refuses it); a fleet view that asks such a peer reads it as json reads
    it. Bytes that are not UTF-8 in a string are replaced, not a failed answer."""
    from aiohttp import web

    path, app, bodies = older_daemon

    async def main() -> list[object]:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.UnixSite(runner, str(path)).start()
        seen: list[object] = []
        try:
            async with Client(f"unix:{path}") as client:
                for body in (b'{"ok": true, "version": "0.9", "uptime_s": NaN, "tick": 3}',
                             b'{"ok": true, "version": "0.9", "hostname": "gpu\xff1"}',
                             b'{"ok":true,"version":"1.0","uptime_s":2.5,"tick":4}'):
                    bodies.append(body)
                    seen.append(await client.health())
                bodies.append(b'<html>not json</html>')
                with pytest.raises(ClientError) as raised:
                    await client.health()
                seen.append(str(raised.value))
        finally:
            await runner.cleanup()
        return seen

    nan_one, bad_bytes, current, not_json = asyncio.run(main())
    assert nan_one.tick == 3 and nan_one.uptime_s != nan_one.uptime_s  # NaN, read
    assert bad_bytes.ok and bad_bytes.hostname == "gpu\ufffd1"
    assert (current.uptime_s, current.tick) == (2.5, 4)
    assert "not a JSON answer" in not_json and "<html>not json" in not_json
