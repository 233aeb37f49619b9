"""The one clock: wall time in seconds, the UTC day that money is booked to, and how a time is
written for people. Every layer (and mlcost-top) reads and writes times through these, so a
day boundary or a time format is defined once."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone

DAY_S = 86400.0


def now() -> float:
    """Wall-clock time, seconds since the epoch (what every recorded timestamp is)."""
    return time.time()


def utc_day(ts: float) -> str:
    """The UTC day of ts as 'YYYY-MM-DD': the day a cost is booked to (the clouds bill in UTC)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).date().isoformat()


def utc_month(ts: float) -> str:
    """The UTC month of ts as 'YYYY-MM'."""
    return utc_day(ts)[:7]


def utc_day_start(ts: float) -> float:
    """The epoch second at which ts's UTC day began."""
    return ts - (ts % DAY_S)


def utc_month_start(ts: float) -> float:
    """The epoch second at which ts's UTC month began."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def local_time(ts: float, *, date: bool = True, seconds: bool = True) -> str:
    """ts as local time for a person: '2026-12-01 09:49:25', or '09:49:25' without the date."""
    fmt = ("%Y-%m-%d " if date else "") + ("%H:%M:%S" if seconds else "%H:%M")
    return time.strftime(fmt, time.localtime(ts))


def utc_clock(ts: float) -> str:
    """ts as a time of day in UTC, said so: '09:49 UTC' (for text that is stored and read from
    anywhere, such as a recommendation's)."""
    return time.strftime("%H:%M UTC", time.gmtime(ts))


def local_zone(ts: float) -> str:
    """The local time zone at ts, as a person reads it beside local_time's: 'UTC', or its name
    and offset ('EST, UTC-05:00'), so a window in local time is not read as the UTC days that
    money is booked to."""
    moment = time.localtime(ts)
    offset = moment.tm_gmtoff or 0
    if offset == 0 and moment.tm_zone in ("UTC", "GMT", "Z", "UCT"):
        return "UTC"
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    written = f"UTC{sign}{hours:02d}:{minutes:02d}"
    name = moment.tm_zone or ""
    return written if not name or name[0] in "+-" else f"{name}, {written}"


def duration(seconds: float) -> str:
    """A length of time for a person, in the unit that reads best: 0.4 s, 12 s, 7 min, 2.5 h,
    30 days (never "0 min"; a review of a snapshot's 5 minutes once read "0.0 days")."""
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds < 1 else f"{seconds:.0f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{round(seconds / 86400, 1):g} days"


def latency_text(seconds: float | None) -> str:
    """A request's latency for a person: 0.0123 -> '12.3 ms', 2.5 -> '2.50 s', None -> '-'
    (the report, the profile, the HTML pages and mlcost-top write p50/p99 with it)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


# The times a store can hold: nothing was recorded before 2020 (mlcost did not exist), and a
# time past 2200 is a unit slip (milliseconds for seconds). A time outside is refused rather
# than read as an empty 1970 range.
MIN_TIME = 1577836800.0  # 2020-01-01T00:00Z
MAX_TIME = 7258118400.0  # 2200-01-01T00:00Z


# The forms of a time a person gives (--until), said wherever one is refused.
TIME_FORMS = "Unix seconds or an ISO 8601 time such as 2026-12-01T09:30 (local) or 2026-12-01T09:30Z"


def parse_time(value: str | float | int) -> float:
    """A point in time from a person: Unix seconds, or an ISO 8601 time ('2026-12-01T09:30',
    '2026-12-01 09:30:00+00:00'; without a zone it is local time), between MIN_TIME (2020) and
    MAX_TIME (2200). ValueError names the value and says the forms (never OverflowError)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    shown = f"{str(value)[:40]}..." if len(str(value)) > 40 else str(value)
    forms = f"give {TIME_FORMS}"
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    else:
        text = str(value).strip()[:100]
        try:
            seconds = float(text)
        except ValueError:
            try:
                seconds = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
            except (ValueError, OverflowError, OSError):
                raise ValueError(f"{shown!r} is not a time; {forms}") from None
    if not (math.isfinite(seconds) and MIN_TIME <= seconds <= MAX_TIME):
        raise ValueError(f"{shown!r} is outside the times a store can hold (2020-01-01 to "
                         f"2200-01-01, Unix seconds {MIN_TIME:.0f} to {MAX_TIME:.0f}); {forms}")
    return seconds
