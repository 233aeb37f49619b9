"""The forms a setting's value takes, in the config file and on the command line: durations
('15m'), sizes ('512MiB'), HOST:PORT addresses, s3:// locations and http(s) URLs. Each parser
or check raises ValueError naming the value and the forms it accepts; the loader adds the key.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from daemon.sources.safe_text import without_url_credentials

# ASCII digits only, and no spaces: `--since '5 m'` and a full-width '５m' are refused, not
# read as 5 minutes (\d and \s take any script's digits and spaces; $ a trailing newline).
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
# Sizes the same way ('10 MB' and a full-width '１０MB' are refused); re.ASCII keeps
# IGNORECASE from reading the Kelvin sign 'K' (U+212A) as a 'k'.
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?",
                   re.IGNORECASE | re.ASCII)
_SIZE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, None: 1,
}


# No duration anyone means is longer than a century; past it a number is a unit slip (ms for
# s) or a hostile value (10**400 overflows float()).
MAX_DURATION_S = 100 * 365 * 86400.0
POSITIVE_DURATION = "a positive number and a unit (e.g. 30s, 15m, 6h, 8d)"  # said in errors
DURATION_FORMS = ("ASCII digits and a unit, no spaces: e.g. 30s, 15m, 6h, 8d; a number alone "
                  "is seconds")
SIZE_FORMS = "ASCII digits and a unit, no spaces: e.g. 512MiB, 1GiB, 2GB"


# A TOML bare key: what a config names without quotes (https://toml.io/en/v1.0.0#keys).
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(name: str) -> str:
    """`name` as a config file spells it in a key: bare, or quoted (a dot or a space in it)."""
    if _BARE_KEY.fullmatch(name):
        return name
    return json.dumps(name)  # a JSON string is a TOML basic string (its escapes are TOML's)


_STRING_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r",
                   "\b": "\\b", "\f": "\\f"}


def toml_value(value: object) -> str:
    """`value`, as tomllib read it from a file, spelled the way TOML writes it, for an error to
    show: `true`, not Python's `True`; `[1, 'a']`; `{ a = 1 }`; a date as ISO 8601; a string
    as a literal string ('15x', as before) where it can be one, else a basic string with
    escapes, so no control or invisible character reaches the terminal (probe 155 L3)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if "'" not in value and value.isprintable():
            return f"'{value}'"
        return '"' + "".join(
            _STRING_ESCAPES.get(ch) or (ch if ch.isprintable() else
                                        f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else
                                        f"\\U{ord(ch):08x}")
            for ch in value) + '"'
    if isinstance(value, int | float):
        return repr(value)  # (inf, -inf and nan are TOML's spellings too)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(str(key))} = {toml_value(item)}"
                                for key, item in value.items()) + " }"
    isoformat = getattr(value, "isoformat", None)  # a date, a time, a date and time
    if callable(isoformat):
        return str(isoformat())
    return repr(value)


def did_you_mean(given: str, known: Iterable[str], shown: Callable[[str], str] | None = None) -> str:
    """" (did you mean X?)" for the known name closest to a mistyped one, as a mistyped
    command-line option gets (probe 155 L3), `shown` spelling it; "" when none is close."""
    close = difflib.get_close_matches(given, list(known), n=1)
    if not close:
        return ""
    return f" (did you mean {shown(close[0]) if shown else close[0]}?)"


class DurationTooLong(ValueError):
    """A duration past MAX_DURATION_S (or past what a float holds): a caller with a smaller
    range of its own says that range instead (`mlcostd idle --for`)."""


def parse_duration(value: str | int | float, *, allowed: str = POSITIVE_DURATION) -> float:
    """'90s', '15m', '6h', '8d', '250ms' or a number of seconds -> seconds: a finite number
    no longer than MAX_DURATION_S either way (a caller checks its own range, e.g. > 0).
    ValueError names the value and the forms (never OverflowError); a negative one says that a
    duration is `allowed` (the caller's range); one too long is a DurationTooLong."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        # true, [1], { a = 1 }, a date from a config file: as the file spells it
        raise ValueError(f"{toml_value(value)[:80]} is not a duration ({DURATION_FORMS})")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    else:
        text = str(value)[:100]
        match = _DURATION.fullmatch(text)
        if not match and text.startswith("-") and _DURATION.fullmatch(text[1:]):
            raise ValueError(f"{text[:80]!r} is negative: a duration is {allowed}")
        if not match:
            raise ValueError(f"{str(value)[:80]!r} is not a duration ({DURATION_FORMS})")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not (math.isfinite(seconds) and abs(seconds) <= MAX_DURATION_S):
        shown = f"{str(value)[:40]}..." if len(str(value)) > 40 else str(value)
        raise DurationTooLong(f"{shown!r} is not a duration of at most {MAX_DURATION_S:.0f} s "
                              "(100 years)")
    return seconds


_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_S3_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9!_.*'()\-]{1,255}")
MAX_S3_PREFIX = 512  # an S3 key is at most 1024 bytes; the file name needs the rest


def parse_s3_url(url: str) -> tuple[str, str]:
    """s3://BUCKET/PREFIX -> (bucket, prefix without slashes at its ends), for
    `[snapshots].upload`. The bucket follows S3's naming rules (3-63 lower-case letters,
    digits, dots and dashes; no '..'; not an IP address); the prefix is segments of S3's safe
    characters, none of them '.' or '..'. ValueError names the value and the form."""
    form = ("give s3://BUCKET/PREFIX (a bucket of 3-63 lower-case letters, digits, dots and "
            "dashes; a prefix of letters, digits and !_.*'()- between slashes)")
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise ValueError(f"{without_url_credentials(str(url))[:80]!r} is not an S3 location; "
                         f"{form}")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if "@" in bucket:  # s3://KEY:SECRET@bucket: never echoed, and never how credentials come
        raise ValueError(f"{without_url_credentials(url)[:80]!r}: a key or secret in the URL "
                         "would be shown wherever the URL is; give s3://BUCKET/PREFIX, and the "
                         "daemon's AWS credentials as boto3 finds them (README \"Uploading "
                         "snapshots\")")
    if (not _S3_BUCKET.fullmatch(bucket) or ".." in bucket or ".-" in bucket
            or "-." in bucket or re.fullmatch(r"[0-9.]+", bucket)):
        raise ValueError(f"{url[:80]!r}: {bucket[:70]!r} is not a valid bucket name; {form}")
    prefix = prefix.strip("/")
    if len(prefix) > MAX_S3_PREFIX:
        raise ValueError(f"{url[:80]!r}: the prefix is {len(prefix)} characters long; keep it "
                         f"under {MAX_S3_PREFIX}")
    for segment in prefix.split("/") if prefix else []:
        if segment in (".", "..") or not _S3_PREFIX_SEGMENT.fullmatch(segment):
            raise ValueError(f"{url[:80]!r}: the prefix segment {segment[:40]!r} is not "
                             f"allowed ('.', '..', empty or unusual characters); {form}")
    return bucket, prefix


def format_duration(seconds: float) -> str:
    """Seconds -> the largest whole unit: 21600 -> '6h', 90 -> '90s'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def format_size(size: float) -> str:
    """Bytes -> the largest binary unit it is a whole number of: 1048576 -> '1MiB' (as a
    [store] size is written), else bytes: 1500 -> '1500B'."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor and size % factor == 0:
            return f"{int(size // factor)}{unit}"
    return f"{size:g}B"


def parse_size(value: str | int) -> int:
    """'512MiB', '1GiB', '2GB' or a number of bytes -> bytes (a caller checks its own range).
    ValueError names the value and the forms (never OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{toml_value(value)[:80]} is not a size ({SIZE_FORMS})")
    if isinstance(value, int):
        return value
    text = str(value)
    match = _SIZE.fullmatch(text)
    if not match and text.startswith("-") and _SIZE.fullmatch(text[1:]):
        raise ValueError(f"{text[:80]!r} is negative: a size is a positive number and a unit "
                         "(e.g. 512MiB, 1GiB)")
    if not match:
        raise ValueError(f"{text[:80]!r} is not a size ({SIZE_FORMS})")
    unit = match.group(2).lower() if match.group(2) else None
    size = float(match.group(1)) * _SIZE_UNITS[unit]
    if not math.isfinite(size):  # 400 digits: float() is inf, and int(inf) an OverflowError
        raise ValueError(f"{text[:40] + '...'!r} is too large to be a size ({SIZE_FORMS})")
    return int(size)


_PORT = re.compile(r"[0-9]{1,20}")  # ASCII digits: str.isdigit takes "²", which int() refuses
ADDRESS_FORMS = ("HOST is an IP address: IPv4 such as 127.0.0.1 or 0.0.0.0, IPv6 in brackets "
                 "such as [::1]:9400, or localhost (127.0.0.1); other names are not resolved")
# The one name a listen address takes, what users write for "this machine only": the loopback
# address it means everywhere (not resolved: an /etc/hosts entry cannot widen it).
LOCALHOST = ("localhost", "127.0.0.1")


def parse_address(value: str) -> tuple[str, int]:
    """HOST:PORT as (host, port), HOST an IP address (an IPv6 one in brackets, given back
    without them), or localhost (127.0.0.1, not resolved). ValueError says what fits. Other
    names are not resolved, and the short and hex forms the C library's inet_aton would read
    (1.2.3 as 1.2.0.3, 127.1, 0x7f000001) are refused: a listen address binds what it says or
    nothing."""
    host, sep, port = value.rpartition(":")
    if not (sep and host and _PORT.fullmatch(port)):
        raise ValueError(f"{value[:80]!r} is not HOST:PORT (e.g. 127.0.0.1:9347)")
    if int(port) > 65535:
        raise ValueError(f"port {int(port)} is out of range (0-65535)")
    if host.lower() == LOCALHOST[0]:
        return LOCALHOST[1], int(port)
    bracketed = host.startswith("[") and host.endswith("]")
    address = host[1:-1] if bracketed else host
    try:
        version = ipaddress.ip_address(address).version
    except ValueError:
        raise ValueError(f"HOST {host[:60]!r} is not an IP address ({ADDRESS_FORMS})") from None
    if version == 6 and not bracketed:
        raise ValueError(f"an IPv6 address goes in brackets: [{address}]:{int(port)}")
    if version == 4 and bracketed:
        raise ValueError(f"an IPv4 address goes without brackets: {address}:{int(port)}")
    return address, int(port)


def check_http_url(key: str, url: object, what: str) -> None:
    """`key = url` is an http(s) URL of `what`, with no user or password in it: mlcostd shows
    the URLs it reads (in /v1/now, reports, profiles, price sources, errors). ValueError shows
    the URL without them."""
    # (its query left out: a `?token=` is the URL's to send, not an error's to show)
    shown = without_url_credentials(str(url)).partition("?")[0][:200]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"{key} = {shown!r}: must be an http(s) URL of {what}")
    if "@" in urlsplit(url).netloc:
        raise ValueError(f"{key} = {shown!r}: a user or password in the URL would be shown "
                         f"wherever the URL is; give the URL of {what} without them")
