"""Schema, migrations and compact units shared by the store's writer and its readers.

Raw rows hold integers in compact units so that a GPU-sample fits in well under 64 bytes:

    time            integer milliseconds since the epoch (``ts``)
    percentages     tenths of a percent (37.5 % -> 375): utilization, SM activity, SM share,
                    CPU percent in rollups
    power           milliwatts (NVML reports milliwatts)
    seconds         milliseconds (cpu_seconds, iowait_seconds)
    PSI avg10       hundredths of a percent (as /proc/pressure prints them)
    bytes           bytes (exact)

Statuses are stored as a small integer code when known, as the text itself otherwise.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import sqlite_utils

# Rollup resolutions, seconds.
MINUTE = 60
HOUR = 3600

# Rollup kinds and metrics (the long rollup table is keyed by these codes).
KIND_GPU = 0
KIND_PROCESS = 1
# What the live cost ledger charged, per UTC hour (res HOUR): `n` the milliseconds charged,
# `sum` the dollars in micro-dollars; key 0 with the host's SPEND_METRICS, or a process's id
# with SPEND_PROCESS. Written by the daemon (daemon.store.facts.write_spend), so a report of
# any past range reads what /v1/now counted instead of re-deriving it from rolled-up averages
# (which lose each process's share of each GPU).
KIND_SPEND = 2
SPEND_METRICS: dict[str, int] = {"total": 20, "idle": 21, "wasted": 22, "storage": 23}
SPEND_PROCESS = 24
# The host's time in the hour that no tick charged, a recording gap inside a run past the
# ledger's cap (CostLedger.unaccounted_seconds): `n` its milliseconds, `sum` 0. Key 0. Not one
# of SPEND_METRICS (those rows' `n` is the seconds charged); a store written before it has none,
# and its reports say 0 for the hours it recorded.
SPEND_UNACCOUNTED = 25
MICRODOLLARS = 1_000_000

# A GPU's facts (uuid, model, memory) each time they change, as a meter reading of this kind
# named by its index (daemon.store.tick_rows.gpu_reading): the `gpus` table holds the last, and a
# host resized onto other GPUs keeps its store, so a report or replay of a range before the
# change reads the GPUs then (daemon.store.queries.gpus_then).
GPU_READING = "gpu"

# A recommendation's snooze each time one is made or undone, as a meter reading of this kind
# named by the recommendation's id, its value until when (Unix seconds; 0: undone): the
# recommendations row keeps only the last snooze, and a replay hides a recommendation at the
# ticks it was snoozed at, as the live view did (daemon.replay).
SNOOZE_READING = "snooze"

# An event of the store itself: ticks taken but dropped from memory before the store could take
# them (a full disk that outlasted the buffer): its span, and `ticks` and `why` in its detail
# (daemon.store.pending). A report of the range says so.
TICKS_DROPPED = "ticks_dropped"

# An event's detail key: true where the event did not end but the run recording it stopped
# (its `ended_at` is that run's last tick; daemon.store.facts.end_events_left_open).
RECORDING_STOPPED = "recording_stopped"


def ended_by_recording_stop(event: dict[str, Any]) -> bool:
    """Whether an event (as queries.events reads it) was open when its recording stopped."""
    detail = event.get("detail")
    return isinstance(detail, dict) and detail.get(RECORDING_STOPPED) is True

GPU_METRICS: dict[str, int] = {
    "utilization": 0,
    "sm_activity": 1,
    "memory_used_bytes": 2,
    "power_watts": 3,
    "temperature_c": 4,
}
PROCESS_METRICS: dict[str, int] = {
    "sm_share": 10,
    "gpu_memory_bytes": 11,
    "cpu_percent": 12,
    "rss_bytes": 13,
}
# Stored unit -> model unit, per metric name.
METRIC_SCALE: dict[str, float] = {
    "utilization": 0.1,
    "sm_activity": 0.1,
    "memory_used_bytes": 1.0,
    "power_watts": 0.001,
    "temperature_c": 1.0,
    "sm_share": 0.1,
    "gpu_memory_bytes": 1.0,
    "cpu_percent": 0.1,
    "rss_bytes": 1.0,
}
# Column of gpu_samples that holds each GPU metric.
GPU_METRIC_COLUMN: dict[str, str] = {
    "utilization": "util",
    "sm_activity": "sm",
    "memory_used_bytes": "mem",
    "power_watts": "power_mw",
    "temperature_c": "temp",
}

STATUS_CODES: dict[str, int] = {"ok": 0, "lost": 1, "timeout": 2, "error": 3}
STATUS_NAMES: dict[int, str] = {code: name for name, code in STATUS_CODES.items()}


def encode_status(status: str) -> int | str:
    return STATUS_CODES.get(status, status)


def decode_status(value: int | str | None) -> str:
    if isinstance(value, int):
        return STATUS_NAMES.get(value, str(value))
    return value if value is not None else "ok"


def pack_text(text: str) -> bytes:
    """A recommendation text as recommendation_texts keeps it: zlib-compressed JSON. Bodies are
    2-5 kB of JSON; compressed, most fit a page beside others instead of overflowing it."""
    return zlib.compress(text.encode(), 6)


def unpack_text(value: bytes | str) -> str:
    """A recommendation_texts body back as JSON text (a row migrated from `recommendations`
    is the text itself)."""
    return zlib.decompress(value).decode() if isinstance(value, bytes) else value


def tenths(value: float | None) -> int | None:
    return None if value is None else round(value * 10)


def hundredths(value: float | None) -> int | None:
    return None if value is None else round(value * 100)


def millis(value: float | None) -> int | None:
    return None if value is None else round(value * 1000)


def unscale(value: int | None, scale: float) -> float | None:
    return None if value is None else value * scale


def unscale_tenths(value: int | None) -> float | None:
    return None if value is None else value / 10


def unscale_millis(value: int | None) -> float | None:
    return None if value is None else value / 1000


def _create_without_rowid(
    db: sqlite_utils.Database, name: str, columns: dict[str, type], pk: tuple[str, ...]
) -> None:
    """sqlite-utils writes the CREATE TABLE; it has no WITHOUT ROWID option, so we append it."""
    sql = db.create_table_sql(name, columns, pk=pk, not_null=set(pk))
    db.execute(sql.rstrip().rstrip(";") + " WITHOUT ROWID")


def _migration_1(db: sqlite_utils.Database) -> None:
    """The initial schema."""
    db.table("meta").create({"key": str, "value": int}, pk="key")
    db.table("gpus").create({"gpu": int, "uuid": str, "name": str, "memory_total_bytes": int}, pk="gpu")
    db.table("processes").create(
        {
            "id": int,
            "pid": int,
            "start_ms": int,
            "ppid": int,
            "user": str,
            "command": str,
            "first_ts": int,
            "last_ts": int,
        },
        pk="id",
        not_null={"pid", "start_ms"},
    )
    db.table("processes").create_index(["pid", "start_ms"], unique=True)
    db.table("processes").create_index(["last_ts"])
    # ts is the rowid: ticks append at the end of the b-tree.
    db.table("ticks").create(
        {
            "ts": int,
            "tick": int,
            "nvml_status": int,  # INTEGER affinity keeps an unknown status text as text
            "n_gpus": int,
            "n_processes": int,
            "io_some": int,
            "io_full": int,
            "cpu_some": int,
            "io_some_us": int,
            "io_full_us": int,
            "cpu_some_us": int,
        },
        pk="ts",
    )
    _create_without_rowid(
        db,
        "gpu_samples",
        {
            "ts": int,
            "gpu": int,
            "status": int,
            "util": int,
            "sm": int,
            "mem": int,
            "power_mw": int,
            "temp": int,
            "sm_clock": int,
            "mem_clock": int,
            "error": str,
        },
        ("ts", "gpu"),
    )
    _create_without_rowid(
        db,
        "proc_samples",
        {
            "ts": int,
            "proc": int,
            "cpu_ms": int,
            "rss": int,
            "read_b": int,
            "write_b": int,
            "iowait_ms": int,
            "state": str,
            "threads": int,
            "threads_d": int,
        },
        ("ts", "proc"),
    )
    _create_without_rowid(
        db,
        "proc_gpu_samples",
        {"ts": int, "proc": int, "gpu": int, "mem": int, "sm": int},
        ("ts", "proc", "gpu"),
    )
    # Rollups: (res, bucket) first so that rollup inserts and retention deletes are range
    # operations; the series index serves history reads.
    _create_without_rowid(
        db,
        "rollups",
        {
            "res": int,
            "bucket": int,
            "kind": int,
            "key": int,
            "metric": int,
            "n": int,
            "sum": int,
            "min": int,
            "max": int,
        },
        ("res", "bucket", "kind", "key", "metric"),
    )
    db.table("rollups").create_index(
        ["kind", "key", "metric", "res", "bucket"], index_name="rollups_series"
    )


def _migration_2(db: sqlite_utils.Database) -> None:
    """Stacks (deduplicated), stack samples, per-process sampler status, events, recommendations."""
    db.table("stacks").create({"hash": str, "frames": str}, pk="hash")
    _create_without_rowid(
        db,
        "stack_samples",
        {"ts": int, "proc": int, "thread": int, "hash": str, "phase": str, "gpu_util": int},
        ("ts", "proc", "thread"),
    )
    db.table("stack_samples").create_index(["proc", "ts"])
    db.table("stack_status").create(
        {"proc": int, "ts": int, "status": str, "error": str}, pk="proc")
    db.table("events").create(
        {"id": int, "kind": str, "target": str, "started_at": int, "ended_at": int,
         "cost": float, "detail": str},
        pk="id",
    )
    db.table("events").create_index(["kind", "target", "started_at"], unique=True)
    db.table("events").create_index(["started_at"])
    db.table("recommendations").create(
        {"id": str, "rule": str, "target": str, "first_seen": int, "last_seen": int,
         "snoozed_until": int, "savings_per_month": float, "body": str},
        pk="id",
    )


def _migration_3(db: sqlite_utils.Database) -> None:
    """Each stack sample keeps the reason of its phase: the rule or signal that decided it."""
    db.execute("ALTER TABLE stack_samples ADD COLUMN reason TEXT")


def _migration_4(db: sqlite_utils.Database) -> None:
    """Each GPU keeps the memory its driver reserves (NVML v2 memory info), a fact of the GPU
    like its total: NULL where the driver has only v1 (then `mem` includes it)."""
    db.execute("ALTER TABLE gpus ADD COLUMN memory_reserved_bytes INTEGER")


def _migration_owners(db: sqlite_utils.Database) -> None:
    """Each process keeps who owns it (daemon.sources.owners: pod, Slurm job, systemd unit), a
    fact read once like its command: a JSON object, NULL when nothing says."""
    db.execute("ALTER TABLE processes ADD COLUMN owner TEXT")


def _migration_snapshots(db: sqlite_utils.Database) -> None:
    """An event points to the incident snapshot taken for it (the file's path), and the
    snapshot's `trigger` names the event: each can be found from the other."""
    db.execute("ALTER TABLE events ADD COLUMN snapshot TEXT")


def _migration_recommendation_texts(db: sqlite_utils.Database) -> None:
    """Each recommendation's text over time: `recommendations` keeps one row (its latest text),
    so a replay showed the end of the recording's advice at earlier ticks. A row is appended
    when a recommendation's text or savings change (daemon.store.facts), so replay reads the
    text as it was at any tick. A rowid table keyed (id, ts), not WITHOUT ROWID like the samples:
    a body is kilobytes of JSON and SQLite advises WITHOUT ROWID for rows under 1/20 of a page;
    the ts index serves retention. An existing store's current text counts from its last_seen,
    the one time it is known to have been current: earlier ticks fall back to it, labelled."""
    db.table("recommendation_texts").create(
        {"id": str, "ts": int, "savings_per_month": float, "body": str},
        pk=("id", "ts"), not_null={"id", "ts"})
    db.table("recommendation_texts").create_index(["ts"], index_name="recommendation_texts_ts")
    db.execute("INSERT INTO recommendation_texts (id, ts, savings_per_month, body) "
               "SELECT id, last_seen, savings_per_month, body FROM recommendations "
               "WHERE last_seen IS NOT NULL")


def _migration_process_kinds(db: sqlite_utils.Database) -> None:
    """Each process's workload kind over time (daemon.analysis.kinds): the meta "kinds" holds
    only the last classification, so a replay or a snapshot showed the end of the recording's
    kinds at earlier ticks. A row is appended when a process's kind changes (or, for its
    confidence and evidence alone, at most every few minutes: daemon.store.facts), so replay
    reads the kind as it was at any tick. `body` is the kind's JSON document (kind,
    kind_confidence, kind_evidence, serves, listening_ports, kind_source); `kind` is its kind
    alone, for queries. Keyed (proc, ts) like recommendation_texts; the ts index serves
    retention."""
    db.table("process_kinds").create(
        {"proc": int, "ts": int, "kind": str, "body": str},
        pk=("proc", "ts"), not_null={"proc", "ts"})
    db.table("process_kinds").create_index(["ts"], index_name="process_kinds_ts")


def _migration_meter_readings(db: sqlite_utils.Database) -> None:
    """What the meters beside the burn read, over time, so a report of a past range prices it
    as the live view did: each storage path's size (`kind` 'storage', `value` bytes) and each
    unit-cost counter (`kind` 'unit', `value` the count); `detail` the setting as JSON (price
    per GB-month; the meter's target, unit and per). Later kinds use the same table: 'latency'
    (a [[cost.latency]] histogram: `value` its requests, `detail` the setting and the cumulative
    buckets, daemon.analysis.latency.reading)."""
    _create_without_rowid(
        db, "meter_readings",
        {"kind": str, "name": str, "ts": int, "value": float, "detail": str},
        ("kind", "name", "ts"))
    db.table("meter_readings").create_index(["ts"], index_name="meter_readings_ts")


def _migration_covering_series(db: sqlite_utils.Database) -> None:
    """The series index carries each rollup's values (n, sum, min, max): a history or the
    report's timeline reads its rows from the index alone, instead of looking each one up in
    the table (a day of minute rollups is 1 440 lookups per GPU and metric; issue 23). Same
    name, so `INDEXED BY rollups_series` reads a store of any version. Rebuilt once, when a
    daemon first opens the store (seconds for a month of rollups)."""
    db.execute("DROP INDEX IF EXISTS rollups_series")
    db.table("rollups").create_index(
        ["kind", "key", "metric", "res", "bucket", "n", "sum", "min", "max"],
        index_name="rollups_series")


# Applied in order; schema_version (PRAGMA user_version) is the number applied.
def _migration_event_raised(db: sqlite_utils.Database) -> None:
    """Each event keeps when it was raised: an idle event's start is the start of the idle
    period, minutes before the daemon raised it, and a replay showed it from there. NULL for
    events written before (their start stands in)."""
    if "raised_at" not in db["events"].columns_dict:  # (a store whose version was set back)
        db.execute("ALTER TABLE events ADD COLUMN raised_at INTEGER")


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _migration_1, _migration_2, _migration_3, _migration_4, _migration_owners,
    _migration_snapshots, _migration_recommendation_texts, _migration_process_kinds,
    _migration_meter_readings, _migration_covering_series, _migration_event_raised]
SCHEMA_VERSION = len(MIGRATIONS)
