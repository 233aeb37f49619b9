"""The /v1/snapshots handlers: take a snapshot, list them, download one.

    POST /v1/snapshots            {"since": "30m" | seconds, "until": time, "html": bool,
                                   "upload": bool}  -> 201 the snapshot taken (422 when
                                   the range holds no tick: nothing is written)
    GET  /v1/snapshots            -> {"folder": ..., "snapshots": [...]} newest first
    GET  /v1/snapshots/{name}     -> the file (a .db snapshot or its .html report)

A snapshot is always written into the daemon's snapshots folder (a client never chooses a path
the root daemon writes to); `mlcostd snapshot --out` downloads it from there. Nor does a client
choose where it is uploaded: `"upload": true` asks for an upload to `[snapshots].upload` of the
daemon's config, the only target the daemon's credentials are used for. The work runs in a
thread (daemon.take_snapshot), one snapshot at a time.
"""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon import clock
from daemon.api.echo import shown as _shown
from daemon.config import parse_duration, snapshots_folder
from daemon.store.files import RefusedFile, open_checked
from daemon.store.snapshot import MAX_SINCE_S

log = logging.getLogger(__name__)

DEFAULT_SINCE_S = 1800.0
# matched with fullmatch: `$` would also match before a final newline ("a.db\n")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,200}\.(db|html)")
CHUNK_BYTES = 1 << 20
TAKE_KEYS = ("since", "until", "html", "upload")  # POST's body (openapi.py documents them)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def snapshot_range(body: dict[str, Any], now: float) -> tuple[float, float]:
    """(since, until) in Unix seconds from a request body: since 1 s to 7 days before until,
    until a time from 2020 (clock.MIN_TIME: nothing is recorded earlier) to a minute from now.
    ValueError names the field, the value and what is allowed."""
    raw_since = body.get("since", DEFAULT_SINCE_S)
    if isinstance(raw_since, bool) or not isinstance(raw_since, int | float | str):
        raise ValueError(f"since={_shown(raw_since)} must be a duration: e.g. \"30m\", \"2h\" "
                         f"or a number of seconds, from 1 s to {MAX_SINCE_S:g} s")
    try:
        span = parse_duration(raw_since)
    except (ValueError, TypeError):
        raise ValueError(f"since={_shown(raw_since)} is not a duration; give e.g. 30m, 2h or "
                         f"seconds, from 1 s to {MAX_SINCE_S:g} s") from None
    if not (math.isfinite(span) and 1 <= span <= MAX_SINCE_S):
        raise ValueError(f"since={_shown(raw_since)} must be between 1 s and {MAX_SINCE_S:g} s")
    until = now
    if "until" in body:
        raw_until = body["until"]
        if isinstance(raw_until, bool) or not isinstance(raw_until, int | float | str):
            raise ValueError(f"until={_shown(raw_until)} must be a time: Unix seconds or an "
                             "ISO 8601 string (leave it out for now)")
        try:
            until = clock.parse_time(raw_until)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"until={_shown(raw_until)}: {exc}") from None
        if until > now + 60:
            raise ValueError(f"until={_shown(raw_until)} must be a past time (Unix seconds or "
                             "ISO 8601), not after now")
    return until - span, until


def open_snapshot_file(folder: Path, name: str) -> int:
    """A read-only descriptor of `folder/name` if it is a file mlcostd wrote there: named in
    the folder's index with the identity it has now, opened without following a link, and a
    regular file of mlcostd's user with one link. Raises FileNotFoundError (not in the index,
    or another file now), RefusedFile (a link, someone else's file, a hard link), OSError."""
    from daemon.store.snapshot import written_files

    known = written_files(folder).get(name)
    if known is None:
        raise FileNotFoundError(f"{name} is not in the index of {folder}")
    fd = open_checked(folder / name)
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != known:
        os.close(fd)
        raise RefusedFile(f"{folder / name} is not the file mlcostd wrote under that name "
                          "(it was replaced); mlcostd serves only its own snapshots: take a "
                          "new one")
    return fd


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
        from daemon.store.snapshot import BadSnapshotRequest, EmptySnapshotRange, SnapshotError

        body = await read_body(request, TAKE_KEYS)
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
        except EmptySnapshotRange as exc:  # well formed, but nothing recorded there
            return _error(422, str(exc))
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
        """Serve one file that mlcostd wrote into its snapshots folder (in its index), from a
        descriptor opened without following links and checked: a regular file of mlcostd's
        with one link, the very file (device, inode) the index names. Anything else is 404:
        a root daemon must not become a way to read /etc/shadow through a planted link."""
        import asyncio

        name = request.match_info["name"]
        if not _NAME.fullmatch(name):
            return _error(400, f"{_shown(name)} is not a snapshot file name; list them at "
                               "/v1/snapshots")
        missing = _error(404, f"no snapshot {_shown(name)}; list them at /v1/snapshots")
        try:
            fd = await asyncio.to_thread(open_snapshot_file, snapshots_folder(daemon.config),
                                         name)
        except RefusedFile as exc:
            log.warning("not serving snapshot %s: %s", name, exc)
            return missing
        except OSError:
            return missing
        try:
            size = os.fstat(fd).st_size
            kind = "text/html; charset=utf-8" if name.endswith(".html") else \
                "application/vnd.sqlite3"
            response = web.StreamResponse(headers={"Content-Type": kind})
            response.content_length = size
            await response.prepare(request)
            offset = 0
            while offset < size:  # what was there when opened, never more
                chunk = await asyncio.to_thread(os.pread, fd, min(CHUNK_BYTES, size - offset),
                                                offset)
                if not chunk:
                    break
                await response.write(chunk)
                offset += len(chunk)
            await response.write_eof()
            return response
        finally:
            os.close(fd)

    app.router.add_post("/v1/snapshots", take)
    app.router.add_get("/v1/snapshots", listing)
    app.router.add_get("/v1/snapshots/{name}", download)
