"""The OpenAPI 3.0 document of the /v1/ API, as data, served at GET /v1/openapi.json.

One entry of OPERATIONS per route, keyed by (METHOD, path) exactly as routes.py registers it;
`document(app)` builds the document from the routes the app really has, so a route without an
entry here is listed with a bare description (and tests/daemon/test_openapi.py fails, naming
it). To document a new route, add its entry to OPERATIONS (or call `operation()` from the
module that adds the route), with its parameters, body and the statuses it answers.
Schemathesis tests the real daemon against this document (tests/daemon/test_openapi.py).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from daemon import __version__
from daemon.store.schema import GPU_METRICS, PROCESS_METRICS
from daemon.wire import API_VERSION

_MAX_SINCE_S = 400 * 86400
_JSON = "application/json"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _query(name: str, schema: dict[str, Any], description: str,
           required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema,
            "description": description}


def _path(name: str, description: str, pattern: str | None = None) -> dict[str, Any]:
    schema = {"type": "string", **({"pattern": pattern} if pattern else {})}
    return {"name": name, "in": "path", "required": True, "schema": schema,
            "description": description}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    # a key the route does not take is a 400 (routes._body): no additionalProperties
    return {"required": False, "content": {_JSON: {"schema": {
        **schema, "additionalProperties": False}}}}


SINCE = {"type": "number", "minimum": 1, "maximum": _MAX_SINCE_S}
KEY_PATTERN = r"^[0-9]+:[0-9]+(\.[0-9]+)?$"  # routes._PROCESS_KEY
PROCESS_KEY = _path("key", "PID:START, the start time to the millisecond (daemon.wire."
                           "process_key), e.g. 1234:1700000000.120", KEY_PATTERN)
METRICS = sorted(GPU_METRICS) + sorted(PROCESS_METRICS) + ["wasted_per_hour"]
REC_ID = _path("id", "a recommendation id from /v1/recommendations")
BAD = _error("a bad parameter or body; the error says which and what is allowed")
NO_REC = _error("no active recommendation with this id")

SNAPSHOT_SPAN = {"type": "number", "minimum": 1, "maximum": 7 * 86400}  # api/snapshots.py
DURATION = r"^[0-9]+(\.[0-9]+)?(s|m|h|d)$"

_NUMBER_OR_NULL = {"type": "number", "nullable": True}
_BYTES_OR_NULL = {"type": "integer", "minimum": 0, "nullable": True}
# The GPU host's CPU, memory and load (daemon.wire.HostUsage); null before the first tick.
HOST_USAGE: dict[str, Any] = {
    "type": "object", "nullable": True,
    "description": "the host's CPU busy share since the previous tick (null on the first), "
                   "memory used (MemTotal - MemAvailable) and total, and load averages",
    "required": ["cpu_percent", "cpus", "memory_used_bytes", "memory_total_bytes", "load"],
    "properties": {
        "cpu_percent": {**_NUMBER_OR_NULL, "minimum": 0, "maximum": 100},
        "cpus": {"type": "integer", "minimum": 1},
        "memory_used_bytes": _BYTES_OR_NULL, "memory_total_bytes": _BYTES_OR_NULL,
        "load": {"type": "array", "nullable": True, "minItems": 3, "maxItems": 3,
                 "items": {"type": "number", "minimum": 0},
                 "description": "1, 5 and 15 min load averages"},
    },
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "Snapshot": {"type": "object", "required": ["name", "path", "bytes", "since", "until"],
                 "description": "a snapshot taken (README: Incident snapshots)"},
    "Snapshots": {"type": "object", "required": ["folder", "snapshots"],
                  "properties": {"folder": {"type": "string"},
                                 "snapshots": {"type": "array",
                                               "items": {"type": "object"}}}},
    "Error": {"type": "object", "required": ["error"],
              "properties": {"error": {"type": "string"}}},
    "Health": {
        "type": "object",
        "required": ["ok", "version", "api_version", "uptime_s", "tick", "nvml_status",
                     "problems"],
        "properties": {
            "ok": {"type": "boolean", "description": "a tick has been recorded and is served"},
            "version": {"type": "string"}, "api_version": {"type": "integer"},
            "uptime_s": {"type": "number"}, "tick": {"type": "integer"},
            "nvml_status": {"type": "string"},
            "store": {"type": "object", "nullable": True,
                      "description": "the store's health (buffered, dropped, problem ...)"},
            "hostname": {"type": "string"},
            "daemon_id": {"type": "string", "description": "chosen at the daemon's start: two "
                          "targets that give one id are one daemon"},
            "problems": {"type": "array", "items": {"type": "string"},
                         "description": "what is wrong now, in words (a full disk, a GPU "
                                        "lost ...); empty when nothing is"},
        },
    },
    "Now": {"type": "object", "description": "the latest state (README: the HTTP API)",
            "required": ["host", "gpus", "processes"],
            "properties": {"host": {"type": "object"},
                           "daemon_id": {"type": "string", "nullable": True,
                                         "description": "chosen at the daemon's start (as in "
                                                        "/v1/health); null in a replay"},
                           "gpus": {"type": "array", "items": {"type": "object"}},
                           "processes": {"type": "array", "items": {"type": "object"}},
                           "host_usage": HOST_USAGE,
                           "burn": {"type": "object", "description": "the host's burn now; "
                                    "its rates are null before the daemon's first tick (not "
                                    "known yet: never $0 for a host that bills)",
                                    "properties": {
                                        "total_per_hour": _NUMBER_OR_NULL,
                                        "wasted_per_hour": _NUMBER_OR_NULL,
                                        "idle_per_hour": _NUMBER_OR_NULL,
                                        "price_per_gpu": _NUMBER_OR_NULL}},
                           "recommendations": {"type": "array", "items": {"type": "object"}},
                           "events": {"type": "array", "items": {"type": "object"}},
                           "spend_today": {"type": "number", "description": "the host's spend "
                                           "on the UTC day of this tick, dollars, the runs "
                                           "before this daemon's start included"},
                           "spend_today_since": {**_NUMBER_OR_NULL, "description":
                                                 "null live; in a replay, where spend_today "
                                                 "counts from when the file holds the day "
                                                 "from then on only"},
                           "budgets": {"type": "array", "items": {"type": "object"},
                                       "description": "each [cost.budgets] budget in its "
                                                      "current UTC period: scope, name, "
                                                      "target, period, period_id, limit, "
                                                      "spent, crossed"},
                           "energy": {"type": "object", "nullable": True,
                                      "description": "energy and carbon so far: joules, kwh, "
                                                     "co2e_grams, grid, host_idle, gpus, "
                                                     "by_job, by_namespace (README: Energy "
                                                     "and carbon)"}}},
    "History": {
        "type": "object", "required": ["metric", "target", "since_s", "until", "points"],
        "properties": {
            "metric": {"type": "string"}, "target": {"type": "string"},
            "since_s": {"type": "number"}, "until": {"type": "number"},
            "points": {"type": "array", "description": "[ts, value, min, max] rows",
                       "items": {"type": "array",
                                 "items": {"type": "number", "nullable": True}}},
        },
    },
    "Phases": {"type": "object", "required": ["key", "since_s", "phases"],
               "properties": {"key": {"type": "string"}, "since_s": {"type": "number"},
                              "phases": {"type": "object"}}},
    "Recommendations": {"type": "object", "required": ["recommendations"],
                        "properties": {"recommendations": {"type": "array",
                                                           "items": {"type": "object"}}}},
    "ActionResult": {
        "type": "object", "required": ["id", "kind", "dry_run", "done", "message"],
        "properties": {
            "id": {"type": "string"}, "kind": {"type": "string"},
            "dry_run": {"type": "boolean"}, "done": {"type": "boolean"},
            "message": {"type": "string"},
            "commands": {"type": "array", "items": {"type": "string"}},
            "patch": {"type": "string", "nullable": True},
            "steps": {"type": "array", "items": {"type": "string"}},
            "refused": {"type": "string", "nullable": True, "description":
                        "a dry run's: why the real run will be refused with 403 (the daemon "
                        "does not take actions: [api].allow_actions); null when it will be "
                        "tried"},
        },
    },
    "Comparison": {
        "type": "object", "description": "README: Compare before and after (`compare --json`)",
        "required": ["version", "a", "b", "figures", "recommendations", "verdict", "method"],
        "properties": {
            "version": {"type": "integer"},
            "a": {"type": "object", "description": "the previous run (label, since, until ...)"},
            "b": {"type": "object", "description": "the latest run"},
            "figures": {"type": "array", "items": {
                "type": "object",
                "required": ["name", "label", "unit", "a", "b", "verdict", "a_text", "b_text"],
                "properties": {
                    "name": {"type": "string"}, "label": {"type": "string"},
                    "unit": {"type": "string"}, "a": _NUMBER_OR_NULL, "b": _NUMBER_OR_NULL,
                    "change": _NUMBER_OR_NULL, "noise": _NUMBER_OR_NULL,
                    "verdict": {"type": "string",
                                "enum": ["better", "worse", "within noise", "inconclusive",
                                         "no figure"]},
                    "a_text": {"type": "string"}, "b_text": {"type": "string"},
                    "change_text": {"type": "string"}, "noise_text": {"type": "string"}}}},
            "recommendations": {"type": "array", "items": {"type": "object"}},
            "verdict": {"type": "string",
                        "enum": ["better", "worse", "mixed", "within noise", "no figure"]},
            "price_note": {"type": "string", "nullable": True,
                           "description": "the two sides were charged different prices per "
                                          "GPU-hour: what that means for the cost figures"},
            "notes": {"type": "array", "items": {"type": "string"},
                      "description": "what the sides are, said before the verdict: a side "
                                     "where no process ran, sides that share no GPU"},
            "method": {"type": "string"},
        },
    },
    "Idleness": {
        "type": "object", "description": "README: Is this host idle? (autostop)",
        "required": ["version", "active", "since", "reason", "basis", "confidence", "for_s",
                     "gpus", "processes"],
        "properties": {
            "version": {"type": "integer"}, "active": {"type": "boolean"},
            "since": {"type": "number", "nullable": True,
                      "description": "Unix time the host has been idle since (idle) or active "
                                     "since (active); null when not known"},
            "since_is_history_start": {"type": "boolean"},
            "idle_for_s": {"type": "number", "nullable": True},
            "for_s": {"type": "number"}, "ts": {"type": "number", "nullable": True},
            "reason": {"type": "string"},
            "basis": {"type": "string", "enum": ["measured", "fail_safe"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "gpus": {"type": "array", "items": {"type": "object"}},
            "processes": {"type": "array", "items": {"type": "object"}},
            "history": {"type": "object", "nullable": True},
        },
    },
    "Snoozed": {"type": "object", "required": ["id", "snoozed_until"],
                "properties": {"id": {"type": "string"}, "snoozed_until": {"type": "number"}}},
    "Unsnoozed": {"type": "object", "required": ["id", "snoozed_until"],
                  "properties": {"id": {"type": "string"},
                                 "snoozed_until": {"type": "number", "nullable": True}}},
}

# Answers any route may give: no token on TCP, a body too large or too slow, a full listener.
COMMON_RESPONSES: dict[str, dict[str, Any]] = {
    "401": _error("TCP without `Authorization: Bearer <token>`, or a wrong token"),
    "503": _error("the listener is at its connection limit, or a store read ran too long"),
}

OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/v1/health"): {
        "summary": "is the recorder recording, and what is wrong",
        "responses": {"200": _json(_ref("Health"), "health")},
    },
    ("GET", "/v1/now"): {
        "summary": "the latest state: host, price, burn, GPUs, processes, recommendations",
        "responses": {"200": _json(_ref("Now"), "the live document")},
    },
    ("GET", "/v1/history"): {
        "summary": "a downsampled series of one GPU, one process, or the host's waste",
        "parameters": [
            _query("metric", {"type": "string", "enum": METRICS},
                   "a GPU metric (with gpu=), a process metric (with process=), or "
                   "wasted_per_hour (the host); default utilization"),
            _query("gpu", {"type": "integer", "minimum": 0, "maximum": 1023}, "GPU index"),
            _query("process", {"type": "string", "pattern": KEY_PATTERN},
                   "PID:START, for a process metric"),
            _query("since", SINCE, "seconds back from now (default 3600)"),
            _query("points", {"type": "number", "minimum": 1, "maximum": 2000},
                   "most points returned (default 300; a fraction is cut off)"),
        ],
        "responses": {"200": _json(_ref("History"), "the series"),
                      "400": _error("a bad parameter, or a metric without its gpu= or "
                                    "process="),
                      "404": _error("gpu= names no GPU of this host and none was recorded "
                                    "in the range")},
    },
    ("GET", "/v1/processes/{key}/phases"): {
        "summary": "where a process's time went: compute, data wait, checkpoint ...",
        "parameters": [PROCESS_KEY, _query("since", SINCE, "seconds back (default 1800)")],
        "responses": {"200": _json(_ref("Phases"), "the phase balance"), "400": BAD,
                      "404": _error("no such process in the store")},
    },
    ("GET", "/v1/recommendations"): {
        "summary": "the active (not snoozed) recommendations",
        "responses": {"200": _json(_ref("Recommendations"), "recommendations")},
    },
    ("GET", "/v1/recommendations/snoozed"): {
        "summary": "the snoozed recommendations the latest evaluation still finds, each with "
                   "its snoozed_until (DELETE /v1/recommendations/{id}/snooze brings one back)",
        "responses": {"200": _json(_ref("Recommendations"), "recommendations")},
    },
    ("GET", "/v1/idle"): {
        "summary": "is this host idle (for autostop): active or not, since when, the evidence "
                   "per GPU and process, and how sure; anything unknown answers active",
        "parameters": [_query("for", {"type": "number", "minimum": 0, "maximum": 30 * 86400},
                              "seconds the host must have been idle to answer idle (default "
                              "0: idle now)")],
        "responses": {"200": _json(_ref("Idleness"), "the answer; also when it could not be "
                                                     "known (active, basis fail_safe, reason)"),
                      "400": BAD},
    },
    ("GET", "/v1/compare"): {
        "summary": "a job's latest run against the run before it, figure by figure (better, "
                   "worse, within noise), as `mlcostd compare --previous` prints with --json",
        "parameters": [_query("previous", {"type": "string", "minLength": 1, "maxLength": 200},
                              "a job (its job or owner label) or a process's PID:START (runs "
                              "of its command line)", required=True)],
        "responses": {"200": _json(_ref("Comparison"), "the comparison"), "400": BAD,
                      "404": _error("no such process, or fewer than two runs in the store"),
                      "429": _error("a comparison is running now; ask again when it is done"),
                      "503": _error("the store cannot be read, or the comparison failed or "
                                    "ran past its 60 s")},
    },
    ("POST", "/v1/recommendations/{id}/apply"): {
        "summary": "what the recommendation's action does (dry run, the default) or did; a "
                   "real run needs a dry run first and is audited (README)",
        "parameters": [REC_ID],
        "requestBody": _body({"type": "object", "properties": {
            "dry_run": {"type": "boolean"},
            # a resize on preliminary evidence is done only when confirmed a second time
            "accept_preliminary": {"type": "boolean"}}}),
        "responses": {
            "200": _json(_ref("ActionResult"), "the dry run, or what was done"), "400": BAD,
            "403": _error("actions are off ([api].allow_actions), or no permission"),
            "404": NO_REC,
            "409": _error("no dry run first, the action is running now, or a resize on "
                          "preliminary evidence without accept_preliminary"),
            "410": _error("the process has exited or is another process now"),
            "422": _error("the recommendation lacks what its action needs"),
            "502": _error("the cloud refused the action"),
        },
    },
    ("POST", "/v1/recommendations/{id}/snooze"): {
        "summary": "hide a recommendation for some hours (kept across restarts)",
        "parameters": [REC_ID],
        "requestBody": _body({"type": "object", "properties": {
            "hours": {"type": "number", "exclusiveMinimum": True, "minimum": 0,
                      "maximum": 24 * 90}}}),
        "responses": {"200": _json(_ref("Snoozed"), "snoozed until"), "400": BAD,
                      "404": NO_REC},
    },
    ("DELETE", "/v1/recommendations/{id}/snooze"): {
        "summary": "end a snooze: the recommendation is shown again (mlcost-top's undo)",
        "parameters": [REC_ID],
        "responses": {"200": _json(_ref("Unsnoozed"), "shown again"),
                      "404": _error("the recommendation is not snoozed")},
    },
    ("POST", "/v1/snapshots"): {
        "summary": "take a snapshot of a time range into the daemon's snapshots folder (a "
                   "store file; with html, its HTML report; with upload, also to S3)",
        "requestBody": _body({"type": "object", "properties": {
            "since": {"oneOf": [SNAPSHOT_SPAN, {"type": "string", "pattern": DURATION}],
                      "description": "how far back from until (default 30m)"},
            "until": {"oneOf": [{"type": "number", "minimum": 1577836800},
                                {"type": "string"}],
                      "description": "Unix seconds or ISO 8601 (default now): a past time, "
                                     "not before 2020-01-01"},
            "html": {"type": "boolean"},
            "upload": {"type": "boolean",
                       "description": "also upload to the daemon's [snapshots].upload; the "
                                      "target is set in the config only (a string is a 400)"}}}),
        "responses": {"201": _json(_ref("Snapshot"), "the snapshot written"), "400": BAD,
                      "422": _error("the range holds no tick (nothing is written); the "
                                    "message names the range the store holds"),
                      "503": _error("the store cannot be read or the folder written now")},
    },
    ("GET", "/v1/snapshots"): {
        "summary": "the snapshots in the daemon's folder, newest first",
        "responses": {"200": _json(_ref("Snapshots"), "the snapshots")},
    },
    ("GET", "/v1/snapshots/{name}"): {
        "summary": "one file of the snapshots folder: a .db snapshot or its .html report",
        "parameters": [_path("name", "a file name from /v1/snapshots",
                             r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,200}\.(db|html)$")],
        "responses": {"200": {"description": "the file", "content": {
            "application/vnd.sqlite3": {"schema": {"type": "string", "format": "binary"}},
            "text/html": {"schema": {"type": "string"}}}},
            "400": _error("not a snapshot file name"), "404": _error("no such snapshot")},
    },
    ("GET", "/metrics"): {
        "summary": "Prometheus text exposition (0.0.4) of the host's, GPUs', processes' and "
                   "recommendations' series (README: On a fleet); not under /v1/, behind the "
                   "same token on TCP, and alone without one on --metrics-listen",
        "responses": {"200": {"description": "the series, as Prometheus scrapes them",
                              "content": {"text/plain": {"schema": {"type": "string"}}}},
                      "500": {"description": "the render failed (the text says so; the log "
                                             "says why)",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}},
    },
    ("GET", "/v1/openapi.json"): {
        "summary": "this document",
        "responses": {"200": _json({"type": "object"}, "the OpenAPI document")},
    },
}


def operation(method: str, path: str, entry: dict[str, Any]) -> None:
    """Document one more route (for a module that adds its own, e.g. /v1/snapshots)."""
    OPERATIONS[(method.upper(), path)] = entry


# Served beside /v1/ on the same app, and documented with it.
OUTSIDE_V1 = ("/metrics",)


def routes_of(app: web.Application) -> list[tuple[str, str]]:
    """(METHOD, path) of the /v1/ routes (and /metrics) the app serves (HEAD, added by aiohttp
    for every GET, left out)."""
    found = []
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if (path.startswith("/v1/") or path in OUTSIDE_V1) and route.method not in ("HEAD", "*"):
            found.append((route.method, path))
    return sorted(set(found))


def document(app: web.Application) -> dict[str, Any]:
    """The OpenAPI document of what `app` serves."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path in routes_of(app):
        entry = dict(OPERATIONS.get((method, path)) or {
            "summary": "not documented yet", "responses": {"200": {"description": "ok"}}})
        entry["responses"] = {**COMMON_RESPONSES, **entry["responses"]}
        entry.setdefault("operationId", f"{method.lower()} {path}")
        paths.setdefault(path, {})[method.lower()] = entry
    return {
        "openapi": "3.0.3",
        "info": {"title": "mlcostd", "version": __version__,
                 "description": f"mlcostd's HTTP API, version {API_VERSION}: JSON under /v1/ "
                                "(and Prometheus text at /metrics) on a unix socket, or on "
                                "TCP with a bearer token."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "TCP only; the unix socket needs "
                                                          "none"}},
        },
        "security": [{"bearer": []}, {}],
    }


async def serve(request: web.Request) -> web.Response:
    return web.json_response(document(request.app))
