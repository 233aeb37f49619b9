"""The store's housekeeping between ticks: rollups, retention by age and size, checkpoints.

`Maintenance` is a mixin of `daemon.store.writer.Store`: it runs on the Store's one connection
under the Store's lock, from `Store.maintain()`. Kept apart from the writer so that the write
path (open, recover, write, buffer) and the bookkeeping that keeps the file small read on their
own.

Raw samples become 1-minute rollups, 1-minute rollups become 1-hour rollups; each keeps count,
sum, min and max so it re-aggregates exactly. Raw rows are deleted only once their minute is
rolled up, minute rows only once their hour is; recommendation texts go with the raw rows
(each keeps the one in force at the oldest tick kept). Over [store].max_size the oldest data
goes, least needed first, and the hour spend (the money record) last and never this month's or
the last 60 days' (`Maintenance._retain_by_size`). Deletes run in bounded batches so the
tick is never blocked for long; by age they run once a minute, raw rows a whole minute of them
at a time (kept up to a minute past the raw retention). Each round first checks that the path
still names the database file the Store holds open (`Store._check_file`: a deleted or replaced
file is recreated from it).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

import sqlite_utils

from daemon import clock
from daemon.store import rollup_rows
from daemon.store.errors import is_corruption
from daemon.store.schema import HOUR, KIND_SPEND, MINUTE
from daemon.store.wide_insert import WideInsert

if TYPE_CHECKING:
    from collections import OrderedDict
    from collections.abc import Hashable, Sequence

    from daemon.sources.sample import Sample
    from daemon.store.health import StoreHealth
    from daemon.store.minute_tally import ProcessMinutes

log = logging.getLogger(__name__)

_RAW_BATCH_TICKS = 30  # ticks deleted per retention batch (x GPUs x processes rows)
# Raw rows past their age go a whole minute at a time, so once a minute: one tick's a tick
# (what a store past its raw retention did) cost every tick a transaction, the texts' and
# kinds' prune queries and a delete per table for ~500 rows at 256 processes. Raw rows are
# kept up to this much longer than the raw retention.
_RAW_STEP_MS = MINUTE * 1000
_MINUTE_BATCH_MS = 10 * MINUTE * 1000
_HOUR_BATCH_MS = 24 * HOUR * 1000
_VACUUM_PAGES = 2048
_STACK_BATCH_ROWS = 2000  # stack samples deleted per size batch
_EVENT_BATCH_ROWS = 500  # events deleted per size batch
# The hour spend this far back (and this UTC month) is kept whatever [store].max_size says:
# the monthly review (report --since 30d) against the 30 days before it.
_SPEND_KEPT_S = 60 * 86400
MAINTAIN_FAILURES_SAID = 3  # rounds in a row that fail before health's `problem` says so
_CHECKPOINT_EVERY_S = 10.0
_CHECKPOINT_EVERY_TICKS = 30  # or sooner when ticks come fast (backfill, tests)
_LAST_SEEN_EVERY_S = 60.0


class Maintenance:
    """Rollups, retention and checkpoints of the Store that inherits this."""

    # Retention by size found nothing more to remove at these (minute_done, hour_done): it
    # tries again once more is rolled up. None: under the cap, or not tried yet.
    _size_stuck_at: tuple[int, int] | None = None
    _stacks_pruned_for = 0  # the cut the unused stacks were last deleted below

    if TYPE_CHECKING:  # the Store's state this mixin works on (set in Store.__init__)
        path: str
        _db: sqlite_utils.Database
        _conn: sqlite3.Connection
        raw_retention_ms: int
        minute_retention_ms: int
        hour_retention_ms: int
        max_bytes: int
        _health: StoreHealth
        _lock: threading.Lock
        _buffer: deque[tuple[int, Sample]]
        _newest_ts: int
        _minute_done: int
        _hour_done: int
        _last_seen: dict[int, int]
        _last_seen_flushed: float
        _processes: dict[tuple[int, int], int]
        _last_checkpoint: float
        _minutes: ProcessMinutes
        _ticks_at_checkpoint: int
        _ids_committed: tuple[list[tuple[int, float]], list[int]]
        _age_retained_for: tuple[int, int, int]  # (minute of the newest tick, minute_done,
        # hour_done) of the last retention by age that finished
        _stepped: tuple[int, int] | None  # a forward step of the clock (Store.clock_stepped_forward)

        _pending_facts: OrderedDict[Hashable, tuple[str, Sequence[object]]]
        _damage_noted: str | None
        _maintain_failures: int
        _problem_kind: str | None

        def _set_problem(self, kind: str, text: str) -> None: ...
        def _clear_problem(self, how: str) -> None: ...

        def _flush(self) -> None: ...
        def _check_file(self) -> None: ...
        def _start_over(self) -> None: ...
        def _trim_buffer(self) -> None: ...
        def _set_meta(self, key: str, value: int) -> None: ...

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
        with self._lock:
            pending = False
            try:
                self._check_file()
                self._start_over()
                if self._damage_noted is not None:
                    return True  # no new store yet: nothing to write or keep meanwhile
                if self._buffer or self._pending_facts:
                    self._flush()
                    self._trim_buffer()
                    pending = bool(self._buffer)
                # The budget is the steps': counted from the call's start, a check and a
                # flush slowed by a loaded machine left them none, and no rollup moved (CI; a
                # daemon so starved would never delete a raw row).
                deadline = time.perf_counter() + budget_s
                for step in (
                    self._rollup_minutes,
                    self._rollup_hours,
                    self._flush_last_seen,
                    self._retain_by_age,
                    self._retain_by_size,
                ):
                    # Each step does one unit at least, then stops at the deadline; one that
                    # stopped goes on at the next call, and the steps after it wait for it.
                    if step(deadline):
                        self._error_resolved()
                        return True
                self._checkpoint()  # (its own cadence: every _CHECKPOINT_EVERY_S or ticks)
            except Exception as error:  # never raise to the daemon loop
                if self._conn.in_transaction:
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                self._health.last_error = f"maintain failed: {error}"
                if isinstance(error, sqlite3.DatabaseError) and is_corruption(error):
                    self._damage_noted = str(error)  # a new file next round
                self._maintain_failures += 1
                # While writes wait (a full disk, an I/O error), that is the problem health and
                # the log say: what waits and what was dropped. Housekeeping fails for the same
                # cause; said in its place each round, it hid the ticks waiting in memory and
                # alternated with it in the log every tick (probe 115).
                writes_wait = (self._problem_kind is not None
                               and self._problem_kind.startswith("write:"))
                if self._maintain_failures >= MAINTAIN_FAILURES_SAID and not writes_wait:
                    self._set_problem(
                        "maintain", f"housekeeping of the store {self.path} fails ({error}): "
                        "rollups, retention and WAL checkpoints wait, so the files grow; check "
                        "the file and its disk (mlcostd check)")
                return True
            self._maintain_failures = 0
            if self._problem_kind == "maintain":
                self._clear_problem("its housekeeping runs again")
            self._error_resolved()
            return pending

    def _error_resolved(self) -> None:
        """After a housekeeping round that went through: a last_error from before, while
        nothing waits and no problem stands, is history (resolved_error, resolved_at), not what
        /v1/health says is wrong now (it said "maintain failed: database or disk is full" long
        after the disk had room again)."""
        health = self._health
        if health.last_error is None or self._buffer or self._pending_facts \
                or self._problem_kind not in (None, "size") or self._damage_noted is not None:
            return
        health.resolved_error, health.resolved_at = health.last_error, clock.now()
        health.last_error = None

    def _rollup_minutes(self, deadline: float) -> bool:
        ms = MINUTE * 1000
        while True:
            row = self._conn.execute(
                "SELECT min(ts) FROM ticks WHERE ts >= ?", (self._minute_done,)
            ).fetchone()
            if row[0] is None:
                return False
            bucket = row[0] - row[0] % ms
            end = bucket + ms
            if end > self._newest_ts:
                return False  # the bucket is not finished yet
            with self._db.atomic():
                _INSERT_ROLLUPS.run(self._conn, [
                    (MINUTE, bucket, *row) for row in rollup_rows.gpu_rows(self._conn, bucket,
                                                                           end)])
                rows = self._minutes.rows(bucket)  # tallied as its ticks were written
                if rows is None:
                    rows = self._process_minute_rows(bucket, end)
                _INSERT_ROLLUPS.run(self._conn, rows)
                self._set_meta("minute_done", end)
            self._minute_done = end
            if time.perf_counter() >= deadline:  # (after one minute at least: each call moves)
                return True

    def _process_minute_rows(self, bucket: int, end: int) -> list[tuple[int, ...]]:
        """Minute rollup rows of every process, read from the raw rows where the writer's
        tally (daemon.store.minute_tally) did not see the whole minute; the tally computes the
        same numbers."""
        return [(MINUTE, bucket, *row) for row in rollup_rows.process_rows(self._conn, bucket,
                                                                            end)]

    def _rollup_hours(self, deadline: float) -> bool:
        ms = HOUR * 1000
        while True:
            row = self._conn.execute(
                "SELECT min(bucket) FROM rollups WHERE res = ? AND bucket >= ?",
                (MINUTE, self._hour_done),
            ).fetchone()
            if row[0] is None:
                return False
            bucket = row[0] - row[0] % ms
            end = bucket + ms
            if end > self._minute_done:
                return False
            with self._db.atomic():
                self._conn.execute(_HOUR_ROLLUP, {"b": bucket, "e": end})
                self._set_meta("hour_done", end)
            self._hour_done = end
            if time.perf_counter() >= deadline:  # (after one hour at least)
                return True

    def _flush_last_seen(self, deadline: float) -> bool:
        now = time.monotonic()
        if not self._last_seen or now - self._last_seen_flushed < _LAST_SEEN_EVERY_S:
            return False
        rows = [(ts, ident) for ident, ts in self._last_seen.items()]
        with self._db.atomic():
            self._conn.executemany("UPDATE processes SET last_ts = ? WHERE id = ?", rows)
        self._last_seen.clear()
        self._last_seen_flushed = now
        return False

    def _retain_by_age(self, deadline: float) -> bool:
        newest = self._newest_ts
        # The cuts move on with a new minute of ticks or a rollup; between them a round would
        # only find nothing to delete (~60 us a tick, most of it an empty write transaction).
        cuts_from = (newest - newest % _RAW_STEP_MS, self._minute_done, self._hour_done)
        if cuts_from == self._age_retained_for:
            return False
        # (a forward step of the clock: the cuts read the clock the ticks before it were
        # stamped on, until every retention has passed them by it: Store.clock_stepped_forward)
        stepped = self._stepped
        if stepped is not None:
            newest -= stepped[0]
            if newest - self.hour_retention_ms > stepped[1]:
                self._stepped = None
                with self._db.atomic():
                    self._conn.execute("DELETE FROM meta WHERE key IN ('clock_stepped_ms', "
                                       "'clock_stepped_before')")
        raw_cut = min(newest - self.raw_retention_ms, self._minute_done)
        raw_cut -= raw_cut % _RAW_STEP_MS
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
        # Meter readings (storage sizes, unit-cost counters, the price) price reports as long
        # as the hour spend they go with is kept; each meter's last reading before the cut stays
        # while it is the one in force there (a price recorded once, at a start months ago).
        # (A few rows a minute: one statement, through the ts index and the primary key.)
        with self._db.atomic():
            self._health.rows_pruned += self._conn.execute(
                "DELETE FROM meter_readings WHERE ts < :cut AND ts < (SELECT max(p.ts) FROM "
                "meter_readings p WHERE p.kind = meter_readings.kind AND "
                "p.name = meter_readings.name AND p.ts <= :cut)", {"cut": hour_cut}).rowcount
        self._age_retained_for = cuts_from
        return False

    def _delete_raw_batch(self, cut: int) -> bool:
        """Delete the oldest ticks' raw rows below `cut` (at most a batch); True if any."""
        conn = self._conn
        oldest = conn.execute("SELECT min(ts) FROM ticks").fetchone()[0]
        if oldest is None or oldest >= cut:
            return False
        row = conn.execute(
            "SELECT ts FROM ticks WHERE ts < ? ORDER BY ts LIMIT 1 OFFSET ?",
            (cut, _RAW_BATCH_TICKS),
        ).fetchone()
        bound = row[0] if row else cut
        deleted = 0
        with self._db.atomic():
            for table in ("gpu_samples", "proc_samples", "proc_gpu_samples", "ticks"):
                deleted += conn.execute(f"DELETE FROM {table} WHERE ts < ?", (bound,)).rowcount
            deleted += conn.execute(_PRUNE_TEXTS, (bound, bound)).rowcount
            deleted += conn.execute(_PRUNE_KINDS, (bound, bound)).rowcount
        self._health.rows_pruned += deleted
        return True

    def _delete_rollup_batch(self, res: int, cut: int, batch_ms: int) -> bool:
        conn = self._conn
        oldest = conn.execute("SELECT min(bucket) FROM rollups WHERE res = ?", (res,)).fetchone()[0]
        if oldest is None or oldest >= cut:
            return False
        bound = min(cut, oldest + batch_ms)
        with self._db.atomic():
            deleted = conn.execute(
                "DELETE FROM rollups WHERE res = ? AND bucket < ?", (res, bound)
            ).rowcount
        self._health.rows_pruned += deleted
        return True

    def _delete_processes(self, cut: int) -> bool:
        """Forget processes last seen before the oldest data we still keep."""
        conn = self._conn
        gone = [
            row[0]
            for row in conn.execute("SELECT id FROM processes WHERE last_ts < ? LIMIT 500", (cut,))
            if row[0] not in self._last_seen
        ]
        if not gone:
            return False
        with self._db.atomic():
            conn.executemany("DELETE FROM processes WHERE id = ?", [(i,) for i in gone])
            conn.executemany("DELETE FROM process_kinds WHERE proc = ?", [(i,) for i in gone])
        gone_set = set(gone)
        self._processes = {k: v for k, v in self._processes.items() if v not in gone_set}
        self._ids_committed = ([], [])  # (the writer's ids of the last tick: looked up again)
        return True

    def _retain_by_size(self, deadline: float) -> bool:
        """Keep the database file under `max_bytes` ([store].max_size; its WAL is not counted:
        it holds the last seconds of writes, checkpointed every few seconds, not data kept).
        What goes, oldest first within each, in this order (`_delete_for_size`): raw samples
        rolled up, stack samples, minute rollups rolled up into hours, events that ended, hour
        rollups of GPUs and processes, and last the hour spend (the money record that the
        report, the review, today's spend and the budgets rest on) from before
        `_spend_kept_from` only. A store that holds nothing more it may remove and is still
        over the cap says so: /v1/health's problems and one log line (probe 149 H3: the cap
        deleted the hour spend up to the newest tick, every round, silently)."""
        conn = self._conn
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        first = True
        while True:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            if pages * page_size <= self.max_bytes:
                self._size_met()
                return False
            if self._size_stuck_at == (self._minute_done, self._hour_done):
                # nothing rolled up since it was found stuck: nothing new it may remove
                self._size_unmet(pages * page_size)
                return False
            if not first and time.perf_counter() >= deadline:
                return True  # (after one batch at least: each call moves)
            first = False
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            # Hysteresis: delete down to 90 % so that we do not prune on every tick.
            if (pages - free) * page_size > self.max_bytes * 0.9 and self._delete_for_size():
                continue
            if not free:
                # over the limit, and nothing it may delete now (not rolled up, or kept)
                self._size_stuck_at = (self._minute_done, self._hour_done)
                self._size_unmet(pages * page_size)
                return False
            conn.execute(f"PRAGMA incremental_vacuum({_VACUUM_PAGES})").fetchall()
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            if not free or pages * page_size <= self.max_bytes:
                # In WAL mode the file shrinks when the checkpoint copies the truncation.
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                self._last_checkpoint = time.monotonic()

    def _delete_for_size(self) -> bool:
        """One batch of the oldest data the size cap may remove, least needed first; True if
        any went."""
        return (self._delete_raw_batch(self._minute_done)
                or self._delete_stack_batch(self._minute_done)
                or self._delete_rollup_batch(MINUTE, self._hour_done, _MINUTE_BATCH_MS)
                or self._delete_events_batch(self._minute_done)
                or self._delete_hour_rollups_batch(self._hour_done, spend=False)
                or self._delete_hour_rollups_batch(self._spend_kept_from(), spend=True))

    def _spend_kept_from(self) -> int:
        """The hour spend from here (ms) on is never removed by the size cap: this UTC month
        (the monthly budgets, and today's spend after a restart) and the last 60 days (the
        monthly review, `report --since 30d`, against the 30 days before it)."""
        newest_s = self._newest_ts / 1000
        start = min(clock.utc_month_start(newest_s), newest_s - _SPEND_KEPT_S)
        return int(start - start % HOUR) * 1000

    def _delete_stack_batch(self, cut: int) -> bool:
        """Delete the oldest stack samples below `cut` (at most a batch), then the stacks no
        sample names once none is left below it; True if any."""
        conn = self._conn
        row = conn.execute("SELECT ts FROM stack_samples WHERE ts < ? ORDER BY ts LIMIT 1 "
                           "OFFSET ?", (cut, _STACK_BATCH_ROWS)).fetchone()
        if row is None and conn.execute("SELECT 1 FROM stack_samples WHERE ts < ? LIMIT 1",
                                        (cut,)).fetchone() is None:
            if self._stacks_pruned_for == cut:
                return False
            self._stacks_pruned_for = cut  # (one scan of the samples per rolled-up minute)
            with self._db.atomic():
                deleted = conn.execute("DELETE FROM stacks WHERE hash NOT IN "
                                       "(SELECT hash FROM stack_samples)").rowcount
            self._health.rows_pruned += deleted
            return deleted > 0
        bound = row[0] if row else cut
        with self._db.atomic():
            deleted = conn.execute("DELETE FROM stack_samples WHERE ts < ?", (bound,)).rowcount
        self._health.rows_pruned += deleted
        return True

    def _delete_events_batch(self, cut: int) -> bool:
        """Delete the oldest events that ended before `cut` (at most a batch); True if any.
        One still open (a budget crossing stands for its period, an idle GPU) stays."""
        with self._db.atomic():
            deleted = self._conn.execute(
                "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ended_at IS NOT "
                "NULL AND ended_at < ? ORDER BY started_at LIMIT ?)",
                (cut, _EVENT_BATCH_ROWS)).rowcount
        self._health.rows_pruned += deleted
        return deleted > 0

    def _delete_hour_rollups_batch(self, cut: int, *, spend: bool) -> bool:
        """Delete the oldest day of hour rollups below `cut`: the hour spend (schema.KIND_SPEND)
        with `spend`, the GPUs' and processes' without; True if any."""
        conn = self._conn
        which = "kind = ?" if spend else "kind != ?"
        oldest = conn.execute(f"SELECT min(bucket) FROM rollups WHERE res = ? AND {which}",
                              (HOUR, KIND_SPEND)).fetchone()[0]
        if oldest is None or oldest >= cut:
            return False
        bound = min(cut, oldest + _HOUR_BATCH_MS)
        with self._db.atomic():
            deleted = conn.execute(
                f"DELETE FROM rollups WHERE res = ? AND bucket < ? AND {which}",
                (HOUR, bound, KIND_SPEND)).rowcount
        self._health.rows_pruned += deleted
        return True

    def _size_met(self) -> None:
        self._size_stuck_at = None
        if self._problem_kind == "size":
            log.warning("the store %s is under its [store].max_size again", self.path)
            self._problem_kind = None
            self._health.problem = None

    def _size_unmet(self, size: int) -> None:
        """Over the cap with nothing left that it may remove: /v1/health's problem, said in
        the log once (each start, and again after another problem stood in its place)."""
        if self._problem_kind is None:
            self._set_problem("size", self._size_text(size))

    def _size_text(self, size: int) -> str:
        kept_from = self._spend_kept_from() / 1000
        spend_rows = self._conn.execute(
            "SELECT count(*) FROM rollups WHERE res = ? AND bucket >= ? AND kind = ?",
            (HOUR, int(kept_from * 1000), KIND_SPEND)).fetchone()[0]
        return (f"the store {self.path} is {_mib(size)} on disk (the database file), over its "
                f"[store].max_size {_mib(self.max_bytes)}, and holds nothing more the size cap "
                f"removes: {self._largest_tables()}; the hour spend since "
                f"{clock.utc_day(kept_from)} ({spend_rows} rows) is kept whatever the size; "
                "raise [store].max_size and restart mlcostd")

    def _largest_tables(self) -> str:
        """The three tables (with their indexes) that hold the most of the file, in words."""
        try:
            sizes: dict[str, int] = {}
            owner = {name: table for name, table in self._conn.execute(
                "SELECT name, tbl_name FROM sqlite_master")}
            for name, size in self._conn.execute(
                    "SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE"):
                table = owner.get(name, name)
                sizes[table] = sizes.get(table, 0) + size
        except sqlite3.Error:  # (an SQLite built without dbstat)
            return "its tables could not be measured (no dbstat in this SQLite)"
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:3]
        return ", ".join(f"{table} {_mib(size)}" for table, size in largest)

    def _checkpoint(self) -> None:
        now = time.monotonic()
        written = self._health.ticks_written
        if (
            now - self._last_checkpoint < _CHECKPOINT_EVERY_S
            and written - self._ticks_at_checkpoint < _CHECKPOINT_EVERY_TICKS
        ):
            return
        self._ticks_at_checkpoint = written
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self._last_checkpoint = now


# Recommendation texts go with the raw ticks a replay shows them at: a text older than the
# oldest tick kept is deleted once a newer one of the same recommendation is in force there, so
# each keeps the text of the oldest tick and its latest text, whatever its age.
_PRUNE_TEXTS = (
    "DELETE FROM recommendation_texts WHERE ts < ? AND EXISTS (SELECT 1 FROM "
    "recommendation_texts newer WHERE newer.id = recommendation_texts.id AND "
    "newer.ts > recommendation_texts.ts AND newer.ts <= ?)"
)

# Kinds likewise: a kind row older than the oldest raw tick kept goes once a newer row of the
# same process is in force there (each process keeps the kind of the oldest tick and its latest).
_PRUNE_KINDS = (
    "DELETE FROM process_kinds WHERE ts < ? AND EXISTS (SELECT 1 FROM process_kinds newer "
    "WHERE newer.proc = process_kinds.proc AND newer.ts > process_kinds.ts AND newer.ts <= ?)"
)

# (a minute of 256 processes is ~1 000 rows)
_INSERT_ROLLUPS = WideInsert(
    "INSERT OR REPLACE INTO rollups (res, bucket, kind, key, metric, n, sum, min, max)", 9)

_HOUR_ROLLUP = f"""
INSERT OR REPLACE INTO rollups (res, bucket, kind, key, metric, n, sum, min, max)
SELECT {HOUR}, :b, kind, key, metric, sum(n), sum(sum), min(min), max(max)
FROM rollups WHERE res = {MINUTE} AND bucket >= :b AND bucket < :e
GROUP BY kind, key, metric
"""


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.2f} MiB"
