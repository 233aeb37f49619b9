"""Writes of the attribution and cost facts: stacks, stack samples, sampler status, events and
recommendations, through the Store's one connection, between ticks.

None of these raises to its caller (the tick, the sampler, the rules): each write goes through
`Store.write_facts`, which waits (keyed, bounded) when the store cannot be written now (a full
disk) and writes after the buffered ticks; the condition is in `Store.health`.

The reads are in `daemon.store.queries` (reader only, no writer).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.store.queries import SPEND_THROUGH
from daemon.store.schema import (
    HOUR,
    KIND_SPEND,
    MICRODOLLARS,
    RECORDING_STOPPED,
    SPEND_METRICS,
    SPEND_PROCESS,
    SPEND_UNACCOUNTED,
    pack_text,
)

if TYPE_CHECKING:  # readers (replay) import this module without loading the writer
    from daemon.store.pending import FactWrite
    from daemon.store.writer import Store


@dataclass(frozen=True, slots=True)
class StackRow:
    """One classified stack of one thread of one process at one moment."""

    ts: float
    pid: int
    start_time: float
    thread_id: int
    stack_hash: str
    frames: tuple[tuple[str, str, int], ...]  # (function, file, line), innermost first
    phase: str
    gpu_util: float | None  # the process's SM share (%) when sampled
    reason: str | None = None  # why the classifier chose the phase (rule or signal)


def write_stacks(store: Store, rows: Iterable[StackRow]) -> int:
    """Store stack samples, each distinct stack once. Returns how many were handed to the store
    (written now, or waiting for the disk)."""
    rows = list(rows)
    if not rows:
        return 0
    with store._lock:
        writes: list[FactWrite] = []
        for row in rows:
            proc = _process_id(store, row.pid, row.start_time)
            if proc is None:
                continue
            ts = round(row.ts * 1000)
            writes.append((("stack", row.stack_hash),
                           "INSERT OR IGNORE INTO stacks (hash, frames) VALUES (?, ?)",
                           (row.stack_hash, json.dumps(row.frames))))
            writes.append((
                ("stack_sample", ts, proc, row.thread_id),
                "INSERT OR REPLACE INTO stack_samples (ts, proc, thread, hash, phase, "
                "gpu_util, reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ts, proc, row.thread_id, row.stack_hash, row.phase,
                 None if row.gpu_util is None else round(row.gpu_util * 10), row.reason)))
        store.write_facts(writes)
    return len(rows)


def write_stack_status(store: Store, pid: int, start_time: float, ts: float, status: str,
                       error: str | None) -> None:
    with store._lock:
        proc = _process_id(store, pid, start_time)
        if proc is None:
            return
        store.write_facts([(
            ("stack_status", proc),
            "INSERT OR REPLACE INTO stack_status (proc, ts, status, error) VALUES (?, ?, ?, ?)",
            (proc, round(ts * 1000), status, error))])


def write_event(store: Store, event: dict[str, Any], raised_at: float | None = None) -> None:
    """Insert or update an event keyed by (kind, target, started_at). `raised_at`: when it was
    raised (the tick that opened it), kept from its first write; else its start."""
    with store._lock:
        store.write_facts([event_write(event, raised_at)])


def event_write(event: dict[str, Any], raised_at: float | None = None
                ) -> tuple[tuple[Any, ...], str, tuple[Any, ...]]:
    """The fact write of `write_event` (its key, SQL and parameters), for the writer itself
    under its lock (the ticks it had to drop: daemon.store.pending)."""
    started = round(event["started_at"] * 1000)
    raised = started if raised_at is None else max(started, round(raised_at * 1000))
    return (("event", event["kind"], event["target"], started),
            "INSERT INTO events (kind, target, started_at, ended_at, cost, detail, raised_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kind, target, started_at) DO UPDATE SET "
            "ended_at = excluded.ended_at, cost = excluded.cost, detail = excluded.detail",
            (event["kind"], event["target"], started,
             None if event.get("ended_at") is None else round(event["ended_at"] * 1000),
             event.get("cost_so_far"), json.dumps(event.get("detail") or {}), raised))


def end_events_left_open(store: Store, kinds: Iterable[str], gap_s: float) -> None:
    """At a daemon's start, end the events of `kinds` that a run before it left open (it
    stopped, or crashed, while a GPU sat idle): each ends at that run's last tick (the first
    tick after its start that no tick follows within `gap_s`; where retention removed those
    ticks, where the recorded spend reaches, else its start), its detail marked
    `"recording_stopped": true`, so no report calls it ongoing for as long as the recording
    was down, and no later run carries it on."""
    kinds = sorted(kinds)
    with store._lock:
        store.write_facts([(
            ("events_left_open",),
            "UPDATE events SET ended_at = coalesce((SELECT min(t.ts) FROM ticks t "
            "WHERE t.ts >= events.started_at AND NOT EXISTS (SELECT 1 FROM ticks u "
            "WHERE u.ts > t.ts AND u.ts <= t.ts + ?1) AND EXISTS (SELECT 1 FROM ticks v "
            "WHERE v.ts >= events.started_at AND v.ts <= events.started_at + ?1)), "
            "(SELECT CAST(value * 1000 AS INTEGER) "
            "FROM meta WHERE key = ?2 AND typeof(value) IN ('integer', 'real') "
            "AND value * 1000 >= events.started_at), started_at), "
            "detail = json_set(CASE WHEN json_valid(detail) AND json_type(detail) = 'object' "
            f"THEN detail ELSE '{{}}' END, '$.{RECORDING_STOPPED}', json('true')) "
            "WHERE ended_at IS NULL AND kind IN (SELECT value FROM json_each(?3))",
            (round(gap_s * 1000), f"json:{SPEND_THROUGH}", json.dumps(kinds)))])


def write_event_snapshot(store: Store, kind: str, target: str, started_at: float,
                         path: str) -> None:
    """Point an event (kind, target, started_at) to the incident snapshot taken for it."""
    with store._lock:
        store.write_facts([(
            ("event_snapshot", kind, target, round(started_at * 1000)),
            "UPDATE events SET snapshot = ? WHERE kind = ? AND target = ? AND started_at = ?",
            (path, kind, target, round(started_at * 1000)))])


# What the store keeps beside a recommendation's text, not in it: a change of these alone
# (every round moves last_seen and the evidence time on) appends no history row. The evidence
# time a replay shows is advanced from the row's to the tick (daemon.replay).
_NOT_TEXT = frozenset({"first_seen", "last_seen", "snoozed_until", "evidence_seconds"})
_TEXTS_REMEMBERED = 4096  # recommendation ids whose last written text the writer remembers
# What a person reads first: a change here is kept at once. Any other change (the evidence's
# figures, the savings' cents, which move every round) is kept at most every 5 minutes, so
# the history grows by a row per headline change (or 5 min), not a row a round (2.5 kB).
_HEADLINE = ("summary", "action")
TEXT_EVERY_S = 300.0


def text_digest(rec: dict[str, Any]) -> bytes:
    """A recommendation's text (its body less the bookkeeping in _NOT_TEXT), as a digest."""
    text = json.dumps({k: v for k, v in rec.items() if k not in _NOT_TEXT}, sort_keys=True,
                      default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def headline_digest(rec: dict[str, Any]) -> bytes:
    """What a person reads first of a recommendation (_HEADLINE), as a digest."""
    text = json.dumps([rec.get(k) for k in _HEADLINE], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _ms(seconds: Any, default: int) -> int:
    """A time in seconds as the store's milliseconds; `default` where it is none (or 0: a
    book that evaluated no sample)."""
    return round(seconds * 1000) if isinstance(seconds, int | float) and seconds > 0 \
        else default


def write_recommendations(store: Store, recommendations: Iterable[dict[str, Any]],
                          ts: float) -> None:
    """Upsert the current recommendations (first_seen kept, last_seen moved on), and append to
    recommendation_texts the text of each one whose text changed since the last written.
    Its times are those of the samples it was evaluated on (the book's first_seen and
    last_seen), `ts` (the round's start) where it has none: /v1/now showed it with that tick,
    so a replay of that tick does too."""
    at = round(ts * 1000)
    with store._lock:
        # id -> (text digest, headline digest, its time) of the text last handed to the store
        written = store._texts_written
        writes: list[FactWrite] = []
        for rec in recommendations:
            body = json.dumps(rec, default=str)
            text_at = _ms(rec.get("last_seen"), at)
            writes.append((
                ("recommendation", rec["id"]),
                "INSERT INTO recommendations (id, rule, target, first_seen, last_seen, "
                "snoozed_until, savings_per_month, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, "
                "snoozed_until = excluded.snoozed_until, "
                "savings_per_month = excluded.savings_per_month, body = excluded.body",
                (rec["id"], rec["rule"], rec["target"],
                 min(_ms(rec.get("first_seen"), text_at), text_at), text_at,
                 None if not rec.get("snoozed_until") else round(rec["snoozed_until"] * 1000),
                 rec.get("savings_per_month"), body)))
            digest, headline = text_digest(rec), headline_digest(rec)
            last = written.get(rec["id"])
            if last is not None:
                written.move_to_end(rec["id"])
                if last[0] == digest or (
                        last[1] == headline and text_at - last[2] < TEXT_EVERY_S * 1000):
                    continue  # the same text, or only its figures moved, within TEXT_EVERY_S
            written[rec["id"]] = (digest, headline, text_at)
            written.move_to_end(rec["id"])
            while len(written) > _TEXTS_REMEMBERED:
                written.popitem(last=False)  # forgotten: its next round writes its text again
            writes.append((
                ("recommendation_text", rec["id"], text_at),
                "INSERT OR REPLACE INTO recommendation_texts (id, ts, savings_per_month, body) "
                "VALUES (?, ?, ?, ?)", (rec["id"], text_at, rec.get("savings_per_month"),
                                        pack_text(body))))
        store.write_facts(writes)


# A kind's row in process_kinds: at once when what a person acts on changes (its kind, whether
# it serves, where the kind came from); its confidence and evidence alone (counts move with
# every socket read) at most every KIND_EVERY_S.
_KIND_HEADLINE = ("kind", "serves", "kind_source")
KIND_EVERY_S = 300.0


def write_process_kinds(store: Store, kinds: dict[tuple[int, float], dict[str, Any]],
                        ts: float) -> int:
    """Append to process_kinds the kind of each process (pid, start_time) -> kind document
    whose kind changed since the row last written for it (see _KIND_HEADLINE, KIND_EVERY_S).
    Returns how many rows were handed to the store."""
    at = round(ts * 1000)
    with store._lock:
        written = store._kinds_written  # (pid, start_ms) -> (document, headline, its time)
        writes: list[FactWrite] = []
        for (pid, start), doc in kinds.items():
            key = (pid, round(start * 1000))
            headline = tuple(doc.get(k) for k in _KIND_HEADLINE)
            last = written.get(key)
            if last is not None and (last[0] == doc or (
                    last[1] == headline and at - last[2] < KIND_EVERY_S * 1000)):
                continue
            proc = _process_id(store, pid, start)
            if proc is None:
                continue  # not recorded yet: its next round writes it
            written[key] = (doc, headline, at)
            writes.append((("process_kind", proc, at),
                           "INSERT OR REPLACE INTO process_kinds (proc, ts, kind, body) "
                           "VALUES (?, ?, ?, ?)",
                           (proc, at, doc.get("kind"), json.dumps(doc, sort_keys=True))))
        live = {(pid, round(start * 1000)) for pid, start in kinds}
        for key in [k for k in written if k not in live]:
            del written[key]  # gone: bounded by the live processes
        store.write_facts(writes)
    return len(writes)


def _process_id(store: Store, pid: int, start_time: float) -> int | None:
    start_ms = round(start_time * 1000)
    ident = store._processes.get((pid, start_ms))
    if ident is not None:
        return ident
    try:
        row = store._conn.execute("SELECT id FROM processes WHERE pid = ? AND start_ms = ?",
                                  (pid, start_ms)).fetchone()
    except sqlite3.Error:  # cannot read now: the fact is dropped like one of an unknown process
        return None
    return row[0] if row else None


def write_spend(store: Store, hosts: dict[int, list[float]],
                processes: dict[tuple[int, tuple[int, float]], list[float]]) -> None:
    """Add what the cost ledger charged to the hour spend rows (schema.KIND_SPEND): `hosts`
    hour -> [seconds, total, idle, wasted, storage, unaccounted seconds (optional)],
    `processes` (hour, (pid, start_time)) -> [seconds, dollars]; hours are UTC hour starts in
    Unix seconds. Added to what is there, so each round writes only its own share. An hour
    that only a recording gap's uncharged time reached gets its SPEND_UNACCOUNTED row alone."""
    upsert = ("INSERT INTO rollups (res, bucket, kind, key, metric, n, sum, min, max) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0) ON CONFLICT (res, bucket, kind, key, metric) "
              "DO UPDATE SET n = n + excluded.n, sum = sum + excluded.sum")
    with store._lock:
        store._spend_writes += 1
        round_id = store._spend_writes  # additive rows: a waiting write is never replaced
        writes: list[FactWrite] = []
        for hour, (seconds, *rest) in hosts.items():
            dollars, unaccounted = rest[:len(SPEND_METRICS)], rest[len(SPEND_METRICS):]
            if seconds > 0 or any(dollars):
                for (name, metric), amount in zip(SPEND_METRICS.items(), dollars, strict=True):
                    writes.append((("spend", round_id, hour, 0, name), upsert, (
                        HOUR, hour * 1000, KIND_SPEND, 0, metric, round(seconds * 1000),
                        round(amount * MICRODOLLARS))))
            if unaccounted and round(unaccounted[0] * 1000) > 0:
                writes.append((("spend", round_id, hour, 0, "unaccounted"), upsert, (
                    HOUR, hour * 1000, KIND_SPEND, 0, SPEND_UNACCOUNTED,
                    round(unaccounted[0] * 1000), 0)))
        for (hour, (pid, start_time)), (seconds, amount) in processes.items():
            proc = _process_id(store, pid, start_time)
            if proc is None:
                continue
            writes.append((("spend", round_id, hour, proc), upsert, (
                HOUR, hour * 1000, KIND_SPEND, proc, SPEND_PROCESS, round(seconds * 1000),
                round(amount * MICRODOLLARS))))
        if writes:
            store.write_facts(writes)


def write_meter_readings(store: Store, ts: float,
                         readings: Iterable[tuple[str, str, float, dict[str, Any]]]) -> None:
    """Record what the meters read at `ts`: (kind 'storage', 'unit' or 'latency', name, value,
    detail)."""
    at = round(ts * 1000)
    with store._lock:
        store.write_facts([
            (("meter", kind, name, at),
             "INSERT OR REPLACE INTO meter_readings (kind, name, ts, value, detail) "
             "VALUES (?, ?, ?, ?, ?)", (kind, name, at, value, json.dumps(detail, sort_keys=True)))
            for kind, name, value, detail in readings])


def last_meter_reading(store: Store, kind: str, name: str) -> dict[str, Any] | None:
    """The detail of the latest reading of one meter the store holds (None: none, or the store
    cannot be read now, or its detail is not a JSON object)."""
    with store._lock:
        try:
            row = store._conn.execute(
                "SELECT detail FROM meter_readings WHERE kind = ? AND name = ? "
                "ORDER BY ts DESC LIMIT 1", (kind, name)).fetchone()
        except sqlite3.Error:
            return None
    try:
        detail = json.loads(row[0]) if row and row[0] else None
    except ValueError:
        return None
    return detail if isinstance(detail, dict) else None

