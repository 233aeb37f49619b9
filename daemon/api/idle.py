"""GET /v1/idle: is this host idle, since when, and why (daemon.analysis.idleness).

The latest tick's /v1/now document is read on the event loop; the look-back history (GPU
utilization buckets, the ticks' coverage) is read from the store in a thread, under a deadline.
Whatever goes wrong while answering — a store read that fails or runs too long, a missing
tick — answers 200 with `active: true` and the reason, never an error status: the caller is a
script deciding whether to stop a machine, and "active" is the answer that stops nothing. Only a
bad `for` is a 400.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon import clock
from daemon.analysis import idleness
from daemon.api.echo import shown

log = logging.getLogger("mlcostd")

MAX_FOR_S = 30 * 86400  # openapi.py documents it
LOOKBACK_S = 3600.0  # how far back "since" is looked for when `for` asks less
# and how far back it is looked for, once more, when the stretch reaches the look-back's start
# while the store was recording then (minute rollups past [store].raw_retention)
LONG_LOOKBACK_S = 86400.0
MAX_POINTS = 600
READ_TIMEOUT_S = 3.0
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")

def parse_for(raw: str | None) -> float:
    """The `for` query parameter: seconds, 0 to MAX_FOR_S; ValueError naming it otherwise."""
    if raw is None:
        return 0.0
    if not _NUMBER.fullmatch(raw) or float(raw) > MAX_FOR_S:
        raise ValueError(f"for={shown(raw)} must be a number of seconds from 0 to {MAX_FOR_S}")
    return float(raw)


def read_history(db: Path, since: float, until: float, for_s: float,
                 gpus: list[int], interval_s: float) -> tuple[idleness.History, bool]:
    """The look-back window from the store (blocking: run it in a thread). Also says whether
    the GPU buckets came from minute rollups rather than raw ticks."""
    from daemon.store.reader import StoreReader

    # Buckets at least two ticks wide, so a healthy history has no empty bucket.
    points = max(1, min(MAX_POINTS, int((until - since) / max(2 * interval_s, 1.0))))
    reader = StoreReader(str(db), timeout_s=READ_TIMEOUT_S)
    try:
        # aligned buckets: the same for every call, so `since` does not move between calls
        series = {index: reader.gpu_history(index, "utilization", since, until, points,
                                            aligned=True)
                  for index in gpus}
        window = (round((until - for_s) * 1000), round(until * 1000))
        first = reader.query("SELECT min(ts) AS ts FROM ticks WHERE ts >= ? AND ts <= ?",
                             (round(since * 1000), window[1]))
        gaps = reader.query(
            "SELECT max(ts - prev) AS gap, min(ts) AS lo, max(ts) AS hi FROM (SELECT ts, "
            "lag(ts) OVER (ORDER BY ts) AS prev FROM ticks WHERE ts >= ? AND ts <= ?)", window)
        # the latest hole in the whole look-back window: idleness is known since it only
        resumed = reader.query(
            "SELECT max(ts) AS ts FROM (SELECT ts, lag(ts) OVER (ORDER BY ts) AS prev FROM "
            "ticks WHERE ts >= ? AND ts <= ?) WHERE ts - prev > ?",
            (round(since * 1000), window[1], round(idleness.hole_s(interval_s) * 1000)))
    finally:
        reader.close()
    first_tick = first[0]["ts"] / 1000 if first and first[0]["ts"] is not None else None
    row = gaps[0] if gaps else {}
    if row.get("lo") is None:
        largest = for_s
    else:
        largest = max((row["gap"] or 0) / 1000, row["lo"] / 1000 - (until - for_s),
                      until - row["hi"] / 1000)
    # The reader's bucket width: the smallest step between two buckets of any GPU (from the
    # second: the first point is at its first row, not at its bucket's start).
    steps = [b[0] - a[0] for s in series.values() for a, b in zip(s[1:], s[2:], strict=False)]
    width = max(min(steps) if steps else (until - since) / points, 1.0)
    resumed_at = (resumed[0]["ts"] / 1000 if resumed and resumed[0]["ts"] is not None
                  else None)
    return (idleness.History(since=since, until=until, width_s=width, first_tick=first_tick,
                             largest_gap_s=largest, gpus=series, resumed_at=resumed_at),
            width >= 60)


def reaches_look_back_start(result: dict[str, Any], history: idleness.History,
                            interval_s: float) -> bool:
    """Whether the answer's stretch (idle or active) begins where the look-back window does,
    with the store recording then: it may begin further back."""
    since = result.get("since")
    return (bool(result.get("since_is_history_start")) and isinstance(since, int | float)
            and idleness.near_start(history, since, interval_s)
            and idleness.recorded_from_start(history, interval_s))


async def idle_answer(daemon: Any, for_s: float) -> dict[str, Any]:
    """The answer for the running daemon; any failure answers active (fail safe)."""
    try:
        document = daemon.now()
        ts = document.get("ts")
        if ts is None:
            return idleness.answer(document, None, for_s=for_s, idle_utilization_pct=0,
                                   interval_s=1)
        until = clock.now()
        gpus = [g.get("index") for g in document.get("gpus", [])]
        interval = daemon.config.daemon.interval

        async def look_back(seconds: float) -> tuple[idleness.History, bool]:
            return await asyncio.wait_for(asyncio.to_thread(
                read_history, daemon.db, until - seconds, until, for_s, gpus, interval),
                READ_TIMEOUT_S + 2)

        history, rollups = await look_back(max(for_s, LOOKBACK_S))
        # the periodic jobs of the rules' latest round: at work for host_idle, and so here
        periodic = daemon.analyzer.periodic() if daemon.analyzer is not None else {}
        # and those it found at work for what the tick alone does not show
        working = daemon.analyzer.working() if daemon.analyzer is not None else {}

        def judged(history: idleness.History) -> dict[str, Any]:
            # the verdict's confidence is the fine look-back's (`rollups`), whichever says since
            return idleness.answer(document, history, for_s=for_s,
                                   idle_utilization_pct=daemon.config.idle.utilization,
                                   interval_s=interval, rollups=rollups, periodic=periodic,
                                   working=working)

        result = judged(history)
        if for_s < LONG_LOOKBACK_S and reaches_look_back_start(result, history, interval):
            # idle (or active) for the whole hour, and recorded before it: since when, further
            # back (a `since` at the hour's start would move with each call, and "all the
            # history holds" would be wrong)
            result = judged((await look_back(LONG_LOOKBACK_S))[0])
        return result
    except (asyncio.TimeoutError, TimeoutError):
        return idleness.fail_safe(f"the store's history did not answer within "
                                  f"{READ_TIMEOUT_S + 2:g} s", for_s=for_s)
    except Exception as exc:  # fail safe: whatever broke, the answer is active
        log.warning("idleness answer failed: %s: %s", type(exc).__name__, exc)
        return idleness.fail_safe(f"the answer could not be worked out ({type(exc).__name__}: "
                                  f"{str(exc)[:200]})", for_s=for_s)


def add_idle_routes(app: web.Application, daemon: Any) -> None:
    async def idle(request: web.Request) -> web.Response:
        try:
            for_s = parse_for(request.query.get("for"))
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(await idle_answer(daemon, for_s))

    app.router.add_get("/v1/idle", idle)
