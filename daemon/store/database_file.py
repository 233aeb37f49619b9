"""The store's database file: one writer per file, and the file at the path is the one recorded
into.

`DatabaseFile` is a mixin of `daemon.store.writer.Store` (like `Maintenance`), working on the
Store's state under the Store's lock.

One writer per database *file*: the Store holds an exclusive `flock` on the database file itself
(its inode), so a second writer is refused whatever name or hard link it opens the file by, and
whether or not the `.lock` file beside it still exists.

The database deleted (or replaced) while recording: every maintenance round compares the open
file with the path (device and inode). When they differ, the store is recreated at the path
from the open copy (SQLite's backup), so nothing recorded is lost; a file that replaced it is
moved aside to `<path>.replaced-<timestamp>` first. This is logged and kept in
`StoreHealth.recreated`; if recreating fails (e.g. the disk is full) `problem` says so and it is
tried again the next round.

The database damaged while recording (a read or a write fails as SQLite fails on a damaged file:
"database disk image is malformed", "file is not a database"): whoever sees it tells the store
(`note_if_damaged`: the daemon's reads, its API's, the writer's own writes), and the next maintenance
round moves the file aside to `<path>.corrupt-<timestamp>` (with its WAL and SHM, for
`sqlite3 FILE .recover`) and records on into a new store at the path (`_start_over`): the ticks
waiting in memory are written there, and the facts recorded once (`Store.set_meta`: the host,
the jobs, the kinds) are written again. `StoreHealth.corrupt_moved_aside` says where the old
file went.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
import stat
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

import sqlite_utils

from daemon.store.errors import StoreError, is_corruption
from daemon.store.files import (
    DB_SUFFIXES,
    RefusedFile,
    check_existing,
    open_private,
    process_alive,
)

if TYPE_CHECKING:
    from daemon.store.health import StoreHealth
    from daemon.store.minute_tally import ProcessMinutes

log = logging.getLogger("daemon.store.writer")  # the Store's log, as before this code moved here

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def cut_short(fd: int) -> str | None:
    """What says the SQLite database open at `fd` is shorter than its header counts, or has no
    header (`truncate`, a partial copy); None when its length is right, or it cannot be read."""
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, 100, 0)
    except OSError:
        return None
    if not head.startswith(SQLITE_HEADER) or len(head) < 100:
        return f"{size} bytes and no SQLite header"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # the header's page count holds where its change counter and version-valid-for agree
    if pages and head[24:28] == head[92:96] and size < pages * page_size:
        return f"{size} bytes where its header counts {pages} pages of {page_size}"
    return None


def take_back_kept_wal(path: str) -> None:
    """A second name of the WAL (`<path>-wal.kept-PID`, `DatabaseFile._keep_wal`) left by a
    writer that died before it removed it (SIGKILL in the moment between): the WAL then had
    two names, and the next start refused it as a file another may hold (CI: a kill -9 test
    writer). Removed where the WAL is at its path; where it is not (the close had deleted it),
    put back as the WAL. Only our own regular files named for a process that is gone."""
    folder, name = os.path.split(path)
    prefix = name + "-wal.kept-"
    try:
        names = [n for n in os.listdir(folder or ".") if n.startswith(prefix)]
    except OSError:
        return
    for kept_name in names:
        pid = kept_name[len(prefix):]
        if not pid.isdigit() or int(pid) == os.getpid() or process_alive(int(pid)):
            continue
        kept = os.path.join(folder, kept_name)
        with contextlib.suppress(OSError):
            found = os.lstat(kept)
            if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
                continue
            if os.path.lexists(path + "-wal"):
                os.unlink(kept)
            else:
                os.replace(kept, path + "-wal")


class DatabaseFile:
    """The lock on the Store's database file and the checks that it is still at its path."""

    if TYPE_CHECKING:  # the Store's state this mixin works on (set in Store.__init__)
        path: str
        _file_fd: int | None
        _db: sqlite_utils.Database
        _conn: sqlite3.Connection
        _health: StoreHealth
        _problem_kind: str | None
        _minutes: ProcessMinutes
        _last_assigned_ts: int

        _damage_noted: str | None
        _moved_aside: bool  # the damaged file is aside; a new one is still to be started
        _buffer: Any
        _pending_facts: Any

        def _open(self) -> sqlite_utils.Database: ...
        def _set_problem(self, kind: str, text: str) -> None: ...
        def _clear_problem(self, how: str) -> None: ...
        def _forget_what_the_file_held(self) -> None: ...

    def _lock_file(self) -> None:
        """Hold an exclusive flock on the database file itself: one writer per inode, whatever
        name or hard link it is opened by. (SQLite's own locks are fcntl locks: independent.)"""
        try:
            fd = open_private(self.path, os.O_RDWR)  # 0600 whatever the umask, never a link
        except RefusedFile as error:  # a link, or not mlcostd's own file: left where it is
            raise StoreError(str(error)) from None
        except OSError as error:
            raise StoreError(
                f"cannot open the store {self.path}: {error.strerror}; check the path and its "
                "permissions, or pass --db with a writable path") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StoreError(f"cannot lock the store {self.path}: {error.strerror}; "
                                 "put the database on a local filesystem") from None
            raise StoreError(
                f"another mlcostd is already recording into {self.path} (it holds the "
                "database file's lock, under this name or another link to the same file); "
                "stop it or pass a different --db") from None
        self._unlock_file()
        self._file_fd = fd

    def _unlock_file(self) -> None:
        if self._file_fd is not None:
            os.close(self._file_fd)
            self._file_fd = None

    def _same_file(self) -> bool | None:
        """Is the path still the file we hold open? None when it cannot be told."""
        if self._file_fd is None:
            return None
        try:
            mine = os.fstat(self._file_fd)
            there = os.stat(self.path)
        except FileNotFoundError:
            return False
        except OSError:
            return None
        return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)

    def _check_file(self) -> None:
        """The database deleted or replaced under us: recreate it at the path from the open
        copy (nothing recorded is lost). Cut short in place (truncated): a new one is started
        (`_start_over`: what the writer had is no longer anywhere to copy from). Caller holds
        _lock. Never raises."""
        same = self._same_file()
        if same is None:
            return
        if same:
            self._check_length()
            if self._problem_kind == "file":  # (a folder moved away and back)
                self._clear_problem("the database file is back at its path")
            return
        gone = not os.path.lexists(self.path)
        what = "deleted or moved away" if gone else "replaced by another file"
        if not gone:
            try:
                check_existing(self.path)
            except RefusedFile as refused:  # a link or someone else's file: never moved
                self._set_problem(
                    "file", f"the database {self.path} was replaced while mlcostd records "
                    f"into it, and mlcostd leaves what is there now alone: {refused}; "
                    "recording goes on into the open file and the database is recreated at "
                    "its path once that is removed")
                return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        tmp = f"{self.path}.recreating"
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.close(open_private(tmp, os.O_WRONLY | os.O_EXCL))
            target = sqlite3.connect(tmp)
            try:
                self._conn.backup(target)
            finally:
                target.close()
        except (OSError, sqlite3.Error) as error:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self._set_problem(
                "file", f"the database {self.path} was {what} while mlcostd records into it, "
                f"and recreating it failed: {error}; recording goes on into the open file "
                "(it has no name now) and recreating is tried again every few seconds: free "
                "space on that disk, or put the file or its folder back; keep mlcostd running "
                "meanwhile (what it recorded is only in the open file: stopped, it is lost)")
            return
        aside = None
        if not gone:
            aside = f"{self.path}.replaced-{time.strftime('%Y%m%dT%H%M%S')}"
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = None
        try:
            self._conn.close()
        except sqlite3.Error:
            pass
        for suffix in ("-wal", "-shm"):  # the deleted file's: its content is in the copy
            try:
                os.unlink(self.path + suffix)
            except OSError:
                pass
        # The minutes tallied so far may not match the file reopened: read from its raw rows.
        self._minutes.forget(self._last_assigned_ts)
        try:
            os.replace(tmp, self.path)
            self._lock_file()
            self._db = self._open()
            self._conn = self._db.conn
            kept = self._conn.execute("SELECT count(*) FROM ticks").fetchone()[0]
        except (OSError, sqlite3.Error, StoreError) as error:
            try:
                self._db = self._open()  # a fresh store at the path rather than none
                self._conn = self._db.conn
                self._lock_file()
                started = "so a new empty store was started there"
            except (OSError, sqlite3.Error, StoreError) as failure:
                self._stand_in()  # (a full disk): the ticks wait in memory meanwhile
                self._damage_noted = self._damage_noted or f"no store at the path: {failure}"
                started = f"and starting a new one failed too ({failure}): tried again soon"
            self._set_problem(
                "file", f"the database {self.path} was {what} while mlcostd records into it; "
                f"putting the copy back failed ({error}), {started}; the copy may be at {tmp}")
            return
        note = (f"the database {self.path} was {what} at about {stamp} while mlcostd recorded "
                f"into it; recreated it there from the open copy ({kept} ticks kept)")
        if aside:
            note += f"; the file found at the path was moved aside to {aside}"
        self._health.recreated = note
        self._health.last_error = note
        log.error("%s", note)
        if self._problem_kind == "file":
            self._clear_problem("the database file is back at its path")

    def _check_length(self) -> None:
        """The file at the path is ours but cut short (`truncate`, a restore of a partial
        copy): SQLite's writer goes on writing pages into it and counting the ticks written
        while no reader can open it, and its close leaves a file `.recover` gets nothing from
        (probe 115). Its header, read through the descriptor held on it, says how long it must
        be; found short, and a reader of its own then cannot read it (a checkpoint by another
        connection can write the header before the pages it counts: that reads fine), it is
        damaged: moved aside with its WAL and a new store started, as for SQLite's own word."""
        found = self._cut_short()
        if found is not None and self._damage_noted is None:
            kept = self._keep_wal()  # before the reader: it deletes the WAL of a 0-byte file
            if not self._readable():
                self._damage_noted = f"the file was cut short: {found}"
            elif kept is not None:
                with contextlib.suppress(OSError):
                    os.unlink(kept)

    def _readable(self) -> bool:
        """Whether a read-only connection of its own reads the ticks table at the path."""
        try:
            reader = sqlite3.connect(f"file:{urllib.parse.quote(self.path)}?mode=ro", uri=True,
                                     timeout=1.0)
        except sqlite3.Error:
            return False
        try:
            reader.execute("SELECT max(ts) FROM ticks").fetchone()
            return True
        except sqlite3.Error:
            return False
        finally:
            reader.close()

    def _cut_short(self) -> str | None:
        """What says the database file is shorter than its header counts (`cut_short`);
        None when its length is right (or cannot be read)."""
        return None if self._file_fd is None else cut_short(self._file_fd)

    def note_if_damaged(self, error: BaseException) -> bool:
        """Whether `error`, raised by a read or write of the store, is SQLite's word for a
        damaged file ("database disk image is malformed", "file is not a database"); if so, the
        next maintenance round moves the file aside and starts a new one (`_start_over`). From
        any thread. Noted only while the file at the path is the one recorded into (another
        file there is `_check_file`'s)."""
        if not (isinstance(error, sqlite3.DatabaseError) and is_corruption(error)):
            return False
        if self._same_file():
            self._damage_noted = str(error)
        return True

    @property
    def starting_over(self) -> bool:
        """Whether the file was found damaged and a new one is (being) started in its place."""
        return self._damage_noted is not None

    def _start_over(self) -> None:
        """The file is damaged (`note_if_damaged`): move it aside (with its WAL and SHM) and
        record on into a new store at the path. Caller holds _lock. Never raises: where moving
        or creating fails (a full disk), `problem` says so (logged once, then at most once a
        minute), the ticks wait in memory (nothing is written while damage is noted) and the
        next round tries again the step that failed: a file moved aside is never moved again,
        and a new one that could not be made is removed, not taken for a damaged one."""
        error = self._damage_noted
        if error is None:
            return
        if not self._moved_aside:
            kept = self._close_keeping_the_wal()
            try:
                self._move_aside(sqlite3.DatabaseError(error), kept)
            except (OSError, StoreError) as failure:
                self._stand_in()
                self._set_problem(
                    "damaged", f"the database {self.path} is damaged ({error}) and moving it "
                    f"aside failed: {failure}; the ticks wait in memory and it is tried again "
                    "every few seconds; stop mlcostd with SIGTERM, move the file away and "
                    "start it again")
                return
            self._unlock_file()  # its lock went with it: nothing at the path is ours now
            self._moved_aside = True
        try:
            self._db = self._open()
            self._conn = self._db.conn
            self._lock_file()
        except (OSError, sqlite3.Error, StoreError) as failure:
            self._stand_in()
            self._unlock_file()
            for suffix in DB_SUFFIXES:  # what the failed start left: ours, never a link
                try:
                    check_existing(self.path + suffix)
                    os.unlink(self.path + suffix)
                except (OSError, RefusedFile):
                    pass
            self._set_problem(
                "damaged", f"the database {self.path} was damaged ({error}) and moved aside to "
                f"{self._health.corrupt_moved_aside}; starting a new one there failed: "
                f"{failure}; the ticks wait in memory and it is tried again every few seconds")
            return
        self._moved_aside = False
        self._damage_noted = None
        self._forget_what_the_file_held()
        self._health.recreated = (
            f"the database {self.path} was found damaged at about "
            f"{time.strftime('%Y-%m-%dT%H:%M:%S')} ({error}); it was moved aside to "
            f"{self._health.corrupt_moved_aside} (what it held: `sqlite3 "
            f"{self._health.corrupt_moved_aside} .recover`) and recording goes on into a new "
            "one at its path")
        if self._problem_kind is not None:
            self._clear_problem("a new database was started at its path")

    def _stand_in(self) -> None:
        """A connection to nothing in place of the writer's, so that what uses it fails as a
        read that cannot be made now, never on a closed connection; writes wait meanwhile."""
        self._db = sqlite_utils.Database(sqlite3.connect(":memory:", check_same_thread=False),
                                         execute_plugins=False)
        self._conn = self._db.conn

    def _close_keeping_the_wal(self) -> str | None:
        """Close the writer's connection without its checkpoint: the last connection to close
        copies the WAL's frames into the database, and a damaged WAL would be copied over
        the good pages a `.recover` could read. A read-only connection held open meanwhile
        makes the writer's close not the last, and closes without a checkpoint itself.
        A file cut short is no WAL-mode database to that connection, and the writer's close
        then deleted the WAL, its last ticks with it (probe 142 L6): a second link to the
        WAL, made first, keeps it. Returns that link (for `_move_aside`), or None."""
        kept = self._keep_wal()
        holder = None
        try:
            holder = sqlite3.connect(f"file:{urllib.parse.quote(self.path)}?mode=ro", uri=True)
            holder.execute("PRAGMA schema_version").fetchone()  # holds its read lock
        except sqlite3.Error:
            pass  # (unreadable: the writer's close checkpoints what it can)
        try:
            self._conn.close()
        except sqlite3.Error:
            pass
        if holder is not None:
            holder.close()
        return kept

    def _keep_wal(self) -> str | None:
        """A second link to the WAL at the path (`<db>-wal.kept-<pid>`), so that a connection
        that deletes it (SQLite deletes the WAL of a database file of no pages when it opens
        one: a file cut to 0 bytes) leaves its frames for `_move_aside`. None: no WAL with
        frames, or no second link can be made there."""
        wal = self.path + "-wal"
        kept = f"{wal}.kept-{os.getpid()}"
        try:
            if os.path.lexists(kept):
                return kept  # (made by _check_length, before its reader)
            found = os.lstat(wal)
            if not (stat.S_ISREG(found.st_mode) and found.st_size > 0):
                return None
            check_existing(wal)  # our own file of one name, or no second name for it
            os.link(wal, kept)
        except (OSError, RefusedFile):
            return None
        return kept

    def _move_aside(self, error: BaseException, kept: str | None = None) -> None:
        """Rename a corrupt database (and its WAL and SHM) aside. Only our own regular files:
        a link or someone else's file is refused (StoreError), never moved. `kept`: a second
        link to the WAL (`_close_keeping_the_wal`), moved aside as its WAL where the close
        deleted the WAL at the path, else removed."""
        try:
            self._move_aside_keeping(error, kept)
        finally:
            if kept is not None and os.path.lexists(kept):
                with contextlib.suppress(OSError):
                    if os.path.lexists(self.path + "-wal"):
                        os.unlink(kept)
                    else:
                        os.replace(kept, self.path + "-wal")  # (not moved: as it was)

    def _move_aside_keeping(self, error: BaseException, kept: str | None) -> None:
        if kept is not None and os.path.lexists(self.path + "-wal"):
            with contextlib.suppress(OSError):  # the WAL is there: its second name is not
                os.unlink(kept)                  # needed (and a WAL of two names is refused)
            kept = None
        try:
            for suffix in DB_SUFFIXES:
                check_existing(self.path + suffix)
        except RefusedFile as refused:
            raise StoreError(f"{refused} (SQLite cannot read the store: {error})") from None
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = f"{self.path}.corrupt-{stamp}"
        n = 1
        while os.path.lexists(aside):
            n += 1
            aside = f"{self.path}.corrupt-{stamp}-{n}"
        os.replace(self.path, aside)
        moved = []
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, aside + suffix)
                moved.append(suffix[1:].upper())
                if suffix == "-wal" and kept is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(kept)  # (the WAL itself went aside)
            elif suffix == "-wal" and kept is not None and os.path.lexists(kept):
                os.replace(kept, aside + suffix)
                moved.append("WAL")
        self._health.corrupt_moved_aside = aside
        self._health.last_error = f"corrupt store moved aside to {aside}: {error}"
        # (it was in /v1/health alone: the operator learnt of the lost history by reading it)
        log.error("the store %s could not be read (%s): moved it aside to %s%s, and started a "
                  "new one; what it held is there for `sqlite3 %s .recover`", self.path, error,
                  aside, f", with its {' and '.join(moved)}" if moved else "", aside)
