"""The API client: `Client("unix:/run/mlcost/mlcostd.sock")` or `Client("http://host:9347", token)`.

Every method returns wire types (daemon.wire). A daemon that is not there raises
`DaemonUnavailable` with how to start one; one that does not answer in time raises it saying so;
an answer with an error status raises `ApiError` with the daemon's message.

HTTP through the standard library (http.client), each request on its own connection in a daemon
thread, awaited with the request's deadline. A client asks for one JSON document at a time: for
that aiohttp added 8-10 MB to mlcost-top's 57 (bench/tui_idle.py), and the daemon alone needs it.
A request abandoned at quit dies with the process (a daemon thread), as aiohttp's did.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

from daemon.wire import (
    TOKEN_MAX_BYTES,
    TOKEN_MIN_CHARS,
    ActionResult,
    Comparison,
    Health,
    History,
    Now,
    Phases,
    Recommendation,
    default_socket_path,
    without_url_credentials,
)
from pricing.key_file import read_key_file
from pricing.small_file import MISSING, UNREADABLE, SmallFileError

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 3.0
APPLY_TIMEOUT_S = 30.0  # an action (a resize through boto3) answers when it was done
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
    """No daemon answers at the target (not running, wrong path, refused, timed out).
    `timed_out`: the connection was made and no answer came in time (a daemon that hangs or
    is stopped, not one that is gone)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


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
    bounded reader), for mlcost-top's other HTTP clients (Prometheus); ClientError past the cap.
    The caller's ClientTimeout bounds the time."""
    from pricing.http import AnswerTooLarge, read_bounded

    try:
        return await read_bounded(response, max_bytes=max_bytes, shown=shown)
    except AnswerTooLarge as exc:
        raise ClientError(str(exc)) from None


class ForeignSocket(OSError):
    """The unix socket is served by a process of another user than root or the client's."""


_PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (the daemon's default transport), to a daemon of root's or the
    client's own user only.

    A user's default socket is under /tmp where XDG_RUNTIME_DIR is not set
    (daemon.wire.default_socket_path), and another local user can make that folder first and
    serve a socket in it: the client would show that user's figures and send its requests,
    its token included, there. So who serves the socket is asked of the kernel (SO_PEERCRED:
    the user of the process that listens) before a byte is sent, and any other user is
    refused with ForeignSocket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("mlcostd", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
            _, uid, _ = _PEER_CREDENTIALS.unpack(sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size))
            if uid not in (0, os.geteuid()):
                raise ForeignSocket(
                    f"{self.socket_path} is served by a process of uid {uid}, neither root nor "
                    "you: not asked (another user may have made its folder first); remove "
                    "that folder, or set XDG_RUNTIME_DIR, or pass the daemon's own socket")
        except OSError:
            sock.close()
            raise
        self.sock = sock


def connection_to(target: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    """A (not yet connected) connection to `target` (unix:PATH, http:// or https://) and the
    path prefix its requests start with; ValueError for any other target."""
    if target.startswith("unix:"):
        return UnixConnection(target[len("unix:"):], timeout_s), ""
    parts = urlsplit(target)
    if "@" in parts.netloc and parts.scheme in ("http", "https"):  # (never shown: a secret)
        raise ValueError(f"target {without_url_credentials(target)!r} has a user or password; "
                         "mlcostd's API takes a bearer token instead: --token-file FILE")
    if parts.scheme == "http" and parts.netloc:
        return http.client.HTTPConnection(parts.netloc, timeout=timeout_s), \
            parts.path.rstrip("/")
    if parts.scheme == "https" and parts.netloc:
        return http.client.HTTPSConnection(parts.netloc, timeout=timeout_s), \
            parts.path.rstrip("/")
    raise ValueError(f"target {without_url_credentials(target)!r} is neither unix:PATH nor "
                     "http://HOST:PORT")


async def in_thread(call: Callable[[], T]) -> T:
    """`call()` in a daemon thread, awaited: the event loop runs on meanwhile, and a call the
    caller stops waiting for (a deadline, the app quitting) never holds the process."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return  # the caller stopped waiting
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = call()
        except Exception as exc:
            error = exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop has closed: nobody waits for this answer

    threading.Thread(target=run, name="mlcost-client", daemon=True).start()
    return await future


def read_token_file(path: str | Path) -> str:
    """The bearer token in `path` (--token-file): one line of TOKEN_MIN_CHARS to
    TOKEN_MAX_BYTES from a regular file (pricing.key_file: a FIFO would hang the start,
    /dev/zero fill memory, a second line break the request's header). ClientError says what is
    wrong, never what the file holds."""
    try:
        return read_key_file(path, max_bytes=TOKEN_MAX_BYTES, min_chars=TOKEN_MIN_CHARS)
    except SmallFileError as exc:
        fix = "" if exc.kind in (MISSING, UNREADABLE) else (
            f"; a token is one line of {TOKEN_MIN_CHARS} to {TOKEN_MAX_BYTES} characters: pass "
            "--token-file with a copy of the daemon's [api].token_file")
        raise ClientError(f"the token file {path}{exc}{fix}") from None


def simulated_scenario(socket_path: str) -> str | None:
    """The scenario whose socket `socket_path` is, where it is where `mlcostd run --simulate
    SCENARIO` serves by default (`…/mlcost/simulated/SCENARIO/mlcostd.sock`,
    daemon.config.paths.simulated_socket_path); None for any other socket."""
    path = Path(socket_path)
    if path.name != "mlcostd.sock" or path.parent.parent.name != "simulated" or \
            path.parent.parent.parent.name != "mlcost":
        return None
    return path.parent.name or None


class Client:
    """One daemon. Each request opens its own connection; `close()` (or `async with`) is kept
    for callers and has nothing to release."""

    def __init__(self, target: str | None = None, token: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target or default_target()
        self.token = token
        self.timeout_s = timeout_s
        self.socket_path = self.target[len("unix:"):] if self.target.startswith("unix:") \
            else None
        try:
            connection_to(self.target, timeout_s)
        except ValueError as exc:
            raise ClientError(str(exc)) from None

    @property
    def name(self) -> str:
        return self.target

    def _hint(self) -> str:
        if self.socket_path is not None:
            try:
                mode = os.stat(self.socket_path).st_mode
            except OSError:
                mode = None
            if mode is not None and not stat.S_ISSOCK(mode):
                what = "a folder" if stat.S_ISDIR(mode) else "a file"
                return (f"{self.socket_path} is {what}, not a socket: give the daemon's API "
                        "socket ([api].socket; as root /run/mlcost/mlcostd.sock)")
            scenario = simulated_scenario(self.socket_path)
            if scenario is not None:  # a simulated host's: `sudo mlcostd run` is this host's
                return (f"start it with `mlcostd run --simulate {scenario}` or try "
                        "`mlcost-top --demo`")
            return ("start it with `sudo mlcostd run` (or `mlcostd run --socket "
                    f"{self.socket_path}`) or try `mlcost-top --demo`")
        return "check that mlcostd runs there with --listen, and the address and port"

    def _headers(self, body: bytes | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def _exchange(self, method: str, path: str, body: bytes | None,
                  timeout_s: float) -> tuple[int, bytes]:
        """One request, blocking (in a client thread): the status and the bounded body."""
        from pricing.http import AnswerTooLarge, FetchError, read_bounded_sync

        deadline = time.monotonic() + timeout_s
        connection, prefix = connection_to(self.target, timeout_s)
        try:
            connection.request(method, prefix + path, body=body, headers=self._headers(body))
            response = connection.getresponse()
            try:
                raw = read_bounded_sync(response, max_bytes=MAX_ANSWER_BYTES,
                                        deadline=deadline, shown=f"{self.target}{path}")
            except AnswerTooLarge as exc:
                raise ClientError(str(exc)) from None
            except FetchError:
                raise TimeoutError from None  # past the deadline: the caller says so
            return response.status, raw
        finally:
            connection.close()

    def _unavailable(self, exc: BaseException, timeout_s: float) -> DaemonUnavailable:
        if isinstance(exc, ForeignSocket):
            return DaemonUnavailable(f"mlcostd at {self.target} refused: {exc}")
        if isinstance(exc, asyncio.TimeoutError | TimeoutError):
            return DaemonUnavailable(f"mlcostd at {self.target} did not answer within "
                                     f"{timeout_s:g} s", timed_out=True)
        return DaemonUnavailable(f"no mlcostd at {self.target}: {self._hint()} "
                                 f"({_why(exc)})")

    async def _request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                       body: dict[str, Any] | None = None,
                       timeout_s: float | None = None) -> Any:
        timeout = timeout_s or self.timeout_s
        if params:
            path = f"{path}?{urlencode(params)}"
        data = json.dumps(body).encode() if body is not None else None
        try:
            status, raw = await asyncio.wait_for(
                in_thread(partial(self._exchange, method, path, data, timeout)), timeout)
        except (asyncio.TimeoutError, OSError, http.client.HTTPException) as exc:
            # TimeoutError first (it is an OSError): a daemon that is there but slow
            raise self._unavailable(exc, timeout) from None
        text = raw.decode("utf-8", errors="replace")
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

    async def apply(self, rec_id: str, dry_run: bool = True,
                    accept_preliminary: bool = False,
                    timeout_s: float = APPLY_TIMEOUT_S) -> ActionResult:
        """`accept_preliminary`: the user confirmed a resize on preliminary evidence a second
        time (the daemon refuses it without). `timeout_s`: how long to wait for the answer."""
        body: dict[str, Any] = {"dry_run": dry_run}
        if accept_preliminary:
            body["accept_preliminary"] = True
        return ActionResult.from_dict(await self._request(
            "POST", f"/v1/recommendations/{rec_id}/apply", body=body, timeout_s=timeout_s))

    async def snooze(self, rec_id: str, hours: float = 24) -> float:
        document = await self._request("POST", f"/v1/recommendations/{rec_id}/snooze",
                                       body={"hours": hours})
        return float(document["snoozed_until"])

    async def snoozed_recommendations(self) -> list[Recommendation]:
        """The snoozed recommendations, each with its `snoozed_until`."""
        document = await self._request("GET", "/v1/recommendations/snoozed")
        return [Recommendation.from_dict(r) for r in document.get("recommendations", [])]

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
        try:
            return await asyncio.wait_for(
                in_thread(partial(self._download, name, out)), SNAPSHOT_TIMEOUT_S)
        except (asyncio.TimeoutError, OSError, http.client.HTTPException) as exc:
            raise self._unavailable(exc, SNAPSHOT_TIMEOUT_S) from None  # writing: ClientError

    def _download(self, name: str, out: Path) -> int:
        """download_snapshot's work, blocking (in a client thread); it cleans up after itself,
        past its deadline too."""
        from daemon.store.files import check_existing, open_checked, temp_path

        try:  # replaced at the end: never a link, a FIFO, a device or someone else's file
            check_existing(out)
        except OSError as exc:
            raise ClientError(f"cannot write {out}: {exc}") from None
        deadline = time.monotonic() + SNAPSHOT_TIMEOUT_S
        path = f"/v1/snapshots/{name}"
        connection, prefix = connection_to(self.target, SNAPSHOT_TIMEOUT_S)
        tmp = temp_path(out)  # a fresh name beside `out`, found by pruning if we are killed
        try:
            connection.request("GET", prefix + path, headers=self._headers())
            response = connection.getresponse()
            if response.status >= 400:
                text = response.read(64 << 10).decode("utf-8", errors="replace")
                try:
                    message = json.loads(text).get("error") or text[:200]
                except (ValueError, AttributeError):
                    message = text[:200]
                raise ApiError(response.status, message)
            # never through a link; 0600 on the descriptor (mlcostd snapshot may run as root)
            try:
                fd = open_checked(tmp, os.O_WRONLY | os.O_EXCL, create=True)
                os.fchmod(fd, 0o600)
            except OSError as exc:
                raise ClientError(f"cannot write {out}: {exc}") from None
            size = 0
            with os.fdopen(fd, "wb") as f:
                while chunk := response.read1(1 << 16):
                    if time.monotonic() > deadline:
                        raise TimeoutError
                    try:
                        f.write(chunk)
                    except OSError as exc:
                        raise ClientError(f"cannot write {out}: {exc}") from None
                    size += len(chunk)
            try:
                os.replace(tmp, out)
            except OSError as exc:
                raise ClientError(f"cannot write {out}: {exc}") from None
            return size
        finally:
            connection.close()
            if tmp.exists():
                tmp.unlink()

    async def close(self) -> None:
        """Nothing to release (each request closes its own connection)."""

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# What an OSError of a connection says, in words (probe 148 L4: "(FileNotFoundError: [Errno 2]
# No such file or directory)" in mlcost-top's header and toasts)
_CONNECT_ERRORS = {
    FileNotFoundError: "no socket there",
    ConnectionRefusedError: "nothing listens there",
    PermissionError: "permission denied: the socket is root's and its group's (see Security)",
}


def _why(exc: BaseException) -> str:
    """Why a connection failed, in words: the errors users meet named plainly, any other as
    its class and text."""
    for kind, words in _CONNECT_ERRORS.items():
        if isinstance(exc, kind):
            return words
    return f"{type(exc).__name__}: {exc}"
