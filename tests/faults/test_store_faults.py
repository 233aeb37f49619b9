"""The store under faults (issue 10, items 7-9, and the fault suite): a full disk, the database
deleted or replaced while recording, its folder made read-only, a second writer through a hard
link or without the .lock file. Real SQLite files, real daemons, real mounts (tests/mounts.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import faultkit
import livedaemon
import mounts
import pytest
from prometheus_client.parser import text_string_to_metric_families
from simhost import poll

from daemon.client import ClientError
from daemon.sources.sample import HostPressure, ProcessSample, Sample
from daemon.store import facts, queries
from daemon.store.maintenance import MAINTAIN_FAILURES_SAID
from daemon.store.reader import StoreReader
from daemon.store.writer import Store, StoreError

T0 = 1_750_000_000.0


def sample(tick: int, pid: int = 100) -> Sample:
    proc = ProcessSample(pid=pid, start_time=T0 - 10, ppid=1, user="alice",
                         command="python train.py", gpus=(), cpu_seconds=tick * 0.5,
                         rss_bytes=1 << 20, read_bytes=0, write_bytes=0, iowait_seconds=0.0,
                         threads=1)
    return Sample(ts=T0 + tick, tick=tick, gpus=(), processes=(proc,), host=HostPressure(),
                  nvml_status="ok")


def event(n: int) -> dict[str, object]:
    return {"kind": "idle", "target": f"gpu:{n}", "started_at": T0 + n, "ended_at": None,
            "cost_so_far": 1.5, "detail": {"pad": "x" * 20_000}}  # needs new pages


def ticks(path: Path) -> list[int]:
    reader = StoreReader(str(path))
    try:
        return reader.ticks()
    finally:
        reader.close()


def count(path: Path, table: str) -> int:
    reader = StoreReader(str(path))
    try:
        return int(reader.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        reader.close()


def answers(daemon: livedaemon.LiveDaemon) -> bool:
    try:
        return bool(daemon.call("health").ok)
    except ClientError:
        return False


# ------------------------------------------------------------------------- 7: full disk


def test_fact_writes_on_a_full_disk_wait_and_land_when_space_returns(tmp_path: Path,
                                                                      caplog) -> None:
    caplog.set_level(logging.INFO, logger="daemon.store.writer")
    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in (1, 2, 3):
            assert store.write(sample(tick))
        (pages,) = store.pragma("page_count")
        store.pragma("max_page_count", pages)
        for n in range(5):  # the tick's and the rules' writes: none of them raises
            facts.write_event(store, event(n))
            facts.write_stack_status(store, 100, T0 - 10, T0 + n, "sampling", "x" * 9000)
            facts.write_recommendations(store, [{"id": f"r{n}", "rule": "idle",
                                                 "target": "gpu:0", "pad": "y" * 9000}], T0)
            store.set_meta(f"host{n}", {"pad": "z" * 9000})
            store.write(sample(4 + n))
        health = store.health
        assert health.problem is not None and "disk is full" in health.problem
        assert health.facts_pending > 0 and health.samples_dropped == 0
        full_lines = [r for r in caplog.records if "disk is full" in r.getMessage()]
        assert len(full_lines) == 1, [r.getMessage() for r in caplog.records]  # once, not 20x
        store.pragma("max_page_count", 1073741823)  # space returns
        assert store.write(sample(9)) is True
        health = store.health
        assert health.problem is None and health.facts_pending == 0
        assert health.facts_dropped == 0 and health.samples_dropped == 0
        assert any("again" in r.getMessage() for r in caplog.records)
    assert ticks(path) == list(range(1, 10))
    assert count(path, "events") == 5 and count(path, "recommendations") == 5
    assert count(path, "stack_status") == 1  # one process: its latest status


def test_housekeeping_on_a_full_disk_leaves_health_saying_what_waits(tmp_path: Path,
                                                                      caplog) -> None:
    """On a full disk (a real one: a small tmpfs) the rollups fail too, round after round:
    housekeeping's "fails ... so the files grow" replaced the writer's "the disk is full; N
    ticks wait in memory (M dropped)" in health each round, and the two alternated in the log
    every tick (probe 115)."""
    caplog.set_level(logging.INFO, logger="daemon.store.writer")
    with mounts.tmpfs(tmp_path / "disk", size="8m") as disk:
        path = disk / "s.db"
        rounds = MAINTAIN_FAILURES_SAID + 3
        with Store(path) as store:
            for tick in range(1, 200):  # minutes to roll up
                assert store.write(sample(tick))
            filler = mounts.fill(disk)
            for tick in range(200, 200 + rounds):
                store.write(sample(tick))
                store.maintain(budget_s=1.0)
            health = store.health
            assert health.last_error is not None and "maintain failed" in health.last_error
            problem = health.problem or ""
            assert "disk is full" in problem and "ticks wait in memory" in problem, problem
            # its advice is what works on a full disk: not a restart, which loses what waits
            assert "keep mlcostd running" in problem, problem
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1 and "disk is full" in errors[0], errors
            filler.unlink()  # space returns
            before = time.time()
            assert store.write(sample(200 + rounds)) is True
            store.maintain(budget_s=1.0)
            health = store.health
            assert health.problem is None
            # what failed is history now: "maintain failed: database or disk is full" stayed
            # in /v1/health's last_error long after (probe 142 L5)
            assert health.last_error is None, health
            assert "maintain failed" in (health.resolved_error or ""), health
            assert health.resolved_at is not None and health.resolved_at >= before, health
            assert store.health.as_dict()["last_error"] is None  # as /v1/health serves it
        assert ticks(path) == list(range(1, 201 + rounds))


def test_ticks_dropped_on_a_full_disk_are_an_event_the_report_names(tmp_path: Path) -> None:
    """A full disk outlasted the ticks memory holds: the oldest were dropped, counted only in
    health (memory), and the report of the range said nothing of the hole (probe 115 F8)."""
    from daemon.commands import report

    with mounts.tmpfs(tmp_path / "disk", size="8m") as disk:
        path = disk / "s.db"
        with Store(path, buffer_limit=5) as store:
            for tick in range(1, 200):
                assert store.write(sample(tick))
            filler = mounts.fill(disk)
            for tick in range(200, 220):  # 20 ticks: the last 5 wait, 15 are dropped
                store.write(sample(tick))
            assert store.health.samples_dropped == 15
            filler.unlink()
            assert store.write(sample(220))
            assert store.health.samples_buffered == 0 and store.health.facts_pending == 0
            assert store.write(sample(221))  # (a later drop would be a span of its own)
        reader = StoreReader(str(path))
        try:
            [event] = [e for e in queries.events(reader, T0, T0 + 300)
                       if e["kind"] == "ticks_dropped"]
            assert (event["started_at"], event["ended_at"]) == (T0 + 200, T0 + 214), event
            assert event["detail"]["ticks"] == 15 and "disk is full" in event["detail"]["why"]
            text = report.render_text(report.build(reader, 300, until=T0 + 221))
        finally:
            reader.close()
    assert "15 ticks taken but not recorded (the store could not be written" in text, text


def test_ticks_dropped_on_a_full_disk_are_said_in_the_log_when_and_after_they_go(
        tmp_path: Path, caplog) -> None:
    """Drops that began after the once-a-minute line and ended before the next never reached
    the log, and the recovery line then said "everything that waited in memory is written";
    the problem counted past its own bound ("601 ticks wait ... at most 600") and said "1
    ticks" (probe 142 M1)."""
    caplog.set_level(logging.INFO, logger="daemon.store.writer")
    with mounts.tmpfs(tmp_path / "disk", size="8m") as disk:
        path = disk / "s.db"
        with Store(path, buffer_limit=5) as store:
            for tick in range(1, 200):
                assert store.write(sample(tick))
            filler = mounts.fill(disk)
            assert not store.write(sample(200))
            assert "1 tick waits in memory (at most 5; 0 dropped so far) and is written when " \
                   "it can" in (store.health.problem or "")
            for tick in range(201, 220):  # 20 ticks: the last 5 wait, 15 are dropped
                store.write(sample(tick))
                problem = store.health.problem or ""
                assert "6 ticks wait" not in problem, problem  # never past its bound
            problem = store.health.problem or ""
            assert "5 ticks wait in memory (at most 5;" in problem, problem
            assert "dropped so far) and are written when it can" in problem, problem
            said = [r.getMessage() for r in caplog.records]
            drops = [m for m in said if "the oldest are dropped" in m]
            assert len(drops) == 1, said  # at the first drop, once
            filler.unlink()
            assert store.write(sample(220))
        said = [r.getMessage() for r in caplog.records]
        again = [m for m in said if m.startswith("recording into")]
        assert len(again) == 1 and "15 ticks taken while it could not be were dropped" in (
            again[0]), said
        assert not any("everything that waited" in m for m in said), said


def test_a_full_disk_before_any_tick_and_a_stop_with_one_tick_are_said_in_plain_words(
        tmp_path: Path, caplog) -> None:
    """At a start on a full disk the first write is a fact (the host's), with no tick yet:
    health said "0 ticks wait in memory ... and are written when it can"; a stop with one tick
    waiting said "stopping with 1 ticks" (probe 142 L5)."""
    caplog.set_level(logging.INFO, logger="daemon.store.writer")
    with mounts.tmpfs(tmp_path / "disk", size="8m") as disk:
        path = disk / "s.db"
        store = Store(path)
        for tick in range(1, 20):
            assert store.write(sample(tick))
        filler = mounts.fill(disk)
        try:
            store.set_meta("host", {"hostname": "box"})  # nothing buffered yet
            problem = store.health.problem or ""
            assert "disk is full" in problem, store.health
            assert "ticks wait in memory until it can be written (none yet; at most " \
                in problem, problem
            assert "0 ticks" not in problem, problem
            assert not store.write(sample(20))
        finally:
            store.close()  # on the full disk: the tick and the fact are lost, and said so
            filler.unlink()
    [stopped] = [r.getMessage() for r in caplog.records if "they are lost" in r.getMessage()]
    assert stopped.startswith("stopping with 1 tick and 1 other write that could not be "
                              "written"), stopped


def test_a_forward_step_of_the_clock_keeps_the_raw_history_recorded_before_it(
        tmp_path: Path) -> None:
    """The wall clock stepped a day forward while recording: retention by age cuts from the
    newest tick, and deleted every raw tick recorded before the step (65 of 126 kept; probe
    115). Told of the step (the daemon's loop sees it), the store keeps them as long as it
    would have, across a restart too; without a step it cuts as ever."""
    path = tmp_path / "s.db"
    day = 86400
    with Store(path, raw_retention_s=3600) as store:
        for tick in range(1, 601):  # 10 minutes
            assert store.write(sample(tick))
        store.clock_stepped_forward(day)
        for tick in range(601 + day, 721 + day):  # 2 minutes more, a day later by the clock
            assert store.write(sample(tick))
            store.maintain(budget_s=1.0)
        assert ticks(path)[:2] == [1, 2], ticks(path)[:2]
    with Store(path, raw_retention_s=3600) as store:  # a restart remembers the step
        assert store.write(sample(721 + day))
        for _ in range(3):
            store.maintain(budget_s=1.0)
    recorded = ticks(path)
    assert recorded[0] == 1 and len(recorded) == 600 + 121, (recorded[0], len(recorded))
    unstepped = tmp_path / "u.db"  # the same timeline with no step told: cut from the newest
    with Store(unstepped, raw_retention_s=3600) as store:
        for tick in [*range(1, 601), *range(601 + day, 722 + day)]:
            assert store.write(sample(tick))
            store.maintain(budget_s=1.0)
    assert ticks(unstepped)[0] > 600


# ------------------------------------------------------------- 8: database deleted


def test_database_deleted_while_recording_is_recreated_with_everything(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in range(1, 6):
            assert store.write(sample(tick))
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")
        for tick in range(6, 9):
            store.write(sample(tick))
        store.maintain(budget_s=1.0)
        assert path.exists()
        assert ticks(path) == list(range(1, 9))
        health = store.health
        assert health.recreated and "deleted" in health.recreated and health.problem is None
        assert store.write(sample(9))
    assert ticks(path) == list(range(1, 10))


def test_database_replaced_while_recording_is_moved_aside_and_recreated(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in range(1, 4):
            assert store.write(sample(tick))
        other = tmp_path / "other"
        other.write_bytes(b"someone else's file")
        os.replace(other, path)
        store.maintain(budget_s=1.0)
        health = store.health
        assert health.recreated and "replaced" in health.recreated
        aside = [p for p in tmp_path.iterdir() if ".replaced-" in p.name]
        assert len(aside) == 1 and aside[0].read_bytes() == b"someone else's file"
        assert store.write(sample(4))
    assert ticks(path) == [1, 2, 3, 4]


def damage(path: Path) -> None:
    """Every page of the database file but the first (its header) overwritten with garbage, as
    a failing disk or a stray write leaves it: SQLite reads "database disk image is malformed"."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        assert size > 4096, "nothing past the header page to damage yet"
        os.pwrite(fd, b"\xde\xad\xbe\xef" * ((size - 4096) // 4), 4096)
    finally:
        os.close(fd)


def test_a_database_damaged_while_recording_is_moved_aside_and_a_new_one_started(
        tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.set_meta("host", {"hostname": "box"})
        for tick in range(1, 6):
            assert store.write(sample(tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
        damage(path)
        reader = StoreReader(str(path))
        try:
            with pytest.raises(Exception) as raised:
                reader.conn.execute("SELECT count(*) FROM proc_samples").fetchone()
        finally:
            reader.close()
        assert store.note_if_damaged(raised.value), raised.value
        assert not store.write(sample(6))  # not into the damaged file: it waits in memory
        store.maintain(budget_s=1.0)
        health = store.health
        aside = Path(health.corrupt_moved_aside or "")
        assert aside.name.startswith("s.db.corrupt-") and aside.exists(), health
        assert aside.stat().st_mode & 0o777 == 0o600
        assert health.recreated and str(aside) in health.recreated and ".recover" in (
            health.recreated)
        assert health.problem is None and health.samples_dropped == 0
        assert store.write(sample(7))
    assert ticks(path) == [6, 7]  # the tick that waited is in the new file, not lost
    reader = StoreReader(str(path))
    try:
        assert reader.meta("host") == {"hostname": "box"}  # the facts recorded once, again
        rows = reader.query("SELECT p.pid FROM proc_samples s JOIN processes p "
                            "ON p.id = s.proc")
    finally:
        reader.close()
    assert [row["pid"] for row in rows] == [100, 100]  # ids of the new file, not the old one's


def test_a_tick_the_damaged_file_refuses_waits_for_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in range(1, 40):
            assert store.write(sample(tick, pid=100 + tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
        store.pragma("cache_size", 1)  # the writer reads the damaged pages, not its cache
        store.pragma("shrink_memory")
        damage(path)
        assert not store.write(sample(40, pid=999))  # a new process: the file's pages are read
        health = store.health
        assert "malformed" in (health.last_error or "") and health.samples_dropped == 0, health
        store.maintain(budget_s=1.0)
        assert store.health.corrupt_moved_aside and store.health.samples_dropped == 0
        assert store.write(sample(41))
    assert ticks(path) == [40, 41]


def test_a_damaged_wal_is_not_copied_over_the_good_pages_moved_aside(tmp_path: Path) -> None:
    """Garbage in the WAL alone: the file moved aside keeps its good pages (closing the
    writer's connection checkpointed the garbage into it, and `.recover` got nothing)."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in range(1, 30):
            assert store.write(sample(tick, pid=100 + tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
        for tick in range(30, 60):  # these in the WAL only
            assert store.write(sample(tick, pid=100 + tick))
        wal = Path(f"{path}-wal")
        fd = os.open(wal, os.O_RDWR)
        try:  # its frames, past the WAL's 32-byte header
            os.pwrite(fd, b"\xde\xad\xbe\xef" * ((os.fstat(fd).st_size - 32) // 4), 32)
        finally:
            os.close(fd)
        assert store.note_if_damaged(sqlite3.DatabaseError("database disk image is malformed"))
        store.maintain(budget_s=1.0)
        aside = Path(store.health.corrupt_moved_aside or "")
        assert aside.exists() and store.write(sample(60))
    kept = sqlite3.connect(f"file:{aside}?mode=ro", uri=True)
    try:
        assert kept.execute("PRAGMA quick_check").fetchone() == ("ok",)
        assert kept.execute("SELECT count(*) FROM ticks").fetchone() == (29,)
    finally:
        kept.close()
    assert ticks(path) == [60]


def test_a_damaged_database_on_a_full_disk_waits_for_space_and_loses_no_tick(
        tmp_path: Path) -> None:
    """Moved aside, and no new file can be made: the ticks wait in memory, the file moved
    aside is not moved again (nor is a new one taken for damaged), nothing raises; with space
    back, a new store holds every tick that waited."""
    with small_disk(tmp_path / "disk") as disk:
        path = disk / "s.db"
        with Store(path) as store:
            for tick in range(1, 6):
                assert store.write(sample(tick))
            store.pragma("wal_checkpoint", "TRUNCATE")
            damage(path)
            filler = fill(disk)
            assert store.note_if_damaged(sqlite3.DatabaseError("database disk image is "
                                                               "malformed"))
            for tick in range(6, 12):
                assert not store.write(sample(tick))
                store.maintain(budget_s=1.0)
            health = store.health
            aside = [p.name for p in disk.iterdir() if ".corrupt-" in p.name
                     and not p.name.endswith(("-wal", "-shm"))]
            assert len(aside) == 1, sorted(p.name for p in disk.iterdir())
            assert health.problem and "starting a new one there failed" in health.problem
            assert health.samples_dropped == 0 and health.samples_buffered == 6
            filler.unlink()
            store.maintain(budget_s=1.0)
            assert store.health.problem is None, store.health
            assert store.write(sample(12))
        assert ticks(path) == list(range(6, 13))


def test_an_api_read_of_a_damaged_file_says_what_happens_to_it(tmp_path: Path, caplog) -> None:
    """The API's answer to a read that met a damaged file: 503, and 'moved aside' only where
    the store will move it (its own file); a damaged file that is not the one recorded into
    (put at the path in its place) is said to be unreadable, with no promise and no
    traceback in the log."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from daemon.api.server import make_app

    def five_ticks_then_damage(store: Store, path: Path) -> None:
        for tick in range(1, 6):
            store.write(sample(tick, pid=100 + tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
        damage(path)

    other = tmp_path / "other.db"
    with Store(other) as writer:
        five_ticks_then_damage(writer, other)

    class Reading:  # a daemon whose /v1/now reads `read` through a real reader
        def __init__(self, store: Store, read: Path) -> None:
            self.store, self.read = store, read

        def now_body(self) -> bytes:
            reader = StoreReader(str(self.read))
            try:
                reader.conn.execute("SELECT count(*) FROM proc_samples").fetchone()
            finally:
                reader.close()
            return b"{}"

    async def answer(daemon: Reading) -> tuple[int, str]:
        async with TestClient(TestServer(make_app(daemon), host="127.0.0.1")) as client:
            async with client.get("/v1/now") as response:
                return response.status, (await response.json())["error"]

    with Store(tmp_path / "s.db") as store:
        assert store.write(sample(1))
        link = tmp_path / "link"
        link.symlink_to(other)
        os.replace(link, tmp_path / "s.db")  # planted at the path, over the store's file
        with caplog.at_level(logging.WARNING, logger="daemon.api.server"):
            status, said = asyncio.run(answer(Reading(store, tmp_path / "s.db")))
        assert status == 503 and "cannot be read now" in said and "moves it aside" not in said
        assert not store.starting_over
        assert not [r for r in caplog.records if r.exc_info]
    path = tmp_path / "t.db"
    with Store(path) as store:
        five_ticks_then_damage(store, path)
        status, said = asyncio.run(answer(Reading(store, path)))
        assert status == 503 and "moves it aside" in said and store.starting_over


def test_housekeeping_that_keeps_failing_is_a_problem_health_says(tmp_path: Path) -> None:
    """Rollups, retention and checkpoints failing round after round (the file made immutable,
    a broken disk) left only `last_error`: the WAL grew and nothing said so."""
    from daemon.store.maintenance import MAINTAIN_FAILURES_SAID

    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in range(1, 200):  # minutes to roll up
            assert store.write(sample(tick))
        store.set_authorizer(  # SQLite refuses the rollups' writes (a real error)
            lambda action, *_: sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_INSERT
            else sqlite3.SQLITE_OK)
        for _ in range(MAINTAIN_FAILURES_SAID):
            store.maintain(budget_s=1.0)
        problem = store.health.problem or ""
        assert "housekeeping of the store" in problem and "not authorized" in problem, problem
        store.set_authorizer(None)
        store.maintain(budget_s=1.0)
        assert store.health.problem is None


def test_only_sqlites_word_for_a_damaged_file_starts_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        assert store.write(sample(1))
        assert not store.note_if_damaged(sqlite3.OperationalError("no such table: x"))
        assert not store.note_if_damaged(ValueError("database disk image is malformed"))
        store.maintain(budget_s=1.0)
        assert store.health.corrupt_moved_aside is None and store.write(sample(2))
    assert ticks(path) == [1, 2]


@pytest.mark.fault("database damaged", "the database file's pages overwritten while the daemon "
                   "records into it and answers reads")
def test_a_database_folder_moved_away_and_back_clears_the_problem(tmp_path: Path) -> None:
    """The store's folder renamed while recording: recreating fails (no folder), and the
    problem told a user to stop mlcostd, which loses what is only in the open file; with the
    folder back (the same file at the path) the problem stayed until the daemon stopped
    (probe 115 F6, F12)."""
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "s.db"
    with Store(path) as store:
        for tick in range(1, 6):
            assert store.write(sample(tick))
        folder.rename(tmp_path / "moved")
        store.maintain(budget_s=1.0)
        problem = store.health.problem or ""
        assert "deleted or moved away" in problem and "put the file or its folder back" in (
            problem), problem
        assert "SIGTERM" not in problem and "keep mlcostd running" in problem, problem
        assert store.write(sample(6))  # into the open file meanwhile
        (tmp_path / "moved").rename(folder)
        store.maintain(budget_s=1.0)
        assert store.health.problem is None, store.health
        assert store.write(sample(7))
    assert ticks(path) == list(range(1, 8))


@pytest.mark.parametrize("length", [0, 4096])
def test_a_database_cut_short_while_recording_is_moved_aside_and_a_new_one_started(
        tmp_path: Path, length: int) -> None:
    """`truncate -s 0` (or to its first page) on the store under the writer: the file kept its
    inode, so nothing was noticed; the writer went on writing and counting ticks into a file
    no reader could open, and its close left one `.recover` got nothing from (probe 115)."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.set_meta("host", {"hostname": "box"})
        for tick in range(1, 60):
            assert store.write(sample(tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
        for _ in range(3):  # a healthy file is never taken for one cut short
            store.maintain(budget_s=1.0)
        assert store.health.corrupt_moved_aside is None
        os.truncate(path, length)
        store.maintain(budget_s=1.0)  # the next round finds it, and starts a new one
        health = store.health
        aside = Path(health.corrupt_moved_aside or "")
        assert aside.name.startswith("s.db.corrupt-") and aside.exists(), health
        assert health.recreated and "cut short" in health.recreated, health.recreated
        assert health.problem is None and health.samples_dropped == 0, health
        assert store.write(sample(60)) and store.write(sample(61))
    assert ticks(path) == [60, 61]  # a new store, readable
    reader = StoreReader(str(path))
    try:
        assert reader.meta("host") == {"hostname": "box"}
    finally:
        reader.close()


def test_check_says_a_store_cut_short_is_damaged_not_busy(tmp_path: Path) -> None:
    """`mlcostd check --db` on a truncated store: "PRAGMA quick_check could not run: disk I/O
    error; fix: run mlcostd check again when the store is not busy" (probe 115)."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in range(1, 60):
            assert store.write(sample(tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
    os.truncate(path, 4096)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "daemon", "check", "--simulate", "idle-host",
                           "--db", str(path)], capture_output=True, text=True, timeout=120,
                          env=env)
    [line] = [line for line in done.stdout.splitlines() if "database:" in line]
    assert line.startswith("[FAIL] database:") and "cut short (4096 bytes where its header" in (
        line), done.stdout
    assert ".recover" in done.stdout and "not busy" not in done.stdout, done.stdout


def test_a_database_cut_short_under_a_live_daemon(mlcostd) -> None:
    daemon = mlcostd("idle-host", interval=0.2)
    poll(lambda: daemon.db.stat().st_size > 8 * 4096, 60,
         "a checkpoint to put pages in the database file", explain=daemon.log_tail)
    os.truncate(daemon.db, 0)
    aside = Path(poll(lambda: (daemon.call("health").store or {}).get("corrupt_moved_aside"),
                      30, "health to say the file cut short was moved aside",
                      explain=daemon.log_tail))
    assert aside.name.startswith(f"{daemon.db.name}.corrupt-")
    first = daemon.wait_for_ticks(3)[0]
    health = daemon.call("health")
    assert health.ok and health.store.get("problem") is None, health
    assert "cut short" in (health.store.get("recreated") or ""), health.store
    assert daemon.stop() == 0
    recorded = ticks(daemon.db)  # readable: what came after is in the new file
    assert recorded == list(range(first, recorded[-1] + 1))
    log = daemon.log()
    assert "Traceback" not in log, daemon.log_tail()
    # it said "everything recorded is in" the new file, and nothing of the one moved aside
    assert "everything recorded is in" not in log and f"moved aside to {aside}" in log, (
        daemon.log_tail())


def test_a_database_damaged_under_a_live_daemon(mlcostd) -> None:
    daemon = mlcostd("idle-host", interval=0.2)
    poll(lambda: daemon.db.stat().st_size > 8 * 4096, 60,
         "a checkpoint to put pages in the database file", explain=daemon.log_tail)
    damage(daemon.db)
    answers_seen: list[str] = []

    def moved_aside() -> str | None:
        try:  # a read of what the damaged file held: it finds the damage
            daemon.call("gpu_history", 0, since_s=3600)
        except ClientError as error:
            answers_seen.append(str(error))
        return (daemon.call("health").store or {}).get("corrupt_moved_aside")

    aside = Path(poll(moved_aside, 30, "health to say the damaged database was moved aside",
                      explain=daemon.log_tail))
    assert aside.exists() and aside.name.startswith(f"{daemon.db.name}.corrupt-")
    assert all("damaged" in text and "internal error" not in text for text in answers_seen), (
        answers_seen)
    first = daemon.wait_for_ticks(3)[0]
    assert daemon.call("gpu_history", 0, since_s=3600)  # reads answer again, from the new file
    health = daemon.call("health")
    assert health.ok and health.store.get("problem") is None, health
    assert daemon.stop() == 0
    recorded = ticks(daemon.db)
    assert recorded == list(range(first, recorded[-1] + 1))  # from the new file's first on
    log = daemon.log()
    assert "moved it aside" in log and "Traceback" not in log, daemon.log_tail()


# -------------------------------------------------------- 9: one writer per database file


def test_a_hard_link_to_the_database_does_not_make_a_second_writer(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        assert store.write(sample(1))
        link = tmp_path / "another-name.db"
        os.link(path, link)
        # a file with two names is refused outright (issue 20: it may be someone else's file)
        with pytest.raises(StoreError, match="has 2 hard links"):
            Store(link)
        assert store.write(sample(2))
    path.unlink()
    with Store(link) as again:  # released on close; one name again
        assert again.write(sample(3))


@pytest.mark.fault("lock removed", "the .lock file deleted under a live daemon, then a second "
                   "daemon on the same database and through a hard link")
def test_second_daemon_refused_without_the_lock_file_and_through_a_hard_link(
        mlcostd, tmp_path: Path) -> None:
    first = mlcostd("idle-host", interval=0.2)
    first.wait_for_ticks(2)
    (first.db.parent / (first.db.name + ".lock")).unlink()
    link = first.folder / "same-file.db"
    for name, db, refusal in (("lock-removed", first.db, "another mlcostd is already recording"),
                              ("hard-link", link, "has 2 hard links")):  # issue 20
        if db == link:
            os.link(first.db, link)
        second = livedaemon.start(tmp_path / name, "idle-host", interval=0.2,
                                  args=["--db", str(db)], wait=False)
        code = second.wait_exit()
        log = second.log()
        assert code == 2, log
        assert refusal in log, log
        assert "Traceback" not in log, log
    before = len(first.ticks())
    first.wait_for_ticks(before + 2)  # the first one records on
    assert first.healthy()


@pytest.mark.fault("database deleted", "the database, WAL and SHM unlinked while recording")
def test_database_deleted_under_a_live_daemon(mlcostd) -> None:
    daemon = mlcostd("idle-host", interval=0.2)
    daemon.wait_for_ticks(3)
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{daemon.db}{suffix}")
    poll(lambda: (daemon.call("health").store or {}).get("recreated"), 30,
         "health to say the database was recreated", explain=daemon.log_tail)
    assert daemon.db.exists()
    daemon.wait_for_ticks(len(daemon.ticks()) + 2)
    assert daemon.stop() == 0
    log = daemon.log()
    assert "was deleted" in log and "everything recorded is in" in log, log
    recorded = ticks(daemon.db)
    assert recorded == list(range(recorded[0], recorded[-1] + 1))  # nothing lost


# ------------------------------------------------------- 7: a real full disk (tmpfs)


def store_series(daemon: livedaemon.LiveDaemon) -> dict[str, float]:
    """The store's series in the daemon's /metrics (on its API socket), by name."""
    async def get() -> str:
        connector = aiohttp.UnixConnector(path=str(daemon.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get("http://mlcostd/metrics") as response:
                assert response.status == 200, response.status
                return await response.text()

    text = asyncio.run(get())
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name.startswith("mlcost_store_")}




def small_disk(folder: Path):
    return mounts.tmpfs(folder, size="8m")


fill = mounts.fill


@pytest.mark.fault("disk full", "an 8 MB tmpfs filled while recording, then freed; a restart "
                   "on it full")
def test_a_real_full_disk_keeps_the_daemon_up_and_loses_no_tick(mlcostd, tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        db = disk / "mlcost.db"
        daemon = mlcostd("idle-host", interval=0.2, args=["--db", str(db)])
        try:
            daemon.db = db
            daemon.wait_for_ticks(3)
            filler = fill(disk)
            poll(lambda: "disk is full" in ((daemon.call("health").store or {}).get("problem")
                                            or ""), 60, "health to say the disk is full",
                 explain=daemon.log_tail)
            assert daemon.healthy()
            # ... and /metrics, for an alert: up, its last sample time moving on, but the store
            # not recording and its ticks waiting (there was no store series: probe 115)
            full = store_series(daemon)
            assert full["mlcost_store_up"] == 0 and full["mlcost_store_samples_buffered"] >= 1
            filler.unlink()
            poll(lambda: (daemon.call("health").store or {}).get("problem") is None, 60,
                 "health to clear the problem once space returns", explain=daemon.log_tail)
            poll(lambda: store_series(daemon)["mlcost_store_up"] == 1, 30,
                 "/metrics to say the store records again", explain=daemon.log_tail)
            after = store_series(daemon)
            assert after["mlcost_store_samples_buffered"] == 0, after
            assert after["mlcost_store_samples_dropped_total"] == 0, after
            assert after["mlcost_store_write_failures_total"] >= 1, after
            assert after["mlcost_store_bytes"] > 0, after
            daemon.wait_for_ticks(len(daemon.ticks()) + 2)
            assert daemon.stop() == 0
            log = daemon.log()
            assert "Traceback" not in log, log
            assert log.count("the disk is full") == 1, log  # rate-limited: said once
            assert "again" in log, log
            recorded = ticks(db)
            assert recorded == list(range(recorded[0], recorded[-1] + 1))  # no tick lost
            # A restart on the full disk: it records (buffering) or says so in one line.
            fill(disk)
            again = livedaemon.start(tmp_path / "again", "idle-host", interval=0.2,
                                     args=["--db", str(db)], wait=False)
            try:
                poll(lambda: again.proc.poll() is not None or answers(again), 60,
                     "the restarted daemon to record or exit", explain=again.log_tail)
            finally:
                code = again.stop()
            log = again.log()
            assert "Traceback" not in log, log
            if code != 0:
                assert code == 2 and "full" in log, log
                assert len([line for line in log.splitlines() if line.startswith("mlcostd:")]) == 1
        finally:
            if daemon.returncode is None:
                daemon.stop()


@pytest.mark.fault("disk full at start", "a first start on a full tmpfs")
def test_a_first_start_on_a_full_disk_is_one_clear_line(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        db = disk / "mlcost.db"
        (disk / "mlcost.db.lock").write_text("1")  # the lock has its page: the store fails
        fill(disk)
        daemon = livedaemon.start(tmp_path / "run", "idle-host", interval=0.2,
                                  args=["--db", str(db)], wait=False)
        code = daemon.wait_exit()
        log = daemon.log()
        assert code == 2, log
        assert "Traceback" not in log, log
        lines = [line for line in log.splitlines() if line.startswith("mlcostd:")]
        assert len(lines) == 1 and "the disk holding it is full" in lines[0], log


@pytest.mark.fault("database replaced", "another file renamed over the database while recording")
def test_database_replaced_under_a_live_daemon(mlcostd, tmp_path: Path) -> None:
    daemon = mlcostd("idle-host", interval=0.2)
    daemon.wait_for_ticks(3)
    other = daemon.folder / "other"
    other.write_bytes(b"someone else's file")
    os.replace(other, daemon.db)
    poll(lambda: "replaced" in ((daemon.call("health").store or {}).get("recreated") or ""),
         30, "health to say the database was replaced", explain=daemon.log_tail)
    daemon.wait_for_ticks(len(daemon.ticks()) + 3)
    assert daemon.stop() == 0
    aside = [p for p in daemon.folder.iterdir() if ".replaced-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == b"someone else's file"
    recorded = ticks(daemon.db)
    assert recorded[0] == 1 and recorded == list(range(1, recorded[-1] + 1))  # nothing lost
    assert "Traceback" not in daemon.log()


@pytest.mark.fault("read-only folder", "the store's folder read-only while the deleted "
                   "database must be recreated in it, then writable again")
def test_a_read_only_folder_delays_the_recreated_database_and_loses_no_tick(
        mlcostd, tmp_path: Path) -> None:
    """A folder mounted read-only under a running daemon does not stop writes to files it has
    open (the kernel checks at open), so the fault that bites is the next file it must create:
    here the database, deleted (through a second, writable view of the folder) while the
    daemon's path to it is read-only."""
    folder = tmp_path / "state"
    folder.mkdir()
    db = folder / "mlcost.db"
    daemon = mlcostd("idle-host", interval=0.2, args=["--db", str(db)])
    daemon.db = db
    daemon.wait_for_ticks(3)
    with mounts.bind(folder, tmp_path / "writable-view") as view, mounts.read_only(folder):
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(view / f"mlcost.db{suffix}")
        poll(lambda: faultkit.health(daemon)["problems"], 60,
             "health to say the database cannot be recreated", explain=daemon.log_tail)
        during = faultkit.health(daemon)
        assert during["ok"], during
        tick_during = during["tick"]
        assert not (view / "mlcost.db").exists()
    poll(lambda: db.exists() and not faultkit.health(daemon)["problems"], 60,
         "the database recreated once the folder is writable", explain=daemon.log_tail)
    daemon.wait_for_ticks(len(daemon.ticks()) + 2)
    assert daemon.stop() == 0
    log = daemon.log()
    assert "Traceback" not in log, log
    recorded = ticks(db)
    assert recorded[0] == 1 and recorded == list(range(1, recorded[-1] + 1))  # nothing lost
    assert tick_during in recorded


# ------------------------------ a store made unwritable under the writer: what to look at (L2)


def _chattr(flag: str, *paths: Path) -> None:
    done = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, text=True)
    # (e2fsprogs' chattr on a file system with attributes, as ext4: .ci/run installs it; a
    # tmp_path on one without them, tmpfs, fails here rather than skipping the test unseen)
    assert done.returncode == 0, f"chattr {flag} does not work here: {done.stderr.strip()}"


def test_a_store_made_immutable_under_the_writer_says_so_and_how_to_undo_it(
        tmp_path: Path, caplog) -> None:
    """`chattr +i` on a recording store logged only "cannot write the store ...: disk I/O
    error; 1 tick waits in memory", where a full disk says to free space (probe 155 L2)."""
    path = tmp_path / "s.db"
    wal = Path(f"{path}-wal")
    with Store(path) as store:
        for tick in range(1, 4):
            assert store.write(sample(tick))
        assert wal.exists()
        _chattr("+i", path, wal)
        try:
            with caplog.at_level(logging.ERROR, logger="daemon.store.writer"):
                assert not store.write(sample(4))
            problem = store.health.problem or ""
            assert "disk I/O error" in problem, problem  # SQLite's words: kept
            assert (f"{path} and {wal} are immutable (`lsattr` shows i; not even root can "
                    f"write them): run `chattr -i {path} {wal}`; 1 tick waits in memory") in (
                problem), problem
            [said] = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
            assert said == problem
        finally:
            subprocess.run(["chattr", "-i", str(path), str(wal)], check=True)
        assert store.write(sample(5))  # as it said: the waiting tick goes in with this one
        assert store.health.problem is None
    assert ticks(path) == [1, 2, 3, 4, 5]


def test_an_append_only_store_file_is_named_with_its_attribute(tmp_path: Path) -> None:
    from daemon.store.errors import unwritable_cause

    path = tmp_path / "s.db"
    path.write_bytes(b"")
    _chattr("+a", path)
    try:
        assert unwritable_cause(str(path)) == (
            f"{path} is append-only (`lsattr` shows a; not even root can write it): run "
            f"`chattr -a {path}`")
    finally:
        subprocess.run(["chattr", "-a", str(path)], check=True)


def test_a_store_on_a_file_system_mounted_read_only_is_named(tmp_path: Path) -> None:
    """A remount read-only (what the kernel does after disk errors) under the writer."""
    from daemon.store.errors import refused_write_advice, unwritable_cause

    folder = tmp_path / "state"
    folder.mkdir()
    path = folder / "s.db"
    path.write_bytes(b"")
    assert unwritable_cause(str(path)) is None
    with mounts.read_only(folder):
        said = unwritable_cause(str(path))
        assert said is not None and said.startswith(
            f"the file system holding {folder} is mounted read-only now"), said
        assert refused_write_advice(str(path)) == said


def test_a_store_its_user_may_not_write_names_the_file_and_its_mode(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """A mode or owner changed under a daemon that does not run as root. (Root writes
    whatever the mode says, so os.access answers for that user here.)"""
    from daemon.store import errors

    path = tmp_path / "s.db"
    path.write_bytes(b"")
    path.chmod(0o444)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda name, mode: (
        False if str(name) == str(path) else real_access(name, mode)))
    said = errors.unwritable_cause(str(path))
    assert said == (f"mlcostd's user (uid {os.geteuid()}) may not write {path} (mode 444, "
                    f"owner uid {os.getuid()}); give it back write permission (chmod, chown)")


def test_a_refused_write_with_no_cause_found_names_the_likely_ones(tmp_path: Path) -> None:
    """A write refused (or a disk I/O error) where the file, its folder and its mount look
    writable: the causes to check, not SQLite's words alone."""
    from daemon.store.errors import refused_write_advice

    path = tmp_path / "s.db"
    path.write_bytes(b"")
    advice = refused_write_advice(str(path))
    for cause in ("permissions and attributes", "`lsattr`", "remounted read-only", "`dmesg`"):
        assert cause in advice, advice


# ------------------------------------------- a store read where it cannot be written (M3)

MLCOSTD = [sys.executable, "-m", "daemon"]


def report_of(db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(MLCOSTD + ["report", "--db", str(db), "--since", "1h"],
                          capture_output=True, text=True, timeout=120)


def store_with_writes_in_its_wal(folder: Path) -> Path:
    """A copy of a store taken with its -wal holding writes not yet in the file (a copy of a
    live daemon's files, as someone sends them)."""
    live = folder / "live.db"
    with Store(live) as store:
        for tick in range(1, 40):
            assert store.write(sample(tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
        for tick in range(40, 60):  # these wait in the -wal
            assert store.write(sample(tick))
        copy = folder / "copy.db"
        for suffix in ("", "-wal"):
            copy.with_name(copy.name + suffix).write_bytes(
                live.with_name(live.name + suffix).read_bytes())
    assert os.path.getsize(str(copy) + "-wal") > 0
    return copy


@pytest.mark.fault("read-only store", "a stopped daemon's store on a read-only mount: report, "
                   "replay and render; a copy whose -wal holds writes there")
def test_a_store_on_a_read_only_mount_is_read_or_says_why_not(mlcostd, tmp_path: Path) -> None:
    """A valid WAL-mode store on a read-only file system was "not an mlcostd database (unable
    to open database file)" to report, replay and render (probe 142 M3): SQLite cannot make
    the -shm and -wal a read-only reader of a WAL-mode file needs."""
    from daemon.replay import Replay, ReplayError

    folder = tmp_path / "backup"
    folder.mkdir()
    db = folder / "mlcost.db"
    daemon = mlcostd("idle-host", interval=0.2, args=["--db", str(db)])
    daemon.db = db
    daemon.wait_for_ticks(3)
    # recording: a read-only view of its folder reads it, beside the writer, with its -wal
    with mounts.bind(folder, tmp_path / "view") as view, mounts.read_only(view):
        done = report_of(view / "mlcost.db")
        assert done.returncode == 0, done.stderr
    assert daemon.stop() == 0
    assert not Path(str(db) + "-wal").exists()  # a clean stop leaves the file alone
    store_with_writes_in_its_wal(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with mounts.read_only(folder):
        done = report_of(db)
        assert done.returncode == 0, done.stderr
        assert "unable to open" not in done.stderr + done.stdout
        replay = Replay(db)
        try:
            assert len(replay._all_ms) >= 3
        finally:
            replay.close()
        page = tmp_path / "page.html"
        done = subprocess.run(MLCOSTD + ["snapshot", "--render", str(db), "--out", str(page)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and page.exists(), done.stderr
        # A copy whose -wal holds writes and no -shm: the file alone is not the store, and
        # SQLite reads the -wal only with a -shm it must create: said, with what to do.
        done = report_of(folder / "copy.db")
        assert done.returncode == 2, done.stdout
        assert "not an mlcostd database" not in done.stderr, done.stderr
        assert "its folder cannot be written" in done.stderr, done.stderr
        assert "copy the store and its -wal to a writable folder" in done.stderr, done.stderr
        with pytest.raises(ReplayError, match="its folder cannot be written"):
            Replay(folder / "copy.db")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # Copied as told, it reads in full.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for suffix in ("", "-wal"):
        (elsewhere / f"copy.db{suffix}").write_bytes(before[f"copy.db{suffix}"])
    assert ticks(elsewhere / "copy.db") == list(range(1, 60))


def test_a_report_leaves_the_store_it_reads_as_it_was(tmp_path: Path) -> None:
    """`report --db` on a copy whose -wal held writes checkpointed them into the file and
    deleted the -wal: the file grew, a store sent as evidence changed (probe 142 L8). With no
    -wal, it still leaves nothing beside the file."""
    copy = store_with_writes_in_its_wal(tmp_path)
    files = (copy, Path(str(copy) + "-wal"))
    before = [p.read_bytes() for p in files]
    done = report_of(copy)
    assert done.returncode == 0, done.stderr
    assert [p.read_bytes() for p in files] == before
    alone = tmp_path / "alone.db"
    with Store(alone) as store:
        for tick in range(1, 30):
            assert store.write(sample(tick))
    assert not Path(str(alone) + "-wal").exists()
    before_alone = alone.read_bytes()
    done = report_of(alone)
    assert done.returncode == 0, done.stderr
    assert alone.read_bytes() == before_alone
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("alone")) == [
        "alone.db"]


@pytest.mark.fault("disk full at stop", "SIGTERM while the disk is full, then a start once "
                   "space is back")
def test_a_clean_stop_on_a_full_disk_is_not_called_a_kill_at_the_next_start(
        mlcostd, tmp_path: Path) -> None:
    """A SIGTERM on a full disk could not hand over its last spend, and the next start said
    the run before it was "killed, or its host lost power" (probe 142 M5). A clean stop
    removes its lock file; a killed run leaves it."""
    with small_disk(tmp_path / "disk") as disk:
        db = disk / "mlcost.db"
        daemon = mlcostd("idle-host", interval=0.2, args=["--db", str(db)],
                         config={"cost": {"evaluate_every": "10m"}})  # one round, at start
        daemon.db = db

        def ticks_after_the_round() -> bool:
            with StoreReader(str(db)) as reader:
                through = queries.spend_through(reader)
                return through is not None and len(reader.ticks(since=through + 0.001)) >= 2

        poll(ticks_after_the_round, 60, "ticks recorded after the first hand-over of spend",
             explain=daemon.log_tail)
        filler = fill(disk)
        poll(lambda: "disk is full" in ((daemon.call("health").store or {}).get("problem")
                                        or ""), 60, "health to say the disk is full",
             explain=daemon.log_tail)
        assert daemon.stop() == 0
        [stopped] = [line for line in daemon.log().splitlines() if "they are lost" in line]
        assert "disk is full" in stopped and "keep mlcostd running" not in stopped, stopped
        assert not Path(str(db) + ".lock").exists()
        filler.unlink()
        again = livedaemon.start(tmp_path / "again", "idle-host", interval=0.2,
                                 args=["--db", str(db)])
        try:
            poll(lambda: "without handing over" in again.log(), 60,
                 "the start to charge what the run before it did not hand over",
                 explain=again.log_tail)
        finally:
            assert again.stop() == 0
        [said] = [line for line in again.log().splitlines() if "without handing over" in line]
        assert "killed" not in said and "lost power" not in said, said
        assert "could not write it into the store" in said, said


def test_the_stores_size_is_never_measured_through_a_link_planted_at_its_path(
        tmp_path: Path) -> None:
    """A symbolic link renamed over the database: the daemon refuses it, but its size on disk
    (/v1/health, /metrics) was the link's target's (probe 142 L4)."""
    path = tmp_path / "s.db"
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 1_000_000)
    with Store(path) as store:
        for tick in range(1, 6):
            assert store.write(sample(tick))
        wal = os.path.getsize(str(path) + "-wal")
        link = tmp_path / "link"
        link.symlink_to(victim)
        os.replace(link, path)
        assert store.health.bytes_on_disk == wal
    assert victim.read_bytes() == b"v" * 1_000_000


def test_a_database_cut_short_goes_aside_with_the_wal_that_holds_its_last_ticks(
        tmp_path: Path) -> None:
    """`truncate -s 0` under the writer: the file went aside with its SHM only, and the WAL
    that held the ticks not yet checkpointed was deleted by the writer's close (probe 142
    L6): a file cut short is no WAL-mode database to the read-only holder that keeps the WAL
    of a damaged file."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        for tick in range(1, 40):
            assert store.write(sample(tick))
        store.pragma("wal_checkpoint", "TRUNCATE")
        for tick in range(40, 60):  # these are only in the WAL
            assert store.write(sample(tick))
        wal = Path(str(path) + "-wal").read_bytes()
        assert wal
        os.truncate(path, 0)
        store.maintain(budget_s=1.0)
        aside = Path(store.health.corrupt_moved_aside or "")
        assert aside.name.startswith("s.db.corrupt-"), store.health
        assert store.write(sample(60))
    kept = Path(str(aside) + "-wal")
    assert kept.exists(), sorted(p.name for p in tmp_path.iterdir())
    assert kept.read_bytes() == wal  # its frames, as they were
    assert not [p for p in tmp_path.iterdir() if ".kept-" in p.name]
    assert ticks(path)[-1] == 60  # and recording goes on into a new one
