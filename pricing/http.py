"""Bounded HTTP: every fetch mlcost makes over a network streams its answer with a byte cap and
a total deadline, so an endless or trickling answer costs at most `max_bytes` of memory and
`timeout_s` of time.

- `fetch` (aiohttp) for the credential-free price refreshers, with a bounded Retry-After on 429;
- `read_bounded` (aiohttp) for any other aiohttp client (mlcost-top's Prometheus queries);
- `read_bounded_sync` (urllib, http.client) for the blocking readers (instance metadata,
  unit-cost counters, budget webhooks, the daemon's API client).
aiohttp is imported by the functions that use it: the blocking readers run without it.

Every failure becomes a `FetchError` whose message names the URL (with secrets removed), what
went wrong and what to do. Query parameters listed in `secret_params` never reach a message.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    import aiohttp

DEFAULT_TIMEOUT_S = 30.0
# The largest answer a price refresh reads: SkyPilot's biggest vms.csv (GCP) is ~6 MB, a
# 5000-SKU Cloud Billing page ~10 MB; 64 MiB leaves room and keeps an endless answer out of
# memory.
MAX_BODY_BYTES = 64 << 20
CHUNK_BYTES = 1 << 16
# A 429 is retried after its Retry-After (seconds), at most this often and this long each,
# so one refresh cannot hang on a throttling server.
MAX_RETRIES_429 = 3
MAX_RETRY_AFTER_S = 30.0
DEFAULT_RETRY_AFTER_S = 1.0
USER_AGENT = "mlcost-pricing/0.1 (+https://github.com/; price refresh)"


class FetchError(RuntimeError):
    """A request that gave no usable answer; the message is for a user."""


class AnswerTooLarge(FetchError):
    """An answer past its byte cap; the reading stopped there."""


def _too_large(shown: str, max_bytes: int) -> AnswerTooLarge:
    return AnswerTooLarge(f"{shown}: the answer is larger than {max_bytes} bytes "
                          f"({max_bytes / 2**20:g} MiB), the most mlcost reads; reading stopped "
                          "there (check the URL: it may serve something else)")


def _too_slow(shown: str, timeout_s: float) -> FetchError:
    return FetchError(f"{shown}: no answer within {timeout_s:g} s; check the network or "
                      "proxy, or try again later (a complete answer, its body included, must "
                      "arrive by then)")


async def read_bounded(response: aiohttp.ClientResponse, *, max_bytes: int = MAX_BODY_BYTES,
                       shown: str = "") -> bytes:
    """The body of `response`, read chunk by chunk: AnswerTooLarge as soon as it passes
    `max_bytes` (a Content-Length above it is refused before reading), so memory stays within
    `max_bytes` plus one chunk. The caller bounds the time (`fetch`'s deadline, or its own)."""
    shown = shown or str(response.url)
    if response.content_length is not None and response.content_length > max_bytes:
        raise _too_large(shown, max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(shown, max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


class _Readable(Protocol):
    def read1(self, size: int = ...) -> bytes: ...


def read_bounded_sync(response: _Readable, *, max_bytes: int, deadline: float,
                      shown: str) -> bytes:
    """The body of a urllib response, read one network read at a time (`read1`, so a trickle
    cannot hold a full-sized `read` open): AnswerTooLarge past `max_bytes`, FetchError past
    `deadline` (time.monotonic()). The socket's own timeout bounds each read."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise FetchError(f"{shown}: the answer did not arrive in time; reading stopped")
        chunk = response.read1(CHUNK_BYTES)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(shown, max_bytes)
        chunks.append(chunk)


def redact_url(url: str, secret_params: Sequence[str] = ("key",)) -> str:
    """`url` with the values of `secret_params` replaced by '***'."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    query = [(k, "***" if k in secret_params else v)
             for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    return urlunsplit(parts._replace(query=urlencode(query, safe="$'* ")))


def _retry_after(value: str | None) -> float:
    try:
        seconds = float(value) if value else DEFAULT_RETRY_AFTER_S
    except ValueError:
        seconds = DEFAULT_RETRY_AFTER_S  # an HTTP date: not worth parsing for a price refresh
    return max(0.0, seconds)


async def fetch(session: aiohttp.ClientSession, url: str, *,
                params: Mapping[str, str] | None = None, as_json: bool = True,
                timeout_s: float = DEFAULT_TIMEOUT_S, max_retries: int = MAX_RETRIES_429,
                max_retry_after_s: float = MAX_RETRY_AFTER_S,
                secret_params: Sequence[str] = ("key",),
                headers: Mapping[str, str] | None = None,
                max_bytes: int = MAX_BODY_BYTES) -> Any:
    """GET `url` (+ `params`, `headers`): parsed JSON, or text with `as_json=False`; raises
    FetchError. Each attempt has `timeout_s` in all (connecting, headers and the whole body:
    a trickling answer is cut there) and reads at most `max_bytes` (AnswerTooLarge past it).
    Header values (an API key) never appear in a message."""
    import aiohttp

    secrets = [v for v in (headers or {}).values() if v]
    shown = redact_url(url if not params else f"{url}?{urlencode(dict(params))}", secret_params)
    attempt = 0
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                answer = await _get_once(session, url, params, headers, shown, as_json,
                                         max_bytes, timeout_s)
        except asyncio.TimeoutError:
            raise _too_slow(shown, timeout_s) from None
        except aiohttp.ClientError as exc:
            text = _scrub(str(exc), params, secret_params, secrets)
            raise FetchError(f"{shown}: {type(exc).__name__}: {text}; check the network or "
                             "proxy") from None
        except FetchError as exc:  # an error page may quote the key: scrub it
            raise type(exc)(_scrub(str(exc), params, secret_params, secrets)) from None
        if not isinstance(answer, _Throttled):
            return answer
        wait = answer.wait
        if attempt >= max_retries or wait > max_retry_after_s:
            raise FetchError(
                f"{shown}: throttled (HTTP 429, Retry-After {wait:g} s) after "
                f"{attempt + 1} attempt(s); try again in a few minutes")
        attempt += 1
        await asyncio.sleep(wait)


class _Throttled:
    def __init__(self, wait: float) -> None:
        self.wait = wait


async def _get_once(session: aiohttp.ClientSession, url: str,
                    params: Mapping[str, str] | None, headers: Mapping[str, str] | None,
                    shown: str, as_json: bool, max_bytes: int, timeout_s: float) -> Any:
    """One GET: the parsed answer, or _Throttled on a 429; FetchError on an HTTP error, a body
    past `max_bytes` or one that does not parse."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with session.get(url, params=params, timeout=timeout,
                           headers={"User-Agent": USER_AGENT, **(headers or {})}) as response:
        if response.status == 429:
            return _Throttled(_retry_after(response.headers.get("Retry-After")))
        if response.status >= 400:
            # only the start of an error page is shown: read no more than that
            head = await response.content.read(4096)
            body = head.decode("utf-8", errors="replace")[:200].replace("\n", " ")
            hint = ("check the API key and that the API is enabled for it"
                    if response.status in (401, 403) else "check the URL and region")
            raise FetchError(f"{shown}: HTTP {response.status}: {body}; {hint}")
        raw = await read_bounded(response, max_bytes=max_bytes, shown=shown)
    try:
        text = raw.decode(response.charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = raw.decode("utf-8", errors="replace")
    if not as_json:
        return text
    try:
        return loads_finite(text)
    except NotFinite as exc:
        raise FetchError(f"{shown}: the answer holds {exc}; refused (a price service never "
                         "sends one)") from None
    except (ValueError, RecursionError) as exc:
        raise FetchError(f"{shown}: the answer is not JSON ({str(exc)[:120]}); the service may "
                         "be down or the URL wrong") from None


class NotFinite(ValueError):
    """A JSON number that is not a finite float (NaN, Infinity, 1e400)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotFinite(f"the number {text[:40]!r}, which is not finite")
    return value


def _finite_int(text: str) -> int | float:
    if len(text.lstrip("-")) > 18:  # past float's exact range: a count or a price no one means
        raise NotFinite(f"the integer {text[:40]}{'...' if len(text) > 40 else ''} of "
                        f"{len(text.lstrip('-'))} digits")
    return int(text)


def _no_constant(name: str) -> Any:
    raise NotFinite(f"{name}, which is not a number JSON allows")


def loads_finite(text: str) -> Any:
    """json.loads, refusing NaN, Infinity, numbers that overflow to inf and integers of more
    than 18 digits (NotFinite names the value): every number parsed is finite."""
    return json.loads(text, parse_float=_finite_float, parse_int=_finite_int,
                      parse_constant=_no_constant)


def _scrub(text: str, params: Mapping[str, str] | None, secret_params: Sequence[str],
           secrets: Sequence[str]) -> str:
    values = [*secrets, *((params or {}).get(name, "") for name in secret_params)]
    for value in values:
        if value:
            text = text.replace(value, "***")
    return text
