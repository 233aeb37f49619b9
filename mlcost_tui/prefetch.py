"""The first /v1/now, fetched before the App starts, so its first frame shows real figures.

A plain blocking GET (daemon.client's connection: http.client over the unix socket or TCP) with a
short deadline, before the event loop runs; any failure here just means the App starts as it
would without it (it says "connecting…" and polls)."""

from __future__ import annotations

import http.client
import json
import time

from daemon import clock
from daemon.client import connection_to
from daemon.wire import Now
from mlcost_tui.messages import HostSnapshot

PREFETCH_TIMEOUT_S = 0.4


def first_snapshot(target: str, token: str | None = None,
                   timeout_s: float = PREFETCH_TIMEOUT_S) -> HostSnapshot | None:
    """`target`'s /v1/now as a snapshot, or None when it does not answer within `timeout_s`
    (or answers anything but a /v1/now document)."""
    started = time.monotonic()
    try:
        if not target.startswith(("unix:", "http://")):
            return None  # https and the rest: the App's client handles them
        connection, prefix = connection_to(target, timeout_s)
        path = prefix + "/v1/now"
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
