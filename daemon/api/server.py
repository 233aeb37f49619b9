"""mlcostd's HTTP API transport (aiohttp): local by default, token-protected on TCP.

Transport: a unix socket (mode 0660) in a 0700 directory that mlcostd creates; an existing
folder is used as it is, never chmodded, and refused when its group or everyone can write it.
Only a stale socket at the socket path is replaced, never a file or a live daemon's socket.
TCP only when `listen` is set, and then every TCP request must carry `Authorization: Bearer
<token>`; the token is read from a 0600 file owned by the daemon's user (created with a random
token if missing; refused if group/world readable or owned by someone else), compared in
constant time and never logged. Errors are JSON {"error": "..."} with the status code.
The /v1 handlers themselves are in daemon.api.routes.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import os
import pwd
import secrets
import socket
import sqlite3
import stat
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.api.echo import shown
from daemon.api.limits import (
    MAX_CONNECTIONS,
    REFUSE_BEFORE_CONTINUE,
    REQUEST_TIMEOUT_S,
    LimitedRunner,
    limited_log,
)
from daemon.api.metrics import Metrics, add_metrics_route, metrics_only_app
from daemon.api.routes import MAX_BODY_BYTES, add_routes, json_error
from daemon.config import parse_address
from daemon.store.files import RefusedFile, folder_problem, open_checked, private_folder
from daemon.wire import SOCKET_PATH_MAX, TOKEN_MAX_BYTES, TOKEN_MIN_CHARS
from pricing.key_file import NOT_A_KEY, key_from_bytes
from pricing.small_file import SmallFileError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """Start-up problem of the API (bad token file, socket in use); the message says the fix."""


class SocketInUse(ApiError):
    """Something serves the socket path already (another mlcostd, most likely)."""


def socket_in_use_message(path: Path) -> str:
    return (f"another mlcostd (or another program) serves {path}; stop it or pass a different "
            "--socket")


def read_token(path: Path) -> str:
    """The bearer token from a 0600 file owned by the daemon's user; one is generated (0600,
    whatever the umask) if the file does not exist. A token file another user owns, or one that
    others can read, is refused: whoever can write it chooses who gets into a root daemon."""
    if not os.path.lexists(path):
        try:
            # made as the store's folder is (0700, those above never writable by others,
            # no other user's link followed): pathlib's made the ones above as the umask said
            private_folder(path.parent)
            fd = open_checked(path, os.O_WRONLY | os.O_EXCL, create=True)
        except OSError as exc:
            raise ApiError(f"cannot create the token file {path}: {exc.strerror}; pass "
                           "--token-file with a writable path") from None
        os.fchmod(fd, 0o600)  # on the descriptor: whatever the umask, never through a link
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        log.info("generated an API token in %s (mode 0600)", path)
    try:
        # never through a link, and only a regular file of ours with one name
        fd = open_checked(path, os.O_RDONLY)
    except RefusedFile as exc:
        raise ApiError(f"token file {exc}") from None
    except OSError as exc:
        raise ApiError(f"cannot read the token file {path}: {exc.strerror}; pass "
                       "--token-file with a readable file") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ApiError(f"token file {path} is readable by others (mode "
                           f"{stat.S_IMODE(info.st_mode):o}); run `chmod 600 {path}`")
        data = f.read(TOKEN_MAX_BYTES + 1)
    try:  # the shape the client accepts (daemon.client.read_token_file), not a cut-off prefix
        if len(data) > TOKEN_MAX_BYTES:
            raise SmallFileError(NOT_A_KEY, f" is larger than {TOKEN_MAX_BYTES} bytes")
        return key_from_bytes(data, TOKEN_MIN_CHARS)
    except SmallFileError as exc:
        raise ApiError(f"token file {path}{exc}: no usable token (one line of {TOKEN_MIN_CHARS} "
                       f"to {TOKEN_MAX_BYTES} characters); delete it to have mlcostd generate "
                       "one") from None


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no such user"


def prepare_socket_folder(folder: Path) -> None:
    """The folder of the unix socket: created 0700 when it does not exist; an existing folder
    is used as it is if check_socket_folder finds it safe. Anything else is refused with the
    fix."""
    try:
        created = private_folder(folder)  # those above it: 0755 less the umask
    except OSError as exc:
        raise ApiError(f"cannot create the socket folder {folder}: {exc.strerror}; pass "
                       "--socket with a writable path") from None
    if not created:
        check_socket_folder(folder)


def check_socket_folder(folder: Path) -> None:
    """An existing socket folder is used as it is (never chmodded: a socket in a shared folder
    must not change it) if it is safe (daemon.store.files.folder_problem, stricter: not even
    a sticky folder like /tmp, where the socket's name could be taken first); one that does
    not exist yet is judged by the folders above it (mlcostd creates it 0700). Raises
    ApiError with the fix."""
    try:
        info = os.stat(folder)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ApiError(f"cannot use the socket folder {folder}: {exc.strerror}; pass "
                       "--socket with a path in a folder of its own") from None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise ApiError(f"the socket folder {folder} is not a directory; pass --socket with a "
                       "path in a folder of its own")
    problem = folder_problem(folder, sticky_ok=False)
    if problem is not None:
        raise ApiError(f"the socket folder {folder} {problem}, so another user could replace "
                       f"the socket; {_socket_folder_fix(folder, problem)}")


def _socket_folder_fix(folder: Path, problem: str) -> str:
    """What to do about a socket folder check_socket_folder refused (`problem`, as
    folder_problem says it): the suggested --socket only where mlcostd would accept it (a
    folder it creates 0700, inside folders others cannot write or that are sticky), else the
    chmod that makes the folder at fault safe."""
    accepted = ("mlcostd accepts a socket folder that only root or its own user can write "
                "(the sticky bit is not enough: another user could take the socket's name "
                "first)")
    own = folder / "api"
    if not own.exists() and folder_problem(own, sticky_ok=False) is None:
        return (f"{accepted}: put the socket in a folder of its own that mlcostd creates 0700, "
                f"e.g. --socket {own / 'mlcostd.sock'}")
    at_fault = "the folder it is inside" if problem.startswith("is inside") else str(folder)
    return (f"{accepted}, inside folders others cannot write unless sticky (like /tmp): run "
            f"`chmod go-w` on {at_fault}, or pass --socket in a folder of root's or mlcostd's "
            "own (mlcostd creates a missing one 0700)")


def check_socket_path(path: Path) -> os.stat_result | None:
    """What is at the socket path now (None: nothing); anything but a socket (left behind by a
    daemon that died) is refused, never replaced. Raises ApiError."""
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ApiError(f"cannot use the socket path {path}: {exc.strerror}; "
                       "pass a different --socket") from None
    if not stat.S_ISSOCK(existing.st_mode):
        kind = "symbolic link" if stat.S_ISLNK(existing.st_mode) else (
            "directory" if stat.S_ISDIR(existing.st_mode) else "file that is not a socket")
        raise ApiError(f"{path} is a {kind}; mlcostd replaces only a socket left behind by a "
                       "daemon that died: move it away or pass a different --socket")
    return existing


def _is_tcp(request: web.BaseRequest) -> bool:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return isinstance(peer, tuple)


def make_app(daemon: Any, *, token: str | None = None,
             started: float | None = None, metrics: Metrics | None = None) -> web.Application:
    """The /v1/ application over `daemon` (a Daemon or anything with its methods), and
    /metrics (behind the same token on TCP)."""
    started_mono = started if started is not None else time.monotonic()

    def refusal(request: web.BaseRequest) -> web.Response | None:
        """The 401 for a TCP request without the token; None when it may go on."""
        if token is None or not _is_tcp(request):
            return None
        sent = request.headers.get("Authorization", "")
        scheme, _, value = sent.partition(" ")
        # (bytes aiohttp could not decode come as surrogates: never a token, never a 500)
        if scheme.lower() == "bearer" and hmac.compare_digest(
                value.strip().encode("utf-8", "surrogateescape"), token.encode()):
            return None
        refused = json_error(401, "missing or wrong bearer token: send "
                                  "`Authorization: Bearer <token>` (the token is in the "
                                  "daemon's [api].token_file)")
        refused.headers["WWW-Authenticate"] = 'Bearer realm="mlcostd"'  # RFC 6750
        return refused

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        refused = refusal(request)
        if refused is not None:
            return refused
        repeated = _repeated_query(request)
        if repeated is not None:
            return json_error(400, repeated)
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
            answer = json_error(exc.status, message)
            if "Allow" in exc.headers:  # a 405 says what is allowed (RFC 9110)
                answer.headers["Allow"] = exc.headers["Allow"]
            return answer
        except Exception as exc:  # the API must answer, not drop the connection
            route = request.match_info.route.resource
            where = route.canonical if route is not None else "unrouted"
            if isinstance(exc, ConnectionError) and _client_gone(request):
                # The client closed its connection before the answer was all sent (a download
                # cut short): a normal client event, one line. Nothing can be sent; aiohttp
                # meets the closed connection again on this answer and says nothing (raised
                # from here, its own 500 handler would log it as a failure).
                limited_log(logging.INFO, f"gone:{request.method}:{where}",
                            f"API {request.method} {where}: the client closed the connection "
                            f"before the answer was all sent ({type(exc).__name__})")
                return json_error(499, "the client closed the connection")
            store = getattr(daemon, "store", None)
            if store is not None and isinstance(exc, sqlite3.Error):
                # the store's file, not this request: one line in the log, no traceback
                limited_log(logging.WARNING, f"503:{where}:{exc}",
                            f"API {request.method} {where}: the store cannot be read: {exc}")
                if store.note_if_damaged(exc) and store.starting_over:
                    return json_error(503, f"the store {store.path} is damaged ({exc}): "
                                           "mlcostd moves it aside and records on into a new "
                                           "one; ask again in a few seconds (history from "
                                           "before is in the file moved aside: see "
                                           "/v1/health)")
                return json_error(503, f"the store {store.path} cannot be read now ({exc}); "
                                       "see /v1/health's store.problem")
            # the traceback once per route and kind of error, then "N more like this"
            limited_log(logging.ERROR, f"500:{request.method}:{where}:{type(exc).__name__}",
                        f"API {request.method} {where} failed", exc_info=exc)
            return json_error(500, f"internal error: {type(exc).__name__}: {exc}")

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY_BYTES)
    app[REFUSE_BEFORE_CONTINUE] = refusal  # `Expect: 100-continue` is answered before guard
    add_routes(app, daemon, started_mono)
    add_metrics_route(app, metrics if metrics is not None else Metrics(daemon))
    return app


def _client_gone(request: web.Request) -> bool:
    """Whether the request's connection is closed or closing (its client went away)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _repeated_query(request: web.Request) -> str | None:
    """What is wrong when a /v1/ route's query gives a parameter more than once (each takes a
    parameter once: `gpu=0&gpu=1` used the first, silently); None when none is repeated."""
    resource = request.match_info.route.resource
    if resource is None or not resource.canonical.startswith("/v1/") or len(request.query) < 2:
        return None
    counts = Counter(key for key, _ in request.query.items())  # (keys() gives each once)
    key, count = counts.most_common(1)[0]
    if count == 1:
        return None
    return (f"query parameter {shown(key)} is given {count} times; {request.method} "
            f"{resource.canonical} takes it once")


def parse_listen(listen: str, flag: str = "--listen") -> tuple[str, int]:
    try:
        return parse_address(listen)
    except ValueError as exc:  # what is wrong with it: the form, or the port's range
        detail = str(exc)
        raise ApiError(f"{flag} {detail}" if repr(listen) in detail
                       else f"{flag} {listen!r}: {detail}") from None


def check_token_path(path: Path) -> None:
    """Before anything is created: a token path that exists must be a regular file (a
    directory, FIFO or device there is refused now, not after the store and workloads start)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return  # generated at start
    except OSError as exc:
        raise ApiError(f"cannot use the token file {path}: {exc.strerror}; pass --token-file "
                       "with a readable file") from None
    if stat.S_ISLNK(info.st_mode):
        raise ApiError(f"token file {path} is a symbolic link; mlcostd reads only a regular "
                       "file: point --token-file at the file itself")
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise ApiError(f"token file {path} is {kind}; pass --token-file with a file (or a "
                       "path that does not exist, to have mlcostd generate one)")


def bind_tcp(host: str, port: int, flag: str) -> socket.socket:
    """A TCP socket bound to host:port (an IP address: daemon.config.parse_address) and
    listening, as asyncio's create_server makes one (SO_REUSEADDR; an IPv6 one IPv6 only);
    aiohttp serves it once the daemon is up, and a connection made before waits in its
    backlog. Raises ApiError with the flag and the reason (the port in use)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(128)  # listening: with SO_REUSEADDR a bind alone reserves nothing
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        fix = {errno.EADDRINUSE: "stop what holds it or pass another port",
               errno.EADDRNOTAVAIL: "pass an address of this host (0.0.0.0 for every one)",
               }.get(exc.errno or 0, f"pass another {flag} HOST:PORT")
        raise ApiError(f"cannot listen on {where} ({flag}): {exc.strerror}; {fix}") from None
    sock.setblocking(False)
    return sock


def socket_served(path: Path) -> bool:
    """Whether a program listens on the unix socket at `path`: a connection is accepted (or
    its queue is full). A socket no one listens on (left by a daemon that died) is not.
    Raises ApiError when it cannot tell (the socket refuses us: permission)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except (TimeoutError, BlockingIOError):  # a listener whose queue is full
            return True
        except OSError as exc:
            raise ApiError(f"cannot tell whether a daemon serves {path}: {exc.strerror}; "
                           "pass a different --socket") from None
    return True


class ApiServer:
    """The API on a unix socket, and on TCP (token required) when `listen` is set."""

    def __init__(self, daemon: Any, socket_path: Path | str | None,
                 listen: str | None = None, token_file: Path | str | None = None, *,
                 max_connections: int = MAX_CONNECTIONS,
                 request_timeout_s: float = REQUEST_TIMEOUT_S,
                 metrics_listen: str | None = None,
                 metrics_label_values: int | None = None) -> None:
        self.daemon = daemon
        # One collector for every listener: the workload counters are kept once.
        self.metrics = Metrics(daemon, **({"label_values": metrics_label_values}
                                          if metrics_label_values else {}))
        self.metrics_listen = metrics_listen or None
        self.metrics_port: int | None = None
        self.socket_path = Path(socket_path) if socket_path else None
        self.listen = listen or None
        self.token_file = Path(token_file) if token_file else (
            self.socket_path.with_name("mlcostd.token") if self.socket_path else None)
        # per listener: the bound on connections and the request read deadline (api.limits)
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self._runners: list[web.AppRunner] = []
        self._bound_unix = False  # only a socket this server bound is removed on stop
        self._bound: dict[str, socket.socket] = {}  # flag -> its TCP port, bound by check()
        self.tcp_port: int | None = None

    def check(self) -> None:
        """What can be refused before the daemon creates anything (its store, its token file,
        its workloads): an unsafe socket folder, something else at the socket path or a live
        listener on it (SocketInUse), the listen addresses, an existing token file (its kind,
        mode and contents), and a TCP port it cannot bind: the ports are bound here and kept
        for start(), so what was checked is what is served. Raises ApiError."""
        if self.socket_path is not None:
            check_socket_folder(self.socket_path.parent)
            if check_socket_path(self.socket_path) is not None and socket_served(
                    self.socket_path):
                raise SocketInUse(socket_in_use_message(self.socket_path))
        listen = parse_listen(self.listen) if self.listen else None
        metrics = (parse_listen(self.metrics_listen, "--metrics-listen")
                   if self.metrics_listen else None)
        if listen is not None:
            if self.token_file is None:
                raise ApiError("--listen needs a token file: pass --token-file")
            check_token_path(self.token_file)
            if os.path.lexists(self.token_file):  # its mode and what it holds, too (a
                read_token(self.token_file)  # missing one is generated at start)
        try:  # last of these checks, so a refusal above leaves no port bound
            if listen is not None:
                self._bound["--listen"] = bind_tcp(*listen, "--listen")
            if metrics is not None:
                self._bound["--metrics-listen"] = bind_tcp(*metrics, "--metrics-listen")
        except ApiError:
            self.release()
            raise

    def release(self) -> None:
        """Close the ports check() bound that start() has not served (a start refused later,
        by the store): never raises."""
        for sock in self._bound.values():
            sock.close()
        self._bound.clear()

    async def start(self) -> None:
        started = time.monotonic()
        if self.socket_path is not None:
            await self._start_unix(make_app(self.daemon, started=started, metrics=self.metrics))
        if self.listen:
            if self.token_file is None:
                raise ApiError("--listen needs a token file: pass --token-file")
            token = read_token(self.token_file)
            host, port = parse_listen(self.listen)
            self.tcp_port = await self._start_tcp(
                make_app(self.daemon, token=token, started=started, metrics=self.metrics),
                host, port, "--listen")
            self.metrics.collector.api_port = self.tcp_port
            log.info("API on http://%s:%d (bearer token from %s)", host, self.tcp_port,
                     self.token_file)
        if self.metrics_listen:
            host, port = parse_listen(self.metrics_listen, "--metrics-listen")
            self.metrics_port = await self._start_tcp(metrics_only_app(self.metrics), host,
                                                      port, "--metrics-listen")
            log.info("metrics on http://%s:%d/metrics (no token: metrics only)", host,
                     self.metrics_port)

    async def _start_tcp(self, app: web.Application, host: str, port: int, flag: str) -> int:
        """Serve `app` on the port check() bound for `flag` (bound now if check() was not
        called); returns the port (port 0: the one chosen)."""
        sock = self._bound.pop(flag, None) or bind_tcp(host, port, flag)
        runner = self._runner(app)
        await runner.setup()
        try:
            await web.SockSite(runner, sock).start()
        except OSError as exc:
            sock.close()
            await runner.cleanup()
            raise ApiError(f"cannot listen on {host}:{port} ({flag}): {exc.strerror}") from None
        self._runners.append(runner)
        return int(sock.getsockname()[1])

    async def _start_unix(self, app: web.Application) -> None:
        assert self.socket_path is not None
        size = len(os.fsencode(self.socket_path))
        if size > SOCKET_PATH_MAX:
            raise ApiError(f"the socket path {self.socket_path} is {size} bytes long; a Unix "
                           f"socket's path can be at most {SOCKET_PATH_MAX}: pass a shorter "
                           "--socket")
        prepare_socket_folder(self.socket_path.parent)
        if check_socket_path(self.socket_path) is not None:
            if await _socket_answers(self.socket_path):  # since check(): one started since
                raise SocketInUse(socket_in_use_message(self.socket_path))
            self.socket_path.unlink()  # left behind by a daemon that died
        runner = self._runner(app)
        await runner.setup()
        old = os.umask(0o117)  # the socket is born 0660: no window with wider access
        try:
            await web.UnixSite(runner, str(self.socket_path)).start()
        finally:
            os.umask(old)
        self._bound_unix = True
        # By path: a socket has no descriptor to fchmod. Safe here: check_socket_folder let
        # only a folder no one else can write (not even sticky), so the name is still ours.
        os.chmod(self.socket_path, 0o660)
        self._runners.append(runner)
        log.info("API on unix:%s", self.socket_path)

    def _runner(self, app: web.Application) -> LimitedRunner:
        return LimitedRunner(app, max_connections=self.max_connections,
                             request_timeout_s=self.request_timeout_s)

    async def stop(self) -> None:
        self.release()
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        if self.socket_path is not None and self._bound_unix:
            self._bound_unix = False
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
