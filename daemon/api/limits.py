"""Limits of the API's HTTP transport against a hostile or broken client (issue 10).

- A bound on concurrent connections per listener: at the bound a new connection closes the
  longest-open one that is not running a request (idle keep-alive, or still sending its
  headers); when every connection is running a request the new one is answered 503 and closed.
- A connection must send a complete request head within `request_timeout_s` of opening (or of
  its previous response): aiohttp's keep-alive timer, which this sets, closes it otherwise
  (slowloris, half-open and idle connections). A body is read with the same deadline
  (daemon.api.routes) and a body nobody reads is drained for at most `LINGER_S`.
- A request that expects `100 Continue` is shown to the app's `REFUSE_BEFORE_CONTINUE` check
  first: aiohttp invites the body in its expect handler, before any middleware runs, so a
  refusal there (a missing token) is the answer, never an invitation.
- Parser-level bad requests (a control byte, a folded header, a bare LF, an oversized line,
  more than MAX_HEADERS headers)
  are answered with a JSON 400 that never echoes the request (it may hold the bearer token),
  and logged as one line per kind, rate-limited: "N more like this" at most once a minute.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    HttpProcessingError,
    LineTooLong,
)
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("daemon.api.server")

MAX_CONNECTIONS = 256  # per listener; two listeners stay well inside a 1024-descriptor limit
REQUEST_TIMEOUT_S = 20.0  # request head (and body) read deadline, and the idle keep-alive time
LINGER_S = 2.0  # an unread request body is drained this long, then the connection is closed
MAX_LINE = 8190  # request line and each header (aiohttp's defaults, said in the 400)
MAX_HEADERS = 128
LOG_EVERY_S = 60.0
# aiohttp's words for a request past max_headers (headers, or chunked trailers)
_TOO_MANY_HEADERS = ("Too many headers", "Too many trailers")
# and for a header that may come once (RFC 9110's singletons, aiohttp's SINGLETON_HEADERS)
_DUPLICATE = "Duplicate "
_SINGLETON_HEADERS = ("Content-Length", "Content-Location", "Content-Range", "Content-Type",
                      "ETag", "Host", "Max-Forwards", "Server", "Transfer-Encoding",
                      "User-Agent")


class RateLimitedLog:
    """One log line per kind at most every `every_s` seconds; what was held back is counted
    and said with the next line of that kind ("N more like this in the last 60 s")."""

    def __init__(self, logger: logging.Logger, every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.every_s = every_s
        self.clock = clock
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (last logged, held back)

    def __call__(self, level: int, kind: str, message: str,
                 exc_info: BaseException | None = None) -> None:
        now = self.clock()
        last, held = self._kinds.get(kind, (-float("inf"), 0))
        if now - last < self.every_s:
            self._kinds[kind] = (last, held + 1)
            return
        if held:
            message += f" ({held} more like this in the last {now - last:.0f} s)"
        self._kinds[kind] = (now, 0)
        self.logger.log(level, "%s", message, exc_info=exc_info)


limited_log = RateLimitedLog(log)


def _describe(exc: BaseException | None, status: int) -> tuple[str, str]:
    """(kind, message) for a request the parser or the server refused; never the request's
    own bytes (the header that failed may be the Authorization header)."""
    if isinstance(exc, LineTooLong):
        return "line-too-long", (f"a request line or header is longer than {MAX_LINE} bytes; "
                                 "send shorter headers")
    # aiohttp has no class of its own for these: a BadHttpMessage of its words (both parsers)
    if isinstance(exc, BadHttpMessage) and exc.message.startswith(_TOO_MANY_HEADERS):
        return "too-many-headers", (f"the request has more than {MAX_HEADERS} headers; send "
                                    "fewer")
    if isinstance(exc, BadHttpMessage) and exc.message.startswith(_DUPLICATE):
        # `Duplicate 'Host' header found.` (aiohttp), `Duplicate Content-Length:` and the
        # request's line (llhttp): the name is one of the singleton headers, said in our own
        # spelling (never the request's bytes)
        said = exc.message[len(_DUPLICATE):].lstrip("'").lower()
        name = next((known for known in _SINGLETON_HEADERS
                     if said.startswith(known.lower()) and said[len(known):][:1] in ("'", ":")),
                    None)
        if name is not None:
            return f"duplicate-header:{name}", (f"the request has the {name} header more than "
                                                "once; send it once")
    if isinstance(exc, BadHttpMethod):
        return "bad-method", "the request line is not HTTP (a bad method); send HTTP/1.1"
    if isinstance(exc, HttpProcessingError):
        name = type(exc).__name__
        return (f"bad-http:{name}",
                f"malformed HTTP request ({name}: a control byte, a folded header, a bare LF "
                "or a bad header); send a well-formed HTTP/1.1 request")
    if status == 504:
        return "timeout", "the request took too long"
    name = type(exc).__name__ if exc is not None else "error"
    return f"server:{name}", f"internal error ({name}); see the daemon's log"


class _Handler(RequestHandler):
    """aiohttp's connection handler with error answers and logs that never echo a request."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        kind, text = _describe(exc, status)
        peer = self._peer()
        limited_log(logging.WARNING, kind, f"API: refused a request from {peer}: {text} "
                                           f"(answered {status})")
        resp = web.Response(status=status, text=json.dumps({"error": text}),
                            content_type="application/json")
        resp.force_close()
        return resp

    def log_exception(self, *args: Any, **kw: Any) -> None:
        # aiohttp's own "Unhandled exception" and the like: one line, no traceback (the
        # traceback's locals and messages may quote the request's headers)
        exc = kw.get("exc_info")
        name = type(exc).__name__ if isinstance(exc, BaseException) else "error"
        what = str(args[0]) if args else "error"
        # a body that cannot be decoded was answered 400 already (routes); aiohttp meets the
        # same error again while it drains the rest: nothing more to say
        level = logging.DEBUG if isinstance(exc, web.RequestPayloadError) else logging.WARNING
        limited_log(level, f"aiohttp:{what}:{name}",
                    f"API: {what} ({name}) on a connection from {self._peer()}")

    def _peer(self) -> str:
        transport = self.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        if isinstance(peer, tuple) and len(peer) >= 2:
            return f"{peer[0]}:{peer[1]}"
        return "the unix socket"


Refusal = Callable[[web.BaseRequest], web.StreamResponse | None]
# What an app refuses a request for before reading its body (the token): asked before aiohttp's
# expect handler sends "100 Continue", so every route, and a path no route has, is covered.
REFUSE_BEFORE_CONTINUE: web.AppKey[Refusal] = web.AppKey("refuse_before_continue")


def _refusing_before_continue(
        handle: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        refuse: Refusal) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    async def handle_request(request: web.BaseRequest) -> web.StreamResponse:
        if request.headers.get(hdrs.EXPECT):
            refused = refuse(request)
            if refused is not None:
                # the client may send its body anyway, or wait: close rather than read it
                refused.force_close()
                return refused
        return await handle(request)

    return handle_request


_TOO_MANY = b"too many connections to mlcostd's API; close idle ones and retry"


class _LimitedServer(web.Server):
    """aiohttp's Server (the protocol factory of one listener) with a bound on connections."""

    max_connections: int
    _open: OrderedDict[RequestHandler, Any]

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: Any) -> None:
        super().connection_made(handler, transport)
        while len(self._open) >= self.max_connections:
            oldest = next((h for h in self._open
                           if not getattr(h, "_request_in_progress", False)), None)
            if oldest is None:  # every connection is running a request: refuse this one
                body = json.dumps({"error": f"{_TOO_MANY.decode()} (limit "
                                            f"{self.max_connections})"}).encode()
                transport.write(b"HTTP/1.1 503 Service Unavailable\r\n"
                                b"Content-Type: application/json\r\nConnection: close\r\n"
                                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                handler.force_close()
                transport.close()
                limited_log(logging.WARNING, "connections-refused",
                            f"API: {self.max_connections} connections are running requests "
                            "(the limit): refused a new one with 503")
                return
            del self._open[oldest]
            oldest.force_close()
            limited_log(logging.WARNING, "connections-evicted",
                        f"API: {self.max_connections} connections open (the limit): closed "
                        "the longest-open idle one for a new one")
        self._open[handler] = transport

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self._open.pop(handler, None)
        super().connection_lost(handler, exc)


class LimitedRunner(web.AppRunner):
    """An AppRunner whose listener bounds its connections and read times (module doc)."""

    def __init__(self, app: web.Application, *, max_connections: int = MAX_CONNECTIONS,
                 request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections={max_connections} must be at least 1")
        if not request_timeout_s > 0:
            raise ValueError(f"request_timeout_s={request_timeout_s} must be above 0")
        super().__init__(app, access_log=None, keepalive_timeout=request_timeout_s,
                         lingering_time=min(LINGER_S, request_timeout_s),
                         max_line_size=MAX_LINE, max_field_size=MAX_LINE,
                         max_headers=MAX_HEADERS)
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # aiohttp builds its Server inside Application; give it this class's connection
        # bookkeeping (it adds behaviour, no state aiohttp knows of)
        server.__class__ = _LimitedServer
        assert isinstance(server, _LimitedServer)
        server.max_connections = self.max_connections
        server._open = OrderedDict()
        refuse = self.app.get(REFUSE_BEFORE_CONTINUE)
        if refuse is not None:  # before aiohttp's expect handler, which precedes middlewares
            server.request_handler = _refusing_before_continue(server.request_handler, refuse)
        return server

    @property
    def open_connections(self) -> int:
        server = self.server
        return len(server._open) if isinstance(server, _LimitedServer) else 0
