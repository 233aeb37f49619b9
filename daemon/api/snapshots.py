"""The /v1/snapshots handlers: take a snapshot, list them, download one.

    POST /v1/snapshots            {"since": "30m" | seconds, "until": time, "html": bool,
                                   "upload": bool}  -> 201 the snapshot taken
    GET  /v1/snapshots            -> {"folder": ..., "snapshots": [...]} newest first
    GET  /v1/snapshots/{name}     -> the file (a .db snapshot or its .html report)

A snapshot is always written into the daemon's snapshots folder (a client never chooses a path
the root daemon writes to); `mlcostd snapshot --out` downloads it from there. Nor does a client
choose where it is uploaded: `"upload": true` asks for an upload to `[snapshots].upload` of the
daemon's config, the only target the daemon's credentials are used for. The work runs in a
thread (daemon.take_snapshot), one snapshot at a time.
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


def _shown(value: Any) -> str:
    """A request's value for an error message: repr, cut to 60 characters."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**60 else \
        f"an integer of {len(str(abs(value)))} digits"
    return text if len(text) <= 60 else text[:57] + "..."


def snapshot_range(body: dict[str, Any], now: float) -> tuple[float, float]:
    """(since, until) in Unix seconds from a request body: since 1 s to 7 days before until,
    until a time from 2020 (clock.MIN_TIME: nothing is recorded earlier) to a minute from now.
    ValueError names the field, the value and what is allowed."""
    raw_since = body.get("since", DEFAULT_SINCE_S)
    try:
        span = parse_duration(raw_since)
    except (ValueError, TypeError):
        raise ValueError(f"since={_shown(raw_since)} is not a duration; give e.g. 30m, 2h or "
                         f"seconds, from 1 s to {MAX_SINCE_S:g} s") from None
    if not (math.isfinite(span) and 1 <= span <= MAX_SINCE_S):
        raise ValueError(f"since={_shown(raw_since)} must be between 1 s and {MAX_SINCE_S:g} s")
    raw_until = body.get("until")
    until = now
    if raw_until is not None:
        try:
            until = clock.parse_time(raw_until)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"until={_shown(raw_until)}: {exc}") from None
        if until > now + 60:
            raise ValueError(f"until={_shown(raw_until)} must be a past time (Unix seconds or "
                             "ISO 8601), not after now")
    return until - span, until


def upload_asked(body: dict[str, Any], configured: str) -> bool:
    """Whether a request asks for an upload (to `configured`, [snapshots].upload). ValueError
    when it names a target (only the config does) or asks for one none is configured."""
    upload = body.get("upload", False)
    if isinstance(upload, str):
        raise ValueError(
            f"upload={_shown(upload)}: a request cannot say where to upload; the target is set "
            "in the daemon's config ([snapshots].upload = \"s3://BUCKET/PREFIX\"); send "
            "\"upload\": true to upload there")
    if not isinstance(upload, bool):
        raise ValueError(f"upload={_shown(upload)} must be true or false")
    if upload and not configured:
        raise ValueError("upload=true, but the daemon has no upload target; set "
                         "[snapshots].upload = \"s3://BUCKET/PREFIX\" in its config and "
                         "restart it")
    return upload


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
            return _error(400, f"html={_shown(html)} must be true or false")
        try:
            upload = upload_asked(body, daemon.config.snapshots.upload)
        except ValueError as exc:
            return _error(400, str(exc))
        try:
            result = await daemon.take_snapshot(since=since, until=until, html=html,
                                                upload=upload)
        except BadSnapshotRequest as exc:  # the request is wrong, not the store or the disk
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
