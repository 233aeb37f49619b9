"""The recorder: every tick's Sample into SQLite, rollups, retention, recovery.

One writer (`Store`), one transaction per tick. Readers (`Store.reader`, see
`daemon.store.reader`) use their own read-only connections with a deadline.

Failure policy: `write()` and `maintain()` never raise. A tick that cannot be committed
(disk full, database locked, I/O error) waits in a bounded in-memory buffer and is retried on
the next call; beyond the bound the oldest samples are dropped. Everything is counted in
`Store.health`. A file that is not a database, or fails `PRAGMA quick_check` at open, is moved
aside to `<path>.corrupt-<timestamp>` and a fresh store is created.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import sqlite_utils

from daemon.sources.sample import Sample
from daemon.store.reader import ReaderTimeout, StoreReader
from daemon.store.schema import (
    HOUR,
    KIND_GPU,
    KIND_PROCESS,
    MIGRATIONS,
    MINUTE,
    PROCESS_METRICS,
    SCHEMA_VERSION,
    STATUS_CODES,
    encode_status,
    hundredths,
    millis,
    tenths,
)

__all__ = ["ReaderTimeout", "Store", "StoreError", "StoreHealth", "StoreReader"]

# Primary SQLite result codes (extended code & 0xff).
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
# Errors that say "not now" rather than "never": keep the sample and retry.
_TRANSIENT = {
    5,  # BUSY
    6,  # LOCKED
    8,  # READONLY (e.g. remounted read-only)
    10,  # IOERR
    13,  # FULL
    14,  # CANTOPEN
    15,  # PROTOCOL
}
_SQLITE_FULL = 13

_RAW_BATCH_TICKS = 30  # ticks deleted per retention batch (x GPUs x processes rows)
_MINUTE_BATCH_MS = 10 * MINUTE * 1000
_HOUR_BATCH_MS = 24 * HOUR * 1000
_VACUUM_PAGES = 2048
_CPU_LOOKBACK_MS = 30 * 1000  # a cpu_percent pair needs its previous sample this close
_CHECKPOINT_EVERY_S = 10.0
_CHECKPOINT_EVERY_TICKS = 30  # or sooner when ticks come fast (backfill, tests)
_LAST_SEEN_EVERY_S = 60.0


class StoreError(Exception):
    """The store cannot be opened (permission, newer schema, ...). Says what to do."""


@dataclass
class StoreHealth:
    """What happened to the store since it was opened; reported by `mlcostd check` and /v1/health."""

    path: str
    schema_version: int = 0
    corrupt_moved_aside: str | None = None
    ticks_written: int = 0
    writes_failed: int = 0  # write attempts (transactions) that failed
    samples_buffered: int = 0  # waiting in memory now
    samples_dropped: int = 0  # lost: buffer overflow or a sample SQLite rejected
    last_error: str | None = None
    rows_pruned: int = 0
    bytes_on_disk: int = 0  # database + WAL

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _error_code(error: BaseException) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _is_corruption(error: sqlite3.DatabaseError) -> bool:
    code = _error_code(error)
    if code is not None:
        return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(error)
    return "not a database" in text or "malformed" in text


class Store:
    """The single writer of one SQLite store file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        raw_retention_s: float = 6 * 3600,
        minute_retention_s: float = 8 * 86400,
        hour_retention_s: float = 400 * 86400,
        max_bytes: int = 1 << 30,
        buffer_limit: int = 600,
        busy_timeout_ms: int = 50,
        flush_chunk: int = 60,
    ) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.raw_retention_ms = int(raw_retention_s * 1000)
        self.minute_retention_ms = int(minute_retention_s * 1000)
        self.hour_retention_ms = int(hour_retention_s * 1000)
        self.max_bytes = max_bytes
        self.buffer_limit = buffer_limit
        self.busy_timeout_ms = busy_timeout_ms
        self.flush_chunk = flush_chunk
        self._health = StoreHealth(path=self.path)
        self._lock = threading.Lock()
        self._buffer: deque[tuple[int, Sample]] = deque()
        self._last_assigned_ts = 0
        self._last_checkpoint = time.monotonic()
        self._ticks_at_checkpoint = 0
        self._last_seen_flushed = time.monotonic()
        self._last_seen: dict[int, int] = {}  # process id -> ts, not yet in processes.last_ts
        self.db = self._open()
        self.conn = self.db.conn
        self._load_state()

    # ----------------------------------------------------------------------------- open

    def _connect(self) -> sqlite_utils.Database:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            check_same_thread=False,  # the daemon may call from an executor; _lock serializes
            timeout=self.busy_timeout_ms / 1000,
        )
        return sqlite_utils.Database(conn, execute_plugins=False)

    def _open(self) -> sqlite_utils.Database:
        db = self._connect()
        try:
            result = db.conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            if result != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {result}")
            self._configure(db)
            return db
        except sqlite3.DatabaseError as error:
            db.conn.close()
            if not (_is_corruption(error) or str(error).startswith("quick_check")):
                raise StoreError(
                    f"cannot open the store {self.path}: {error}; check the path, its "
                    "permissions and that no other mlcostd uses it"
                ) from error
            self._move_aside(error)
        db = self._connect()
        self._configure(db)
        return db

    def _move_aside(self, error: BaseException) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = f"{self.path}.corrupt-{stamp}"
        n = 1
        while os.path.exists(aside):
            n += 1
            aside = f"{self.path}.corrupt-{stamp}-{n}"
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, aside + suffix)
        self._health.corrupt_moved_aside = aside
        self._health.last_error = f"corrupt store moved aside to {aside}: {error}"

    def _configure(self, db: sqlite_utils.Database) -> None:
        conn = db.conn
        fresh = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
        if fresh:
            # Must precede the first table; lets size retention give pages back to the OS.
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
        conn.execute(f"PRAGMA journal_size_limit={16 << 20}")
        # maintain() checkpoints between ticks; this is only the safety net.
        conn.execute("PRAGMA wal_autocheckpoint=8000")
        conn.execute("PRAGMA cache_size=-16000")
        conn.execute("PRAGMA temp_store=MEMORY")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the store {self.path} has schema version {version}, newer than this "
                f"mlcostd knows ({SCHEMA_VERSION}); upgrade mlcostd or point --db elsewhere"
            )
        for number in range(version, SCHEMA_VERSION):
            with db.atomic():
                MIGRATIONS[number](db)
                conn.execute(f"PRAGMA user_version={number + 1}")
        self._health.schema_version = SCHEMA_VERSION

    def _load_state(self) -> None:
        conn = self.conn
        self._gpus: dict[int, tuple[str, str, int | None]] = {
            row[0]: (row[1], row[2], row[3])
            for row in conn.execute("SELECT gpu, uuid, name, memory_total_bytes FROM gpus")
        }
        self._processes: dict[tuple[int, int], int] = {
            (pid, start_ms): ident
            for ident, pid, start_ms in conn.execute("SELECT id, pid, start_ms FROM processes")
        }
        last = conn.execute("SELECT tick FROM ticks ORDER BY ts DESC LIMIT 1").fetchone()
        self.last_tick = int(last[0]) if last else 0  # the daemon numbers on from here
        newest = conn.execute("SELECT max(ts) FROM ticks").fetchone()[0]
        self._newest_ts = newest or 0
        self._last_assigned_ts = self._newest_ts
        self._minute_done = self._meta("minute_done")
        self._hour_done = self._meta("hour_done")

    def _meta(self, key: str) -> int:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def _set_meta(self, key: str, value: int) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def set_meta(self, key: str, value: object) -> None:
        """Record a fact about this store (e.g. the host it describes) as JSON."""
        with self._lock:
            self.conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                (f"json:{key}", json.dumps(value, sort_keys=True)))

    # ---------------------------------------------------------------------------- write

    def write(self, sample: Sample) -> bool:
        """Record one tick in one transaction. Never raises.

        Returns True when this sample (and everything buffered before it) is committed,
        False when it waits in the buffer (see `health`).
        """
        with self._lock:
            ts = round(sample.ts * 1000)
            if ts <= self._last_assigned_ts:
                ts = self._last_assigned_ts + 1  # ts is a primary key: keep it increasing
            self._last_assigned_ts = ts
            self._buffer.append((ts, sample))
            self._flush()
            self._trim_buffer()
            return not self._buffer

    def _trim_buffer(self) -> None:
        while len(self._buffer) > self.buffer_limit:
            self._buffer.popleft()
            self._health.samples_dropped += 1
        self._health.samples_buffered = len(self._buffer)

    def _flush(self) -> None:
        """Commit buffered samples oldest first, at most `flush_chunk` of them per call."""
        budget = self.flush_chunk
        one_by_one = False
        while self._buffer and budget > 0:
            count = 1 if one_by_one else min(len(self._buffer), budget)
            batch = list(itertools.islice(self._buffer, count))
            try:
                self._commit(batch)
            except Exception as error:  # never raise to the tick
                self._health.writes_failed += 1
                self._health.last_error = f"write failed: {error}"
                code = _error_code(error)
                if code in _TRANSIENT:
                    if code == _SQLITE_FULL:
                        self._prune_for_space()
                    return
                if count > 1:
                    one_by_one = True  # find the sample SQLite rejects, write the others
                    continue
                self._buffer.popleft()  # this sample can never be written
                self._health.samples_dropped += 1
                budget -= 1
                continue
            for _ in batch:
                self._buffer.popleft()
            self._health.ticks_written += count
            budget -= count

    def _commit(self, batch: list[tuple[int, Sample]]) -> None:
        conn = self.conn
        new_processes: dict[tuple[int, int], int] = {}
        new_gpus: dict[int, tuple[str, str, int | None]] = {}
        seen: dict[int, int] = {}
        conn.execute("BEGIN IMMEDIATE")
        try:
            for ts, sample in batch:
                self._insert(ts, sample, new_processes, new_gpus, seen)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise
        # Only now are the new rows' ids real.
        self._processes.update(new_processes)
        self._gpus.update(new_gpus)
        self._last_seen.update(seen)
        self._newest_ts = max(self._newest_ts, batch[-1][0])

    def _insert(
        self,
        ts: int,
        sample: Sample,
        new_processes: dict[tuple[int, int], int],
        new_gpus: dict[int, tuple[str, str, int | None]],
        seen: dict[int, int],
    ) -> None:
        conn = self.conn
        host = sample.host
        conn.execute(
            "INSERT INTO ticks (ts, tick, nvml_status, n_gpus, n_processes, io_some, io_full,"
            " cpu_some, io_some_us, io_full_us, cpu_some_us) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                ts,
                sample.tick,
                encode_status(sample.nvml_status),
                len(sample.gpus),
                len(sample.processes),
                hundredths(host.io_some_avg10),
                hundredths(host.io_full_avg10),
                hundredths(host.cpu_some_avg10),
                host.io_some_total_us,
                host.io_full_total_us,
                host.cpu_some_total_us,
            ),
        )
        gpu_rows = []
        for gpu in sample.gpus:
            facts = (gpu.uuid, gpu.name, gpu.memory_total_bytes)
            known = new_gpus.get(gpu.index) or self._gpus.get(gpu.index)
            if known != facts and not (known and facts[2] is None and known[:2] == facts[:2]):
                conn.execute(
                    "INSERT OR REPLACE INTO gpus (gpu, uuid, name, memory_total_bytes)"
                    " VALUES (?,?,?,?)",
                    (gpu.index, *facts),
                )
                new_gpus[gpu.index] = facts
            gpu_rows.append(
                (
                    ts,
                    gpu.index,
                    STATUS_CODES.get(gpu.status, gpu.status),
                    tenths(gpu.utilization),
                    tenths(gpu.sm_activity),
                    gpu.memory_used_bytes,
                    millis(gpu.power_watts),
                    gpu.temperature_c,
                    gpu.sm_clock_mhz,
                    gpu.memory_clock_mhz,
                    gpu.error,
                )
            )
        if gpu_rows:
            conn.executemany(
                "INSERT OR REPLACE INTO gpu_samples (ts, gpu, status, util, sm, mem, power_mw,"
                " temp, sm_clock, mem_clock, error) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                gpu_rows,
            )
        proc_rows = []
        use_rows = []
        known_processes = self._processes
        for proc in sample.processes:
            key = (proc.pid, round(proc.start_time * 1000))
            ident = known_processes.get(key) or new_processes.get(key)
            if ident is None:
                cursor = conn.execute(
                    "INSERT INTO processes (pid, start_ms, ppid, user, command, first_ts,"
                    " last_ts) VALUES (?,?,?,?,?,?,?)",
                    (proc.pid, key[1], proc.ppid, proc.user, proc.command, ts, ts),
                )
                ident = cursor.lastrowid
                assert ident is not None
                new_processes[key] = ident
            seen[ident] = ts
            iowait = proc.iowait_seconds
            proc_rows.append(
                (
                    ts,
                    ident,
                    round(proc.cpu_seconds * 1000),
                    proc.rss_bytes,
                    proc.read_bytes,
                    proc.write_bytes,
                    None if iowait is None else round(iowait * 1000),
                    proc.state,
                    proc.threads,
                    proc.threads_in_d,
                )
            )
            for use in proc.gpus:
                use_rows.append(
                    (ts, ident, use.gpu_index, use.memory_bytes, round(use.sm_share * 10))
                )
        if proc_rows:
            conn.executemany(
                "INSERT OR REPLACE INTO proc_samples (ts, proc, cpu_ms, rss, read_b, write_b,"
                " iowait_ms, state, threads, threads_d) VALUES (?,?,?,?,?,?,?,?,?,?)",
                proc_rows,
            )
        if use_rows:
            conn.executemany(
                "INSERT OR REPLACE INTO proc_gpu_samples (ts, proc, gpu, mem, sm)"
                " VALUES (?,?,?,?,?)",
                use_rows,
            )

    def _prune_for_space(self) -> None:
        """Disk full: free pages inside the file by deleting the oldest rolled-up raw rows."""
        try:
            self._delete_raw_batch(self._minute_done)
        except sqlite3.Error as error:
            self._health.last_error = f"prune after disk full failed: {error}"

    # ------------------------------------------------------------------------- maintain

    def maintain(self, budget_s: float = 0.02) -> bool:
        """Do bounded housekeeping; True while more work is pending. Never raises.

        Order: flush buffered samples, minute rollups, hour rollups, retention by age (raw,
        minute, hour), retention by size, WAL checkpoint. Raw rows are deleted only once their
        minute is rolled up, minute rows only once their hour is.
        """
        deadline = time.perf_counter() + budget_s
        with self._lock:
            pending = False
            try:
                if self._buffer:
                    self._flush()
                    self._trim_buffer()
                    pending = bool(self._buffer)
                for step in (
                    self._rollup_minutes,
                    self._rollup_hours,
                    self._flush_last_seen,
                    self._retain_by_age,
                    self._retain_by_size,
                ):
                    if time.perf_counter() >= deadline:
                        return True
                    pending = step(deadline) or pending
                if time.perf_counter() < deadline:
                    self._checkpoint()
            except Exception as error:  # never raise to the daemon loop
                if self.conn.in_transaction:
                    try:
                        self.conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                self._health.last_error = f"maintain failed: {error}"
                return True
            return pending

    def _rollup_minutes(self, deadline: float) -> bool:
        ms = MINUTE * 1000
        while True:
            row = self.conn.execute(
                "SELECT min(ts) FROM ticks WHERE ts >= ?", (self._minute_done,)
            ).fetchone()
            if row[0] is None:
                return False
            bucket = row[0] - row[0] % ms
            end = bucket + ms
            if end > self._newest_ts:
                return False  # the bucket is not finished yet
            if time.perf_counter() >= deadline:
                return True
            with self.db.atomic():
                self.conn.execute(_GPU_MINUTE_ROLLUP, {"b": bucket, "e": end})
                self.conn.executemany(_INSERT_ROLLUP, self._process_minute_rows(bucket, end))
                self._set_meta("minute_done", end)
            self._minute_done = end

    def _process_minute_rows(self, bucket: int, end: int) -> list[tuple[int, ...]]:
        """Minute rollup rows of every process; cpu_percent (tenths) from consecutive samples.

        Computed in Python: SQLite's window functions cost 3x more here.
        """
        conn = self.conn
        rows: list[tuple[int, ...]] = []
        head = (MINUTE, bucket, KIND_PROCESS)
        for proc, *values in conn.execute(_PROCESS_GPU_MINUTE, {"b": bucket, "e": end}):
            if values[0]:
                rows.append((*head, proc, PROCESS_METRICS["sm_share"], *values[0:4]))
            if values[4]:
                rows.append((*head, proc, PROCESS_METRICS["gpu_memory_bytes"], *values[4:8]))
        stats: dict[tuple[int, int], list[int]] = {}
        previous: dict[int, tuple[int, int]] = {}
        cpu_metric = PROCESS_METRICS["cpu_percent"]
        rss_metric = PROCESS_METRICS["rss_bytes"]

        def add(key: tuple[int, int], value: int) -> None:
            acc = stats.get(key)
            if acc is None:
                stats[key] = [1, value, value, value]
                return
            acc[0] += 1
            acc[1] += value
            if value < acc[2]:
                acc[2] = value
            elif value > acc[3]:
                acc[3] = value

        for ts, proc, cpu_ms, rss in conn.execute(
            "SELECT ts, proc, cpu_ms, rss FROM proc_samples WHERE ts >= ? AND ts < ?",
            (self._previous_tick(bucket), end),
        ):
            before = previous.get(proc)
            previous[proc] = (ts, cpu_ms)
            if ts < bucket:
                continue
            if rss is not None:
                add((proc, rss_metric), rss)
            if before is not None and ts > before[0] and cpu_ms >= before[1]:
                # tenths of a percent of one CPU, rounded half up
                add((proc, cpu_metric), ((cpu_ms - before[1]) * 2000 // (ts - before[0]) + 1) // 2)
        rows.extend((*head, proc, metric, *acc) for (proc, metric), acc in stats.items())
        return rows

    def _previous_tick(self, ts: int) -> int:
        """The tick before `ts` if it is recent enough to pair CPU counters with, else `ts`."""
        row = self.conn.execute(
            "SELECT max(ts) FROM ticks WHERE ts < ? AND ts >= ?", (ts, ts - _CPU_LOOKBACK_MS)
        ).fetchone()
        return ts if row[0] is None else row[0]

    def _rollup_hours(self, deadline: float) -> bool:
        ms = HOUR * 1000
        while True:
            row = self.conn.execute(
                "SELECT min(bucket) FROM rollups WHERE res = ? AND bucket >= ?",
                (MINUTE, self._hour_done),
            ).fetchone()
            if row[0] is None:
                return False
            bucket = row[0] - row[0] % ms
            end = bucket + ms
            if end > self._minute_done:
                return False
            if time.perf_counter() >= deadline:
                return True
            with self.db.atomic():
                self.conn.execute(_HOUR_ROLLUP, {"b": bucket, "e": end})
                self._set_meta("hour_done", end)
            self._hour_done = end

    def _flush_last_seen(self, deadline: float) -> bool:
        now = time.monotonic()
        if not self._last_seen or now - self._last_seen_flushed < _LAST_SEEN_EVERY_S:
            return False
        rows = [(ts, ident) for ident, ts in self._last_seen.items()]
        with self.db.atomic():
            self.conn.executemany("UPDATE processes SET last_ts = ? WHERE id = ?", rows)
        self._last_seen.clear()
        self._last_seen_flushed = now
        return False

    def _retain_by_age(self, deadline: float) -> bool:
        newest = self._newest_ts
        raw_cut = min(newest - self.raw_retention_ms, self._minute_done)
        minute_cut = min(newest - self.minute_retention_ms, self._hour_done)
        hour_cut = newest - self.hour_retention_ms
        while self._delete_raw_batch(raw_cut):
            if time.perf_counter() >= deadline:
                return True
        while self._delete_rollup_batch(MINUTE, minute_cut, _MINUTE_BATCH_MS):
            if time.perf_counter() >= deadline:
                return True
        while self._delete_rollup_batch(HOUR, hour_cut, _HOUR_BATCH_MS):
            if time.perf_counter() >= deadline:
                return True
        if self._delete_processes(hour_cut):
            return time.perf_counter() >= deadline
        return False

    def _delete_raw_batch(self, cut: int) -> bool:
        """Delete the oldest ticks' raw rows below `cut` (at most a batch); True if any."""
        conn = self.conn
        oldest = conn.execute("SELECT min(ts) FROM ticks").fetchone()[0]
        if oldest is None or oldest >= cut:
            return False
        row = conn.execute(
            "SELECT ts FROM ticks WHERE ts < ? ORDER BY ts LIMIT 1 OFFSET ?",
            (cut, _RAW_BATCH_TICKS),
        ).fetchone()
        bound = row[0] if row else cut
        deleted = 0
        with self.db.atomic():
            for table in ("gpu_samples", "proc_samples", "proc_gpu_samples", "ticks"):
                deleted += conn.execute(f"DELETE FROM {table} WHERE ts < ?", (bound,)).rowcount
        self._health.rows_pruned += deleted
        return True

    def _delete_rollup_batch(self, res: int, cut: int, batch_ms: int) -> bool:
        conn = self.conn
        oldest = conn.execute("SELECT min(bucket) FROM rollups WHERE res = ?", (res,)).fetchone()[0]
        if oldest is None or oldest >= cut:
            return False
        bound = min(cut, oldest + batch_ms)
        with self.db.atomic():
            deleted = conn.execute(
                "DELETE FROM rollups WHERE res = ? AND bucket < ?", (res, bound)
            ).rowcount
        self._health.rows_pruned += deleted
        return True

    def _delete_processes(self, cut: int) -> bool:
        """Forget processes last seen before the oldest data we still keep."""
        conn = self.conn
        gone = [
            row[0]
            for row in conn.execute("SELECT id FROM processes WHERE last_ts < ? LIMIT 500", (cut,))
            if row[0] not in self._last_seen
        ]
        if not gone:
            return False
        with self.db.atomic():
            conn.executemany("DELETE FROM processes WHERE id = ?", [(i,) for i in gone])
        gone_set = set(gone)
        self._processes = {k: v for k, v in self._processes.items() if v not in gone_set}
        return True

    def _retain_by_size(self, deadline: float) -> bool:
        conn = self.conn
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        while True:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            if pages * page_size <= self.max_bytes:
                return False
            if time.perf_counter() >= deadline:
                return True
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            # Hysteresis: delete down to 90 % so that we do not prune on every tick.
            if (pages - free) * page_size > self.max_bytes * 0.9 and (
                self._delete_raw_batch(self._minute_done)
                or self._delete_rollup_batch(MINUTE, self._hour_done, _MINUTE_BATCH_MS)
                or self._delete_rollup_batch(HOUR, self._newest_ts, _HOUR_BATCH_MS)
            ):
                continue
            if not free:
                return False  # over the limit, but nothing may be deleted yet (not rolled up)
            conn.execute(f"PRAGMA incremental_vacuum({_VACUUM_PAGES})").fetchall()
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            if not free or pages * page_size <= self.max_bytes:
                # In WAL mode the file shrinks when the checkpoint copies the truncation.
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                self._last_checkpoint = time.monotonic()

    def _checkpoint(self) -> None:
        now = time.monotonic()
        written = self._health.ticks_written
        if (
            now - self._last_checkpoint < _CHECKPOINT_EVERY_S
            and written - self._ticks_at_checkpoint < _CHECKPOINT_EVERY_TICKS
        ):
            return
        self._ticks_at_checkpoint = written
        self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self._last_checkpoint = now

    # ------------------------------------------------------------------------- status

    @property
    def health(self) -> StoreHealth:
        """A copy of the counters, with bytes on disk measured now."""
        size = 0
        for suffix in ("", "-wal"):
            try:
                size += os.stat(self.path + suffix).st_size
            except OSError:
                pass
        self._health.bytes_on_disk = size
        self._health.samples_buffered = len(self._buffer)
        return StoreHealth(**asdict(self._health))

    @property
    def minute_done(self) -> int:
        """Raw data before this ts (ms) is rolled up into minutes."""
        return self._minute_done

    @property
    def hour_done(self) -> int:
        """Minute rollups before this ts (ms) are rolled up into hours."""
        return self._hour_done

    @staticmethod
    def reader(path: str | os.PathLike[str], timeout_s: float = 5.0) -> StoreReader:
        """A read-only connection whose queries are cut off after `timeout_s`."""
        return StoreReader(path, timeout_s=timeout_s)

    def close(self) -> None:
        """Flush what can be flushed, checkpoint, close. Never raises."""
        with self._lock:
            try:
                if self._buffer:
                    self._flush()
                if self._last_seen:
                    self._last_seen_flushed = 0.0
                    self._flush_last_seen(time.perf_counter() + 1)
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except Exception as error:
                self._health.last_error = f"close: {error}"
            finally:
                self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_GPU_MINUTE_ROLLUP = f"""
INSERT OR REPLACE INTO rollups (res, bucket, kind, key, metric, n, sum, min, max)
SELECT {MINUTE}, :b, {KIND_GPU}, gpu, metric, count(v), sum(v), min(v), max(v) FROM (
    SELECT gpu, 0 AS metric, util AS v FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 1, sm FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 2, mem FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 3, power_mw FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 4, temp FROM gpu_samples WHERE ts >= :b AND ts < :e
) GROUP BY gpu, metric HAVING count(v) > 0
"""

_INSERT_ROLLUP = (
    "INSERT OR REPLACE INTO rollups (res, bucket, kind, key, metric, n, sum, min, max)"
    " VALUES (?,?,?,?,?,?,?,?,?)"
)

# Per sample, a process's SM share and GPU memory are summed over the GPUs it holds.
_PROCESS_GPU_MINUTE = """
SELECT proc, count(sm), sum(sm), min(sm), max(sm), count(mem), sum(mem), min(mem), max(mem)
FROM (
    SELECT proc, sum(sm) AS sm, sum(mem) AS mem FROM proc_gpu_samples
    WHERE ts >= :b AND ts < :e GROUP BY ts, proc
) GROUP BY proc
"""

_HOUR_ROLLUP = f"""
INSERT OR REPLACE INTO rollups (res, bucket, kind, key, metric, n, sum, min, max)
SELECT {HOUR}, :b, kind, key, metric, sum(n), sum(sum), min(min), max(max)
FROM rollups WHERE res = {MINUTE} AND bucket >= :b AND bucket < :e
GROUP BY kind, key, metric
"""
