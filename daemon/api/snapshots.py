"""The /v1/snapshots handlers: take a snapshot, list them, download one.

    POST /v1/snapshots            {"since": "30m" | seconds, "until": time, "html": bool,
                                   "upload": "s3://BUCKET/PREFIX"}  -> 201 the snapshot taken
    GET  /v1/snapshots            -> {"folder": ..., "snapshots": [...]} newest first
    GET  /v1/snapshots/{name}     -> the file (a .db snapshot or its .html report)

A snapshot is always written into the daemon's snapshots folder (a client never chooses a path
the root daemon writes to); `mlcostd snapshot --out` downloads it from there. The work runs in
a thread (daemon.take_snapshot), one snapshot at a time.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon import clock
from daemon.config import parse_duration, snapshots_folder

MAX_SINCE_S = 7 * clock.DAY_S  # a snapshot longer than this is a store copy, not an incident
DEFAULT_SINCE_S = 1800.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,200}\.(db|html)$")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def snapshot_range(body: dict[str, Any], now: float) -> tuple[float, float]:
    """(since, until) in Unix seconds from a request body; ValueError names the bad value."""
    raw_since = body.get("since", DEFAULT_SINCE_S)
    try:
        span = parse_duration(raw_since)
    except (ValueError, TypeError):
        raise ValueError(f"since={raw_since!r} is not a duration (e.g. 30m, 2h, or seconds)") \
            from None
    if not (math.isfinite(span) and 1 <= span <= MAX_SINCE_S):
        raise ValueError(f"since={raw_since!r} must be between 1 s and {MAX_SINCE_S:g} s")
    raw_until = body.get("until")
    until = now
    if raw_until is not None:
        try:
            until = clock.parse_time(raw_until)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(f"until: {exc}") from None
        if not (math.isfinite(until) and 0 < until <= now + 60):
            raise ValueError(f"until={raw_until!r} must be a past time (Unix seconds or ISO "
                             "8601)")
    return until - span, until


def add_snapshot_routes(app: web.Application, daemon: Any,
                        read_body: Any) -> None:
    """The /v1/snapshots routes over `daemon` (a runtime.daemon.Daemon); `read_body` is the
    bounded JSON body reader of daemon.api.routes."""

    async def take(request: web.Request) -> web.Response:
        from daemon.store.snapshot import BadSnapshotRequest, SnapshotError

        body = await read_body(request)
        try:
            since, until = snapshot_range(body, clock.now())
        except ValueError as exc:
            return _error(400, str(exc))
        html = body.get("html", False)
        if not isinstance(html, bool):
            return _error(400, f"html={html!r} must be true or false")
        upload = body.get("upload")
        if upload is not None and (not isinstance(upload, str) or not upload.startswith(
                "s3://")):
            return _error(400, f"upload={str(upload)[:80]!r} must be s3://BUCKET/PREFIX")
        try:
            result = await daemon.take_snapshot(since=since, until=until, html=html,
                                                upload=upload or None)
        except BadSnapshotRequest as exc:  # e.g. a malformed upload URL
            return _error(400, str(exc))
        except SnapshotError as exc:  # the store cannot be read or the folder written now
            return _error(503, str(exc))
        except OSError as exc:
            return _error(503, f"writing the snapshot failed: {exc}")
        result["name"] = Path(result["path"]).name
        return web.json_response(result, status=201)

    async def listing(request: web.Request) -> web.Response:
        import asyncio

        from daemon.store.snapshot import list_snapshots

        folder = snapshots_folder(daemon.config)
        found = await asyncio.to_thread(list_snapshots, folder)
        return web.json_response({"folder": str(folder), "snapshots": found})

    async def download(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if not _NAME.match(name):
            return _error(400, f"{name[:80]!r} is not a snapshot file name; list them at "
                               "/v1/snapshots")
        path = snapshots_folder(daemon.config) / name
        if not path.is_file() or path.is_symlink():
            return _error(404, f"no snapshot {name!r}; list them at /v1/snapshots")
        kind = "text/html; charset=utf-8" if name.endswith(".html") else \
            "application/vnd.sqlite3"
        return web.FileResponse(path, headers={"Content-Type": kind})

    app.router.add_post("/v1/snapshots", take)
    app.router.add_get("/v1/snapshots", listing)
    app.router.add_get("/v1/snapshots/{name}", download)
