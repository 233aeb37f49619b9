"""An HTTP server on 127.0.0.1 that answers the way a hostile or broken one does: a body that
never ends, one that trickles a byte at a time, or a fixed body; for the tests that every
network read mlcost makes is bounded in bytes and time (issue 20, item 7).

A plain threaded socket server (no asyncio), so it also serves blocking urllib clients. Every
connection ends when the client goes away or the server stops."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from typing import Any

ENDLESS = "endless"  # 64 KiB chunks as fast as the client takes them, forever
TRICKLE = "trickle"  # one byte every 50 ms, forever


class HostileServer:
    """`with HostileServer(ENDLESS) as server:` ... `server.url`. `body` is ENDLESS, TRICKLE,
    ("limited", N) (N bytes, then silence with the connection open) or bytes to send whole."""

    def __init__(self, body: Any, content_type: str = "text/plain") -> None:
        self.body = body
        self.content_type = content_type
        self.sent = 0
        self._stop = threading.Event()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        request = b""
        while b"\r\n\r\n" not in request and len(request) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                return
            request += chunk
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {self.content_type}\r\nConnection: close\r\n"
        try:
            if isinstance(self.body, bytes):
                conn.sendall(f"{head}Content-Length: {len(self.body)}\r\n\r\n".encode()
                             + self.body)
                return
            conn.sendall(f"{head}\r\n".encode())  # no length: the body ends when we close
            if self.body == ENDLESS:
                chunk = b"x" * 65536
                while not self._stop.is_set():
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            elif self.body == TRICKLE:
                while not self._stop.wait(0.05):
                    conn.sendall(b"1")
                    self.sent += 1
            else:
                _, size = self.body
                conn.sendall(b"x" * size)
                self.sent += size
                self._stop.wait()
        except OSError:
            return  # the client went away: what a bounded reader does

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def finishes_within(seconds: float, function: Any, *args: Any, **kwargs: Any) -> tuple[
        bool, Any]:
    """Run `function` in a thread: (finished within `seconds`, its result or exception). A
    reader that is not bounded is left running (a daemon thread) and reported as not finished."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(function(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    return (not thread.is_alive() and time.monotonic() - started <= seconds,
            outcome[0] if outcome else None)
