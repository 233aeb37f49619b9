"""Read-only queries of the attribution and cost facts: stack samples, sampler statuses, events
and recommendations.

Imports only the reader, so analysis, replay and reports read these facts without loading the
writer (`daemon.store.facts` writes them).

What may carry a command line or an argument (an event's target and detail, a recommendation's
body and its texts, a process's kind, a stack sample's reason, a sampler's error) is redacted once
more on its way out (daemon.sources.redact: `redact_stored_json`, `redact_stored`), as
`snapshot --db` redacts it: a store written elsewhere, before a rule, or edited holds what this
daemon would have hidden. The report, the snapshot page and replay read through here.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from daemon import clock
from daemon.sources.owners import decode_owner
from daemon.sources.patterns import safe_job_patterns
from daemon.sources.redact import (
    redact_document,
    redact_field,
    redact_name,
    redact_stored,
    redact_stored_json,
)
from daemon.store.reader import StoreReader, stored_command
from daemon.store.schema import (
    GPU_READING,
    HOUR,
    KIND_GPU,
    KIND_PROCESS,
    KIND_SPEND,
    MICRODOLLARS,
    MINUTE,
    PROCESS_METRICS,
    SPEND_METRICS,
    SPEND_PROCESS,
    decode_status,
    unpack_text,
)
from daemon.wire import PHASES, RECENT_PHASE_S, parse_process_key


def _stored_json(value: object) -> Any:
    """A stored JSON column parsed, redacted on its way out (what is no JSON fails to parse as
    it did before the redaction)."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str):
        raise TypeError(f"a JSON column holds {type(value).__name__}, not text")
    return json.loads(redact_stored_json(value))


def _stored_text(value: object) -> object:
    """A stored text column redacted on its way out; NULL or a number stays what it is."""
    return redact_stored(value) if isinstance(value, str) else value


def stack_samples(reader: StoreReader, since: float, until: float) -> list[dict[str, Any]]:
    """Stack samples in [since, until] with their process, frames and the reason of their
    phase (None in stores written before reasons were kept), oldest first.

    Samples of one stack share one frames tuple (read once per hash): a 30-minute window holds
    thousands of samples of a few dozen stacks, and a copy per sample made the daemon's memory
    grow with the window (bench/soak.py)."""
    columns = {r["name"] for r in reader.query("PRAGMA table_info(stack_samples)")}
    reason = "s.reason" if "reason" in columns else "NULL AS reason"
    span = (round(since * 1000), round(until * 1000))
    frames_of = {
        r["hash"]: _stored_frames(r["frames"]) for r in reader.query(
            "SELECT hash, frames FROM stacks WHERE hash IN (SELECT DISTINCT hash FROM "
            "stack_samples WHERE ts >= ? AND ts <= ?)", span)}
    rows = reader.query(
        f"SELECT s.ts, p.pid, p.start_ms, s.thread, s.hash, s.phase, s.gpu_util, {reason} "
        "FROM stack_samples s JOIN processes p ON p.id = s.proc "
        "WHERE s.ts >= ? AND s.ts <= ? ORDER BY s.ts", span)
    reasons: dict[object, object] = {}  # a few reasons over thousands of samples: each redacted once
    return [{"ts": r["ts"] / 1000, "pid": r["pid"], "start_time": r["start_ms"] / 1000,
             "thread": r["thread"], "hash": r["hash"], "phase": r["phase"],
             "gpu_util": None if r["gpu_util"] is None else r["gpu_util"] / 10,
             "reason": reasons[r["reason"]] if r["reason"] in reasons else reasons.setdefault(
                 r["reason"], _stored_text(r["reason"])),
             "frames": frames_of.get(r["hash"], ())}
            for r in rows if r["hash"] in frames_of]


def latest_phase(reader: StoreReader, pid: int, start_time: float, since: float,
                 until: float) -> str | None:
    """What the process does now by its stack samples in [since, until] (None: none there):
    the phase most of those taken in the RECENT_PHASE_S up to the last one say, of phases as
    many the one sampled last. What replay's `phase_now` shows in an open low-utilization
    window, as the live daemon's (daemon.analysis.live_phases.LivePhases.latest_phase). Two
    lookups in the index (proc, ts): its last sample, then those of the RECENT_PHASE_S to it."""
    proc = reader.query("SELECT id FROM processes WHERE pid = ? AND start_ms = ?",
                        (pid, round(start_time * 1000)))
    if not proc:
        return None
    last = reader.query("SELECT MAX(ts) AS ts FROM stack_samples WHERE proc = ? AND ts >= ? "
                        "AND ts <= ?", (proc[0]["id"], round(since * 1000), round(until * 1000)))
    end = last[0]["ts"] if last else None
    if not isinstance(end, int):  # none sampled there (or a planted store's text)
        return None
    rows = reader.query(
        "SELECT phase, COUNT(*) AS n, MAX(ts) AS latest FROM stack_samples WHERE proc = ? "
        "AND ts >= ? AND ts <= ? GROUP BY phase ORDER BY n DESC, latest DESC LIMIT 1",
        (proc[0]["id"], max(round(since * 1000), end - round(RECENT_PHASE_S * 1000)), end))
    phase = rows[0]["phase"] if rows else None
    return phase if phase in PHASES else None  # (a planted store's text is not a phase)


def _stored_frames(text: str) -> tuple[tuple[Any, ...], ...]:
    """A stack's frames as stored ([function, file, line] each), each function and file name
    redacted on its way out (`redact_field`: a process names its own functions and files)."""
    return tuple((redact_field(f[0]) if isinstance(f[0], str) else f[0],
                  redact_field(f[1]) if isinstance(f[1], str) else f[1], *f[2:])
                 if isinstance(f, list) and len(f) >= 2 else tuple(f)
                 for f in json.loads(text))


def stack_statuses(reader: StoreReader) -> dict[tuple[int, float], dict[str, Any]]:
    rows = reader.query(
        "SELECT p.pid, p.start_ms, s.ts, s.status, s.error FROM stack_status s "
        "JOIN processes p ON p.id = s.proc")
    return {(r["pid"], r["start_ms"] / 1000): {"status": r["status"],
                                               "error": _stored_text(r["error"]),
                                               "ts": r["ts"] / 1000} for r in rows}


def events(reader: StoreReader, since: float, until: float) -> list[dict[str, Any]]:
    """Events that overlap [since, until] (open ones included), each with the incident
    snapshot taken for it (`snapshot`: its path, or None)."""
    return _events(reader, "started_at <= ? AND (ended_at IS NULL OR ended_at >= ?)",
                   (round(until * 1000), round(since * 1000)))


def open_events(reader: StoreReader, kind: str) -> list[dict[str, Any]]:
    """The events of `kind` the store holds open (no `ended_at`), oldest first, as `events`
    reads them."""
    return _events(reader, "kind = ? AND ended_at IS NULL", (kind,))


def _events(reader: StoreReader, where: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    columns = {r["name"] for r in reader.query("PRAGMA table_info(events)")}
    snapshot = "snapshot" if "snapshot" in columns else "NULL AS snapshot"
    raised = "raised_at" if "raised_at" in columns else "NULL AS raised_at"
    rows = reader.query(
        f"SELECT kind, target, started_at, ended_at, cost, detail, {snapshot}, {raised} "
        f"FROM events WHERE {where} ORDER BY started_at", params)
    return [{"kind": r["kind"], "target": _stored_text(r["target"]),
             "started_at": r["started_at"] / 1000,
             "ended_at": None if r["ended_at"] is None else r["ended_at"] / 1000,
             "raised_at": None if r["raised_at"] is None else r["raised_at"] / 1000,
             "cost_so_far": r["cost"], "detail": _stored_json(r["detail"] or "{}"),
             "snapshot": _stored_text(r["snapshot"])} for r in rows]


def recommendations(reader: StoreReader, since: float) -> list[dict[str, Any]]:
    """Recommendations seen since `since`, largest savings first, with their history."""
    rows = reader.query(
        "SELECT first_seen, last_seen, snoozed_until, body FROM recommendations "
        "WHERE last_seen >= ? ORDER BY savings_per_month DESC", (round(since * 1000),))
    out = []
    for r in rows:
        body = _stored_json(r["body"])
        body["first_seen"] = r["first_seen"] / 1000
        body["last_seen"] = r["last_seen"] / 1000
        body["snoozed_until"] = None if r["snoozed_until"] is None else r["snoozed_until"] / 1000
        out.append(body)
    return out


def recommendation_texts(reader: StoreReader, since: float,
                         at: float) -> dict[str, tuple[float, dict[str, Any]]]:
    """The text of each recommendation seen in [since, at] as it was at `at`: id -> (when that
    text was written, its body), from the latest recommendation_texts row at or before `at`;
    where there is none (a store that kept texts only from a later upgrade on), the earliest
    row after `at`, whose time says so. A recommendation without any row (a store or snapshot
    from before the texts were kept) is absent: its recommendations row is all there is."""
    found = reader.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                         ("recommendation_texts",))
    if not found:
        return {}
    # CROSS JOIN keeps SQLite's order: each recommendation, then its one row by (id, ts); a
    # plain join let the planner scan every text (bench/recommendation_writes.py: 33 ms a tick).
    rows = reader.query(
        "SELECT r.id, r.last_seen, r.body AS latest, t.ts, t.body "
        "FROM recommendations r CROSS JOIN recommendation_texts t "
        "ON t.id = r.id AND t.ts = coalesce("
        "(SELECT max(x.ts) FROM recommendation_texts x WHERE x.id = r.id AND x.ts <= :at), "
        "(SELECT min(x.ts) FROM recommendation_texts x WHERE x.id = r.id AND x.ts > :at)) "
        "WHERE r.last_seen >= :since AND r.first_seen <= :at",
        {"since": round(since * 1000), "at": round(at * 1000)})
    # The recommendations row holds the newest text (a history row is kept at most once a
    # minute while only figures move: daemon.store.facts): from its last round on, it is it.
    at_ms = round(at * 1000)
    return {r["id"]: (r["last_seen"] / 1000, _stored_json(r["latest"])) if r["last_seen"] <= at_ms
            else (r["ts"] / 1000, _stored_json(unpack_text(r["body"]))) for r in rows}


def recorded_range(reader: StoreReader) -> tuple[float, float] | None:
    """(first, last) time the store holds anything for, in Unix seconds: from when its
    recording began (`first_recorded`: its first raw tick, or the start of a rollup whose ticks
    retention removed) to its last raw tick or rollup bucket's start. None for an empty store.
    (A young store's first rollup bucket starts up to an hour before its first tick: a report
    of a 7-minute store covered an hour, from its rollups.)"""
    first = first_recorded(reader)
    if first is None:
        return None
    hi = reader.query("SELECT max(ts) AS hi FROM ticks")[0]["hi"]
    # the samples' last rollups, found along the primary key (res, bucket, ...): a month is
    # millions of rows
    ends = [reader.query(
        "SELECT bucket FROM rollups WHERE res = ? AND kind IN (?, ?) ORDER BY bucket DESC "
        "LIMIT 1", (res, KIND_GPU, KIND_PROCESS)) for res in (MINUTE, HOUR)]
    highs = [v for v in (hi, *(rows[0]["bucket"] for rows in ends if rows)) if v is not None]
    return first, (max(highs) / 1000 if highs else first)


def held_range(store: str, recorded: tuple[float, float] | None) -> str:
    """What a store holds, in the words `mlcostd report` uses for a window that misses it:
    "STORE holds 2026-12-01 07:30:00 to 2026-12-01 09:30:00" (`recorded`: recorded_range),
    or "STORE holds no samples at all"."""
    if recorded is None:
        return f"{store} holds no samples at all"
    return f"{store} holds {clock.local_time(recorded[0])} to {clock.local_time(recorded[1])}"


def first_recorded(reader: StoreReader) -> float | None:
    """When the store's recording began, in Unix seconds: its first raw tick, or, where raw
    retention has removed the ticks of a rollup (a bucket, the samples' or the hour spend's,
    that ends by the first tick left), the first bucket's start. None for an empty store."""
    lo = reader.query("SELECT min(ts) AS lo FROM ticks")[0]["lo"]
    buckets = [(rows[0]["bucket"], res) for res in (MINUTE, HOUR) if (rows := reader.query(
        "SELECT bucket FROM rollups WHERE res = ? AND kind IN (?, ?, ?) ORDER BY bucket "
        "LIMIT 1", (res, KIND_GPU, KIND_PROCESS, KIND_SPEND)))]
    # (each kind's first that ends by the first tick: the current hour's spend row begins
    # before a first tick retention left, and the minutes before it were read as never
    # recorded, probe 149; the first minute where it is in the first such hour)
    ended = sorted((bucket, res) for bucket, res in buckets
                   if type(bucket) is int and (lo is None or bucket + res * 1000 <= lo))
    if ended:
        bucket = ended[0][0]
        minutes = [b for b, res in ended if res == MINUTE]
        if minutes and minutes[0] < bucket - bucket % (HOUR * 1000) + HOUR * 1000:
            bucket = minutes[0]
        return float(bucket) / 1000
    return None if lo is None else float(lo) / 1000


# The meta key of the time the daemon last handed the store its hour spend (each
# [cost].evaluate_every round and at its stop): the recorded spend covers the ticks up to it.
SPEND_THROUGH = "spend_through"


def recorded_jobs(reader: StoreReader) -> dict[str, str] | None:
    """[cost].jobs as the daemon that recorded the store ran ({name: regex}, meta "cost",
    written by runtime/daemon.py); None where it recorded none."""
    cost = reader.meta("cost")
    jobs = cost.get("jobs") if isinstance(cost, dict) else None
    if not isinstance(jobs, dict):
        return None
    # a store's file may come from anyone: a pattern that can hang its reader is left out
    return safe_job_patterns({str(name): str(pattern) for name, pattern in jobs.items()})


def spend_through(reader: StoreReader) -> float | None:
    """Up to when the store's hour spend was recorded (Unix seconds); None for a store
    written before this was kept, or where the value is not a time."""
    value = reader.meta(SPEND_THROUGH)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _has_table(reader: StoreReader, name: str) -> bool:
    return bool(reader.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                             (name,)))


# The part of one GPU's price it wasted at a tick, from its status name and utilization (%, None
# unknown): the analysis's formula (daemon.analysis.cost.gpu_wasted_per_hour), the store knowing
# none.
GpuWaste = Callable[[str, float | None], float]


def spend_by_day(reader: StoreReader, since: float, until: float,
                 gpu_waste: GpuWaste | None = None
                 ) -> list[tuple[float, int, int, float, float]]:
    """The hour spend the daemon's ledger recorded (schema.KIND_SPEND) over [since, until],
    summed per UTC day in SQL (a month of 64 processes is 46 000 hour rows): (a time inside
    the part of the day in the range, key: 0 for the host or a process id, metric code,
    seconds charged, dollars). An hour the range cuts counts by its ticks inside
    (`_recorded_shares`): its waste by what those ticks wasted (`gpu_waste`; else as its
    spend), its idle as what is left of its spend inside once its processes' parts are placed
    (the ledger's host spend is its processes' and its idle: an hour whose GPUs were held for
    its first half and not after has its idle in the second).
    [] for a store written before hour spend was kept."""
    hour_ms, day_ms = HOUR * 1000, 86400 * 1000
    lo, hi = round(since * 1000), round(until * 1000)
    whole_lo, whole_hi = -(-lo // hour_ms) * hour_ms, hi // hour_ms * hour_ms
    out: list[tuple[float, int, int, float, float]] = []
    if whole_hi > whole_lo:
        for r in reader.query(
                "SELECT bucket / :day AS d, min(bucket) AS first, max(bucket) AS last, key, "
                "metric, sum(n) AS n, sum(sum) AS total FROM rollups WHERE res = :res AND "
                "bucket >= :lo AND bucket < :hi AND kind = :kind GROUP BY d, key, metric",
                {"day": day_ms, "res": HOUR, "lo": whole_lo, "hi": whole_hi,
                 "kind": KIND_SPEND}):
            middle = (r["first"] + r["last"] + hour_ms) / 2000
            out.append((middle, r["key"], r["metric"], r["n"] / 1000,
                        r["total"] / MICRODOLLARS))
    edges = [(lo // hour_ms * hour_ms, min(whole_lo, hi))]
    if whole_hi >= whole_lo:
        edges.append((whole_hi, hi))
    for a, b in edges:
        if b <= a or b <= lo:
            continue
        rows = reader.query("SELECT bucket, key, metric, n, sum FROM rollups WHERE res = ? AND "
                            "bucket = ? AND kind = ?", (HOUR, a, KIND_SPEND))
        inside = (max(lo, a), min(b, a + hour_ms))
        # (by the range's own ends: a tick just past the hour may have charged into it)
        shares = _recorded_shares(reader, a, (lo, hi), rows, gpu_waste) if rows else None
        clock_share = (inside[1] - inside[0]) / hour_ms
        if shares is not None:
            shares[SPEND_IDLE_KEY] = _idle_share(rows, shares)
        # (the host's seconds by time, its dollars by dollars: probe 153 M3, a window of the
        # part of an hour at $5.67/h beside a part at $10/h read 20 % more seconds than it held,
        # and its burn per hour as much less)
        seconds_share = clock_share if shares is None else shares.get(SPEND_SECONDS_KEY,
                                                                      shares[0])
        for r in rows:
            share = clock_share if shares is None else shares.get(r["key"], shares[0]) \
                if r["key"] else shares.get(_HOST_METRIC_KEYS.get(r["metric"], 0), shares[0])
            if share > 0:
                out.append(((inside[0] + inside[1]) / 2000, r["key"], r["metric"],
                            r["n"] / 1000 * (share if r["key"] else seconds_share),
                            r["sum"] / MICRODOLLARS * share))
    return out


# A tick's interval as the ledger charged it (`_hour_ticks`): a gap capped at MAX_GAP_MS, as
# daemon.analysis.ledger.MAX_TICK_GAP_S caps it (the store knowing nothing of the analysis).
MAX_GAP_MS = 60_000
# The processes that held a GPU at each tick of a span, one JSON array a tick found along
# proc_gpu_samples' primary key (ts, ...); numbers only: a damaged file's text or blob, which
# JSON cannot hold, sorts after every number. (Joined and summed by process in SQL, an edge
# hour of 8 x 64 took 0.17 s, four of them most of a 1-hour report: bench/report.py.)
_TICK_PROCESSES = (
    "SELECT k.ts, (SELECT json_group_array(s.proc) FROM proc_gpu_samples s WHERE s.ts = k.ts "
    "AND s.proc <= 9223372036854775807) AS procs FROM ticks k WHERE k.ts >= ? AND k.ts <= ?")


def _hour_ticks(reader: StoreReader, hour: int,
                through: int | None) -> tuple[list[tuple[int, int]], Counter[int]]:
    """The ticks whose interval the ledger put in the hour starting at `hour` (ms), handed
    over by `through` (ms; None: all): (ts, the interval before it as charged, ms), oldest
    first. By the interval's midpoint (daemon.analysis.ledger: the tick at 11:00:00.014, a
    second after the one before, is in 10:00's row; counted in 11:00's, a review of a store
    from 10:54 to 11:05 read $5.99 for the $5.999 its rows held). A run's first tick (after a
    daemon start reading) charged nothing: no part of any row. Read as the hour's tick times
    and the starts among them, placed here (the tick before each one, a correlated max() in
    SQL, was read again at each of its uses). And how many ticks the store holds in each
    minute of the hour and the one after it (by their start, ms), up to `through`."""
    hour_end = hour + HOUR * 1000
    times = [ts for ts, in reader.rows(
        "SELECT ts FROM ticks WHERE ts >= coalesce((SELECT max(ts) FROM ticks WHERE ts < :hour),"
        " :hour) AND ts < :end AND (:through IS NULL OR ts <= :through) ORDER BY ts",
        {"hour": hour, "end": hour_end + MAX_GAP_MS, "through": through})]
    if not times:
        return [], Counter()
    starts = sorted(r["ts"] for r in reader.query(
        "SELECT ts FROM meter_readings WHERE kind = 'start' AND name = 'daemon' AND ts > ? "
        "AND ts <= ?", (times[0], times[-1]))
        if isinstance(r["ts"], int | float) and not isinstance(r["ts"], bool)) \
        if _has_table(reader, "meter_readings") else []
    out = []
    for prev, ts in zip(times, times[1:], strict=False):  # (the first: the tick before)
        if starts:
            index = bisect.bisect_right(starts, prev)  # (a daemon started after prev, by ts)
            if index < len(starts) and starts[index] <= ts:
                continue
        charged = min(ts - prev, MAX_GAP_MS)
        if 2 * hour <= 2 * ts - charged < 2 * hour_end:  # (its midpoint, in whole numbers)
            out.append((ts, charged))
    minute = MINUTE * 1000
    return out, Counter(ts - ts % minute for ts in times if ts >= hour)


def _held_throughout(reader: StoreReader, part: list[tuple[int, float]], keys: Iterable[int],
                     minutes: Counter[int], through: int | None) -> set[int]:
    """The minutes (their start, ms) among `part`'s ticks at every tick of which each process
    of `keys` held a GPU, read from their minute rollups: a process's sm_share count is the
    ticks it held a GPU at (the writer writes a share for each GPU it holds, 0 without an NVML
    sample), so a count equal to the ticks the minute holds now (`minutes`, counted up to
    `through`) is each of them. Only minutes whose raw ticks are all there still: raw
    retention and a snapshot cut the raw range only at its ends (so a minute that starts at or
    after the first raw tick and ends by the last), and a tick written into a minute after it
    was rolled up (a retried write) makes its ticks more than the count, never as many. (A
    file edited to disagree with its rollups reads as its rollups say.)"""
    wanted = sorted({ts - ts % (MINUTE * 1000) for ts, _ in part})
    procs = set(keys)
    if not wanted or not procs or not all(type(key) is int for key in procs):
        return set()  # (a damaged file's key that is no process id: tick by tick)
    # (each its own query: min() and max() in one read every tick, not two ends of the key)
    first, last = reader.rows("SELECT (SELECT min(ts) FROM ticks), (SELECT max(ts) FROM ticks)")[0]
    if first is None or last is None:
        return set()
    end = last if through is None else min(last, through)
    inner = [m for m in wanted if m >= first and m + MINUTE * 1000 <= end and minutes[m]]
    if not inner:
        return set()
    counted: Counter[int] = Counter()
    for bucket, n in reader.rows(
            "SELECT bucket, n FROM rollups WHERE kind = ? AND key IN (SELECT value FROM "
            "json_each(?)) AND metric = ? AND res = ? AND bucket >= ? AND bucket <= ?",
            (KIND_PROCESS, json.dumps(sorted(procs)), PROCESS_METRICS["sm_share"], MINUTE,
             inner[0], inner[-1])):
        if isinstance(n, int) and n == minutes.get(bucket):
            counted[bucket] += 1
    return {m for m in inner if counted[m] == len(procs)}


# The host's price as each run charged it (daemon.analysis.price_history.PRICE_READING, its
# value the price per hour), read here by its kind and name (the store knowing no analysis).
_PRICE_KIND, _PRICE_NAME = "price", "host"


def _hour_prices(reader: StoreReader, hour: int) -> tuple[list[int], list[float]]:
    """The prices per hour recorded as charged from the last reading before the hour starting
    at `hour` (ms) through its end: (since when, ms; the price), oldest first. ([], []) where
    none was recorded (a store from before prices were kept, or a hostile file's)."""
    if not _has_table(reader, "meter_readings"):
        return [], []
    times: list[int] = []
    prices: list[float] = []
    for ts, value in reader.rows(
            "SELECT ts, value FROM meter_readings WHERE kind = :kind AND name = :name AND ts >="
            " coalesce((SELECT max(ts) FROM meter_readings WHERE kind = :kind AND name = :name"
            " AND ts <= :hour), :hour) AND ts < :end ORDER BY ts",
            {"kind": _PRICE_KIND, "name": _PRICE_NAME, "hour": hour,
             "end": hour + HOUR * 1000 + MAX_GAP_MS}):
        if type(ts) is int and isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value) and value >= 0 and (not times or ts > times[-1]):
            times.append(ts)
            prices.append(float(value))
    return times, prices


def _held_ms(reader: StoreReader, part: list[tuple[int, float]], keys: list[int],
             minutes: Counter[int], through_ms: int | None) -> dict[int, float]:
    """Each process of `keys`: the intervals of `part` ((ts, ms) of an hour's ticks, each as
    charged, weighted by its price) at the ticks it held a GPU at."""
    held: dict[int, float] = dict.fromkeys(keys, 0.0)
    if part and held:
        # (only the part inside: a report's cost grows with it) the minutes at each tick of
        # which every process held a GPU from their rollups, the rest tick by tick, the ticks
        # of one set of processes summed once: a host's processes hold their GPUs for many
        # ticks running (read tick by tick, a 1-hour report's two whole edge hours were a
        # quarter of its time: bench/report.py)
        throughout = _held_throughout(reader, part, held, minutes, through_ms)
        minute = MINUTE * 1000
        everyone = sum(ms for ts, ms in part if ts - ts % minute in throughout)
        for key in held:
            held[key] += everyone
        interval: dict[int, float] = {}
        spans: list[list[int]] = []  # the runs of the others: [first ts, last ts, index]
        for i, (ts, ms) in enumerate(part):
            if ts - ts % minute not in throughout:
                interval[ts] = ms
                if spans and spans[-1][2] == i - 1:
                    spans[-1][1:] = [ts, i]
                else:
                    spans.append([ts, ts, i])
        by_set: dict[str, float] = {}
        for a, b, _ in spans:
            for ts, procs in reader.rows(_TICK_PROCESSES, (a, b)):
                tick_ms = interval.get(ts)  # (not a run's first tick, nor one of those above)
                if tick_ms is not None and procs:
                    by_set[procs] = by_set.get(procs, 0) + tick_ms
        # (a process with no GPU sample among the part's ticks was charged outside them; one
        # on several GPUs at a tick counts that tick once)
        for ids, ms in by_set.items():
            for proc in set(json.loads(ids)):
                if isinstance(proc, int) and proc in held:  # (not a damaged file's 5.5)
                    held[proc] += ms
    return held


# Keys of `_recorded_shares` beside the host (0) and process ids (positive): the host's idle and
# waste, which its spend's share does not place, and the part of the host's seconds inside (by
# time: the host's share is by dollars, each tick at its price, and differs where the price
# changed in the hour).
SPEND_IDLE_KEY, SPEND_WASTED_KEY, SPEND_SECONDS_KEY = -1, -2, -3
_HOST_METRIC_KEYS = {SPEND_METRICS["idle"]: SPEND_IDLE_KEY,
                     SPEND_METRICS["wasted"]: SPEND_WASTED_KEY}
# The host's rows whose `n` is the seconds charged (not SPEND_UNACCOUNTED's, the seconds not)
_CHARGED = frozenset(SPEND_METRICS.values())


def _idle_share(rows: list[dict[str, Any]], shares: dict[int, float]) -> float:
    """The part of an hour's idle spend inside: the host's spend inside less its processes'
    (each row's dollars times its share), over the hour's idle; the host's share where the
    rows say no idle."""
    dollars = {(r["key"], r["metric"]): r["sum"] for r in rows
               if isinstance(r["sum"], int | float)}
    idle = dollars.get((0, SPEND_METRICS["idle"]))
    total = dollars.get((0, SPEND_METRICS["total"]))
    if not idle or idle <= 0 or total is None:
        return shares[0]
    processes = math.fsum(value * shares.get(key, 0.0) for (key, metric), value in
                          dollars.items() if key and metric == SPEND_PROCESS)
    return min(1.0, max(0.0, (total * shares[0] - processes) / idle))


def _recorded_shares(reader: StoreReader, hour: int, inside: tuple[int, int],
                     rows: list[dict[str, Any]], gpu_waste: GpuWaste | None = None
                     ) -> dict[int, float] | None:
    """The part of an hour's recorded spend that falls in `inside` (ms), by key (0: the host,
    else a process id), from the hour's raw ticks: each tick charged the interval before it,
    so a part is its ticks (a process's: those it held a GPU at; none, none of its spend)
    times the interval, each at the price it was charged at (the price readings: a daemon
    started again at another price mid-hour), over what the row charged. An hour recorded
    from 14:03 to 14:23 puts a quarter of its spend in 14:18-14:23 and none in 14:12-14:18 (the
    clock's share would be 1/12 and 1/12; a snapshot holds its range's ticks, and the period
    before it was not recorded at all). And the part of its waste (SPEND_WASTED_KEY), with
    `gpu_waste`: the same, each tick's charge times the part of it its GPUs wasted (an hour
    whose first 3 minutes wasted 70 % and the rest 45 % puts 70 % of those 3 minutes' spend in
    their waste, not the hour's 53 %).
    None where the hour's raw ticks are gone, wholly or in part (minute rollups from before its
    first tick: raw retention cut it): the clock's share then."""
    lo, hi = inside
    # The row holds what was charged up to the spend's last hand-over: the ticks after it are
    # not in it yet (a snapshot taken 14 s after one placed 60 ticks' worth of a row that held
    # 46 of them, and its review read $1,034/day for a $786/day host).
    through = spend_through(reader)
    if through is not None:  # (and the hour's ticks it holds: those up to it)
        hi = max(lo, min(hi, round(through * 1000)))
    # A run's first tick is in no range's part either (a stopped store's whole range compared
    # the second before its first tick with its spend).
    through_ms = None if through is None else round(through * 1000)
    ticks, minutes = _hour_ticks(reader, hour, through_ms)
    # The minutes whose raw ticks retention (or the size cap) removed, from their minute
    # rollups: what of the row those ticks charged is placed by them (probe 149: placed by the
    # clock over the whole hour, the 7 minutes of a run that started at :10 put 3/60 of its
    # row in its last 3 minutes, and a report said $1.34 for the $2.92 spent).
    pruned = _pruned_minutes(reader, hour, minutes)
    if not ticks and minutes and not pruned:  # its raw ticks are there, and none of them
        # charged (a run's first tick only, or none handed over yet): nothing of the row is in
        # any range; the clock's share put a 3 s slice of it before a stopped store's first
        # tick, CI 1 in 2
        return {0: 0.0, **{r["key"]: 0.0 for r in rows if r["key"]}}
    # (a minute rolled up wholly before the hour's first raw tick, which may be a run's first
    # and charge nothing: a minute that held one in its last second ended before the first
    # tick that charged, and read as cut by retention, CI 1 in 20; in a snapshot, the minute
    # before its range)
    if not pruned and (not ticks or reader.query(
            "SELECT 1 FROM rollups WHERE res = ? AND bucket >= ? AND bucket < ? LIMIT 1",
            (MINUTE, hour, min(minutes)))):
        return None  # neither its raw ticks nor what they were: the clock's share
    charged = {r["key"]: r["n"] for r in rows
               if r["metric"] == SPEND_PROCESS or r["key"] == 0 and r["metric"] in _CHARGED}
    host_ms = charged.get(0) or max(charged.values(), default=0)
    if host_ms <= 0 or not all(isinstance(ms, int | float) for ms in charged.values()):
        return None
    # Each tick's interval at the price it was charged at, relative to the hour's mean (1 for
    # all where one price held): by milliseconds alone, a window of the 3 minutes at $32.77/h
    # of an hour whose other 5 ran at $55.06/h read $2.10 for the $1.63 the ledger charged.
    since, prices = _hour_prices(reader, hour)
    weight: dict[int, float] = {}
    if len(set(prices)) > 1:
        at = [prices[max(0, bisect.bisect_right(since, ts) - 1)] for ts, _ in ticks]
        mean = math.fsum(p * ms for p, (_, ms) in zip(at, ticks, strict=True)) \
            / max(1, sum(ms for _, ms in ticks))
        if mean > 0:
            weight = {ts: p / mean for p, (ts, _) in zip(at, ticks, strict=True)}
    part = [(ts, ms * weight.get(ts, 1.0)) for ts, ms in ticks if lo < ts <= hi]
    keys = [key for key in charged if key]
    held = _held_ms(reader, part, keys, minutes, through_ms)
    if pruned:
        # What the row charged beyond its raw ticks left is the pruned ticks': the part of it
        # inside is theirs inside (by their minutes), a process's as the host's.
        kept = sum(ms for _, ms in ticks)
        inside_part = _pruned_inside(pruned, (lo, hi), hour, max(0.0, host_ms - kept),
                                     kept / len(ticks) if len(ticks) >= 10
                                     else _interval_ms(reader))
        held_kept = _held_ms(reader, [(ts, float(ms)) for ts, ms in ticks], keys, minutes,
                             through_ms) if keys else {}
        pruned_ms = max(0.0, host_ms - kept) * inside_part
        shares = {0: min(1.0, (sum(ms for _, ms in part) + pruned_ms) / host_ms),
                  SPEND_SECONDS_KEY: min(1.0, (sum(ms for ts, ms in ticks if lo < ts <= hi)
                                               + pruned_ms) / host_ms)}
        for key, ms in held.items():
            row_ms = charged[key]
            shares[key] = (min(1.0, (ms + max(0.0, row_ms - held_kept.get(key, 0.0))
                                     * inside_part) / row_ms) if row_ms > 0 else 0.0)
        return shares  # (its waste as its spend: the pruned ticks' GPUs are not there)
    # Where the price changed in the hour, a process's part is over what its own ticks in the
    # hour cost, read the same way over all of them (only then: a process that ran at one
    # price has its milliseconds' share, and the hour's mean price is not its own).
    whole = _held_ms(reader, [(ts, ms * weight[ts]) for ts, ms in ticks], keys, minutes,
                     through_ms) if weight and keys else {}
    shares = {0: min(1.0, sum(ms for _, ms in part) / host_ms),
              SPEND_SECONDS_KEY: min(1.0, sum(ms for ts, ms in ticks if lo < ts <= hi) / host_ms)}
    for key, ms in held.items():
        row_ms = whole.get(key) or charged[key]
        shares[key] = (min(1.0, ms / row_ms) if isinstance(row_ms, int | float)
                       and row_ms > 0 else 0.0)
    if gpu_waste is not None and part:
        # each tick's charge (its interval at its price) times the part of it wasted, over the
        # same of all the hour's ticks
        wasted = _wasted_parts(reader, ticks[0][0], ticks[-1][0], gpu_waste)
        charges = [(ts, ms * weight.get(ts, 1.0) * wasted.get(ts, 1.0)) for ts, ms in ticks]
        whole_charge = math.fsum(c for _, c in charges)
        if whole_charge > 0:
            inside_ts = {ts for ts, _ in part}
            shares[SPEND_WASTED_KEY] = min(1.0, math.fsum(
                c for ts, c in charges if ts in inside_ts) / whole_charge)
    return shares


def _pruned_minutes(reader: StoreReader, hour: int,
                    kept: Counter[int]) -> dict[int, tuple[int, int]]:
    """The minutes of the hour starting at `hour` (ms) whose raw ticks were removed, by their
    minute rollups (a GPU's or process's count there is the ticks it was read at), from the
    hour's start to its first raw tick left (`kept`: the raw ticks each minute still holds):
    {minute start: (ticks removed, where they end, ms)}. {} for a snapshot (it holds its
    range's ticks and the rollups of the minute before: the hour before it is not its own)."""
    if _has_table(reader, "snapshot"):
        return {}
    minute = MINUTE * 1000
    first = min(kept) if kept else None
    if first is None:  # (the first raw tick left in the hour, or none)
        end = hour + HOUR * 1000
    else:
        found = reader.rows("SELECT min(ts) FROM ticks WHERE ts >= ?", (hour,))[0][0]
        end = found if isinstance(found, int) else first + minute
    out: dict[int, tuple[int, int]] = {}
    for bucket, n in reader.rows(
            "SELECT bucket, max(n) FROM rollups WHERE res = ? AND bucket >= ? AND bucket < ? "
            "AND kind IN (?, ?) GROUP BY bucket", (MINUTE, hour, end, KIND_GPU, KIND_PROCESS)):
        if type(bucket) is int and type(n) is int and n - kept.get(bucket, 0) > 0:
            out[bucket] = (n - kept.get(bucket, 0), min(bucket + minute, end))
    return out


def _pruned_inside(pruned: dict[int, tuple[int, int]], inside: tuple[int, int], hour: int,
                   pruned_ms: float, tick_ms: float) -> float:
    """The part of what the removed ticks charged (`pruned_ms`; `_pruned_minutes`) in `inside`
    (ms): each minute's ticks (`tick_ms` each) spread over the part of it they were in, and
    what they do not hold, charged before the first minute rollup left (minute retention
    removed those), over the hour up to it by the clock (all of the hour's row in a `--since
    1h` whose minutes before it were gone)."""
    lo, hi = inside
    total = sum(n for n, _ in pruned.values())
    if total <= 0 or pruned_ms <= 0:
        return 0.0
    first = min(pruned)
    before = max(0.0, pruned_ms - total * tick_ms) if first > hour else 0.0
    placed = 0.0
    for bucket, (n, end) in pruned.items():
        if end > bucket:
            placed += n * max(0, min(hi, end) - max(lo, bucket)) / (end - bucket)
    in_minutes = (pruned_ms - before) * placed / total
    earlier = before * max(0, min(hi, first) - max(lo, hour)) / (first - hour) if before else 0.0
    return (in_minutes + earlier) / pruned_ms


def _interval_ms(reader: StoreReader) -> float:
    """The interval between ticks the store's daemon ran with (ms; 1 s where it says none)."""
    host = reader.meta("host")
    value = host.get("interval_s") if isinstance(host, dict) else None
    return float(value) * 1000 if isinstance(value, int | float) and not isinstance(
        value, bool) and math.isfinite(value) and value > 0 else 1000.0


def _wasted_parts(reader: StoreReader, first: int, last: int,
                  gpu_waste: GpuWaste) -> dict[int, float]:
    """The part of the host's charge wasted at each tick in [first, last] (ms) that read a
    GPU: its GPUs' `gpu_waste`, each GPU an equal part of the host (a tick that read none is
    absent: its whole charge was wasted)."""
    seen: dict[tuple[Any, Any], float] = {}  # (status, util) -> its waste: few distinct pairs
    sums: dict[int, list[float]] = {}
    for ts, status, util in reader.rows(
            "SELECT ts, status, util FROM gpu_samples WHERE ts >= ? AND ts <= ?", (first, last)):
        part = seen.get((status, util))
        if part is None:  # (a hostile file's text where a number belongs: no reading)
            part = seen[(status, util)] = gpu_waste(
                decode_status(status) if isinstance(status, int | str) else "",
                util / 10 if isinstance(util, int | float) and not isinstance(util, bool)
                else None)
        found = sums.get(ts)
        if found is None:
            sums[ts] = [part, 1.0]
        else:
            found[0] += part
            found[1] += 1.0
    return {ts: total / count for ts, (total, count) in sums.items()}


def process_facts(reader: StoreReader, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """What the store knows of each process id: pid, start_time, user, command, owner (the
    decoded object), first and last seen."""
    wanted = sorted(set(ids))
    out: dict[int, dict[str, Any]] = {}
    for i in range(0, len(wanted), 500):
        chunk = wanted[i:i + 500]
        for r in reader.query(
                "SELECT id, pid, start_ms, ppid, user, command, owner, first_ts, last_ts FROM "
                f"processes WHERE id IN ({','.join('?' * len(chunk))})", chunk):
            out[r["id"]] = {"pid": r["pid"], "start_time": r["start_ms"] / 1000,
                            "ppid": r["ppid"], "user": r["user"], "command": stored_command(r["command"]),
                            "owner": decode_owner(r["owner"]),
                            "first_ts": None if r["first_ts"] is None else r["first_ts"] / 1000,
                            "last_ts": None if r["last_ts"] is None else r["last_ts"] / 1000}
    return out


def meter_readings(reader: StoreReader, since: float, until: float,
                   kinds: tuple[str, ...] | None = None
                   ) -> dict[tuple[str, str], list[tuple[float, float, dict[str, Any]]]]:
    """What the meters read (storage sizes, unit-cost counters, prices, GPUs, starts) in
    [since, until] and the last reading before it: (kind, name) -> [(ts, value, detail)],
    oldest first; only those of `kinds` where given (a month of a storage walk's readings is
    many more rows than its prices). {} for a store written before readings were kept."""
    if not _has_table(reader, "meter_readings"):
        return {}
    lo, hi = round(since * 1000), round(until * 1000)
    wanted = "" if kinds is None else \
        f" AND kind IN ({', '.join(f':k{i}' for i in range(len(kinds)))})"
    rows = reader.query(
        "SELECT kind, name, ts, value, detail FROM meter_readings m WHERE ts <= :hi AND ts >= "
        "coalesce((SELECT max(p.ts) FROM meter_readings p WHERE p.kind = m.kind AND "
        f"p.name = m.name AND p.ts <= :lo), :lo){wanted} ORDER BY ts",
        {"lo": lo, "hi": hi, **{f"k{i}": kind for i, kind in enumerate(kinds or ())}})
    out: dict[tuple[str, str], list[tuple[float, float, dict[str, Any]]]] = {}
    names: dict[tuple[object, object], tuple[str, str]] = {}  # each meter's, redacted once
    for r in rows:
        value = r["value"]
        if not isinstance(value, int | float) or not isinstance(r["ts"], int):
            continue  # a damaged or hostile row (a NaN is stored as NULL): not a reading
        # (its error, a storage walk's folder, a meter's URL: redacted on its way out, as text:
        # a meter's details repeat from reading to reading, and redact_stored_json remembers
        # the short ones; redacting each parsed detail cost 2.5x the parse)
        text = r["detail"]
        try:
            detail = json.loads(redact_stored_json(text) if isinstance(text, str) and text
                                else "{}")
        except (TypeError, ValueError):
            detail = {}
        key = names.get((r["kind"], r["name"]))
        if key is None:
            # (a name that hid something keeps a tag of it: two meters whose names differ
            # only in a secret stay two, their readings apart: redact_name)
            key = names[(r["kind"], r["name"])] = (
                redact_field(str(r["kind"])), redact_name(str(r["name"])))
        out.setdefault(key, []).append(
            (r["ts"] / 1000, float(value), detail if isinstance(detail, dict) else {}))
    return out


def recorded_host(reader: StoreReader) -> dict[str, Any]:
    """The host as the store's daemon recorded it (meta "host": hostname, instance, price,
    the settings replay needs), redacted on its way out ({} where none, or not an object):
    the hostname and the instance's facts came from outside the daemon."""
    host = reader.meta("host")
    return redact_document(host) if isinstance(host, dict) else {}


def snoozes_and_actions(reader: StoreReader, since: float,
                        until: float) -> tuple[dict[str, float], dict[str, list[dict[str, Any]]]]:
    """Each recommendation's snooze (id -> until when) and the actions taken on it in
    [since, until] (id -> the audit trail's entries: daemon.api.audit), dry runs included."""
    snoozed = {r["id"]: r["snoozed_until"] / 1000 for r in reader.query(
        "SELECT id, snoozed_until FROM recommendations WHERE snoozed_until IS NOT NULL AND "
        "last_seen >= ?", (round(since * 1000),))}
    actions: dict[str, list[dict[str, Any]]] = {}
    for event in events(reader, since, until):
        detail = event["detail"]
        if event["kind"] == "action" and isinstance(detail, dict) and detail.get("recommendation"):
            actions.setdefault(str(detail["recommendation"]), []).append(
                dict(detail, at=event["started_at"]))
    return snoozed, actions
def process_kinds(reader: StoreReader, at: float | None = None) -> dict[tuple[int, float], Any]:
    """Each process's workload kind as it was at `at` (None: the latest): (pid, start_time) ->
    the kind document (parsed JSON: a hostile file's value may be anything; read it through
    daemon.analysis.kinds.recorded_kind). From the process_kinds history; a store from before
    the history (or a process without a row there) falls back to the meta "kinds" the daemon
    last wrote, only when `at` is None: at a past tick that was not yet known."""
    found: dict[tuple[int, float], Any] = {}
    table = reader.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                         ("process_kinds",))
    if table:
        bound = "" if at is None else " AND x.ts <= :at"
        rows = reader.query(
            "SELECT p.pid, p.start_ms, k.body FROM process_kinds k JOIN processes p "
            "ON p.id = k.proc WHERE k.ts = (SELECT max(x.ts) FROM process_kinds x "
            f"WHERE x.proc = k.proc{bound})",
            {} if at is None else {"at": round(at * 1000)})
        for r in rows:
            try:
                found[(r["pid"], r["start_ms"] / 1000)] = _stored_json(r["body"])
            except (TypeError, ValueError):
                continue  # a damaged row: no kind, as if none was recorded
    if at is None:
        recorded = redact_document(reader.meta("kinds"))
        for key, doc in (recorded.items() if isinstance(recorded, dict) else ()):
            try:
                found.setdefault(parse_process_key(str(key)), doc)
            except ValueError:
                continue
    return found


GPU_FACTS = ("uuid", "name", "memory_total_bytes", "memory_reserved_bytes")


def gpus_then(readings: Mapping[tuple[str, str], list[tuple[float, float, dict[str, Any]]]],
              at: float) -> dict[int, dict[str, Any]]:
    """Each GPU's facts (of GPU_FACTS) as recorded in force at `at`, by index, from a range's meter
    readings (meter_readings; schema.GPU_READING); a GPU with no reading then is left out (the
    `gpus` table's row is all there is: a store recorded before GPU facts were kept)."""
    found: dict[int, dict[str, Any]] = {}
    for (kind, name), rows in readings.items():
        if kind != GPU_READING or not name.isdigit():
            continue
        before = [detail for ts, _, detail in rows if ts <= at]
        if before:
            found[int(name)] = _gpu_facts(before[-1])
    return found


def _gpu_facts(detail: dict[str, Any]) -> dict[str, Any]:
    """A GPU reading's facts, each of its type (a store is anyone's file): a uuid or name that
    is not a string is left out (the `gpus` row's stands), a memory figure that is not a count
    is None (unknown)."""
    out: dict[str, Any] = {key: detail[key][:200] for key in ("uuid", "name")
                           if isinstance(detail.get(key), str)}
    for key in ("memory_total_bytes", "memory_reserved_bytes"):
        value = detail.get(key)
        out[key] = value if isinstance(value, int) and not isinstance(value, bool) \
            and value >= 0 else None
    return out

