"""The /v1 handlers: health, now, history, phases, recommendations (+ apply, snooze).

Each handler reads what the running daemon holds, on the event loop (the tick and the analyzer
change that state on the loop, so it is never read from a thread); only blocking work runs in a
thread: store reads (through their own read-only connections) and a recommendation's action.
Errors are JSON {"error": "..."} that name the bad value and what is allowed; a value from the
request is quoted through daemon.api.echo.shown, so an error stays short whatever was sent.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from daemon import __version__, clock
from daemon.analysis.cost import gpu_wasted_per_hour
from daemon.analysis.price_history import PRICE_READING, PriceHistory
from daemon.api import openapi
from daemon.api.echo import shown
from daemon.api.limits import REQUEST_TIMEOUT_S
from daemon.wire import API_VERSION, parse_process_key

MAX_BODY_BYTES = 64 * 1024
HISTORY_TIMEOUT_S = 3.0  # a history query is cut off past this (the store reader's deadline)
MAX_HISTORY_SINCE_S = 400 * clock.DAY_S
MAX_HISTORY_POINTS = 2000
MAX_SNOOZE_HOURS = 24 * 90
MAX_JSON_DEPTH = 32  # a request body nested deeper is refused before json.loads recurses
MAX_PID = 1 << 22  # Linux's pid_max ceiling (4194304)
MAX_START_TIME = 1e11  # a process start time (Unix seconds) a store can hold
MAX_GPU_INDEX = 1023
# the keys of each POST body (openapi.py documents them, additionalProperties false)
APPLY_KEYS = ("dry_run", "accept_preliminary")
SNOOZE_KEYS = ("hours",)


_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_PROCESS_KEY = re.compile(r"[0-9]+:[0-9]+(\.[0-9]+)?")  # as openapi.py documents it
_INDEX = re.compile(r"[0-9]+")


def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _bad(message: str) -> web.HTTPException:
    return web.HTTPBadRequest(text=json.dumps({"error": message}),
                              content_type="application/json")


def _number(query: Any, name: str, default: float, low: float, high: float) -> float:
    raw = query.get(name)
    if raw is None:
        return default
    if not _NUMBER.fullmatch(raw):  # float() would take " 1", "1_0", "nan", "inf"
        raise _bad(f"{name}={shown(raw)} is not a number")
    value = float(raw)
    if not (low <= value <= high):
        raise _bad(f"{name}={shown(raw)} must be between {low:g} and {high:g}")
    return value


class _RepeatedKey(ValueError):
    """A JSON object names one key twice (json.loads would keep the last, silently)."""


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key, value in pairs:
        if key in body:
            raise _RepeatedKey(key)
        body[key] = value
    return body


async def _body(request: web.Request, keys: tuple[str, ...]) -> dict[str, Any]:
    """The request's JSON object, of `keys` only: an unknown key (a typo: "sinse" for
    "since") or one given twice is a 400 naming it and the keys the route takes, never a
    default taken silently in its place."""
    if not request.can_read_body:
        return {}
    # a body must arrive within the connection's request deadline (daemon.api.limits): a
    # lying Content-Length does not hold the request open
    deadline = getattr(request.protocol, "keepalive_timeout", None) or REQUEST_TIMEOUT_S
    try:
        raw = await asyncio.wait_for(request.read(), deadline)
    except (asyncio.TimeoutError, TimeoutError):
        message = (f"the request body did not arrive within {deadline:g} s (is Content-Length "
                   "right?); send the whole body at once")
        raise web.HTTPRequestTimeout(text=json.dumps({"error": message}),
                                     content_type="application/json",
                                     headers={"Connection": "close"}) from None
    except (HttpProcessingError, web.RequestPayloadError) as exc:  # a bad gzip or deflate body
        encoding = request.headers.get("Content-Encoding", "none")
        raise _bad(f"the request body could not be decoded (Content-Encoding: "
                   f"{shown(encoding)}: {type(exc).__name__}); send plain JSON or a valid "
                   "gzip/deflate body") from None
    if not raw.strip():
        return {}
    if _nesting(raw) > MAX_JSON_DEPTH:
        raise _bad(f"the request body is nested too deeply (more than {MAX_JSON_DEPTH} levels "
                   "of [ or {); send a flat JSON object")
    route = f"{request.method} {request.match_info.route.resource.canonical}" \
        if request.match_info.route.resource is not None else request.path
    takes = f"{route} takes {', '.join(keys)}" if keys else f"{route} takes no key"
    try:
        body = json.loads(raw, object_pairs_hook=_no_repeats)
    except _RepeatedKey as exc:
        raise _bad(f"the request body gives key {shown(exc.args[0])} twice; give it once "
                   f"({takes})") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _bad("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    unknown = [key for key in body if key not in keys]
    if unknown:
        raise _bad(f"unknown key {shown(unknown[0])} in the request body; {takes}")
    return body


def _nesting(raw: bytes) -> int:
    """How deep [ and { nest in a JSON text (outside strings), without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return deepest
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _process_key(key: str) -> tuple[int, float]:
    """PID:START_TIME with a pid and a start time a store can hold; 400 otherwise."""
    if not _PROCESS_KEY.fullmatch(key):
        raise _bad(f"process key {shown(key)} is not PID:START_TIME: a pid and a start time in "
                   "seconds, in digits (e.g. 1234:1700000000.12)")
    try:
        pid, start = parse_process_key(key)
    except ValueError:  # (its message quotes the whole key)
        raise _bad(f"process key {shown(key)}: its pid is out of range (0 to {MAX_PID})") \
            from None
    if not 0 <= pid <= MAX_PID:
        raise _bad(f"process key {shown(key)}: pid {shown(pid)} is out of range (0 to "
                   f"{MAX_PID})")
    if not (math.isfinite(start) and 0 <= start <= MAX_START_TIME):
        raise _bad(f"process key {shown(key)}: start time {shown(start)} must be a finite Unix "
                   f"time between 0 and {MAX_START_TIME:g} (e.g. 1234:1700000000.12)")
    return pid, start


def add_routes(app: web.Application, daemon: Any, started_mono: float) -> None:
    """The /v1 routes over `daemon` (a runtime.daemon.Daemon)."""

    async def health(request: web.Request) -> web.Response:
        store = daemon.store.health.as_dict() if getattr(daemon, "store", None) else None
        nvml = getattr(getattr(daemon, "nvml", None), "status", "unknown")
        return web.json_response({
            "ok": daemon.last_sample is not None, "version": __version__,
            "api_version": API_VERSION, "uptime_s": time.monotonic() - started_mono,
            "tick": daemon.tick, "nvml_status": nvml, "store": store,
            "hostname": daemon.host.get("hostname", ""),
            "daemon_id": getattr(daemon, "daemon_id", ""),
            # What is wrong now (a full disk, a recreated database, a GPU lost...), in words.
            "problems": health_problems(daemon, store),
        })

    async def now(request: web.Request) -> web.Response:
        # the body encoded once per document (Daemon.now_body), as web.json_response sends it
        return web.Response(body=daemon.now_body(), content_type="application/json",
                            charset="utf-8")

    async def history(request: web.Request) -> web.Response:
        from daemon.store.schema import GPU_METRICS, PROCESS_METRICS

        metric = request.query.get("metric", "utilization")
        since = _number(request.query, "since", 3600, 1, MAX_HISTORY_SINCE_S)
        points = int(_number(request.query, "points", 300, 1, MAX_HISTORY_POINTS))
        gpu_q, proc_q = request.query.get("gpu"), request.query.get("process")
        until = clock.now()
        read: Callable[[Any], list[Any]]
        if proc_q is not None:
            if metric not in PROCESS_METRICS:
                raise _bad(f"metric={shown(metric)} is not a process metric; one of "
                           f"{', '.join(sorted(PROCESS_METRICS))}")
            pid, start = _process_key(proc_q)
            target = f"process:{proc_q}"

            def read(reader: Any) -> list[Any]:
                return reader.process_history(pid, start, metric, until - since, until, points)
        elif metric == "wasted_per_hour":
            target = "host"
            document = daemon.now()  # on the loop; the store read below runs in a thread
            price = _price_per_gpu(document)
            gpus = [g.get("index") for g in document.get("gpus", [])]
            idle_pct = daemon.config.idle.utilization

            def read(reader: Any) -> list[Any]:
                from daemon.store import queries

                # each point at the price charged then (a run before this start, at another)
                prices = PriceHistory.from_readings(queries.meter_readings(
                    reader, until - since, until, kinds=(PRICE_READING,)), None)

                def per_gpu(ts: float) -> float:
                    then = prices.at(ts)
                    return price if then is None else then.per_gpu

                return wasted_series(reader, gpus, per_gpu, until - since, until, points,
                                     idle_pct)
        else:
            if metric not in GPU_METRICS:
                raise _bad(f"metric={shown(metric)} is not a GPU metric; one of "
                           f"{', '.join(sorted(GPU_METRICS))} or wasted_per_hour")
            if gpu_q is None:
                raise _bad("say which series: gpu=INDEX or process=PID:START")
            if not _INDEX.fullmatch(gpu_q):
                raise _bad(f"gpu={shown(gpu_q)} is not a GPU index")
            index = int(gpu_q)
            if not 0 <= index <= MAX_GPU_INDEX:
                raise _bad(f"gpu={shown(gpu_q)} is not a GPU index (0 to {MAX_GPU_INDEX})")
            target = f"gpu:{index}"

            def read(reader: Any) -> list[Any]:
                return reader.gpu_history(index, metric, until - since, until, points)
        try:
            rows = await asyncio.wait_for(
                asyncio.to_thread(_read_store, daemon.db, read), HISTORY_TIMEOUT_S + 2)
        except (asyncio.TimeoutError, TimeoutError):
            return json_error(503, f"history query ran past {HISTORY_TIMEOUT_S} s; ask for a "
                                   "shorter range or fewer points")
        except Exception as exc:
            if type(exc).__name__ == "ReaderTimeout":
                return json_error(503, str(exc))
            raise
        seen = daemon.last_sample
        if not rows and target.startswith("gpu:") and seen is not None:
            indexes = sorted(g.index for g in seen.gpus)
            if int(target[4:]) not in indexes:  # not a GPU of this host, nor one it had then
                on_host = (f"this host's GPUs: {', '.join(map(str, indexes))}" if indexes
                           else "it has none")
                return json_error(404, f"no GPU {target[4:]} on this host and none recorded "
                                       f"in the last {since:g} s ({on_host})")
        return web.json_response({"metric": metric, "target": target, "since_s": since,
                                  "until": until, "points": [list(p) for p in rows]})

    async def phases(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        _process_key(key)
        since = _number(request.query, "since", 1800, 1, MAX_HISTORY_SINCE_S)
        # the live balance (on the loop, where the tick feeds it), else the store, off the loop
        result = daemon.phases_in_memory(key, since)
        if result is None:
            result = await asyncio.to_thread(daemon.phases_for, key, since)
        if result is None:
            return json_error(404, f"no process {shown(key, quoted=False)} on this host")
        if not isinstance(result, dict) or "phases" not in result:
            result = {"phases": result}
        return web.json_response({"key": key, "since_s": since, **result})

    async def recommendations(request: web.Request) -> web.Response:
        # the daemon keeps the snoozes: what it lists is what is active
        return web.json_response({"recommendations": daemon.active_recommendations()})

    async def snoozed(request: web.Request) -> web.Response:
        # those the daemon hides until their snooze runs out (DELETE .../snooze ends one)
        return web.json_response({"recommendations": daemon.snoozed_recommendations()})

    async def apply(request: web.Request) -> web.Response:
        from daemon.api.actions import ActionError
        from daemon.api.audit import ActionRefused, peer

        rec_id = request.match_info["id"]
        body = await _body(request, APPLY_KEYS)
        dry_run = body.get("dry_run", True)
        if not isinstance(dry_run, bool):
            return json_error(400, f"dry_run={shown(dry_run)} must be true or false")
        # a resize on preliminary evidence: the caller's second confirmation (actions.py)
        accept_preliminary = body.get("accept_preliminary", False)
        if not isinstance(accept_preliminary, bool):
            return json_error(400, f"accept_preliminary={shown(accept_preliminary)} must be "
                                   "true or false")
        rec = daemon.recommendation(rec_id)  # on the loop, where the analyzer's state lives
        if rec is None:
            return json_error(404, f"no active recommendation {shown(rec_id)}; list them at "
                                   "/v1/recommendations")
        gate, who = daemon.action_gate, peer(request.transport)  # audit.py: trail and checks
        try:
            gate.begin(rec, who, dry_run)
        except ActionRefused as exc:
            return json_error(exc.status, str(exc))
        held = daemon.action_held_back(rec)  # on the loop: the last tick, the latest round
        if held is not None:
            gate.end(rec, who, dry_run, error=held, status=409)
            return json_error(409, held)
        try:  # only the action (a signal, boto3 calls) runs in a thread
            result = await asyncio.to_thread(daemon.run_action, rec, dry_run,
                                             accept_preliminary)
        except ActionError as exc:
            gate.end(rec, who, dry_run, error=str(exc), status=exc.status)
            return json_error(exc.status, str(exc))
        except BaseException as exc:
            gate.end(rec, who, dry_run, error=f"{type(exc).__name__}: {exc}", status=500)
            raise
        gate.end(rec, who, dry_run, result=result)
        return web.json_response(result)

    async def snooze(request: web.Request) -> web.Response:
        rec_id = request.match_info["id"]
        body = await _body(request, SNOOZE_KEYS)
        hours = body.get("hours", 24)
        if isinstance(hours, bool) or not isinstance(hours, int | float) or not (
                0 < hours <= MAX_SNOOZE_HOURS):
            return json_error(400, f"hours={shown(hours)} must be a number between 0 and "
                                   f"{MAX_SNOOZE_HOURS}")
        until = daemon.snooze_recommendation(rec_id, float(hours))
        if until is None:
            return json_error(404, f"no active recommendation {shown(rec_id)}; list them at "
                                   "/v1/recommendations")
        return web.json_response({"id": rec_id, "snoozed_until": until})

    async def unsnooze(request: web.Request) -> web.Response:
        rec_id = request.match_info["id"]
        if not daemon.unsnooze_recommendation(rec_id):
            return json_error(404, f"recommendation {shown(rec_id)} is not snoozed")
        return web.json_response({"id": rec_id, "snoozed_until": None})

    app.router.add_get("/v1/health", health)
    app.router.add_get("/v1/now", now)
    app.router.add_get("/v1/history", history)
    app.router.add_get("/v1/processes/{key}/phases", phases)
    app.router.add_get("/v1/recommendations", recommendations)
    app.router.add_post("/v1/recommendations/{id}/apply", apply)
    app.router.add_get("/v1/recommendations/snoozed", snoozed)
    app.router.add_post("/v1/recommendations/{id}/snooze", snooze)
    app.router.add_delete("/v1/recommendations/{id}/snooze", unsnooze)
    app.router.add_get("/v1/openapi.json", openapi.serve)  # documents the routes: openapi.py

    from daemon.api.compare import add_compare_routes
    from daemon.api.idle import add_idle_routes
    from daemon.api.snapshots import add_snapshot_routes

    add_snapshot_routes(app, daemon, _body)
    add_idle_routes(app, daemon)
    add_compare_routes(app, daemon)


def health_problems(daemon: Any, store: dict[str, Any] | None) -> list[str]:
    """/v1/health's problems: what is wrong now (a full disk, a recreated database, a GPU
    lost, ticks late...), in words."""
    return (([store["problem"]] if store and store.get("problem") else [])
            + _gpu_problems(daemon.last_sample) + _sampling_problems(daemon)
            + _snapshot_problems(daemon) + _loop_problems(daemon))


def _loop_problems(daemon: Any) -> list[str]:
    """Ticks that came late (daemon.runtime.late_ticks.LateTicks)."""
    problem = getattr(getattr(daemon, "late_ticks", None), "problem", None)
    return [problem] if isinstance(problem, str) else []


def _gpu_problems(sample: Any) -> list[str]:
    """The GPUs of the latest tick that are not read normally, in words."""
    if sample is None:
        return []
    return [f"GPU {gpu.index}: {gpu.status}" + (f": {gpu.error}" if gpu.error else "")
            for gpu in sample.gpus if gpu.status != "ok"]


def _sampling_problems(daemon: Any) -> list[str]:
    """What stops the stack sampler now (daemon.sources.stacks.StackSampler.problem)."""
    sampler = getattr(getattr(daemon, "attribution", None), "sampler", None)
    problem = getattr(sampler, "problem", None)
    return [problem] if isinstance(problem, str) else []


def _snapshot_problems(daemon: Any) -> list[str]:
    """An incident snapshot that failed for good (daemon.runtime.snapshots.SnapshotTriggers)."""
    problem = getattr(getattr(daemon, "snapshots", None), "problem", None)
    return [problem] if isinstance(problem, str) else []


def _price_per_gpu(document: dict[str, Any]) -> float:
    burn = document.get("burn") or {}
    price = burn.get("price_per_gpu")
    if price is None:
        price = (document.get("price") or {}).get("per_gpu_per_hour")
    return float(price or 0.0)


def wasted_series(reader: Any, gpus: list[int], price_per_gpu: Callable[[float], float],
                  since: float, until: float, points: int,
                  idle_utilization_pct: float) -> list[tuple[float, float, float, float]]:
    """Host wasted $/h over time: the sum over GPUs of the cost model's wasted $/h for each
    GPU's utilization (daemon.analysis.cost.gpu_wasted_per_hour, the header's computation), at
    `price_per_gpu(ts)`, the price per GPU charged then.
    A point is (ts, average, min, max): the min from the busiest moment, the max the idlest."""
    total: dict[float, list[float]] = {}
    for index in gpus:
        for ts, avg, low, high in reader.gpu_history(index, "utilization", since, until, points):
            price = price_per_gpu(ts)
            acc = total.setdefault(ts, [0.0, 0.0, 0.0])
            acc[0] += gpu_wasted_per_hour(price, avg, True, idle_utilization_pct)
            acc[1] += gpu_wasted_per_hour(price, high, True, idle_utilization_pct)
            acc[2] += gpu_wasted_per_hour(price, low, True, idle_utilization_pct)
    return [(ts, v[0], v[1], v[2]) for ts, v in sorted(total.items())]


def _read_store(db: Path, read: Callable[[Any], list[Any]]) -> list[Any]:
    from daemon.store.reader import StoreReader

    if not Path(db).exists():
        return []
    reader = StoreReader(str(db), timeout_s=HISTORY_TIMEOUT_S)
    try:
        return read(reader)
    finally:
        reader.close()
