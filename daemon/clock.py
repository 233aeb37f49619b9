"""The one clock: wall time in seconds, the UTC day that money is booked to, and how a time is
written for people. Every layer (and mlcost-top) reads and writes times through these, so a
day boundary or a time format is defined once."""

from __future__ import annotations

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


def local_time(ts: float, *, date: bool = True, seconds: bool = True) -> str:
    """ts as local time for a person: '2026-12-01 09:49:25', or '09:49:25' without the date."""
    fmt = ("%Y-%m-%d " if date else "") + ("%H:%M:%S" if seconds else "%H:%M")
    return time.strftime(fmt, time.localtime(ts))


def parse_time(value: str | float | int) -> float:
    """A point in time from a person: Unix seconds, or an ISO 8601 time ('2026-12-01T09:30',
    '2026-12-01 09:30:00+00:00'; without a zone it is local time). ValueError says the forms."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is not a time; give Unix seconds or an ISO 8601 time such "
                         "as 2026-12-01T09:30 (local) or 2026-12-01T09:30Z") from None
    return when.timestamp()
