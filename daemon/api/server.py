"""mlcostd's HTTP API under /v1/ (aiohttp): local by default, token-protected on TCP.

Transport: a unix socket (mode 0660) in a 0700 directory. TCP only when `listen` is set, and
then every TCP request must carry `Authorization: Bearer <token>`; the token is read from a 0600
file (created with a random token if missing; refused if group/world readable), compared in
constant time and never logged. Errors are JSON {"error": "..."} with the status code.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.wire import API_VERSION, parse_process_key

log = logging.getLogger(__name__)

VERSION = "0.1.0"
MAX_BODY_BYTES = 64 * 1024
HISTORY_TIMEOUT_S = 3.0  # a history query is cut off past this (the store reader's deadline)
MAX_HISTORY_SINCE_S = 400 * 86400
MAX_HISTORY_POINTS = 2000
MAX_SNOOZE_HOURS = 24 * 90

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """Start-up problem of the API (bad token file, socket in use); the message says the fix."""


def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _bad(message: str) -> web.HTTPException:
    return web.HTTPBadRequest(text=json.dumps({"error": message}),
                              content_type="application/json")


def read_token(path: Path) -> str:
    """The bearer token from a 0600 file; one is generated if the file does not exist."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        log.info("generated an API token in %s (mode 0600)", path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ApiError(f"token file {path} is readable by others (mode {stat.S_IMODE(mode):o}); "
                       f"run `chmod 600 {path}`")
    token = path.read_text().strip()
    if len(token) < 16:
        raise ApiError(f"token file {path} holds no usable token (at least 16 characters); "
                       "delete it to have mlcostd generate one")
    return token


def _is_tcp(request: web.Request) -> bool:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return isinstance(peer, tuple)


def make_app(daemon: Any, *, token: str | None = None,
             started: float | None = None) -> web.Application:
    """The /v1/ application over `daemon` (a Daemon or anything with its methods)."""
    started_mono = started if started is not None else time.monotonic()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is not None and _is_tcp(request):
            sent = request.headers.get("Authorization", "")
            scheme, _, value = sent.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    value.strip().encode(), token.encode()):
                return json_error(401, "missing or wrong bearer token: send "
                                       "`Authorization: Bearer <token>` (the token is in the "
                                       "daemon's [api].token_file)")
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return json_error(413, f"request body too large (limit {MAX_BODY_BYTES} bytes)")
        except web.HTTPException as exc:
            if exc.content_type == "application/json":
                raise
            message = {404: f"no such endpoint {request.method} {request.path}; see /v1/health "
                            "and the README for the API",
                       405: f"{request.method} is not allowed on {request.path}"}.get(
                exc.status, exc.reason)
            return json_error(exc.status, message)
        except Exception as exc:  # the API must answer, not drop the connection
            log.exception("API %s %s failed", request.method, request.path)
            return json_error(500, f"internal error: {type(exc).__name__}: {exc}")

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)

    async def health(request: web.Request) -> web.Response:
        store = daemon.store.health.as_dict() if getattr(daemon, "store", None) else None
        nvml = getattr(getattr(daemon, "nvml", None), "status", "unknown")
        return web.json_response({
            "ok": daemon.last_sample is not None, "version": VERSION,
            "api_version": API_VERSION, "uptime_s": time.monotonic() - started_mono,
            "tick": daemon.tick, "nvml_status": nvml, "store": store,
            "hostname": daemon.host.get("hostname", ""),
        })

    async def now(request: web.Request) -> web.Response:
        return web.json_response(daemon.now())

    def _number(query: Any, name: str, default: float, low: float, high: float) -> float:
        raw = query.get(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise _bad(f"{name}={raw!r} is not a number") from None
        if not (low <= value <= high):
            raise _bad(f"{name}={raw!r} must be between {low:g} and {high:g}")
        return value

    async def history(request: web.Request) -> web.Response:
        from daemon.store.schema import GPU_METRICS, PROCESS_METRICS

        metric = request.query.get("metric", "utilization")
        since = _number(request.query, "since", 3600, 1, MAX_HISTORY_SINCE_S)
        points = int(_number(request.query, "points", 300, 1, MAX_HISTORY_POINTS))
        gpu_q, proc_q = request.query.get("gpu"), request.query.get("process")
        until = time.time()
        if proc_q is not None:
            if metric not in PROCESS_METRICS:
                raise _bad(f"metric={metric!r} is not a process metric; one of "
                           f"{', '.join(sorted(PROCESS_METRICS))}")
            try:
                pid, start = parse_process_key(proc_q)
            except ValueError as exc:
                raise _bad(str(exc)) from None
            target = f"process:{proc_q}"

            def read(reader: Any) -> list[Any]:
                return reader.process_history(pid, start, metric, until - since, until, points)
        elif metric == "wasted_per_hour":
            target = "host"
            price = _price_per_gpu(daemon)
            gpus = [g.get("index") for g in daemon.now().get("gpus", [])]

            def read(reader: Any) -> list[Any]:
                return _wasted_series(reader, gpus, price, until - since, until, points)
        else:
            if metric not in GPU_METRICS:
                raise _bad(f"metric={metric!r} is not a GPU metric; one of "
                           f"{', '.join(sorted(GPU_METRICS))} or wasted_per_hour")
            if gpu_q is None:
                raise _bad("say which series: gpu=INDEX or process=PID:START")
            try:
                index = int(gpu_q)
            except ValueError:
                raise _bad(f"gpu={gpu_q!r} is not a GPU index") from None
            target = f"gpu:{index}"

            def read(reader: Any) -> list[Any]:
                return reader.gpu_history(index, metric, until - since, until, points)
        try:
            rows = await asyncio.wait_for(
                asyncio.to_thread(_read_store, daemon.db, read), HISTORY_TIMEOUT_S + 2)
        except (asyncio.TimeoutError, TimeoutError):
            return json_error(503, f"history query ran past {HISTORY_TIMEOUT_S} s; ask for a "
                                   "shorter range or fewer points")
        except Exception as exc:
            if type(exc).__name__ == "ReaderTimeout":
                return json_error(503, str(exc))
            raise
        return web.json_response({"metric": metric, "target": target, "since_s": since,
                                  "until": until, "points": [list(p) for p in rows]})

    async def phases(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        try:
            parse_process_key(key)
        except ValueError as exc:
            return json_error(400, str(exc))
        since = _number(request.query, "since", 1800, 1, MAX_HISTORY_SINCE_S)
        phases_for = getattr(daemon, "phases_for", None)
        if phases_for is None:
            return json_error(404, "this mlcostd does not record phases yet (no stack sampling)")
        result = phases_for(key, since)
        if asyncio.iscoroutine(result):
            result = await result
        if result is None:
            return json_error(404, f"no process {key} on this host")
        if not isinstance(result, dict) or "phases" not in result:
            result = {"phases": result}
        return web.json_response({"key": key, "since_s": since, **result})

    async def recommendations(request: web.Request) -> web.Response:
        snoozed = getattr(daemon, "snoozed", {})
        wall = time.time()
        active = [r for r in daemon.now().get("recommendations") or []
                  if snoozed.get(r.get("id"), 0) <= wall]
        return web.json_response({"recommendations": active})

    async def _body(request: web.Request) -> dict[str, Any]:
        if not request.can_read_body:
            return {}
        raw = await request.read()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise _bad("the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _bad("the request body must be a JSON object")
        return body

    async def apply(request: web.Request) -> web.Response:
        rec_id = request.match_info["id"]
        body = await _body(request)
        dry_run = body.get("dry_run", True)
        if not isinstance(dry_run, bool):
            return json_error(400, f"dry_run={dry_run!r} must be true or false")
        apply_fn = getattr(daemon, "apply_recommendation", None)
        if apply_fn is None:
            return json_error(404, "this mlcostd cannot apply recommendations")
        from daemon.api.actions import ActionError

        try:
            result = await asyncio.to_thread(apply_fn, rec_id, dry_run)
        except ActionError as exc:
            return json_error(exc.status, str(exc))
        if result is None:
            return json_error(404, f"no active recommendation {rec_id!r}; list them at "
                                   "/v1/recommendations")
        return web.json_response(result if isinstance(result, dict) else result.as_dict())

    async def snooze(request: web.Request) -> web.Response:
        rec_id = request.match_info["id"]
        body = await _body(request)
        hours = body.get("hours", 24)
        if isinstance(hours, bool) or not isinstance(hours, int | float) or not (
                0 < hours <= MAX_SNOOZE_HOURS):
            return json_error(400, f"hours={hours!r} must be a number between 0 and "
                                   f"{MAX_SNOOZE_HOURS}")
        snooze_fn = getattr(daemon, "snooze_recommendation", None)
        if snooze_fn is None:
            return json_error(404, "this mlcostd cannot snooze recommendations")
        until = snooze_fn(rec_id, float(hours))
        if until is None:
            return json_error(404, f"no active recommendation {rec_id!r}; list them at "
                                   "/v1/recommendations")
        return web.json_response({"id": rec_id, "snoozed_until": until})

    app.router.add_get("/v1/health", health)
    app.router.add_get("/v1/now", now)
    app.router.add_get("/v1/history", history)
    app.router.add_get("/v1/processes/{key}/phases", phases)
    app.router.add_get("/v1/recommendations", recommendations)
    app.router.add_post("/v1/recommendations/{id}/apply", apply)
    app.router.add_post("/v1/recommendations/{id}/snooze", snooze)
    return app


def _price_per_gpu(daemon: Any) -> float:
    doc = daemon.now()
    burn = doc.get("burn") or {}
    price = burn.get("price_per_gpu")
    if price is None:
        price = (doc.get("price") or {}).get("per_gpu_per_hour")
    return float(price or 0.0)


def _wasted_series(reader: Any, gpus: list[int], price_per_gpu: float, since: float,
                   until: float, points: int) -> list[tuple[float, float, float, float]]:
    """Host wasted $/h over time: sum over GPUs of price x (1 - utilization)."""
    total: dict[float, list[float]] = {}
    for index in gpus:
        for ts, avg, low, high in reader.gpu_history(index, "utilization", since, until, points):
            acc = total.setdefault(ts, [0.0, 0.0, 0.0])
            acc[0] += price_per_gpu * (1 - min(avg, 100.0) / 100)
            acc[1] += price_per_gpu * (1 - min(high, 100.0) / 100)
            acc[2] += price_per_gpu * (1 - min(low, 100.0) / 100)
    return [(ts, v[0], v[1], v[2]) for ts, v in sorted(total.items())]


def _read_store(db: Path, read: Callable[[Any], list[Any]]) -> list[Any]:
    from daemon.store.reader import StoreReader

    if not Path(db).exists():
        return []
    reader = StoreReader(str(db), timeout_s=HISTORY_TIMEOUT_S)
    try:
        return read(reader)
    finally:
        reader.close()


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    try:
        if not sep or not host:
            raise ValueError
        number = int(port)
        if not 0 <= number <= 65535:
            raise ValueError
    except ValueError:
        raise ApiError(f"--listen {listen!r} is not HOST:PORT (e.g. 127.0.0.1:9347)") from None
    return host.strip("[]"), number


class ApiServer:
    """The API on a unix socket, and on TCP (token required) when `listen` is set."""

    def __init__(self, daemon: Any, socket_path: Path | str | None,
                 listen: str | None = None, token_file: Path | str | None = None) -> None:
        self.daemon = daemon
        self.socket_path = Path(socket_path) if socket_path else None
        self.listen = listen or None
        self.token_file = Path(token_file) if token_file else (
            self.socket_path.with_name("mlcostd.token") if self.socket_path else None)
        self._runners: list[web.AppRunner] = []
        self.tcp_port: int | None = None

    async def start(self) -> None:
        started = time.monotonic()
        if self.socket_path is not None:
            await self._start_unix(make_app(self.daemon, started=started))
        if self.listen:
            if self.token_file is None:
                raise ApiError("--listen needs a token file: pass --token-file")
            token = read_token(self.token_file)
            host, port = parse_listen(self.listen)
            runner = web.AppRunner(make_app(self.daemon, token=token, started=started),
                                   access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, host, port)
            try:
                await site.start()
            except OSError as exc:
                await runner.cleanup()
                raise ApiError(f"cannot listen on {self.listen}: {exc.strerror}") from None
            self._runners.append(runner)
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            self.tcp_port = sockets[0].getsockname()[1] if sockets else port
            log.info("API on http://%s:%d (bearer token from %s)", host, self.tcp_port,
                     self.token_file)

    async def _start_unix(self, app: web.Application) -> None:
        assert self.socket_path is not None
        folder = self.socket_path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(folder, 0o700)
        except OSError as exc:
            raise ApiError(f"cannot create the socket folder {folder}: {exc.strerror}; pass "
                           "--socket with a writable path") from None
        if self.socket_path.exists() or self.socket_path.is_symlink():
            if await _socket_answers(self.socket_path):
                raise ApiError(f"another mlcostd answers on {self.socket_path}; stop it or "
                               "pass a different --socket")
            self.socket_path.unlink()  # left behind by a daemon that died
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        old = os.umask(0o117)  # the socket is born 0660: no window with wider access
        try:
            await web.UnixSite(runner, str(self.socket_path)).start()
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o660)
        self._runners.append(runner)
        log.info("API on unix:%s", self.socket_path)

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        if self.socket_path is not None:
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                pass


async def _socket_answers(path: Path) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), 1.0)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True
