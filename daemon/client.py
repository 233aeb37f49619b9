"""The API client: `Client("unix:/run/mlcost/mlcostd.sock")` or `Client("http://host:9347", token)`.

Every method returns wire types (daemon.wire). A daemon that is not there raises
`DaemonUnavailable` with how to start one; an answer with an error status raises `ApiError`
with the daemon's message.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.wire import (
    ActionResult,
    Comparison,
    Health,
    History,
    Now,
    Phases,
    Recommendation,
    default_socket_path,
)

if TYPE_CHECKING:  # imported on the first request: mlcost-top draws its first frame without it
    import aiohttp

DEFAULT_TIMEOUT_S = 3.0
HISTORY_TIMEOUT_S = 8.0
COMPARE_TIMEOUT_S = 75.0  # the daemon cuts its comparison off at 60 s (daemon.api.compare)
IDLE_TIMEOUT_S = 8.0  # the daemon's own store read is cut off at 5 s (daemon.api.idle)
SNAPSHOT_TIMEOUT_S = 120.0  # writing (and uploading) a snapshot takes a while
# The largest JSON answer read from a daemon: /v1/now of 8 GPUs x 64 processes is ~1 MB; a
# daemon that sends more (or never stops) is cut off here, not held in memory.
MAX_ANSWER_BYTES = 32 << 20


class ClientError(Exception):
    """Base of what the client raises."""


class DaemonUnavailable(ClientError):
    """No daemon answers at the target (not running, wrong path, refused, timed out)."""


class ApiError(ClientError):
    """The daemon answered with an error status; `status` and the daemon's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.message = message


def default_target() -> str:
    return f"unix:{default_socket_path()}"


async def read_answer(response: Any, *, max_bytes: int = MAX_ANSWER_BYTES,
                      shown: str = "") -> bytes:
    """The body of an aiohttp response, at most `max_bytes` (pricing.http.read_bounded, the one
    bounded reader), for this client and mlcost-top's other HTTP clients; ClientError past the
    cap. The caller's ClientTimeout bounds the time."""
    from pricing.http import AnswerTooLarge, read_bounded

    try:
        return await read_bounded(response, max_bytes=max_bytes, shown=shown)
    except AnswerTooLarge as exc:
        raise ClientError(str(exc)) from None


def read_token_file(path: str | Path) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise ClientError(f"cannot read the token file {path}: {exc.strerror}") from None


class Client:
    """One daemon. Open lazily, close with `await client.close()` (or `async with`)."""

    def __init__(self, target: str | None = None, token: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target or default_target()
        self.token = token
        self.timeout_s = timeout_s
        if self.target.startswith("unix:"):
            self.socket_path: str | None = self.target[len("unix:"):]
            self.base = "http://mlcostd"
        elif self.target.startswith(("http://", "https://")):
            self.socket_path = None
            self.base = self.target.rstrip("/")
        else:
            raise ClientError(f"target {self.target!r} is neither unix:PATH nor http://HOST:PORT")
        self._session: aiohttp.ClientSession | None = None

    @property
    def name(self) -> str:
        return self.target

    def _hint(self) -> str:
        if self.socket_path is not None:
            return ("start it with `sudo mlcostd run` (or `mlcostd run --socket "
                    f"{self.socket_path}`) or try `mlcost-top --demo`")
        return "check that mlcostd runs there with --listen, and the address and port"

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            connector = (aiohttp.UnixConnector(path=self.socket_path)
                         if self.socket_path is not None else aiohttp.TCPConnector(limit=4))
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            self._session = aiohttp.ClientSession(connector=connector, headers=headers)
        return self._session

    async def _request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                       body: dict[str, Any] | None = None,
                       timeout_s: float | None = None) -> Any:
        import aiohttp

        session = self._open()
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.timeout_s)
        try:
            async with session.request(method, self.base + path, params=params, json=body,
                                       timeout=timeout) as response:
                raw = await read_answer(response, shown=f"{self.target}{path}")
                text = raw.decode("utf-8", errors="replace")
                status = response.status
        except (aiohttp.ClientConnectionError, FileNotFoundError, ConnectionRefusedError,
                OSError) as exc:
            raise DaemonUnavailable(f"no mlcostd at {self.target}: {self._hint()} "
                                    f"({type(exc).__name__}: {exc})") from None
        except asyncio.TimeoutError:
            raise DaemonUnavailable(f"mlcostd at {self.target} did not answer within "
                                    f"{timeout.total:g} s") from None
        try:
            document = json.loads(text) if text else {}
        except ValueError:
            raise ApiError(status, f"not a JSON answer from {self.target}: {text[:80]!r}") \
                from None
        if status >= 400:
            message = document.get("error") if isinstance(document, dict) else None
            raise ApiError(status, message or text[:200])
        return document

    async def health(self) -> Health:
        return Health.from_dict(await self._request("GET", "/v1/health"))

    async def now(self) -> Now:
        return Now.from_dict(await self._request("GET", "/v1/now"))

    async def now_raw(self) -> dict[str, Any]:
        return await self._request("GET", "/v1/now")

    async def gpu_history(self, gpu: int, metric: str = "utilization", since_s: float = 3600,
                          points: int = 300) -> History:
        return History.from_dict(await self._request(
            "GET", "/v1/history", params={"metric": metric, "gpu": str(gpu),
                                          "since": str(since_s), "points": str(points)},
            timeout_s=HISTORY_TIMEOUT_S))

    async def host_history(self, metric: str = "wasted_per_hour", since_s: float = 3600,
                           points: int = 300) -> History:
        return History.from_dict(await self._request(
            "GET", "/v1/history", params={"metric": metric, "since": str(since_s),
                                          "points": str(points)}, timeout_s=HISTORY_TIMEOUT_S))

    async def process_history(self, key: str, metric: str = "sm_share", since_s: float = 3600,
                              points: int = 300) -> History:
        return History.from_dict(await self._request(
            "GET", "/v1/history", params={"metric": metric, "process": key,
                                          "since": str(since_s), "points": str(points)},
            timeout_s=HISTORY_TIMEOUT_S))

    async def phases(self, key: str, since_s: float = 1800) -> Phases:
        return Phases.from_dict(await self._request(
            "GET", f"/v1/processes/{key}/phases", params={"since": str(since_s)}))

    async def compare_previous(self, target: str) -> Comparison:
        """GET /v1/compare: job `target`'s (or process PID:START's command line's) latest run
        against the run before it. ApiError 404 when the store holds no earlier run."""
        return Comparison.from_dict(await self._request(
            "GET", "/v1/compare", params={"previous": target}, timeout_s=COMPARE_TIMEOUT_S))

    async def idle(self, for_s: float = 0.0) -> dict[str, Any]:
        """GET /v1/idle: the idleness answer (README: Is this host idle?), as the daemon sent
        it; `active` is true whenever the daemon could not tell."""
        document = await self._request("GET", "/v1/idle", params={"for": f"{for_s:.3f}"},
                                       timeout_s=IDLE_TIMEOUT_S)
        if not isinstance(document, dict) or not isinstance(document.get("active"), bool):
            raise ApiError(200, f"not an idleness answer from {self.target}")
        return document

    async def recommendations(self) -> list[Recommendation]:
        document = await self._request("GET", "/v1/recommendations")
        return [Recommendation.from_dict(r) for r in document.get("recommendations", [])]

    async def apply(self, rec_id: str, dry_run: bool = True) -> ActionResult:
        return ActionResult.from_dict(await self._request(
            "POST", f"/v1/recommendations/{rec_id}/apply", body={"dry_run": dry_run},
            timeout_s=30.0))

    async def snooze(self, rec_id: str, hours: float = 24) -> float:
        document = await self._request("POST", f"/v1/recommendations/{rec_id}/snooze",
                                       body={"hours": hours})
        return float(document["snoozed_until"])

    async def unsnooze(self, rec_id: str) -> None:
        """End a snooze (undo): the recommendation is listed again."""
        await self._request("DELETE", f"/v1/recommendations/{rec_id}/snooze")

    async def take_snapshot(self, since_s: float = 1800, until: float | None = None,
                            html: bool = False, upload: bool = False) -> dict[str, Any]:
        """POST /v1/snapshots: the daemon writes a snapshot into its snapshots folder; with
        `upload`, it uploads it to its configured [snapshots].upload (a client never says
        where)."""
        body: dict[str, Any] = {"since": since_s, "html": html}
        if until is not None:
            body["until"] = until
        if upload:
            body["upload"] = True
        document = await self._request("POST", "/v1/snapshots", body=body,
                                       timeout_s=SNAPSHOT_TIMEOUT_S)
        return document if isinstance(document, dict) else {}

    async def snapshots(self) -> dict[str, Any]:
        """GET /v1/snapshots: the daemon's snapshots folder and its files, newest first."""
        document = await self._request("GET", "/v1/snapshots")
        return document if isinstance(document, dict) else {}

    async def download_snapshot(self, name: str, out: Path) -> int:
        """Save one file of the daemon's snapshots folder to `out` (mode 0600, written to a
        temporary name first). Returns its size."""
        import aiohttp

        from daemon.store.files import open_checked, temp_path

        session = self._open()
        timeout = aiohttp.ClientTimeout(total=SNAPSHOT_TIMEOUT_S)
        tmp = temp_path(out)  # a fresh name beside `out`, found by pruning if we are killed
        try:
            async with session.get(f"{self.base}/v1/snapshots/{name}",
                                   timeout=timeout) as response:
                if response.status >= 400:
                    text = await response.text()
                    try:
                        message = json.loads(text).get("error") or text[:200]
                    except (ValueError, AttributeError):
                        message = text[:200]
                    raise ApiError(response.status, message)
                # never through a link; 0600 on the descriptor (mlcostd snapshot may run
                # as root)
                fd = open_checked(tmp, os.O_WRONLY | os.O_EXCL, create=True)
                os.fchmod(fd, 0o600)
                size = 0
                with os.fdopen(fd, "wb") as f:
                    async for chunk in response.content.iter_chunked(1 << 16):
                        f.write(chunk)
                        size += len(chunk)
            os.replace(tmp, out)
            return size
        except (aiohttp.ClientConnectionError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
                raise ClientError(f"cannot write {out}: {exc}") from None
            raise DaemonUnavailable(f"no mlcostd at {self.target}: {self._hint()} "
                                    f"({type(exc).__name__}: {exc})") from None
        finally:
            if tmp.exists():
                tmp.unlink()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
