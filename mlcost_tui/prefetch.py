"""The first /v1/now, fetched before the App starts, so its first frame shows real figures.

A plain blocking GET with the standard library (http.client, over the unix socket or TCP) and a
short deadline: the App's own client (daemon.client, on aiohttp) is imported and connected after
the first frame, and any failure here just means the App starts as it would without it (it says
"connecting…" and polls)."""

from __future__ import annotations

import http.client
import json
import socket
import time

from daemon import clock
from daemon.wire import Now
from mlcost_tui.messages import HostSnapshot

PREFETCH_TIMEOUT_S = 0.4


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("mlcostd", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def first_snapshot(target: str, token: str | None = None,
                   timeout_s: float = PREFETCH_TIMEOUT_S) -> HostSnapshot | None:
    """`target`'s /v1/now as a snapshot, or None when it does not answer within `timeout_s`
    (or answers anything but a /v1/now document)."""
    started = time.monotonic()
    connection: http.client.HTTPConnection
    try:
        if target.startswith("unix:"):
            connection = _UnixConnection(target[len("unix:"):], timeout_s)
            path = "/v1/now"
        elif target.startswith("http://"):
            host = target[len("http://"):].rstrip("/")
            connection = http.client.HTTPConnection(host, timeout=timeout_s)
            path = "/v1/now"
        else:
            return None  # https and the rest: the App's client handles them
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status != 200:
            return None
        document = json.loads(body)
        if not isinstance(document, dict) or document.get("ts") is None:
            return None  # a daemon still starting: the App polls it
        now = Now.from_dict(document)
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return HostSnapshot(target, now, None, time.monotonic() - started, clock.now())
