"""A real aiohttp server on 127.0.0.1 in a background thread, answering from a script.

Each route maps to a list of replies served in order (the last one repeats); a reply is
(status, body, headers) or the string "hang" (never answers: for client timeouts). Requests are
recorded with their query so tests can assert what the client asked for.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Reply = tuple[int, str, dict[str, str]] | str


@dataclass
class LocalServer:
    routes: dict[str, list[Reply]]
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, dict(request.query)))
        self.headers.append(dict(request.headers))
        replies = self.routes.get(request.path)
        if not replies:
            return web.Response(status=404, text=f"no route {request.path}")
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        if reply == "hang":
            assert self._stop is not None
            await self._stop.wait()
            return web.Response(status=503)
        status, body, headers = reply  # type: ignore[misc]
        return web.Response(status=status, text=body, headers=headers)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            app = web.Application()
            app.router.add_route("GET", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"
            self._started.set()
            await self._stop.wait()
            await runner.cleanup()

        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    def __enter__(self) -> LocalServer:
        self._thread.start()
        assert self._started.wait(10), "the local server did not start"
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def ok(body: str, **headers: str) -> Reply:
    return (200, body, headers)
