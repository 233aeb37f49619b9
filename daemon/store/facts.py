"""Attribution and cost facts in the store: stacks, stack samples, sampler status, events and
recommendations. Written by the daemon between ticks through the Store's one connection."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.store.reader import StoreReader

if TYPE_CHECKING:  # readers (replay) import this module without loading the writer
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


def write_stacks(store: Store, rows: Iterable[StackRow]) -> int:
    """Store stack samples, each distinct stack once. Returns how many were written."""
    rows = list(rows)
    if not rows:
        return 0
    with store._lock:
        conn = store.conn
        with store.db.atomic():
            for row in rows:
                proc = _process_id(store, row.pid, row.start_time)
                if proc is None:
                    continue
                conn.execute("INSERT OR IGNORE INTO stacks (hash, frames) VALUES (?, ?)",
                             (row.stack_hash, json.dumps(row.frames)))
                conn.execute(
                    "INSERT OR REPLACE INTO stack_samples (ts, proc, thread, hash, phase, "
                    "gpu_util) VALUES (?, ?, ?, ?, ?, ?)",
                    (round(row.ts * 1000), proc, row.thread_id, row.stack_hash, row.phase,
                     None if row.gpu_util is None else round(row.gpu_util * 10)))
    return len(rows)


def write_stack_status(store: Store, pid: int, start_time: float, ts: float, status: str,
                       error: str | None) -> None:
    with store._lock:
        proc = _process_id(store, pid, start_time)
        if proc is None:
            return
        store.conn.execute(
            "INSERT OR REPLACE INTO stack_status (proc, ts, status, error) VALUES (?, ?, ?, ?)",
            (proc, round(ts * 1000), status, error))


def write_event(store: Store, event: dict[str, Any]) -> None:
    """Insert or update an event keyed by (kind, target, started_at)."""
    with store._lock:
        store.conn.execute(
            "INSERT INTO events (kind, target, started_at, ended_at, cost, detail) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, target, started_at) DO UPDATE SET "
            "ended_at = excluded.ended_at, cost = excluded.cost, detail = excluded.detail",
            (event["kind"], event["target"], round(event["started_at"] * 1000),
             None if event.get("ended_at") is None else round(event["ended_at"] * 1000),
             event.get("cost_so_far"), json.dumps(event.get("detail") or {})))


def write_recommendations(store: Store, recommendations: Iterable[dict[str, Any]],
                          ts: float) -> None:
    """Upsert the current recommendations (first_seen kept, last_seen moved on)."""
    with store._lock, store.db.atomic():
        for rec in recommendations:
            store.conn.execute(
                "INSERT INTO recommendations (id, rule, target, first_seen, last_seen, "
                "snoozed_until, savings_per_month, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, "
                "snoozed_until = excluded.snoozed_until, "
                "savings_per_month = excluded.savings_per_month, body = excluded.body",
                (rec["id"], rec["rule"], rec["target"], round(ts * 1000), round(ts * 1000),
                 None if not rec.get("snoozed_until") else round(rec["snoozed_until"] * 1000),
                 rec.get("savings_per_month"), json.dumps(rec, default=str)))


def _process_id(store: Store, pid: int, start_time: float) -> int | None:
    start_ms = round(start_time * 1000)
    ident = store._processes.get((pid, start_ms))
    if ident is not None:
        return ident
    row = store.conn.execute("SELECT id FROM processes WHERE pid = ? AND start_ms = ?",
                             (pid, start_ms)).fetchone()
    return row[0] if row else None


# -- reads ------------------------------------------------------------------------------


def stack_samples(reader: StoreReader, since: float, until: float) -> list[dict[str, Any]]:
    """Stack samples in [since, until] with their process and frames, oldest first."""
    rows = reader.query(
        "SELECT s.ts, p.pid, p.start_ms, s.thread, s.hash, s.phase, s.gpu_util, k.frames "
        "FROM stack_samples s JOIN processes p ON p.id = s.proc JOIN stacks k ON k.hash = s.hash "
        "WHERE s.ts >= ? AND s.ts <= ? ORDER BY s.ts",
        (round(since * 1000), round(until * 1000)))
    return [{"ts": r["ts"] / 1000, "pid": r["pid"], "start_time": r["start_ms"] / 1000,
             "thread": r["thread"], "hash": r["hash"], "phase": r["phase"],
             "gpu_util": None if r["gpu_util"] is None else r["gpu_util"] / 10,
             "frames": [tuple(f) for f in json.loads(r["frames"])]} for r in rows]


def stack_statuses(reader: StoreReader) -> dict[tuple[int, float], dict[str, Any]]:
    rows = reader.query(
        "SELECT p.pid, p.start_ms, s.ts, s.status, s.error FROM stack_status s "
        "JOIN processes p ON p.id = s.proc")
    return {(r["pid"], r["start_ms"] / 1000): {"status": r["status"], "error": r["error"],
                                               "ts": r["ts"] / 1000} for r in rows}


def events(reader: StoreReader, since: float, until: float) -> list[dict[str, Any]]:
    """Events that overlap [since, until] (open ones included)."""
    rows = reader.query(
        "SELECT kind, target, started_at, ended_at, cost, detail FROM events "
        "WHERE started_at <= ? AND (ended_at IS NULL OR ended_at >= ?) ORDER BY started_at",
        (round(until * 1000), round(since * 1000)))
    return [{"kind": r["kind"], "target": r["target"], "started_at": r["started_at"] / 1000,
             "ended_at": None if r["ended_at"] is None else r["ended_at"] / 1000,
             "cost_so_far": r["cost"], "detail": json.loads(r["detail"] or "{}")} for r in rows]


def recommendations(reader: StoreReader, since: float) -> list[dict[str, Any]]:
    """Recommendations seen since `since`, largest savings first, with their history."""
    rows = reader.query(
        "SELECT first_seen, last_seen, snoozed_until, body FROM recommendations "
        "WHERE last_seen >= ? ORDER BY savings_per_month DESC", (round(since * 1000),))
    out = []
    for r in rows:
        body = json.loads(r["body"])
        body["first_seen"] = r["first_seen"] / 1000
        body["last_seen"] = r["last_seen"] / 1000
        body["snoozed_until"] = None if r["snoozed_until"] is None else r["snoozed_until"] / 1000
        out.append(body)
    return out
