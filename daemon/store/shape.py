"""The shape a store file must have before anything reads it, and the one line that says why a
file cannot be read.

A file a user hands us (`mlcostd snapshot --render FILE`, `mlcostd report --db FILE`,
`mlcost-top --replay FILE`) may be damaged or made to hurt: a view where a table belongs (a
recursive one runs until the reader's deadline), a virtual table, a generated column (computed
on every read), a column missing, a text where a number belongs. `check_shape` compares the
file with the schema its own version promises (daemon.store.schema's migrations, applied to an
empty database), before any query reads a row; `read_failure` turns whatever a read still
raises (a wrong type deep in a row, a query past the deadline) into one line naming the file.
"""

from __future__ import annotations

import functools
import sqlite3
import zlib
from typing import TYPE_CHECKING

import sqlite_utils

from daemon.store.errors import damaged_store, is_damaged
from daemon.store.reader import ReaderTimeout
from daemon.store.schema import MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    from daemon.store.reader import StoreReader

# What reading a hostile file can raise, beyond SQLite's own errors: a text where a number
# belongs (TypeError, ValueError), a huge number (OverflowError), a JSON or packed text that
# does not decode (ValueError, zlib.error), a document of the wrong shape (KeyError, IndexError,
# AttributeError), one nested too deep (RecursionError).
READ_ERRORS: tuple[type[BaseException], ...] = (
    sqlite3.Error, ReaderTimeout, TypeError, ValueError, OverflowError, KeyError, IndexError,
    AttributeError, zlib.error, RecursionError)

WHAT_TO_GIVE = ("give the daemon's database, a copy of it (sqlite3 DB \"VACUUM INTO 'x.db'\"), "
                "or a snapshot taken by `mlcostd snapshot`")


class StoreShapeError(ValueError):
    """A file that is not shaped like the store it says it is; the message is one line that
    names the file, what is wrong and what to give instead."""


class StoreOnReadOnlyFolder(StoreShapeError, sqlite3.DatabaseError):
    """A store in WAL mode whose -wal holds writes, in a folder where SQLite cannot create the
    -shm it needs to read them (a read-only file system, or a folder this user cannot write).
    The message names the cause and what to do."""


@functools.cache
def expected_tables(version: int) -> dict[str, frozenset[str]]:
    """{table: its columns} of a store at schema `version`: the migrations up to it, applied
    to an empty in-memory database."""
    db = sqlite_utils.Database(memory=True)
    for migration in MIGRATIONS[:version]:
        migration(db)
    return {name: frozenset(db[name].columns_dict) for name in db.table_names()}


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_shape(reader: StoreReader) -> int:
    """The file's schema version, once each table its version promises is a plain table (not
    a view, a virtual table or missing) with its columns, none of them generated.
    StoreShapeError otherwise. Reads only the schema (sqlite_master, table_xinfo), under the
    reader's deadline. A schema whose text does not decode is refused as damaged where
    SQLite's quick_check finds damage (random bytes over a snapshot's pages read "not an
    mlcostd database" here and "damaged" from `snapshot --db`: probe 126 F4)."""
    try:
        return _check_shape(reader)
    except sqlite3.OperationalError as exc:
        if "Could not decode" not in str(exc):
            raise
        damage = _damage(reader)
        if damage is None:
            raise
        raise StoreShapeError(damaged_store(reader.path, damage)) from None


def _damage(reader: StoreReader) -> str | None:
    """What SQLite's quick_check finds wrong with the file (its first finding), or None where
    it finds nothing or cannot tell (past the reader's deadline)."""
    try:
        rows = reader.rows("PRAGMA quick_check(1)")
    except (sqlite3.Error, ReaderTimeout):
        return None
    found = str(rows[0][0]) if rows and rows[0] else "ok"
    return None if found == "ok" else found


def _check_shape(reader: StoreReader) -> int:
    path = reader.path

    def refuse(what: str) -> StoreShapeError:
        return StoreShapeError(f"{path} is not an mlcostd store or snapshot this mlcost can "
                               f"read: {_one_line(what)}; {WHAT_TO_GIVE}")

    version = reader.query("PRAGMA user_version")[0]["user_version"]
    if version == 0 and not reader.query("SELECT 1 FROM sqlite_master LIMIT 1"):
        raise refuse("it is empty (no tables: an empty file, or a database never written)")
    if not 1 <= version <= SCHEMA_VERSION:
        raise refuse(f"its schema version is {version} (this mlcost reads 1 to "
                     f"{SCHEMA_VERSION}{'; a newer mlcost wrote it' if version > 0 else ''})")
    expected = expected_tables(version)
    names = sorted(expected)
    marks = ", ".join("?" * len(names))
    found = reader.query(f"SELECT type, name, sql FROM sqlite_master WHERE name IN ({marks})",
                         names)
    kinds = {row["name"]: row for row in found}
    for name in names:
        row = kinds.get(name)
        if row is None:
            raise refuse(f"it has no table {name!r} (schema version {version} has one)")
        if row["type"] != "table":
            raise refuse(f"{name!r} is a {row['type']}, not a table")
        if not str(row["sql"] or "").lstrip().upper().startswith("CREATE TABLE"):
            raise refuse(f"{name!r} is not a plain table ({str(row['sql'])[:60]!r})")
        columns = {c["name"]: c for c in reader.query(f'PRAGMA table_xinfo("{name}")')}
        missing = sorted(expected[name] - set(columns))
        if missing:
            raise refuse(f"table {name!r} lacks the column(s) {', '.join(missing)}")
        generated = sorted(c for c, info in columns.items() if info["hidden"] in (2, 3))
        if generated:
            raise refuse(f"table {name!r} has generated column(s) {', '.join(generated)}, "
                         "which mlcost never writes")
    return version


def read_failure(path: object, exc: BaseException) -> str:
    """One line naming `path` and why reading it failed, from an exception in READ_ERRORS."""
    if isinstance(exc, StoreShapeError):
        return str(exc)
    if isinstance(exc, ReaderTimeout):
        what = f"a query ran past its deadline ({_one_line(str(exc), 160)})"
    elif isinstance(exc, sqlite3.DatabaseError) and is_damaged(exc):
        # the file is ours and damaged: which file to give is not the question
        return damaged_store(path, exc)
    elif isinstance(exc, sqlite3.Error):
        what = f"SQLite: {_one_line(str(exc), 160)}"
    else:
        what = (f"a value of the wrong type or shape ({type(exc).__name__}: "
                f"{_one_line(str(exc), 160)})")
    return f"{path} cannot be read: {what}; {WHAT_TO_GIVE}"
