"""The recorder: every tick's Sample into SQLite, with recovery when the file or the disk fails.

One writer (`Store`), one transaction per tick; the rows a tick writes are built, by position,
in `daemon.store.tick_rows`. Rollups, retention and checkpoints are in
`daemon.store.maintenance` (the `Maintenance` mixin), run by `Store.maintain()`. Readers
(`Store.reader`, see `daemon.store.reader`) use their own read-only connections with a deadline.

Failure policy: `write()` and `maintain()` never raise. A tick that cannot be committed
(disk full, database locked, I/O error) waits in a bounded in-memory buffer and is retried on
the next call; beyond the bound the oldest samples are dropped. Everything is counted in
`Store.health`. A file that is not a database, or fails `PRAGMA quick_check` at open, is moved
aside to `<path>.corrupt-<timestamp>` and a fresh store is created.

The other writes (events, stack samples and statuses, recommendations, host facts: see
`daemon.store.facts`) are upserts: one that fails for a "not now" reason waits, keyed, in a
bounded pending list and is written after the buffered ticks (the `PendingWrites` mixin,
daemon.store.pending, which also tells a condition that stops writing, once and then at most
once a minute).

One writer per database *file*, and the file at the path is the one recorded into: the
`DatabaseFile` mixin (daemon.store.database_file) holds the lock and recreates a database
deleted or replaced while recording.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import sqlite_utils

from daemon.sources.sample import ProcessSample, Sample
from daemon.store import tick_rows
from daemon.store.database_file import DatabaseFile, take_back_kept_wal
from daemon.store.errors import (
    SQLITE_FULL,
    TRANSIENT,
    StoreError,
    error_code,
    free_bytes,
    is_corruption,
)
from daemon.store.files import (
    RefusedFile,
    check_existing,
    private_database,
    private_folder,
)
from daemon.store.health import StoreHealth
from daemon.store.maintenance import Maintenance
from daemon.store.minute_tally import ProcessMinutes
from daemon.store.pending import PendingWrites
from daemon.store.reader import ReaderTimeout, StoreReader
from daemon.store.schema import MIGRATIONS, SCHEMA_VERSION
from daemon.store.tick_rows import GpuFacts, GpuUseRow, ProcessSampleRow

__all__ = ["ReaderTimeout", "Store", "StoreError", "StoreHealth", "StoreReader", "finish"]

log = logging.getLogger(__name__)

_PRAGMA_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|-?[0-9]+")


_SAMPLE_KEY = attrgetter("pid", "start_time")  # a ProcessSample's key, read in C
PROCESS_CACHE_MAX = 4096  # process ids kept in memory; past it, only the live ones stay
# The writer's SQLite page cache. Ticks append at the right edge of each table, so the pages
# they touch are few: a 2 h store at 8 GPUs x 64 processes wrote and maintained no faster with
# 16 MB than with 4 MB, and a 16 MB cache grew the daemon's RSS with the store for its first
# 16 MB (bench/soak.py: ~5 MB/h on the demo host, never flat within the 2 h).
PAGE_CACHE_KIB = 4000


class Store(DatabaseFile, PendingWrites, Maintenance):
    """The single writer of one SQLite store file (its file: `DatabaseFile`; what waits while it
    cannot be written: `PendingWrites`; its housekeeping: `Maintenance`)."""

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
        try:
            private_folder(Path(self.path).parent)
        except OSError as exc:
            raise StoreError(
                f"cannot create the store's folder {Path(self.path).parent}: {exc.strerror}; "
                "pass --db with a writable path") from None
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
        self._age_retained_for = (0, 0, 0)  # maintenance: when retention by age last finished
        # The wall clock stepped forward while recording (Store.clock_stepped_forward): by how
        # much in all (ms), and the newest tick stamped on the clock before; None: no step.
        # (read from the store's meta by _load_state)
        self._stepped: tuple[int, int] | None = None
        # ((pid, start_time) of each process, their ids) of the last tick committed, and of the
        # last inserted in the open transaction (daemon.store.writer._process_ids)
        self._ids_committed: tuple[list[tuple[int, float]], list[int]] = ([], [])
        self._ids_inserted = self._ids_committed
        self._last_seen_flushed = time.monotonic()
        self._last_seen: dict[int, int] = {}  # process id -> ts, not yet in processes.last_ts
        self._pending_facts: OrderedDict[Hashable, tuple[str, Sequence[object]]] = OrderedDict()
        self._batching = 0  # open facts_batched() blocks (daemon.store.pending)
        self._texts_written: OrderedDict[str, tuple[bytes, bytes, int]] = OrderedDict()  # facts
        self._spend_writes = 0  # rounds of hour spend handed over (facts.write_spend)
        # facts.write_process_kinds: each live process's kind as last written
        self._kinds_written: dict[tuple[int, int], tuple[dict[str, Any], tuple[Any, ...], int]] = {}
        self._problem_kind: str | None = None
        # A read or write found the file damaged (DatabaseFile.note_if_damaged): SQLite's words,
        # until the next maintenance round starts a new one; nothing is written meanwhile.
        self._damage_noted: str | None = None
        self._dropped_span: list[int] | None = None  # PendingWrites._note_dropped
        self._moved_aside = False  # DatabaseFile._start_over: moved, a new one still to start
        self._maintain_failures = 0  # maintenance rounds in a row that failed
        self._meta_values: dict[str, str] = {}  # set_meta's facts, written again into a new file
        self._problem_logged_at = 0.0
        self._problem_repeats = 0
        self._file_fd: int | None = None
        self._lock_file()
        try:
            self._db = self._open()
            if self._file_fd is not None and not self._same_file():
                self._lock_file()  # a corrupt file was moved aside: lock the new one
            self._conn = self._db.conn
            self._load_state()
        except sqlite3.Error as error:
            self._unlock_file()
            raise StoreError(f"cannot read the store {self.path}: {error}; check the free space "
                             "and permissions of its disk, then start mlcostd again") from None
        except BaseException:
            self._unlock_file()
            raise

    # ----------------------------------------------------------------------------- open

    def _connect(self) -> sqlite_utils.Database:
        try:
            take_back_kept_wal(self.path)  # (a dead writer's second name of the WAL)
            private_database(self.path)  # 0600 before SQLite creates it; its WAL/SHM follow
        except RefusedFile as exc:  # a planted link or someone else's file: left alone
            raise StoreError(str(exc)) from None
        except OSError as exc:
            raise StoreError(
                f"cannot open or create the store {self.path}: {exc.strerror}; pass --db "
                "with a writable file path") from None
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
            if not (is_corruption(error) or str(error).startswith("quick_check")):
                free = free_bytes(self.path)
                if error_code(error) == SQLITE_FULL or free == 0:
                    raise StoreError(
                        f"cannot open the store {self.path}: the disk holding it is full "
                        f"({free} bytes free; SQLite: {error}); free space on that disk or "
                        "pass --db on another one, then start mlcostd again") from None
                raise StoreError(
                    f"cannot open the store {self.path}: {error}; check the path, its "
                    "permissions and that no other mlcostd uses it"
                ) from None
            self._move_aside(error)
        db = self._connect()
        self._configure(db)
        return db

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
        conn.execute(f"PRAGMA cache_size=-{PAGE_CACHE_KIB}")
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
        conn = self._conn
        self._gpus: dict[int, GpuFacts] = {
            row[0]: (row[1], row[2], row[3], row[4])
            for row in conn.execute(
                "SELECT gpu, uuid, name, memory_total_bytes, memory_reserved_bytes FROM gpus")
        }
        # (pid, start_ms) -> id of the processes seen lately; a miss is looked up in the table
        # (never preloaded whole: a store keeps every process of months of rollups)
        self._processes: dict[tuple[int, int], int] = {}
        # id -> the command line recorded for it, as this writer last wrote or first saw it: a
        # process that execs (a shell or a launcher becoming the program) is renamed in place.
        self._commands: dict[int, str] = {}
        last = conn.execute("SELECT tick FROM ticks ORDER BY ts DESC LIMIT 1").fetchone()
        self.last_tick = int(last[0]) if last else 0  # the daemon numbers on from here
        newest = conn.execute("SELECT max(ts) FROM ticks").fetchone()[0]
        self._newest_ts = newest or 0
        self._last_assigned_ts = self._newest_ts
        self._minutes = ProcessMinutes(self._newest_ts)  # the processes' minute rollups
        self._minute_done = self._meta("minute_done")
        self._hour_done = self._meta("hour_done")
        stepped = self._meta("clock_stepped_ms")  # kept across restarts: see clock_stepped_forward
        self._stepped = (stepped, self._meta("clock_stepped_before")) if stepped > 0 else None

    def _meta(self, key: str) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def _set_meta(self, key: str, value: int) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def set_meta(self, key: str, value: object) -> None:
        """Record a fact about this store (e.g. the host it describes) as JSON. Never raises:
        on a full disk it waits with the other facts."""
        with self._lock:
            text = self._meta_values[key] = json.dumps(value, sort_keys=True)
            self._write_meta(key, text)

    def _write_meta(self, key: str, text: str) -> None:
        self.write_facts([(("meta", key), "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                           (f"json:{key}", text))])

    def _forget_what_the_file_held(self) -> None:
        """A new database was started at the path (DatabaseFile._start_over): what this writer
        knew the old file to hold (its process and GPU ids, the texts and kinds written, its
        rollup marks) is read from the new one, and set_meta's facts are written again. The
        facts that waited were bound to the old file's process ids: they are dropped, counted.
        Caller holds _lock."""
        assigned = self._last_assigned_ts
        self._load_state()
        self._last_assigned_ts = max(assigned, self._last_assigned_ts)
        self._ids_committed = self._ids_inserted = ([], [])
        self._last_seen.clear()
        self._texts_written.clear()
        self._kinds_written.clear()
        self._age_retained_for = (0, 0, 0)
        self._health.facts_dropped += len(self._pending_facts)
        self._pending_facts.clear()
        self._health.facts_pending = 0
        for key, text in self._meta_values.items():
            self._write_meta(key, text)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; rolled back on any failure, which is raised."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    def pragma(self, name: str, argument: int | str | None = None) -> tuple[Any, ...] | None:
        """`PRAGMA name` or `PRAGMA name(argument)` on the writer's connection, under its lock;
        the first row. For checks, benchmarks and fault tests (`max_page_count` makes a disk
        that is full), so nothing outside the store needs its connection."""
        if not _PRAGMA_WORD.fullmatch(name) or (
                argument is not None and not _PRAGMA_WORD.fullmatch(str(argument))):
            raise ValueError(f"not a PRAGMA name or argument: {name!r} {argument!r}")
        sql = f"PRAGMA {name}" if argument is None else f"PRAGMA {name}({argument})"
        with self._lock:
            row = self._conn.execute(sql).fetchone()
        return None if row is None else tuple(row)

    def set_authorizer(self, authorizer: Any) -> None:
        """SQLite's authorizer on the writer's connection (sqlite3.Connection.set_authorizer),
        under its lock; None removes it. For fault tests: SQLite itself refusing a statement."""
        with self._lock:
            self._conn.set_authorizer(authorizer)

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

    def _flush(self) -> None:
        """Commit buffered samples oldest first, at most `flush_chunk` of them per call."""
        if self._damage_noted is not None:
            return  # into a damaged file: the ticks wait for the new one (maintain)
        budget = self.flush_chunk
        one_by_one = False
        while self._buffer and budget > 0:
            count = 1 if one_by_one else min(len(self._buffer), budget)
            batch = list(itertools.islice(self._buffer, count))
            try:
                self._commit(batch)
            except Exception as error:  # never raise to the tick
                code = error_code(error)
                if isinstance(error, sqlite3.DatabaseError) and is_corruption(error):
                    self._damage_noted = str(error)  # the file is damaged, not the sample
                    self._write_failed(error)
                    return
                if code in TRANSIENT:
                    self._write_failed(error)
                    if code == SQLITE_FULL:
                        self._prune_for_space()
                    return
                self._health.writes_failed += 1
                self._health.last_error = f"write failed: {error}"
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
        if not self._buffer and self._pending_facts:
            self._flush_facts()
        if not self._buffer and not self._pending_facts:
            span, self._dropped_span = self._dropped_span, None  # (its event is written: a
            # later drop is another span)
            if self._problem_kind is not None and self._problem_kind.startswith("write:"):
                self._clear_problem(
                    "everything that waited in memory is written" if span is None else
                    f"what waited in memory is written, but {span[2]} "
                    + ("tick taken while it could not be was" if span[2] == 1 else
                       "ticks taken while it could not be were")
                    + " dropped before (the store holds a ticks_dropped event over them)")

    def _commit(self, batch: list[tuple[int, Sample]]) -> None:
        new_processes: dict[tuple[int, int], int] = {}
        new_gpus: dict[int, GpuFacts] = {}
        seen: dict[int, int] = {}
        commands: dict[int, str] = {}
        with self._transaction():
            written = [(ts, *self._insert(ts, sample, new_processes, new_gpus, seen, commands))
                       for ts, sample in batch]
        self._commands.update(commands)
        for ts, proc_rows, use_rows in written:
            self._minutes.add(ts, proc_rows, use_rows)
        # Only now are the new rows' ids real.
        self._ids_committed = self._ids_inserted
        self._processes.update(new_processes)
        if len(self._processes) > PROCESS_CACHE_MAX:  # keyed by process: bounded (soak.py)
            live = {(p.pid, round(p.start_time * 1000)) for p in batch[-1][1].processes}
            self._processes = {k: v for k, v in self._processes.items() if k in live}
        if len(self._commands) > len(self._processes) + PROCESS_CACHE_MAX:
            ids = set(self._processes.values())
            self._commands = {k: v for k, v in self._commands.items() if k in ids}
        self._gpus.update(new_gpus)
        self._last_seen.update(seen)
        self._newest_ts = max(self._newest_ts, batch[-1][0])

    def _insert(
        self,
        ts: int,
        sample: Sample,
        new_processes: dict[tuple[int, int], int],
        new_gpus: dict[int, GpuFacts],
        seen: dict[int, int],
        commands: dict[int, str],
    ) -> tuple[list[ProcessSampleRow], list[GpuUseRow]]:
        """Insert one tick's rows (built by daemon.store.tick_rows); its process and GPU-use
        rows are returned for the minute tally."""
        conn = self._conn
        conn.execute(tick_rows.INSERT_TICK, tick_rows.tick_row(ts, sample))
        for gpu in sample.gpus:
            facts = tick_rows.gpu_facts(gpu)
            if tick_rows.facts_changed(new_gpus.get(gpu.index) or self._gpus.get(gpu.index),
                                       facts):
                conn.execute(tick_rows.INSERT_GPU, (gpu.index, *facts))
                conn.execute(tick_rows.INSERT_GPU_READING,
                             tick_rows.gpu_reading(ts, gpu.index, facts))
                new_gpus[gpu.index] = facts
        if sample.gpus:
            tick_rows.INSERT_GPU_SAMPLES.run(conn, tick_rows.gpu_sample_rows(ts, sample.gpus))
        processes = sample.processes
        idents = self._process_ids(ts, processes, new_processes, commands)
        self._rename(processes, idents, commands)
        seen.update(dict.fromkeys(idents, ts))
        proc_rows = tick_rows.process_sample_rows(ts, processes, idents)
        use_rows = tick_rows.gpu_use_rows(ts, processes, idents)
        if proc_rows:
            tick_rows.INSERT_PROCESS_SAMPLES.run(conn, proc_rows)
        if use_rows:
            tick_rows.INSERT_GPU_USES.run(conn, use_rows)
        return proc_rows, use_rows

    def _process_ids(self, ts: int, processes: Sequence[ProcessSample],
                     new_processes: dict[tuple[int, int], int],
                     commands: dict[int, str]) -> list[int]:
        """The id in `processes` of each process, in order; one not seen lately is looked up
        (recorded before a restart) or recorded now, in `new_processes` until committed. Most
        ticks have the processes of the tick before, in the same order: they take its ids, one
        comparison of the keys instead of a rounding and a look-up per process."""
        keys = list(map(_SAMPLE_KEY, processes))
        if keys == self._ids_committed[0]:  # the last committed tick's processes, in order
            self._ids_inserted = self._ids_committed
            return self._ids_committed[1]
        known = self._processes
        idents: list[int] = []
        for proc in processes:
            key = (proc.pid, round(proc.start_time * 1000))
            ident = known.get(key) or new_processes.get(key)
            if ident is None:
                row = self._conn.execute(tick_rows.FIND_PROCESS, key).fetchone()
                if row is not None:  # recorded before a restart, with the command it had then
                    ident = int(row[0])
                    if isinstance(row[1], str):
                        commands[ident] = row[1]
                else:
                    ident = self._conn.execute(tick_rows.INSERT_PROCESS,
                                               tick_rows.process_row(ts, proc, key[1])).lastrowid
                    assert ident is not None
                new_processes[key] = ident
            idents.append(ident)
        self._ids_inserted = (keys, idents)
        return idents

    def _rename(self, processes: Sequence[ProcessSample], idents: list[int],
                commands: dict[int, str]) -> None:
        """Write the command line of each process whose command changed since it was recorded
        (it exec'd); `commands` collects what this transaction wrote or first saw. The sample
        carries the same string object tick after tick: one identity test a process."""
        recorded, conn = self._commands, self._conn
        for ident, proc in zip(idents, processes, strict=True):
            command = proc.command
            before = commands.get(ident)
            if before is None:
                before = recorded.get(ident)
            if before is command:
                continue
            if before is not None and before != command:
                conn.execute("UPDATE processes SET command = ? WHERE id = ?", (command, ident))
            commands[ident] = command

    # ------------------------------------------------------------------------- status

    @property
    def health(self) -> StoreHealth:
        """A copy of the counters, with bytes on disk measured now."""
        size = 0
        for suffix in ("", "-wal"):
            try:  # never through a link planted at the path (probe 142 L4: its target's size)
                found = os.lstat(self.path + suffix)
            except OSError:
                continue
            if stat.S_ISREG(found.st_mode):
                size += found.st_size
        self._health.bytes_on_disk = size
        self._health.samples_buffered = len(self._buffer)
        return self._health.copy()

    @property
    def processes_cached(self) -> int:
        """How many process ids the writer holds in memory (bounded by PROCESS_CACHE_MAX)."""
        return len(self._processes)

    @property
    def minute_done(self) -> int:
        """Raw data before this ts (ms) is rolled up into minutes."""
        return self._minute_done

    @property
    def hour_done(self) -> int:
        """Minute rollups before this ts (ms) are rolled up into hours."""
        return self._hour_done

    def clock_stepped_forward(self, by_s: float) -> None:
        """The wall clock jumped `by_s` forward between two ticks (the daemon's loop saw it):
        measured from the newest tick, the ticks recorded before the step look that much
        older than they are, and retention by age, which cuts from the newest tick, deleted a
        day of raw history for a day's step (probe 115). Until every retention has passed
        them by the clock they were recorded on, the cuts are made as if the step had not
        happened (kept in the store's meta, across restarts)."""
        if by_s <= 0:
            return
        with self._lock:
            total = int(by_s * 1000) + (self._stepped[0] if self._stepped else 0)
            self._stepped = (total, self._newest_ts)
            self.write_facts([(("meta", "clock_stepped"), "INSERT OR REPLACE INTO meta (key, "
                               "value) VALUES ('clock_stepped_ms', ?), "
                               "('clock_stepped_before', ?)", self._stepped)])

    @staticmethod
    def reader(path: str | os.PathLike[str], timeout_s: float = 5.0) -> StoreReader:
        """A read-only connection whose queries are cut off after `timeout_s`."""
        return StoreReader(path, timeout_s=timeout_s)

    def close(self) -> None:
        """Flush what can be flushed, checkpoint, close. Never raises."""
        with self._lock:
            try:
                self._check_file()
                self._start_over()  # a file found damaged: what waits goes to a new one
                if self._buffer or self._pending_facts:
                    self._flush()
                if self._last_seen:
                    self._last_seen_flushed = 0.0
                    self._flush_last_seen(time.perf_counter() + 1)
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except Exception as error:
                self._health.last_error = f"close: {error}"
            finally:
                lost, facts = len(self._buffer), len(self._pending_facts)
                if lost or facts:
                    log.error("stopping with %s and %s that could not be written to %s "
                              "(%s): they are lost", _count(lost, "tick"),
                              _count(facts, "other write"), self.path,
                              # the cause, not the problem's advice to keep mlcostd
                              # running (probe 142 L5: nested in "they are lost")
                              self._health.last_error or self._health.problem)
                self._conn.close()
                self._unlock_file()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _count(count: int, what: str) -> str:
    """"1 tick", "2 ticks"."""
    return f"{count} {what}" if count == 1 else f"{count} {what}s"


def finish(path: str | os.PathLike[str], timeout_s: float = 5.0) -> None:
    """Leave a store no writer records into any more (a finished profile) as one self-contained
    file: its WAL checkpointed into it and its journal mode DELETE, so no -wal or -shm stays
    beside it, nor comes back when it is read (a read-only reader of a WAL-mode file creates
    both and cannot remove them). A Store that opens it later turns WAL on again. Raises
    StoreError, the file as it was, where it cannot: missing, not ours, a writer still on it."""
    try:
        check_existing(path)  # a planted link or someone else's file: left alone
    except RefusedFile as exc:
        raise StoreError(f"cannot finish the store {path}: {exc}") from None
    uri = "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=rw"  # never creates
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=timeout_s)
        try:
            mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot finish the store {path}: {exc}") from None
    if str(mode).lower() != "delete":  # refused without an error, e.g. another connection on it
        raise StoreError(f"cannot finish the store {path}: its journal mode stayed {mode}")
