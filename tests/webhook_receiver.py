"""A webhook receiver on 127.0.0.1 for the budget tests: a real HTTP server on its own port that
keeps each JSON body POSTed to it, in order."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


class Receiver:
    """`url` to post to; `bodies`, the JSON bodies received so far."""

    def __init__(self, server: HTTPServer, bodies: list[dict[str, Any]]) -> None:
        self.url = f"http://127.0.0.1:{server.server_port}/hook"
        self.bodies = bodies


@contextmanager
def receiving() -> Iterator[Receiver]:
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Receiver(server, bodies)
    finally:
        server.shutdown()
        server.server_close()
