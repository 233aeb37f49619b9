"""daemon.client over the standard library: a daemon that is there but silent is told apart from
one that is not there, within the request's deadline, and a request left waiting never holds the
caller (it runs in a daemon thread). A target with a user and password in it is refused without
showing them (the API takes a bearer token)."""

from __future__ import annotations

import asyncio
import re
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


def test_a_daemon_that_turns_us_away_is_said_as_refusing_not_as_gone(mlcostd, tmp_path):
    """Probe 141 L11: `mlcost-top --connect http://…` without `--token-file` read "✕ no daemon ·
    retrying in 4s": the daemon had answered (401), and asking again will not let it in. A
    real daemon on a real port, asked without its token and with a wrong one."""
    from simhost import poll

    from mlcost_tui.panels.header import connection_text
    from mlcost_tui.sources import LiveSource

    daemon = mlcostd("idle-host", args=["--listen", "127.0.0.1:0",
                                        "--token-file", str(tmp_path / "token")])
    port = poll(lambda: re.search(r"API on http://[^:]+:(\d+) ", daemon.log()), 30,
                "the API's port in the log", explain=daemon.log_tail).group(1)
    for token in (None, "w" * 40):
        source = LiveSource([Client(f"http://127.0.0.1:{port}", token=token, timeout_s=5)], 1.0)
        refused = asyncio.run(source.fetch(0))
        assert refused.refused and refused.error and "HTTP 401" in refused.error
        shown = connection_text(refused, False, 4.0).plain
        assert shown == "✕ refused by the daemon: check --token-file", shown


def test_no_daemon_says_how_to_start_one(tmp_path):
    async def ask() -> DaemonUnavailable:
        with pytest.raises(DaemonUnavailable) as raised:
            await Client(f"unix:{tmp_path}/none.sock").health()
        return raised.value

    message = str(asyncio.run(ask()))
    assert message.startswith(f"no mlcostd at unix:{tmp_path}/none.sock: start it with")
    # why, in words, not Python's exception (probe 148 L4: "FileNotFoundError: [Errno 2]")
    assert message.endswith("(no socket there)") and "Errno" not in message, message


def test_a_simulated_hosts_socket_names_its_scenario(monkeypatch):
    """A simulated daemon's socket (where `mlcostd run --simulate demo` serves by default) is
    brought back by `mlcostd run --simulate demo`, not by `sudo mlcostd run`, which starts this
    host's daemon on another socket (probe 154 L4)."""
    import tempfile

    from daemon.config.paths import simulated_socket_path

    # a short folder: under xdist tmp_path's socket path passes AF_UNIX's 108 bytes
    runtime = tempfile.TemporaryDirectory(dir="/tmp", prefix="mlc")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime.name)
    path = simulated_socket_path("data-stall")

    async def ask() -> DaemonUnavailable:
        with pytest.raises(DaemonUnavailable) as raised:
            await Client(f"unix:{path}").health()
        return raised.value

    message = str(asyncio.run(ask()))
    assert message.startswith(f"no mlcostd at unix:{path}: start it with "
                              "`mlcostd run --simulate data-stall`"), message
    assert "sudo" not in message and message.endswith("(no socket there)"), message
    runtime.cleanup()


def test_a_socket_nobody_listens_on_is_said_so(tmp_path):
    """A socket file left by a daemon that was killed: nothing listens there."""
    path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # bound, never listening: a connection is refused

    async def ask() -> DaemonUnavailable:
        with pytest.raises(DaemonUnavailable) as raised:
            await Client(f"unix:{path}").health()
        return raised.value

    message = str(asyncio.run(ask()))
    assert message.endswith("(nothing listens there)") and "Errno" not in message, message


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


def test_a_socket_another_user_serves_is_not_asked(tmp_path):
    """A user's default socket is under /tmp without XDG_RUNTIME_DIR, and another local user
    can make its folder first and serve a socket there (a probe did: the client took its
    hostname and sent it the request). The client asks the kernel who serves the socket and
    sends nothing to a user who is neither root nor its own."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    planted = Path(tempfile.mkdtemp(prefix="mlcost-planted-", dir="/tmp"))
    planted.chmod(0o777)
    path = planted / "mlcostd.sock"
    said_r, said_w = os.pipe()
    child = os.fork()
    if child == 0:  # the other user: nobody, serving a socket in the folder it made first
        try:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            server.listen(4)
            os.write(said_w, b"R")
            conn, _ = server.accept()
            conn.settimeout(5)
            got = conn.recv(65536)
            os.write(said_w, b"G" if got else b"-")
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 16\r\n\r\n{\"ok\": \"forged\"}")
        finally:
            os._exit(0)
    os.close(said_w)
    try:
        assert os.read(said_r, 1) == b"R"

        async def ask() -> DaemonUnavailable:
            with pytest.raises(DaemonUnavailable) as raised:
                await Client(f"unix:{path}", token="t" * 20, timeout_s=5).health()
            return raised.value

        message = str(asyncio.run(ask()))
        assert "served by a process of uid 65534, neither root nor you" in message
        assert os.read(said_r, 1) == b"-"  # it read nothing: not one byte (the token neither)
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.close(said_r)
        shutil.rmtree(planted)
