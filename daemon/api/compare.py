"""GET /v1/compare?previous=JOB|PID:START: `mlcostd compare --previous` answered by the API.

This job's latest run against the run before it, as `mlcostd compare --previous TARGET --json`
prints it (README: Compare before and after). The runs are looked up in the store first, in a
thread under a deadline (one query; 404 when it holds fewer than two), so a job with nothing to
compare costs no more than that. The comparison itself (two report documents and their
bootstrap, seconds of CPU) runs as that command in a process of its own: the daemon's ticks
never wait on it, and the API does not import the command layer that builds reports. One
comparison at a time (429 while one runs), under a deadline, its answer bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.analysis.compare import NoPreviousRun, previous_runs
from daemon.sources.safe_text import one_line
from daemon.store.shape import READ_ERRORS

log = logging.getLogger(__name__)

MAX_TARGET_CHARS = 200  # a job label or PID:START; openapi.py documents it
LOOKUP_TIMEOUT_S = 10.0
COMPARE_TIMEOUT_S = 60.0
MAX_ANSWER_BYTES = 4 << 20
PREFIX = "mlcostd compare: "
LOOKUP_ERRORS: tuple[type[BaseException], ...] = (*READ_ERRORS, OSError, asyncio.TimeoutError)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def compare_argv(target: str, db: Path, config_source: str | None) -> list[str]:
    """The command the answer comes from: this interpreter's `mlcostd compare`, on the
    daemon's store, with the daemon's config file (its prices and catalogs) when it has one."""
    argv = [sys.executable, "-m", "daemon", "compare", "--previous", target, "--json",
            "--db", str(db)]
    if config_source and Path(config_source).is_file():
        argv += ["--config", config_source]
    return argv


async def run_compare(argv: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    """(exit status, the JSON document or None, its error message); kills it at the deadline
    (status -1 then)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), COMPARE_TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, None, f"the comparison took longer than {COMPARE_TIMEOUT_S:g} s"
    message = one_line(err.decode("utf-8", "replace").strip().splitlines()[-1]
                       if err.strip() else "")[:400].removeprefix(PREFIX)
    if proc.returncode != 0 or len(out) > MAX_ANSWER_BYTES:
        return proc.returncode or -1, None, message or "the comparison failed"
    try:
        document = json.loads(out)
    except ValueError:
        return -1, None, "the comparison printed no JSON document"
    return 0, document if isinstance(document, dict) else None, message


def add_compare_routes(app: web.Application, daemon: Any) -> None:
    running = asyncio.Lock()

    async def compare(request: web.Request) -> web.Response:
        target = request.query.get("previous", "")
        if not target or len(target) > MAX_TARGET_CHARS or not target.isprintable():
            return _error(400, f"previous= must be a job name or a process's PID:START, 1 to "
                               f"{MAX_TARGET_CHARS} printable characters")
        db = Path(daemon.db)
        try:
            await asyncio.wait_for(asyncio.to_thread(previous_runs, db, target,
                                                     LOOKUP_TIMEOUT_S), LOOKUP_TIMEOUT_S + 2)
        except NoPreviousRun as exc:
            return _error(404, one_line(str(exc))[:400])
        except LOOKUP_ERRORS as exc:
            return _error(503, f"cannot read the store's runs now: "
                               f"{one_line(str(exc))[:200] or type(exc).__name__}")
        if running.locked():
            return _error(429, "a comparison is running; ask again when it is done")
        async with running:
            config = getattr(daemon, "config", None)
            status, document, message = await run_compare(
                compare_argv(target, db, getattr(config, "source", None)))
        if document is not None:
            return web.json_response(document)
        if status == 1:  # an input the command could not read: nothing to compare
            return _error(404, message)
        log.warning("GET /v1/compare?previous=%s: %s", one_line(target)[:80], message)
        return _error(503, message)

    app.router.add_get("/v1/compare", compare)
