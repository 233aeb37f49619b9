"""Read-only queries over a store: the report, the HTTP API and snapshot replay use these.

A `StoreReader` has its own read-only connection. Every public method runs in one short read
transaction under a deadline (a progress handler), so a slow query fails with `ReaderTimeout`
instead of holding a read snapshot that stops WAL checkpoints.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlite_utils

from daemon.sources.owners import decode_owner, workload_label
from daemon.sources.redact import redact_field, redact_stored
from daemon.sources.sample import GpuSample, GpuUse, HostPressure, ProcessSample, Sample
from daemon.store import rollup_rows
from daemon.store.schema import (
    GPU_METRIC_COLUMN,
    GPU_METRICS,
    HOUR,
    KIND_GPU,
    KIND_PROCESS,
    METRIC_SCALE,
    MINUTE,
    PROCESS_METRICS,
    decode_status,
    unscale,
    unscale_millis,
    unscale_tenths,
)

# Choose the finest data whose row count over the range stays small.
_RAW_MAX_SPAN_GPU_S = 3600  # 1 h of raw rows: 3 600 ticks x the host's GPUs scanned
_RAW_MAX_SPAN_PROCESS_S = 900  # raw process rows are scanned for all processes of a tick
_MINUTE_MAX_SPAN_S = 8 * 86400

# Raw per-sample values of each process metric, (ts, v) rows for one process.
_PROCESS_RAW = {
    "sm_share": "SELECT ts, sum(sm) AS v FROM proc_gpu_samples"
    " WHERE proc = :p AND ts >= :lo AND ts <= :hi GROUP BY ts",
    "gpu_memory_bytes": "SELECT ts, sum(mem) AS v FROM proc_gpu_samples"
    " WHERE proc = :p AND ts >= :lo AND ts <= :hi GROUP BY ts",
    "rss_bytes": "SELECT ts, rss AS v FROM proc_samples WHERE proc = :p AND ts >= :lo AND ts <= :hi",
    "cpu_percent": "SELECT ts, v FROM (SELECT ts, CASE WHEN ts - lag(ts) OVER w > 0"
    " AND cpu_ms >= lag(cpu_ms) OVER w THEN"
    " CAST(round((cpu_ms - lag(cpu_ms) OVER w) * 1000.0 / (ts - lag(ts) OVER w)) AS INTEGER)"
    " END AS v FROM proc_samples WHERE proc = :p AND ts >= :lo - 300000 AND ts <= :hi"
    " WINDOW w AS (PARTITION BY proc ORDER BY ts)) WHERE ts >= :lo",
}


# Each series' totals over a span of rollups: one seek of the covering series index
# (daemon.store.schema) per GPU metric and per metric of each process alive in the window,
# instead of a scan of every rollup row in the span sorted by series (a month of hour rollups at
# 64 processes is 213 000 rows; issue 23). A process's last_ts is written every minute or so
# (daemon.store.maintenance), hence the slack.
_LAST_SEEN_SLACK_MS = HOUR * 1000
# No process uses more than every core of its host: 100 % x Linux's most CPUs (NR_CPUS 8192).
# A store's figure beyond that (an edited or damaged file) is no figure: None, shown as "-".
MAX_CPU_PERCENT = 100.0 * 8192


def text_or(value: object, default: str = "") -> str:
    """A text column as text: NULL (the columns allow it; an edited store holds it) or a
    number or blob where text belongs is `default`."""
    return value if isinstance(value, str) else default


def _gpu_text(value: object) -> str:
    """A GPU's stored uuid, name or error on its way out of the store ("" where there is none):
    a store from before they were redacted at the source, or edited, holds what the driver or a
    scenario named them."""
    return redact_field(value) if isinstance(value, str) else ""


def stored_command(value: object) -> str:
    """A process's command line as read from the store, redacted once more on its way out
    (daemon.sources.redact.redact_stored: a store from another writer, from before a rule, or
    edited, holds what this daemon would have hidden; `snapshot --db` hides it too)."""
    return redact_stored(text_or(value))


def plausible_cpu_percent(value: float) -> float | None:
    return value if 0.0 <= value <= MAX_CPU_PERCENT else None  # NaN fails both tests
_SERIES_TOTALS = (
    "WITH series(kind, key, metric) AS ("
    f" SELECT {KIND_GPU}, gpu, m.column1 FROM gpus, (VALUES "
    + ", ".join(f"({code})" for code in GPU_METRICS.values()) + ") AS m"
    f" UNION ALL SELECT {KIND_PROCESS}, id, m.column1 FROM processes, (VALUES "
    + ", ".join(f"({code})" for code in PROCESS_METRICS.values()) + ") AS m"
    " WHERE (first_ts IS NULL OR first_ts <= :hi) AND (last_ts IS NULL OR last_ts >= :seen))"
    " SELECT s.kind, s.key, s.metric, sum(r.n), sum(r.sum), min(r.min), max(r.max)"
    " FROM series s JOIN rollups r INDEXED BY rollups_series ON r.kind = s.kind"
    " AND r.key = s.key AND r.metric = s.metric AND r.res = :res AND r.bucket >= :a"
    " AND r.bucket < :b GROUP BY s.kind, s.key, s.metric")


NOT_A_REGULAR_FILE = "not a regular file: a store is an SQLite file"


def no_store_at(path: str | os.PathLike[str]) -> str:
    """Why there is no store to open at `path` (one that is no regular file): nothing there,
    or something else there."""
    return f"{path} is {NOT_A_REGULAR_FILE}" if os.path.exists(path) else f"no store at {path}"


class ReaderTimeout(Exception):
    """A read query ran past its deadline and was cut off."""


def _writer_holds(path: str) -> bool:
    """Whether a daemon holds the store's writer flock (daemon.store.writer: one writer per
    database file). Opens and closes the file: only where no SQLite connection to it is open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return True  # cannot tell: read as if it were being written
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # also lets go of the flock, if taken
    return False


def _file_bytes(path: str) -> int | None:
    """The size of the file at `path`; None where there is none (or it cannot be looked at)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _read_only_extra(given: str, resolved: str, wal_bytes: int | None) -> str:
    """What a read-only URI needs beyond `mode=ro` where the store's folder cannot be written
    (a read-only mount, a backup volume): SQLite reads a WAL-mode store read-only only with its
    -shm and -wal beside it, or created there, and said "unable to open database file" (probe
    142 M3). With both there (a writer's: it has both open, whatever the -wal holds), SQLite
    reads them (it builds the index in memory where it cannot write the -shm). Else, with no
    writes in a -wal, the file alone is the store and no writer is on it: `immutable=1` reads
    it without either. With writes in a -wal and no -shm, immutable would ignore the -wal:
    refused, saying what to do."""
    if os.access(os.path.dirname(resolved), os.W_OK | os.X_OK):
        return ""
    if wal_bytes is not None and os.path.exists(resolved + "-shm"):
        return ""
    if not wal_bytes:
        return "&immutable=1"
    from daemon.store.shape import StoreOnReadOnlyFolder  # shape imports this module

    raise StoreOnReadOnlyFolder(
        f"{given} cannot be read where it is: its folder cannot be written (a read-only file "
        f"system?) and its {Path(resolved).name}-wal holds writes that SQLite reads only with "
        "a -shm file it must create beside it; copy the store and its -wal to a writable "
        "folder first (cp FILE FILE-wal DEST/)")


class StoreReader:
    """Read-only view of a store file. Safe beside a live writer, and from several threads:
    one read transaction at a time on its one connection (overlapping ones failed or hung)."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 5.0,
                 tidy: bool = False) -> None:
        """`tidy`, for a command that reads a store in a process of its own (`mlcostd report`):
        when no daemon is recording into it, read through a query-only read-write connection,
        so that SQLite removes the -wal and -shm files on close. A read-only connection, the
        last to close, leaves both beside the database. Never in the daemon's own process."""
        self.path = str(path)
        self.timeout_s = timeout_s
        # A FIFO held the open below (and _writer_holds') without end; a device or folder is no
        # store either. Missing or unreadable: SQLite's own error below says so.
        try:
            mode: int | None = os.stat(self.path).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise sqlite3.DatabaseError(NOT_A_REGULAR_FILE)
        resolved = str(Path(self.path).resolve())
        uri = "file:" + urllib.parse.quote(resolved)
        wal_bytes = _file_bytes(resolved + "-wal")
        # Whether a daemon records into the file, asked only where it is safe (`tidy`): a
        # command of its own, before its connection opens. None: not asked.
        self.recording: bool | None = _writer_holds(self.path) if tidy else None
        # Never where a -wal holds writes: the close would checkpoint them into the file and
        # delete the -wal, and a report must not change the store it reads (a copy sent as
        # evidence grew and lost its -wal: probe 142 L8). Read-only, both are left as found.
        writable = (tidy and not wal_bytes and os.access(self.path, os.W_OK)
                    and not self.recording)
        if not writable:
            uri += "?mode=ro" + _read_only_extra(self.path, resolved, wal_bytes)
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        if writable:
            conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA busy_timeout=1000")
        self.db = sqlite_utils.Database(conn, execute_plugins=False, recursive_triggers=False)
        self.conn = conn
        self._deadline = math.inf
        self._one_read = threading.RLock()
        conn.set_progress_handler(self._past_deadline, 1000)

    def _past_deadline(self) -> int:
        return 1 if time.perf_counter() > self._deadline else 0

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction under the deadline; always ended before returning."""
        with self._one_read:
            self._deadline = time.perf_counter() + self.timeout_s
            started = time.perf_counter()
            try:
                self.conn.execute("BEGIN")
                yield self.conn
            except sqlite3.OperationalError as error:
                if "interrupted" in str(error):
                    raise ReaderTimeout(
                        f"query on {self.path} was cut off after "
                        f"{time.perf_counter() - started:.2f} s (deadline {self.timeout_s} s); "
                        "ask for a shorter range or fewer points") from error
                raise
            finally:
                self._deadline = math.inf
                if self.conn.in_transaction:
                    self.conn.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        """Run any read-only SQL under the deadline; rows as dicts."""
        with self._read():
            return list(self.db.query(sql, params))

    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        """Run any read-only SQL under the deadline; rows as tuples, in the order the query
        names its columns (for reads of thousands of rows, whose dicts cost more than the
        query: an edge hour's ticks, queries._recorded_shares)."""
        with self._read() as conn:
            return conn.execute(sql, params).fetchall()

    # ------------------------------------------------------------------------- latest

    def _meta(self, conn: sqlite3.Connection, key: str) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def meta(self, key: str) -> object | None:
        """A fact recorded with Store.set_meta, or None."""
        rows = self.query("SELECT value FROM meta WHERE key = ?", (f"json:{key}",))
        if not rows:
            return None
        value = rows[0]["value"]
        # The column's INTEGER affinity stores a number's JSON text as that number.
        return value if isinstance(value, int | float) else json.loads(value)

    def latest(self) -> Sample | None:
        """The newest committed tick, rebuilt as model objects."""
        with self._read() as conn:
            newest = conn.execute("SELECT max(ts) FROM ticks").fetchone()[0]
        if newest is None:
            return None
        found = self.samples(newest / 1000, newest / 1000)
        return found[-1] if found else None

    def samples(self, since: float, until: float, max_samples: int = 600) -> list[Sample]:
        """Ticks in [since, until] rebuilt as Samples, at most `max_samples` evenly spread
        (every k-th tick), oldest first. For window figures such as the report's cost. The read
        transaction fetches the rows; the Samples are built after it ends, so a loaded host
        spends its slowness outside the reader's deadline and the WAL's read snapshot."""
        lo, hi = round(since * 1000), round(until * 1000)
        with self._read() as conn:
            count = conn.execute(
                "SELECT count(*) FROM ticks WHERE ts >= ? AND ts <= ?", (lo, hi)).fetchone()[0]
            if not count:
                return []
            step = max(1, math.ceil(count / max_samples))
            picked = ("SELECT ts FROM ticks WHERE ts >= :lo AND ts <= :hi AND tick % :k = 0")
            args = {"lo": lo, "hi": hi, "k": step}
            ticks = conn.execute(
                "SELECT ts, tick, nvml_status, io_some, io_full, cpu_some, io_some_us,"
                f" io_full_us, cpu_some_us FROM ticks WHERE ts IN ({picked}) ORDER BY ts",
                args).fetchall()
            gpu_rows = conn.execute(
                "SELECT s.ts, s.gpu, status, util, sm, mem, power_mw, temp, sm_clock, mem_clock,"
                " error, g.uuid, g.name, g.memory_total_bytes, g.memory_reserved_bytes"
                " FROM gpu_samples s"
                f" LEFT JOIN gpus g ON g.gpu = s.gpu WHERE s.ts IN ({picked})", args,
            ).fetchall()
            use_rows = conn.execute(
                f"SELECT ts, proc, gpu, mem, sm FROM proc_gpu_samples WHERE ts IN ({picked})",
                args,
            ).fetchall()
            # A process's facts once, not on each of its samples' rows: at 64 processes x 240
            # samples its command and user were 15 000 strings a snapshot's report held at once.
            process_rows = conn.execute(
                "SELECT id, pid, start_ms, ppid, user, command, owner FROM processes WHERE id IN"
                f" (SELECT DISTINCT proc FROM proc_samples WHERE ts IN ({picked}))", args,
            ).fetchall()
            proc_rows = conn.execute(
                "SELECT ts, proc, cpu_ms, rss, read_b, write_b, iowait_ms, state, threads,"
                f" threads_d FROM proc_samples WHERE ts IN ({picked})", args,
            ).fetchall()
        gpus: dict[int, list[GpuSample]] = {}
        for r in gpu_rows:
            # A GPU's uuid and name (the driver's or a scenario's text) and NVML's error, as
            # stored: redacted on their way out (`_gpu_text`; remembered, they repeat each tick)
            gpus.setdefault(r[0], []).append(GpuSample(
                index=r[1], uuid=_gpu_text(r[11]), name=_gpu_text(r[12]),
                status=decode_status(r[2]),
                utilization=unscale_tenths(r[3]), sm_activity=unscale_tenths(r[4]),
                memory_used_bytes=r[5], memory_total_bytes=r[13],
                memory_reserved_bytes=r[14],
                power_watts=unscale_millis(r[6]), temperature_c=r[7], sm_clock_mhz=r[8],
                memory_clock_mhz=r[9], error=_gpu_text(r[10]) if r[10] is not None else None))
        uses: dict[tuple[int, int], list[GpuUse]] = {}
        for ts, proc, gpu, mem, sm in use_rows:
            uses.setdefault((ts, proc), []).append(GpuUse(gpu, mem, sm / 10))
        known = {r[0]: (r[1], r[2] / 1000, r[3], r[4], stored_command(r[5]), decode_owner(r[6]))
                 for r in process_rows}
        procs: dict[int, list[ProcessSample]] = {}
        for r in proc_rows:
            facts = known.get(r[1])
            if facts is None:
                continue  # its process row is gone (retention): as the join left it out
            pid, start_time, ppid, user, command, owner = facts
            procs.setdefault(r[0], []).append(ProcessSample(
                pid=pid, start_time=start_time, ppid=ppid, user=user, command=command,
                gpus=tuple(uses.get((r[0], r[1]), ())), cpu_seconds=r[2] / 1000,
                rss_bytes=r[3], read_bytes=r[4], write_bytes=r[5],
                iowait_seconds=unscale_millis(r[6]), state=r[7], threads=r[8],
                threads_in_d=r[9], owner=dict(owner)))
        return [Sample(ts=t[0] / 1000, tick=t[1],
                       gpus=tuple(sorted(gpus.get(t[0], []), key=lambda g: g.index)),
                       processes=tuple(sorted(procs.get(t[0], ()),
                                              key=lambda p: (p.pid, p.start_time))),
                       host=HostPressure(
                           io_some_avg10=unscale(t[3], 0.01), io_full_avg10=unscale(t[4], 0.01),
                           cpu_some_avg10=unscale(t[5], 0.01), io_some_total_us=t[6],
                           io_full_total_us=t[7], cpu_some_total_us=t[8]),
                       nvml_status=decode_status(t[2]))
                for t in ticks]

    def ticks(self, since: float | None = None, until: float | None = None) -> list[int]:
        """Tick numbers of the raw ticks in [since, until] (seconds), oldest first."""
        lo = -(2**62) if since is None else round(since * 1000)
        hi = 2**62 if until is None else round(until * 1000)
        with self._read() as conn:
            return [
                r[0]
                for r in conn.execute(
                    "SELECT tick FROM ticks WHERE ts >= ? AND ts <= ? ORDER BY ts", (lo, hi)
                )
            ]

    # ------------------------------------------------------------------------ history

    def _resolution(self, span_s: float, raw_max_span_s: float) -> int:
        if span_s <= raw_max_span_s:
            return 1
        if span_s <= _MINUTE_MAX_SPAN_S:
            return MINUTE
        return HOUR

    def _history(
        self,
        kind: int,
        key: int,
        metric: str,
        code: int,
        raw_sql: str,
        raw_params: dict[str, Any],
        since: float,
        until: float,
        max_points: int,
        raw_max_span_s: float,
        conn: sqlite3.Connection,
        aligned: bool = False,
    ) -> list[tuple[float, float, float, float]]:
        lo, hi = round(since * 1000), round(until * 1000)
        res = self._resolution(until - since, raw_max_span_s)
        width = max(math.ceil((hi - lo + 1) / max(max_points, 1)), res * 1000)
        # Buckets from `lo`, or (aligned) on multiples of their width since the epoch: the same
        # buckets for every read of a moving window, so what is read from them does not move
        # with the moment it is asked (GET /v1/idle's `since`).
        origin = lo - lo % width if aligned else lo
        minute_done = self._meta(conn, "minute_done")
        hour_done = self._meta(conn, "hour_done")
        parts = []
        params: dict[str, Any] = {
            "kind": kind,
            "key": key,
            "metric": code,
            "lo": lo,
            "hi": hi,
            "w": width,
            "origin": origin,
            **raw_params,
        }
        rollup = (
            "SELECT bucket AS t, n, sum AS total, min AS lo_v, max AS hi_v"
            " FROM rollups INDEXED BY rollups_series"
            " WHERE kind = :kind AND key = :key AND metric = :metric AND res = {res}"
            " AND bucket >= {start} AND bucket <= :hi AND bucket < {stop}"
        )
        if res == HOUR:
            parts.append(
                rollup.format(res=HOUR, start=f":lo - {HOUR * 1000 - 1}", stop=":hour_done")
            )
            parts.append(
                rollup.format(
                    res=MINUTE,
                    start=f"max(:lo - {MINUTE * 1000 - 1}, :hour_done)",
                    stop=":minute_done",
                )
            )
        elif res == MINUTE:
            parts.append(
                rollup.format(res=MINUTE, start=f":lo - {MINUTE * 1000 - 1}", stop=":minute_done")
            )
        params["hour_done"] = hour_done
        params["minute_done"] = minute_done
        params["raw_lo"] = lo if res == 1 else max(lo, minute_done)
        raw = raw_sql.replace(":lo", ":raw_lo")
        parts.append(f"SELECT ts AS t, 1 AS n, v AS total, v AS lo_v, v AS hi_v FROM ({raw})")
        sql = (
            "SELECT max((t - :origin) / :w, 0) AS i, sum(n), sum(total), min(lo_v), max(hi_v),"
            " min(t) FROM (" + " UNION ALL ".join(parts)
            + ") WHERE total IS NOT NULL GROUP BY i ORDER BY i"
        )
        scale = METRIC_SCALE[metric]
        rows = conn.execute(sql, params).fetchall()
        # Each point at its bucket's start, but the first never before its first row (the
        # range's start, or where the recording began inside it).
        return [
            (max(origin + i * width, first if k == 0 else 0) / 1000, total * scale / n,
             low * scale, high * scale)
            for k, (i, n, total, low, high, first) in enumerate(rows)
        ]

    def gpu_history(
        self, index: int, metric: str, since: float, until: float, max_points: int = 300,
        *, aligned: bool = False,
    ) -> list[tuple[float, float, float, float]]:
        """(ts, avg, min, max) points of one GPU metric over [since, until], in model units.

        Reads raw rows for short ranges, minute rollups up to 8 days, hour rollups beyond.
        `aligned`: buckets on multiples of their width since the epoch, not from `since`.
        """
        if metric not in GPU_METRICS:
            raise ValueError(f"unknown GPU metric {metric!r}; one of {sorted(GPU_METRICS)}")
        column = GPU_METRIC_COLUMN[metric]
        raw = (
            f"SELECT ts, {column} AS v FROM gpu_samples"
            " WHERE ts >= :lo AND ts <= :hi AND gpu = :gpu"
        )
        with self._read() as conn:
            return self._history(
                KIND_GPU,
                index,
                metric,
                GPU_METRICS[metric],
                raw,
                {"gpu": index},
                since,
                until,
                max_points,
                _RAW_MAX_SPAN_GPU_S,
                conn,
                aligned,
            )

    def process_history(
        self,
        pid: int,
        start_time: float,
        metric: str,
        since: float,
        until: float,
        max_points: int = 300,
    ) -> list[tuple[float, float, float, float]]:
        """(ts, avg, min, max) points of one process metric; [] for an unknown process."""
        if metric not in PROCESS_METRICS:
            raise ValueError(f"unknown process metric {metric!r}; one of {sorted(PROCESS_METRICS)}")
        with self._read() as conn:
            row = conn.execute(
                "SELECT id FROM processes WHERE pid = ? AND start_ms = ?",
                (pid, round(start_time * 1000)),
            ).fetchone()
            if row is None:
                return []
            return self._history(
                KIND_PROCESS,
                row[0],
                metric,
                PROCESS_METRICS[metric],
                _PROCESS_RAW[metric],
                {"p": row[0]},
                since,
                until,
                max_points,
                _RAW_MAX_SPAN_PROCESS_S,
                conn,
            )

    # ------------------------------------------------------------------------ summary

    def window_summary(self, since: float, until: float) -> dict[str, Any]:
        """What `mlcostd report --json` shows for [since, until], from raw samples."""
        lo, hi = round(since * 1000), round(until * 1000)
        with self._read() as conn:
            ticks = conn.execute(
                "SELECT count(*) FROM ticks WHERE ts >= ? AND ts <= ?", (lo, hi)
            ).fetchone()[0]
            return {
                "window": {"since": since, "until": until, "ticks": ticks},
                "gpus": self._gpu_summary(conn, lo, hi),
                "processes": self._process_summary(conn, lo, hi),
            }

    def rollup_summary(self, since: float, until: float, *,
                       raw_edges: tuple[bool, bool] = (False, False)) -> dict[str, Any]:
        """What window_summary gives, from the rollups: hour rollups for the whole hours
        rolled up so far, minute rollups around them. For ranges a raw read cannot answer in
        time (a day of 64 processes is millions of rows). Averages are exact (sum and count);
        memory is the largest seen; counters (CPU time, bytes read) and the processes' GPUs
        are not in the rollups: a process's GPUs are those it held at its last raw sample
        (none once raw samples are gone), its read and write bytes and I/O wait None.
        `raw_edges` (at its start, at its end): the part of the minute the range starts or
        ends in that it holds, from that minute's raw ticks where they are kept, not none of
        it or the whole minute (a range cut where the GPUs changed model: a minute rollup holds
        both models' ticks); where they are not, the minute counts whole in the range it ends
        (at its start) and not in the one it starts (at its end)."""
        lo, hi = round(since * 1000), round(until * 1000)
        with self._read() as conn:
            minute_done, hour_done = self._meta(conn, "minute_done"), self._meta(conn, "hour_done")
            edges = self._raw_edges(conn, lo, hi, minute_done, raw_edges)
            whole = lo, hi  # (the range; lo and hi become what the rollups are read for)
            step = MINUTE * 1000
            if raw_edges[0] and lo % step:
                lo = edges[0][1] if edges[0] else lo - lo % step
            if raw_edges[1] and (hi + 1) % step and hi - hi % step + step <= minute_done:
                hi = edges[1][0] - 1 if edges[1] else hi - hi % step - 1
            h_lo = -(-lo // (HOUR * 1000)) * HOUR * 1000
            h_hi = max(h_lo, min(hi // (HOUR * 1000) * HOUR * 1000, hour_done))
            spans = [(HOUR, h_lo, h_hi), (MINUTE, lo, min(h_lo, hi)),
                     (MINUTE, max(h_hi, lo), min(hi, minute_done))]
            totals: dict[tuple[int, int, int], list[int]] = {}

            def add(rows: Iterable[Sequence[int]]) -> None:
                """Sum rollup rows (kind, key, metric, n, sum, min, max) into `totals`."""
                for kind, key, metric, n, total, low, high in rows:
                    found = totals.get((kind, key, metric))
                    if found is None:
                        totals[(kind, key, metric)] = [n, total, low, high]
                    else:
                        found[0] += n
                        found[1] += total
                        found[2], found[3] = min(found[2], low), max(found[3], high)

            for res, a, b in spans:
                if b <= a:
                    continue
                add(conn.execute(_SERIES_TOTALS, {"res": res, "a": a, "b": b,
                                                  "seen": lo - _LAST_SEEN_SLACK_MS, "hi": hi}))
            for edge in edges:  # (as the rollups of their part of a minute)
                if edge is not None:
                    add(rollup_rows.gpu_rows(conn, *edge))
                    add(rollup_rows.process_rows(conn, *edge))
            lo, hi = whole  # (a raw end edge's minute is rolled up: no tail after it)
            # The minutes not rolled up yet (the last one or two): their raw ticks, as the
            # rollups they will become (a process that started a minute ago is in the report);
            # where nothing is rolled up at all (a store younger than its first rollup), raw.
            tail = max(lo, minute_done)
            tail_ticks = conn.execute("SELECT count(*) FROM ticks WHERE ts >= ? AND ts <= ?",
                                      (tail, hi)).fetchone()[0]
            if not totals:
                return {"window": {"since": since, "until": until, "ticks": tail_ticks},
                        "gpus": self._gpu_summary(conn, tail, hi),
                        "processes": self._process_summary(conn, tail, hi)}
            covered = self._covered_ticks(totals) + tail_ticks
            if tail_ticks:
                add(rollup_rows.gpu_rows(conn, tail, hi + 1))
                add(rollup_rows.process_rows(conn, tail, hi + 1))
            return {"window": {"since": since, "until": until, "ticks": covered},
                    "gpus": self._gpu_rollup_summary(conn, totals),
                    "processes": self._process_rollup_summary(conn, totals, lo, hi)}

    @staticmethod
    def _raw_edges(conn: sqlite3.Connection, lo: int, hi: int, minute_done: int,
                   wanted: tuple[bool, bool]) -> tuple[tuple[int, int] | None, ...]:
        """rollup_summary's raw edges: ([lo, the next minute), [hi's minute, hi + 1)) in ms,
        each where wanted, the range cuts a minute there that is rolled up, and that minute's
        raw ticks are all kept (the store's first raw tick is not after its start: raw
        retention may have removed part of it); else None."""
        step = MINUTE * 1000
        out: list[tuple[int, int] | None] = [None, None]
        if not any(wanted) or hi - lo < step:
            return (None, None)
        first = conn.execute("SELECT min(ts) FROM ticks").fetchone()[0]
        head = (lo, -(-lo // step) * step)
        tail = (hi // step * step, hi + 1)
        for i, (a, b) in enumerate((head, tail)):
            start = a - a % step
            if wanted[i] and a < b and (a % step if i == 0 else b % step) \
                    and start + step <= minute_done and first is not None and first <= start:
                out[i] = (a, b)
        if out[0] is not None and out[1] is not None and out[0][1] > out[1][0]:
            return (None, None)  # (one minute: window_summary's, not this one's)
        return tuple(out)

    @staticmethod
    def _covered_ticks(totals: dict[tuple[int, int, int], list[int]]) -> int:
        """Ticks the rollups cover: the utilization samples of the GPU seen most."""
        counts = [v[0] for (kind, _, metric), v in totals.items()
                  if kind == KIND_GPU and metric == GPU_METRICS["utilization"]]
        return max(counts, default=0)

    def _gpu_rollup_summary(self, conn: sqlite3.Connection,
                            totals: dict[tuple[int, int, int], list[int]]) -> list[dict[str, Any]]:
        def avg(key: int, metric: str) -> float | None:
            found = totals.get((KIND_GPU, key, GPU_METRICS[metric]))
            return found[1] / found[0] * METRIC_SCALE[metric] if found and found[0] else None

        def high(key: int, metric: str) -> int | None:
            found = totals.get((KIND_GPU, key, GPU_METRICS[metric]))
            return found[3] if found else None

        gpus = []
        for index in sorted({key for kind, key, _ in totals if kind == KIND_GPU}):
            facts = conn.execute(
                "SELECT uuid, name, memory_total_bytes, memory_reserved_bytes FROM gpus"
                " WHERE gpu = ?", (index,)).fetchone() or ("", "", None, None)
            found = totals.get((KIND_GPU, index, GPU_METRICS["utilization"]))
            gpus.append({"index": index, "uuid": _gpu_text(facts[0]), "name": _gpu_text(facts[1]),
                         "utilization": avg(index, "utilization"),
                         "sm_activity": avg(index, "sm_activity"),
                         "memory_used_bytes": high(index, "memory_used_bytes"),
                         "memory_peak_bytes": high(index, "memory_used_bytes"),
                         "memory_total_bytes": facts[2], "memory_reserved_bytes": facts[3],
                         "power_watts": avg(index, "power_watts"),
                         "samples": found[0] if found else 0, "status": "ok"})
        return gpus

    def _process_rollup_summary(self, conn: sqlite3.Connection,
                                totals: dict[tuple[int, int, int], list[int]], lo: int,
                                hi: int) -> list[dict[str, Any]]:
        procs = {key for kind, key, _ in totals if kind == KIND_PROCESS}
        out = []
        for proc, (pid, start_ms, ppid, user, command, owner_text) in self._process_facts(
                conn, procs):
            def metric(name: str, proc: int = proc) -> list[int] | None:
                return totals.get((KIND_PROCESS, proc, PROCESS_METRICS[name]))

            sm, memory, cpu, rss = (metric(n) for n in ("sm_share", "gpu_memory_bytes",
                                                        "cpu_percent", "rss_bytes"))
            first_ts, last_ts = conn.execute(
                "SELECT first_ts, last_ts FROM processes WHERE id = ?", (proc,)).fetchone()
            held = [r[0] for r in conn.execute(
                "SELECT gpu FROM proc_gpu_samples WHERE ts = ? AND proc = ? ORDER BY gpu",
                (last_ts, proc))] if last_ts is not None else []
            out.append({
                "pid": pid, "start_time": start_ms / 1000, "ppid": ppid, "user": text_or(user),
                "command": stored_command(command), "owner": (owner := decode_owner(owner_text)),
                "workload": workload_label(owner), "gpus": held,
                "gpu_memory_bytes": memory[3] if memory else 0,
                "gpu_memory_peak_bytes": memory[3] if memory else 0,
                "sm_share": sm[1] / sm[0] * METRIC_SCALE["sm_share"] if sm and sm[0] else 0.0,
                "cpu_percent": plausible_cpu_percent(
                    cpu[1] / cpu[0] * METRIC_SCALE["cpu_percent"] if cpu and cpu[0] else 0.0),
                "rss_bytes": rss[3] if rss else None, "io_wait_seconds": None,
                "read_bytes": None, "write_bytes": None, "threads_in_d_max": None,
                "first_seen": max(lo, first_ts or lo) / 1000,
                "last_seen": min(hi, last_ts or hi) / 1000,
            })
        return out

    def _gpu_summary(self, conn: sqlite3.Connection, lo: int, hi: int) -> list[dict[str, Any]]:
        gpus = []
        for gpu, samples, util, sm, power, peak, last_ts in conn.execute(
            "SELECT gpu, count(*), avg(util), avg(sm), avg(power_mw), max(mem), max(ts)"
            " FROM gpu_samples WHERE ts >= ? AND ts <= ? GROUP BY gpu ORDER BY gpu",
            (lo, hi),
        ).fetchall():
            facts = conn.execute(
                "SELECT uuid, name, memory_total_bytes, memory_reserved_bytes FROM gpus"
                " WHERE gpu = ?", (gpu,)
            ).fetchone() or ("", "", None, None)
            mem, status = conn.execute(
                "SELECT mem, status FROM gpu_samples WHERE ts = ? AND gpu = ?", (last_ts, gpu)
            ).fetchone()
            gpus.append(
                {
                    "index": gpu,
                    "uuid": _gpu_text(facts[0]),
                    "name": _gpu_text(facts[1]),
                    "utilization": unscale(util, 0.1),
                    "sm_activity": unscale(sm, 0.1),
                    "memory_used_bytes": mem,
                    "memory_peak_bytes": peak,
                    "memory_total_bytes": facts[2],
                    "memory_reserved_bytes": facts[3],
                    "power_watts": unscale(power, 0.001),
                    "samples": samples,
                    "status": decode_status(status),
                }
            )
        return gpus

    def _process_summary(self, conn: sqlite3.Connection, lo: int, hi: int) -> list[dict[str, Any]]:
        # Each process's samples counted in one pass, its first and last sample then read by
        # their primary key (ts, proc): three passes, each sorted by process, were a third of
        # a 15 min report of 64 processes (bench/report.py).
        counters = "ts, cpu_ms, read_b, write_b, iowait_ms"
        stats: dict[int, tuple[int, int | None]] = {}
        first: dict[int, tuple[Any, ...]] = {}
        last: dict[int, tuple[Any, ...]] = {}
        for proc, samples, threads_d_max, first_ts, last_ts in conn.execute(
                "SELECT proc, count(*), max(threads_d), min(ts), max(ts) FROM proc_samples"
                " WHERE ts >= ? AND ts <= ? GROUP BY proc", (lo, hi)).fetchall():
            stats[proc] = (samples, threads_d_max)
            first[proc] = conn.execute(f"SELECT {counters} FROM proc_samples WHERE ts = ? AND "
                                       "proc = ?", (first_ts, proc)).fetchone()
            last[proc] = conn.execute(f"SELECT {counters}, rss FROM proc_samples WHERE ts = ? "
                                      "AND proc = ?", (last_ts, proc)).fetchone()
        sm_sum: dict[int, int] = {}
        gpus_held: dict[int, list[int]] = {}
        peak: dict[int, int | None] = {}  # the most GPU memory it held at once
        for proc, gpu, sm, most in conn.execute(
            "SELECT proc, gpu, sum(sm), max(mem) FROM proc_gpu_samples WHERE ts >= ? AND ts <= ?"
            " GROUP BY proc, gpu ORDER BY proc, gpu",
            (lo, hi),
        ):
            sm_sum[proc] = sm_sum.get(proc, 0) + sm
            gpus_held.setdefault(proc, []).append(gpu)
            peak[proc] = most
        # On one GPU its peak is that GPU's; on several, the largest sum of one tick.
        several = [proc for proc, held in gpus_held.items() if len(held) > 1]
        if several:  # one pass over the window for all of them
            peak.update(conn.execute(
                "SELECT proc, max(m) FROM (SELECT proc, sum(mem) AS m FROM proc_gpu_samples"
                " WHERE ts >= ? AND ts <= ? AND proc IN (SELECT value FROM json_each(?))"
                " GROUP BY ts, proc) GROUP BY proc", (lo, hi, json.dumps(several))))
        out = []
        for proc, (pid, start_ms, ppid, user, command, owner_text) in self._process_facts(
                conn, first):
            f, l_ = first[proc], last[proc]
            samples, threads_d_max = stats[proc]
            held, last_mem = conn.execute(
                "SELECT count(*), sum(mem) FROM proc_gpu_samples WHERE ts = ? AND proc = ?",
                (l_[0], proc),
            ).fetchone()
            if not held:
                last_mem = 0  # holds no GPU at its last sample (None: held, size unknown)
            wall_ms = l_[0] - f[0]

            def delta(column: int, proc: int = proc) -> int | None:
                a, b = first[proc][column], last[proc][column]
                if a is None or b is None:
                    a, b = self._known_counter_ends(conn, proc, column, lo, hi)
                return None if a is None or b is None else b - a

            cpu_delta = delta(1)
            iowait = delta(4)
            out.append(
                {
                    "pid": pid,
                    "start_time": start_ms / 1000,
                    "ppid": ppid,
                    "user": text_or(user),
                    "command": stored_command(command),
                    "owner": (owner := decode_owner(owner_text)),
                    "workload": workload_label(owner),
                    "gpus": gpus_held.get(proc, []),
                    "gpu_memory_bytes": last_mem,
                    "gpu_memory_peak_bytes": peak.get(proc, 0),
                    "sm_share": sm_sum.get(proc, 0) / 10 / samples,
                    "cpu_percent": plausible_cpu_percent(
                        (cpu_delta or 0) / wall_ms * 100 if wall_ms > 0 else 0.0),
                    "rss_bytes": l_[5],
                    "io_wait_seconds": None if iowait is None else iowait / 1000,
                    "read_bytes": delta(2),
                    "write_bytes": delta(3),
                    "threads_in_d_max": threads_d_max,
                    "first_seen": f[0] / 1000,
                    "last_seen": l_[0] / 1000,
                }
            )
        return out

    def _process_facts(
        self, conn: sqlite3.Connection, procs: Iterable[int]
    ) -> list[tuple[int, tuple[int, int, int, str, str, str | None]]]:
        rows = []
        for proc in procs:
            r = conn.execute(
                "SELECT pid, start_ms, ppid, user, command, owner FROM processes WHERE id = ?",
                (proc,)
            ).fetchone()
            if r is not None:
                rows.append((proc, r))
        rows.sort(key=lambda item: (item[1][0], item[1][1]))
        return rows

    def _known_counter_ends(
        self, conn: sqlite3.Connection, proc: int, column: int, lo: int, hi: int
    ) -> tuple[int | None, int | None]:
        """First and last non-null value of a counter, for counters not always known."""
        name = ("ts", "cpu_ms", "read_b", "write_b", "iowait_ms")[column]
        where = f"proc = ? AND ts >= ? AND ts <= ? AND {name} IS NOT NULL"
        a = conn.execute(
            f"SELECT {name} FROM proc_samples WHERE {where} ORDER BY ts LIMIT 1", (proc, lo, hi)
        ).fetchone()
        b = conn.execute(
            f"SELECT {name} FROM proc_samples WHERE {where} ORDER BY ts DESC LIMIT 1",
            (proc, lo, hi),
        ).fetchone()
        return (a[0] if a else None, b[0] if b else None)

    # ------------------------------------------------------------------------- sizes

    def table_bytes(self) -> dict[str, int]:
        """Bytes on disk per table and index, measured with the dbstat virtual table."""
        with self._read() as conn:
            return {
                name: size
                for name, size in conn.execute(
                    "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY name"
                )
            }

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
