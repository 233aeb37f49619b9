"""HTTP for the credential-free refreshers: aiohttp with timeouts, bounded Retry-After on 429.

Every failure becomes a `FetchError` whose message names the URL (with secrets removed), what
went wrong and what to do. Query parameters listed in `secret_params` never reach a message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp

DEFAULT_TIMEOUT_S = 30.0
# A 429 is retried after its Retry-After (seconds), at most this often and this long each,
# so one refresh cannot hang on a throttling server.
MAX_RETRIES_429 = 3
MAX_RETRY_AFTER_S = 30.0
DEFAULT_RETRY_AFTER_S = 1.0
USER_AGENT = "mlcost-pricing/0.1 (+https://github.com/; price refresh)"


class FetchError(RuntimeError):
    """A request that gave no usable answer; the message is for a user."""


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
                headers: Mapping[str, str] | None = None) -> Any:
    """GET `url` (+ `params`, `headers`): parsed JSON, or text with `as_json=False`; raises
    FetchError. Header values (an API key) never appear in a message."""
    secrets = [v for v in (headers or {}).values() if v]
    shown = redact_url(url if not params else f"{url}?{urlencode(dict(params))}", secret_params)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    attempt = 0
    while True:
        try:
            async with session.get(url, params=params, timeout=timeout,
                                   headers={"User-Agent": USER_AGENT, **(headers or {})}) as response:
                if response.status == 429:
                    wait = _retry_after(response.headers.get("Retry-After"))
                    if attempt >= max_retries or wait > max_retry_after_s:
                        raise FetchError(
                            f"{shown}: throttled (HTTP 429, Retry-After {wait:g} s) after "
                            f"{attempt + 1} attempt(s); try again in a few minutes")
                    attempt += 1
                    await asyncio.sleep(wait)
                    continue
                if response.status >= 400:
                    body = (await response.text())[:200].replace("\n", " ")
                    body = _scrub(body, params, secret_params, secrets)
                    hint = ("check the API key and that the API is enabled for it"
                            if response.status in (401, 403) else "check the URL and region")
                    raise FetchError(f"{shown}: HTTP {response.status}: {body}; {hint}")
                if not as_json:
                    return await response.text()
                try:
                    return await response.json(content_type=None)
                except ValueError as exc:
                    raise FetchError(f"{shown}: the answer is not JSON ({exc}); the service may "
                                     "be down or the URL wrong") from None
        except asyncio.TimeoutError:
            raise FetchError(f"{shown}: no answer within {timeout_s:g} s; check the network or "
                             "proxy, or try again later") from None
        except aiohttp.ClientError as exc:
            text = _scrub(str(exc), params, secret_params, secrets)
            raise FetchError(f"{shown}: {type(exc).__name__}: {text}; check the network or "
                             "proxy") from None


def _scrub(text: str, params: Mapping[str, str] | None, secret_params: Sequence[str],
           secrets: Sequence[str]) -> str:
    values = [*secrets, *((params or {}).get(name, "") for name in secret_params)]
    for value in values:
        if value:
            text = text.replace(value, "***")
    return text
