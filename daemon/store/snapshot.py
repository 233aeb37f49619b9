"""Snapshot files: a time range of a store, copied into a new store file of the same schema.

A snapshot *is* a store (below's idea): the same tables, holding the range's raw samples,
rollups, processes, stacks, events and recommendations (with their texts over the range),
plus a `snapshot` table of facts about the copy (host, instance, price and its source, the
range, the mlcost version, the trigger).
So `daemon.replay.Replay`, `StoreReader` and `mlcostd report --db` read it unchanged.

How it is written, and why:

- from the daemon's file through its own read-only connection (ATTACH ... mode=ro): one read
  transaction, so the copy is consistent and the writer is never blocked (WAL);
- into a temporary file (0600 from its first byte) in the destination's folder, then fsync and
  rename: a reader never sees half a snapshot, a crash leaves no file under the final name;
- the copy of the range is built by INSERT ... SELECT under a deadline (a progress handler),
  so a huge range fails with SnapshotError instead of running for ever;
- command lines, event details and recommendation bodies (and their texts), process kinds,
  stack reasons and frames, sampler errors, meter readings and the host's facts are passed
  through the redaction of daemon.sources.redact once more on the way out (they were redacted
  at the source; a file that leaves the host is checked again);
- journal_mode DELETE: one self-contained file, nothing beside it.

Blocking: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import sqlite3
import time
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from daemon import __version__, clock
from daemon.sources.owners import decode_owner, encode_owner
from daemon.sources.redact import (
    redact_document,
    redact_name,
    redact_stored,
    redact_stored_json,
)
from daemon.sources.safe_text import one_line
from daemon.store.errors import damaged_store, is_damaged
from daemon.store.files import (
    RefusedFile,
    check_existing,
    open_checked,
    open_private,
    private_folder,
    remove_stale_temp_files,
    temp_path,
)
from daemon.store.reader import StoreReader, no_store_at
from daemon.store.schema import (
    HOUR,
    MIGRATIONS,
    MINUTE,
    SCHEMA_VERSION,
    pack_text,
    unpack_text,
)

SNAPSHOT_TABLE = "snapshot"  # key -> JSON value; only snapshots have it
SNAPSHOT_SUFFIX = ".db"
HTML_SUFFIX = ".html"
DEFAULT_TIMEOUT_S = 60.0
MAX_SINCE_S = 7 * clock.DAY_S  # a snapshot longer than this is a store copy, not an incident
COPY_CACHE_KIB = 256  # SQLite page cache of the copy's connection, each of its two files


class SnapshotError(Exception):
    """A snapshot cannot be written or read; the message names the file and the fix."""


class BadSnapshotRequest(SnapshotError):
    """What was asked cannot be done as asked (a range that ends before it starts, a malformed
    upload URL): the caller's input is wrong, not the store or the disk."""


class NotAStore(SnapshotError):
    """The file to take a snapshot of is no mlcostd store, or a damaged one: refused by the
    command as `mlcostd report --db` refuses it (exit status 2); the daemon's own store that
    cannot be read is its failure, not the request's (the API's 5xx)."""


class EmptySnapshotRange(SnapshotError):
    """The range asked for holds no tick: a snapshot of it would replay nothing. The message
    names the range and what the store holds."""


@dataclass(frozen=True)
class SnapshotInfo:
    """What was written (or what a snapshot file says about itself)."""

    path: str
    bytes: int
    since: float
    until: float
    ticks: int
    created_at: float
    trigger: dict[str, Any] | None
    seconds: float = 0.0  # wall time the copy took
    cpu_seconds: float = 0.0  # CPU time of the writing thread
    first_tick: float | None = None  # its first raw tick (after `since` in a young store)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _uri(path: Path, mode: str) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + f"?mode={mode}"


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> str:
    names = [r[1] for r in conn.execute(f"PRAGMA {schema}.table_info({table})")]
    return ", ".join(f'"{n}"' for n in names)


# (table, WHERE over the source rows). :lo/:hi are the range in ms; keep_procs holds the ids of
# the processes the range mentions.
_RANGE_COPIES: tuple[tuple[str, str], ...] = (
    ("gpus", "1"),
    ("ticks", "ts >= :lo AND ts <= :hi"),
    ("gpu_samples", "ts >= :lo AND ts <= :hi"),
    ("proc_samples", "ts >= :lo AND ts <= :hi"),
    ("proc_gpu_samples", "ts >= :lo AND ts <= :hi"),
    ("rollups", f"(res = {MINUTE} AND bucket >= :lo - {MINUTE * 1000} AND bucket <= :hi) OR "
                f"(res = {HOUR} AND bucket >= :lo - {HOUR * 1000} AND bucket <= :hi)"),
    ("stack_samples", "ts >= :lo AND ts <= :hi"),
    # each meter's readings in the range and the one before it (a unit cost is a difference)
    ("meter_readings", "ts <= :hi AND ts >= coalesce((SELECT max(p.ts) FROM src.meter_readings "
                       "p WHERE p.kind = meter_readings.kind AND p.name = meter_readings.name "
                       "AND p.ts <= :lo), :lo)"),
    ("stacks", "hash IN (SELECT hash FROM src.stack_samples WHERE ts >= :lo AND ts <= :hi)"),
    ("stack_status", "proc IN (SELECT id FROM temp.keep_procs)"),
    ("processes", "id IN (SELECT id FROM temp.keep_procs)"),
    ("events", "started_at <= :hi AND (ended_at IS NULL OR ended_at >= :lo)"),
    ("recommendations", "last_seen >= :lo AND first_seen <= :hi"),
    # each copied recommendation's texts in the range, and the one in force at its start
    ("recommendation_texts",
     "id IN (SELECT id FROM src.recommendations WHERE last_seen >= :lo AND first_seen <= :hi) "
     "AND ts <= :hi AND ts >= coalesce((SELECT max(p.ts) FROM src.recommendation_texts p "
     "WHERE p.id = recommendation_texts.id AND p.ts <= :lo), :lo)"),
    # each kept process's kinds in the range, and the one in force at its start
    ("process_kinds",
     "proc IN (SELECT id FROM temp.keep_procs) AND ts <= :hi AND ts >= coalesce((SELECT "
     "max(p.ts) FROM src.process_kinds p WHERE p.proc = process_kinds.proc AND p.ts <= :lo), "
     ":lo)"),
    ("meta", "1"),
)


def _redact_json(text: str | None) -> str | None:
    """An event's detail or a recommendation's body, as every reader of a store reads it."""
    return redact_stored_json(text) if isinstance(text, str) and text else text


def _redact_text(text: str | None) -> str | None:
    """A command line or other stored text, as every reader of a store reads it."""
    return redact_stored(text) if isinstance(text, str) and text else text


def _redact_name(text: str | None) -> str | None:
    """A meter reading's name, as every reader of a store reads it (queries.meter_readings)."""
    return redact_name(text) if isinstance(text, str) and text else text


def _redact_owner(text: str | None) -> str | None:
    """A process's owner (JSON), as every reader of a store reads it (owners.decode_owner)."""
    return encode_owner(decode_owner(text)) if isinstance(text, str) and text else text


def _redact_packed_json(value: bytes | str | None) -> bytes | str | None:
    """A recommendation_texts body (compressed JSON: schema.pack_text), redacted like a body."""
    if value is None:
        return None
    redacted = _redact_json(unpack_text(value))
    return pack_text(redacted) if isinstance(value, bytes) and redacted is not None else redacted


def write_snapshot(db: str | os.PathLike[str], out: str | os.PathLike[str], since: float,
                   until: float, *, trigger: dict[str, Any] | None = None,
                   timeout_s: float = DEFAULT_TIMEOUT_S, empty_ok: bool = False) -> SnapshotInfo:
    """Copy [since, until] (Unix seconds) of the store `db` into a new snapshot file `out`
    (atomically, mode 0600). A range that holds no tick raises EmptySnapshotRange and writes
    nothing, unless `empty_ok` (an incident trigger's range: its facts are kept whatever the
    store holds). Raises SnapshotError saying what went wrong and what to do."""
    source, target = Path(db), Path(out)
    if not source.is_file():
        raise SnapshotError(f"{no_store_at(source)}; start the recorder (`mlcostd run`) or pass "
                            "--db with the daemon's database")
    if until < since:
        raise BadSnapshotRequest(f"the range ends ({until:.0f}) before it starts ({since:.0f}); "
                            "give --since a positive duration and --until a later time")
    for own in (source, Path(f"{source}-wal"), Path(f"{source}-shm")):
        if target.exists() and own.exists() and os.path.samefile(target, own):
            raise SnapshotError(f"{target} is the store itself ({source}); give --out another "
                                "file name")
    try:  # replaced at the end: only a file mlcostd may use, never a link, FIFO or device
        check_existing(target)
    except RefusedFile as exc:
        raise SnapshotError(str(exc)) from None
    started, cpu_started = time.perf_counter(), time.thread_time()
    try:
        private_folder(target.parent)
    except OSError as exc:
        raise SnapshotError(f"cannot create the folder {target.parent} for {target.name}: "
                            f"{exc.strerror}; pass --out with a writable path") from None
    tmp = temp_path(target)  # found and removed by prune() if this process is killed
    try:
        os.close(open_private(tmp, os.O_WRONLY | os.O_EXCL))
    except OSError as exc:
        raise SnapshotError(f"cannot write into {target.parent}: {exc.strerror}; pass --out "
                            "with a writable path") from None
    try:
        ticks, first_tick = _copy(source, tmp, since, until, trigger, timeout_s, empty_ok)
        fd = open_checked(tmp)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        _fsync_folder(target.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return SnapshotInfo(path=str(target), bytes=target.stat().st_size, since=since, until=until,
                        ticks=ticks, created_at=clock.now(), trigger=trigger,
                        seconds=time.perf_counter() - started,
                        cpu_seconds=time.thread_time() - cpu_started, first_tick=first_tick)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _copy(source: Path, tmp: Path, since: float, until: float,
          trigger: dict[str, Any] | None, timeout_s: float,
          empty_ok: bool) -> tuple[int, float | None]:
    """Copy the range into `tmp`: (its ticks, the first one's time or None)."""
    conn = sqlite3.connect(_uri(tmp, "rw"), uri=True, isolation_level=None)
    deadline = time.perf_counter() + timeout_s
    conn.set_progress_handler(lambda: 1 if time.perf_counter() > deadline else 0, 1000)
    try:
        conn.execute("PRAGMA journal_mode=OFF")  # a temporary file: a crash just deletes it
        conn.execute("PRAGMA synchronous=OFF")  # fsync once at the end
        conn.execute("PRAGMA page_size=4096")
        # The copy appends pages once: a small page cache serves it as fast as the default 2 MB,
        # which the daemon's allocator would keep after the snapshot (bench/snapshot_memory.py).
        conn.execute(f"PRAGMA cache_size=-{COPY_CACHE_KIB}")
        db = sqlite_utils.Database(conn, execute_plugins=False)
        for migration in MIGRATIONS:
            migration(db)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute(f"CREATE TABLE {SNAPSHOT_TABLE} (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("ATTACH DATABASE ? AS src", (_uri(source, "ro"),))
        conn.execute("SELECT count(*) FROM src.sqlite_master")  # a non-database fails here
        conn.execute(f"PRAGMA src.cache_size=-{COPY_CACHE_KIB}")
        # (stack reasons repeat over thousands of samples: each one redacted once)
        conn.create_function("redact_text", 1, functools.lru_cache(maxsize=4096)(_redact_text),
                             deterministic=True)
        conn.create_function("redact_json", 1, _redact_json, deterministic=True)
        conn.create_function("redact_name", 1, _redact_name, deterministic=True)
        conn.create_function("redact_owner", 1, _redact_owner, deterministic=True)
        conn.create_function("redact_packed_json", 1, _redact_packed_json, deterministic=True)
        lo, hi = round(since * 1000), round(until * 1000)
        conn.execute("BEGIN")  # one read transaction over the source: a consistent copy
        version = conn.execute("PRAGMA src.user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            newer = version > SCHEMA_VERSION
            raise SnapshotError(
                f"the store {source} has schema version {version}, "
                f"{'newer' if newer else 'older'} than this mlcostd's ({SCHEMA_VERSION}); "
                + ("upgrade mlcost" if newer else "start `mlcostd run` on it once to upgrade it"))
        params = {"lo": lo, "hi": hi}
        conn.execute("CREATE TEMP TABLE keep_procs (id INTEGER PRIMARY KEY)")
        conn.execute(
            "INSERT OR IGNORE INTO temp.keep_procs SELECT DISTINCT proc FROM src.proc_samples "
            "WHERE ts >= :lo AND ts <= :hi UNION SELECT DISTINCT proc FROM src.stack_samples "
            "WHERE ts >= :lo AND ts <= :hi UNION SELECT DISTINCT key FROM src.rollups WHERE "
            f"kind = 1 AND ((res = {MINUTE} AND bucket >= :lo - {MINUTE * 1000} AND bucket <= :hi)"
            f" OR (res = {HOUR} AND bucket >= :lo - {HOUR * 1000} AND bucket <= :hi))", params)
        for table, where in _RANGE_COPIES:
            columns = _columns(conn, "main", table)
            selected = columns
            if table == "processes":  # its command line; its owner (pod, unit, Slurm names)
                selected = columns.replace('"command"', 'redact_text("command")').replace(
                    '"owner"', 'redact_owner("owner")')
            elif table == "stack_samples":
                selected = columns.replace('"reason"', 'redact_text("reason")')
            elif table == "stack_status":
                selected = columns.replace('"error"', 'redact_text("error")')
            elif table == "events":
                selected = columns.replace('"detail"', 'redact_json("detail")')
            elif table == "recommendations":
                selected = columns.replace('"body"', 'redact_json("body")')
            elif table == "recommendation_texts":
                selected = columns.replace('"body"', 'redact_packed_json("body")')
            elif table == "process_kinds":
                selected = columns.replace('"body"', 'redact_json("body")')
            elif table == "stacks":  # function and file names: the process chose them
                selected = columns.replace('"frames"', 'redact_json("frames")')
            elif table == "meter_readings":  # a storage walk's error, a meter's URL
                # (a name keys the readings: two that redact alike stay two, each tagged; as
                # redact_text did, they broke the copy's key and the snapshot failed)
                selected = columns.replace('"name"', 'redact_name("name")').replace(
                    '"detail"', 'redact_json("detail")')
            elif table == "gpus":  # the driver's (a scenario's) names
                selected = columns.replace('"uuid"', 'redact_text("uuid")').replace(
                    '"name"', 'redact_text("name")')
            elif table == "gpu_samples":  # NVML's error text (NULL on nearly every row:
                # no call into Python for it, 8 GPUs x 3 600 rows an hour)
                selected = columns.replace('"error"', 'CASE WHEN "error" IS NULL THEN NULL '
                                           'ELSE redact_text("error") END')
            elif table == "meta":  # the hostname and instance; each process's kind
                selected = columns.replace('"value"', "CASE WHEN \"key\" IN ('json:host', "
                                           "'json:kinds') THEN redact_json(\"value\") ELSE "
                                           "\"value\" END")
            conn.execute(f"INSERT INTO main.{table} ({columns}) SELECT {selected} "
                         f"FROM src.{table} WHERE {where}", params)
        ticks, first_ms = conn.execute("SELECT count(*), min(ts) FROM main.ticks").fetchone()
        if not ticks and not empty_ok:  # (write_snapshot removes the file begun)
            raise EmptySnapshotRange(empty_range(source, since, until))
        host_row = conn.execute("SELECT value FROM src.meta WHERE key = 'json:host'").fetchone()
        conn.execute("COMMIT")
        host = json.loads(host_row[0]) if host_row else {}
        host = redact_document(host) if isinstance(host, dict) else {}
        price = host.get("price") if isinstance(host.get("price"), dict) else {}
        facts = {
            "version": __version__,
            "schema_version": SCHEMA_VERSION,
            "created_at": clock.now(),
            "since": since,
            "until": until,
            "ticks": ticks,
            "hostname": host.get("hostname", ""),
            "instance": host.get("instance"),
            "price": price,
            "price_source": (price or {}).get("source"),
            "trigger": redact_document(trigger) if trigger else None,
        }
        conn.executemany(f"INSERT INTO {SNAPSHOT_TABLE} (key, value) VALUES (?, ?)",
                         [(k, json.dumps(v, sort_keys=True, default=str))
                          for k, v in facts.items()])
        conn.execute("DETACH DATABASE src")
        conn.execute("PRAGMA journal_mode=DELETE")
        return int(ticks), None if first_ms is None else first_ms / 1000
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise SnapshotError(f"copying {source} into a snapshot ran past {timeout_s:g} s; "
                                "take a shorter range (--since)") from None
        raise SnapshotError(f"cannot copy {source} into a snapshot: {exc}") from None
    except sqlite3.DatabaseError as exc:
        if is_damaged(exc):
            raise NotAStore(damaged_store(source, exc)) from None
        raise NotAStore(f"cannot read {source} as an mlcostd store ({exc}); pass --db with "
                        "the daemon's database") from None
    finally:
        conn.close()


def empty_range(source: Path, since: float, until: float) -> str:
    """Why [since, until] of the store `source` makes no snapshot: it holds no tick there;
    with the range the store holds (as `mlcostd report` says it) and what to do."""
    from daemon.store import queries

    asked = f"{clock.local_time(since)} to {clock.local_time(until)}"
    try:
        reader = StoreReader(str(source))
        try:
            recorded = queries.recorded_range(reader)
            first_tick = reader.query("SELECT min(ts) AS ts FROM ticks")[0]["ts"]
        finally:
            reader.close()
    except (sqlite3.Error, OSError) as exc:  # (the copy just read it: hardly ever)
        return (f"no tick from {asked} to take a snapshot of, and {source} cannot be read to "
                f"say what it holds ({one_line(str(exc))[:160]}); nothing was written")
    held = queries.held_range(str(source), recorded)
    if recorded is None:
        return (f"no tick from {asked} to take a snapshot of: {held}; is mlcostd recording "
                "into it? Start it with `mlcostd run`, or pass the --db it records into")
    thinned = ""
    if first_tick is not None and first_tick / 1000 > until and recorded[0] < until:
        thinned = (f"; its ticks before {clock.local_time(first_tick / 1000)} were thinned to "
                   "rollups ([store].raw_retention), and a snapshot replays ticks")
    return (f"no tick from {asked} to take a snapshot of: {held}{thinned}; give a range "
            "inside that (--until, and --since for its length); nothing was written")


def snapshot_facts(reader: StoreReader) -> dict[str, Any] | None:
    """The `snapshot` table of an open store (replay, the snapshot page) as a dict, redacted on
    its way out like the rest of a store (the trigger names what fired); None for a store
    that is not a snapshot."""
    found = reader.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                         (SNAPSHOT_TABLE,))
    if not found:
        return None
    return {r["key"]: redact_document(json.loads(r["value"]))
            for r in reader.query(f"SELECT key, value FROM {SNAPSHOT_TABLE}")}


def read_facts(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The `snapshot` table of a snapshot file as a dict; None for a store that is not a
    snapshot. Raises SnapshotError for a file SQLite cannot read."""
    file = Path(path)
    try:
        conn = sqlite3.connect(_uri(file, "ro"), uri=True)
    except sqlite3.Error as exc:
        raise SnapshotError(f"cannot open {file}: {exc}") from None
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                             (SNAPSHOT_TABLE,)).fetchone()
        if not found:
            return None
        return {k: redact_document(json.loads(v)) for k, v in conn.execute(
            f"SELECT key, value FROM {SNAPSHOT_TABLE}")}
    except (sqlite3.DatabaseError, ValueError) as exc:
        if isinstance(exc, sqlite3.DatabaseError) and is_damaged(exc):
            raise SnapshotError(damaged_store(file, exc)) from None
        raise SnapshotError(f"{file} is not a readable snapshot ({exc})") from None
    finally:
        conn.close()


def list_snapshots(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The snapshot files in `folder`, newest first: path, bytes, the HTML beside it (if any),
    and the facts each file holds. A file that cannot be read is listed with its error; a
    link, or a file that is not mlcostd's own, is not listed (nor opened)."""
    base = Path(folder)
    if not base.is_dir():
        return []
    out = []
    for file in base.glob(f"*{SNAPSHOT_SUFFIX}"):
        if file.name.startswith("."):
            continue  # a snapshot being written
        try:
            check_existing(file)  # a link or someone else's file is not read, not listed
            size = file.stat().st_size
        except OSError:
            continue
        entry: dict[str, Any] = {"name": file.name, "path": str(file), "bytes": size}
        html = file.with_suffix(HTML_SUFFIX)
        entry["html"] = str(html) if html.exists() else None
        try:
            facts = read_facts(file) or {}
        except SnapshotError as exc:
            facts, entry["error"] = {}, str(exc)
        for key in ("created_at", "since", "until", "ticks", "trigger", "hostname"):
            entry[key] = facts.get(key)
        out.append(entry)
    out.sort(key=lambda e: (e.get("created_at") or 0.0, e["name"]), reverse=True)
    return out


# -- the index: which files of the snapshots folder mlcostd wrote ----------------------------

INDEX_NAME = ".mlcost-snapshots.index"  # hidden: never listed, pruned or served


def record_written(path: str | os.PathLike[str]) -> None:
    """Note in its folder's index that mlcostd wrote `path` (a snapshot or its HTML): its name
    and identity (device, inode), so only files mlcostd wrote are ever served. One line
    appended under a lock: writers in other processes (`mlcostd snapshot` direct) may append
    too. Raises OSError (RefusedFile for a link or a file not ours at the index's path)."""
    file = Path(path)
    info = os.lstat(file)
    fd = open_private(file.parent / INDEX_NAME, os.O_WRONLY | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{file.name}\t{info.st_dev}\t{info.st_ino}\n".encode())
    finally:
        os.close(fd)


def written_files(folder: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """name -> (device, inode) of the files in `folder` that mlcostd wrote (record_written),
    the latest entry per name; {} when there is no index. Raises OSError (RefusedFile for a
    link or a file not ours at the index's path)."""
    try:
        fd = open_checked(Path(folder) / INDEX_NAME)
    except FileNotFoundError:
        return {}
    with os.fdopen(fd, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    found = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            found[parts[0]] = (int(parts[1]), int(parts[2]))
    return found


def _compact_index(folder: Path) -> None:
    """Drop the index entries whose file is gone or is another file now (pruned). Never
    raises: an index that cannot be compacted just keeps a few lines too many."""
    try:
        fd = open_private(folder / INDEX_NAME, os.O_RDWR, create=False)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 1 << 24, 0).decode("utf-8", errors="replace")
        kept = []
        for line in text.splitlines():
            parts = line.split("\t")
            try:
                info = os.lstat(folder / parts[0])
            except (OSError, ValueError):
                continue
            if len(parts) == 3 and parts[1:] == [str(info.st_dev), str(info.st_ino)]:
                kept.append(line + "\n")
        new = "".join(kept).encode()
        if new != text.encode():
            os.ftruncate(fd, 0)
            os.pwrite(fd, new, 0)
    except OSError:
        pass
    finally:
        os.close(fd)


def snapshot_name(hostname: str, at: float, reason: str = "manual") -> str:
    """A file name that sorts by time and says whose and why: mlcost-HOST-20261201T120000Z-why.db"""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in (hostname or "host"))[:40]
    why = "".join(c if c.isalnum() or c in "-_" else "-" for c in reason)[:60]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))
    return f"mlcost-{safe}-{stamp}-{why}{SNAPSHOT_SUFFIX}"


def free_path(folder: str | os.PathLike[str], name: str) -> Path:
    """`folder/name`, or `name` with -2, -3, ... before its suffix when that is taken (two
    incidents in the same second keep both snapshots)."""
    path = Path(folder) / name
    n = 1
    # (lexists: a link planted at the name, dangling or not, takes it too; its writer would
    # refuse it and the snapshot fail)
    while os.path.lexists(path) or os.path.lexists(path.with_suffix(HTML_SUFFIX)):
        n += 1
        path = Path(folder) / f"{Path(name).stem}-{n}{Path(name).suffix}"
    return path


def prune(folder: str | os.PathLike[str], max_bytes: int, max_age_s: float,
          now: float | None = None, keep: str | os.PathLike[str] | None = None) -> list[str]:
    """Delete the oldest snapshots (and their HTML) in `folder` until they are younger than
    `max_age_s` and take at most `max_bytes` together; `keep` (the one just taken) stays
    whatever its size. Temporary files of writers that are gone (killed mid-way) are deleted
    too. A link or a file that is not mlcostd's own is left alone. Returns what was
    deleted."""
    now = time.time() if now is None else now  # the OS's clock, as the files' mtimes
    base = Path(folder)
    if not base.is_dir():
        return []
    deleted = remove_stale_temp_files(base)
    files = []
    for file in base.glob(f"*{SNAPSHOT_SUFFIX}"):
        if file.name.startswith("."):
            continue
        try:
            check_existing(file)  # a link or someone else's file: not ours to count or delete
            info = file.stat()
        except OSError:
            continue
        parts, size = [file], info.st_size
        html = file.with_suffix(HTML_SUFFIX)
        try:
            check_existing(html)
            size += html.stat().st_size
            parts.append(html)
        except OSError:
            pass  # none, or not ours
        files.append((info.st_mtime, file, parts, size))
    files.sort()  # oldest first
    total = sum(f[3] for f in files)
    kept = Path(keep).resolve() if keep is not None else None
    for mtime, file, parts, size in files:
        if file.resolve() == kept or (total <= max_bytes and now - mtime <= max_age_s):
            continue
        for part in parts:
            try:
                part.unlink()
                deleted.append(str(part))
            except FileNotFoundError:
                pass
            except OSError:
                continue
        total -= size
    if deleted:
        _compact_index(base)
    return deleted

