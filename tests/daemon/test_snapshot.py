"""Snapshot files (daemon.store.snapshot): a range of a real store copied into a store of its
own, read back by replay; atomic, private, redacted; and every file replay must refuse."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.replay import Replay, ReplayError
from daemon.store import facts
from daemon.store.schema import SCHEMA_VERSION, unpack_text
from daemon.store.snapshot import (
    SNAPSHOT_TABLE,
    SnapshotError,
    free_path,
    list_snapshots,
    prune,
    read_facts,
    snapshot_name,
    write_snapshot,
)
from tests.daemon.scripted import T0, recording_daemon

TICKS = 40
SECRET = "hunter2-very-secret-token-value"


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A store recorded through the daemon's real tick path (scripted samples T0+1..T0+40),
    with a stack sample, a low-utilization window, an idle event and a recommendation."""
    folder = tmp_path_factory.mktemp("source")
    daemon = recording_daemon(folder, 5.0, ticks=TICKS)
    store = daemon.store
    assert store is not None
    facts.write_stacks(store, [facts.StackRow(
        ts=T0 + 20, pid=4242, start_time=1000.5, thread_id=1, stack_hash="abc",
        frames=(("read_shard", "/srv/train.py", 88), ("main", "/srv/train.py", 120)),
        phase="data_wait", gpu_util=3.0, reason="file read in the leaf frame")])
    facts.write_event(store, {"kind": "low_utilization", "target": "4242:1000.500",
                              "started_at": T0 + 18, "ended_at": T0 + 24, "cost_so_far": 0.01})
    facts.write_event(store, {"kind": "gpu_held_idle", "target": "gpu:0",
                              "started_at": T0 + 10, "ended_at": None, "cost_so_far": 0.5,
                              "detail": {"holders": [{"command": f"train --token {SECRET}"}]}})
    facts.write_event(store, {"kind": "gpu_held_idle", "target": "gpu:1",
                              "started_at": T0 - 3600, "ended_at": T0 - 3000, "cost_so_far": 1})
    rec = {"id": "rec-1", "rule": "idle_gpu", "target": "gpu:0", "savings_per_month": 1234.0}
    facts.write_recommendations(store, [dict(rec, summary=f"stop train --token {SECRET}")],
                                T0 + 15)  # an earlier text, kept in recommendation_texts
    facts.write_recommendations(store, [dict(rec, summary="stop it")], T0 + 30)
    store.close()
    db = folder / "mlcost.db"
    conn = sqlite3.connect(db)  # a command line recorded before redaction knew this secret
    conn.execute("UPDATE processes SET command = ?", (f"python train.py --password={SECRET}",))
    conn.commit()
    conn.close()
    return db


def test_a_snapshot_holds_the_range_and_replays_like_the_store(source, tmp_path):
    out = tmp_path / "snaps" / "one.db"
    info = write_snapshot(source, out, T0 + 10.5, T0 + 30.5,
                          trigger={"kind": "gpu_held_idle", "reason": "test"})
    assert info.ticks == 20 and info.path == str(out) and info.bytes == out.stat().st_size
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o700
    assert sorted(os.listdir(out.parent)) == ["one.db"]  # no temp file, no journal left
    conn = sqlite3.connect(out)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    ticks = [r[0] for r in conn.execute("SELECT tick FROM ticks ORDER BY ts")]
    assert ticks == list(range(11, 31))
    assert conn.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 40
    assert conn.execute("SELECT count(*) FROM proc_samples").fetchone()[0] == 20
    assert conn.execute("SELECT count(*) FROM stack_samples").fetchone()[0] == 1
    assert conn.execute("SELECT frames FROM stacks").fetchone()[0].count("train.py") == 2
    kinds = sorted(r[0] + r[1] for r in conn.execute("SELECT kind, target FROM events"))
    assert kinds == ["gpu_held_idlegpu:0", "low_utilization4242:1000.500"]  # not the old one
    assert [r[0] for r in conn.execute("SELECT id FROM recommendations")] == ["rec-1"]
    conn.close()
    snapshot = read_facts(out)
    assert snapshot is not None
    assert snapshot["trigger"]["kind"] == "gpu_held_idle"
    assert snapshot["hostname"] == "testhost" and snapshot["price"]["per_hour"] == 4.0
    assert snapshot["price_source"] == "test price"
    assert snapshot["since"] == pytest.approx(T0 + 10.5) and snapshot["ticks"] == 20

    at = T0 + 25
    with Replay(source) as whole, Replay(out) as part:
        assert part.snapshot == snapshot and whole.snapshot is None
        assert part.start == pytest.approx(T0 + 11) and part.end == pytest.approx(T0 + 30)
        live, replayed = whole.state_at(at), part.state_at(at)
        assert replayed["burn"]["total_per_hour"] == live["burn"]["total_per_hour"]
        assert replayed["burn"]["wasted_per_hour"] == live["burn"]["wasted_per_hour"]
        assert [g["utilization"] for g in replayed["gpus"]] == [12.0, 80.0]
        assert [p["cpu_percent"] for p in replayed["processes"]] == \
            [p["cpu_percent"] for p in live["processes"]]
        assert replayed["host"]["replay"]["snapshot"]["trigger"]["reason"] == "test"
        later = part.state_at(T0 + 30)
        assert [r["id"] for r in later["recommendations"]] == ["rec-1"]
        assert [e["kind"] for e in later["events"]] == ["gpu_held_idle"]


def test_command_lines_and_event_details_are_redacted_on_the_way_out(source, tmp_path):
    out = tmp_path / "redacted.db"
    write_snapshot(source, out, T0, T0 + TICKS)
    data = out.read_bytes()
    assert SECRET.encode() not in data
    assert SECRET.encode() in source.read_bytes()  # the source did hold it (the test bites)
    conn = sqlite3.connect(out)
    assert conn.execute("SELECT command FROM processes").fetchone()[0].startswith(
        "python train.py --password=")
    texts = [unpack_text(r[0]) for r in conn.execute(
        "SELECT body FROM recommendation_texts ORDER BY ts")]
    conn.close()
    assert len(texts) == 2 and "--token <redacted>" in texts[0]  # the earlier text, redacted


def test_a_command_line_is_copied_as_text_not_as_json(source, tmp_path):
    # redaction is per column: a command line that happens to parse as JSON is not rewritten
    db = tmp_path / "copy.db"
    db.write_bytes(source.read_bytes())
    conn = sqlite3.connect(db)
    conn.execute("UPDATE processes SET command = ?", ('["python","serve.py"]',))
    conn.commit()
    conn.close()
    out = tmp_path / "out.db"
    write_snapshot(db, out, T0, T0 + TICKS)
    conn = sqlite3.connect(out)
    assert {r[0] for r in conn.execute("SELECT command FROM processes")} == {
        '["python","serve.py"]'}
    conn.close()


def test_a_snapshot_that_fails_leaves_no_file_behind(source, tmp_path):
    out = tmp_path / "slow.db"
    with pytest.raises(SnapshotError, match="ran past 0 s; take a shorter range"):
        write_snapshot(source, out, T0, T0 + TICKS, timeout_s=0)
    assert os.listdir(tmp_path) == []
    with pytest.raises(SnapshotError, match="before it starts"):
        write_snapshot(source, out, T0 + 10, T0)
    link = tmp_path / "same.db"
    os.link(source, link)
    for own in (source, link):
        with pytest.raises(SnapshotError, match="is the store itself"):
            write_snapshot(source, own, T0, T0 + 5)
    link.unlink()
    with pytest.raises(SnapshotError, match="no store at"):
        write_snapshot(tmp_path / "missing.db", out, T0, T0 + 1)
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, just text\n" * 100)
    with pytest.raises(SnapshotError, match="notes.txt"):
        write_snapshot(text, out, T0, T0 + 1)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_a_store_of_a_newer_schema_is_not_copied(source, tmp_path):
    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(source)
    conn.execute("VACUUM INTO ?", (str(newer),))
    conn.close()
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(SnapshotError, match="newer than this mlcostd's"):
        write_snapshot(newer, tmp_path / "out.db", T0, T0 + 10)


@pytest.fixture(scope="module")
def snapshot(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("snapshot") / "good.db"
    write_snapshot(source, out, T0, T0 + TICKS, trigger={"kind": "manual", "reason": "by hand"})
    return out


def _bad_files(snapshot: Path, folder: Path) -> dict[str, tuple[Path, str]]:
    """Files replay must refuse, and what its message must say."""
    data = snapshot.read_bytes()
    truncated = folder / "truncated.db"
    truncated.write_bytes(data[: len(data) // 2])
    corrupt = folder / "corrupt.db"
    damaged = bytearray(data)
    for offset in range(4096 * 2, len(damaged), 997):  # scribble over every page after the 2nd
        damaged[offset:offset + 8] = b"\xde\xad\xbe\xef" * 2
    corrupt.write_bytes(bytes(damaged))
    newer = folder / "newer.db"
    newer.write_bytes(data)
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 3}")
    conn.commit()
    conn.close()
    text = folder / "notes.db"
    text.write_text("meeting notes, not a snapshot\n" * 200)
    empty = folder / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE unrelated (x)").connection.close()
    zero = folder / "zero.db"
    zero.write_bytes(b"")  # a file created and never written (a copy that failed at once)
    return {"truncated": (truncated, "damaged snapshot|the file is damaged"),
            "corrupt": (corrupt, "damaged snapshot|the file is damaged"),
            "newer": (newer, "newer mlcost"),
            "text": (text, "not an mlcostd store"),
            "unrelated": (empty, "not an mlcostd store"),
            "empty": (zero, "not an mlcostd store.*: it is empty"),
            "missing": (folder / "nothing-here.db", "no store at")}


def test_replay_refuses_damaged_newer_and_foreign_files_by_name(snapshot, tmp_path):
    for what, (path, message) in _bad_files(snapshot, tmp_path).items():
        with pytest.raises(ReplayError, match=message) as caught:
            Replay(path)
        assert str(path) in str(caught.value), what


def test_mlcost_top_replay_of_a_bad_file_exits_2_with_the_file_named(snapshot, tmp_path):
    for what, (path, _) in _bad_files(snapshot, tmp_path).items():
        done = subprocess.run([sys.executable, "-m", "mlcost_tui.cli", "--replay", str(path)],
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2, (what, done.stdout, done.stderr)
        assert str(path) in done.stderr, what
        assert "Traceback" not in done.stderr + done.stdout, what


def test_listing_naming_and_pruning_keep_the_folder_bounded(snapshot, tmp_path):
    folder = tmp_path / "snapshots"
    folder.mkdir()
    now = time.time()
    names = []
    for age_h in (50, 3, 2, 1):
        name = snapshot_name("gpu-host/1", now - age_h * 3600, "gpu_held_idle")
        (folder / name).write_bytes(snapshot.read_bytes())
        (folder / name).with_suffix(".html").write_text("<html></html>")
        os.utime(folder / name, (now - age_h * 3600, now - age_h * 3600))
        names.append(name)
    assert names[0].startswith("mlcost-gpu-host-1-") and names[0].endswith("-gpu_held_idle.db")
    (folder / ".being-written.db").write_bytes(b"partial")
    assert free_path(folder, names[0]).name == names[0].replace(".db", "-2.db")
    assert free_path(folder, "new.db") == folder / "new.db"
    listed = list_snapshots(folder)
    assert len(listed) == 4 and all(e["html"] for e in listed)
    assert listed[0]["trigger"]["reason"] == "by hand"
    size = snapshot.stat().st_size + len("<html></html>")
    removed = prune(folder, max_bytes=2 * size, max_age_s=24 * 3600, now=now)
    kept = sorted(p.name for p in folder.glob("mlcost-*.db"))
    assert kept == sorted(names[2:])  # the 50 h old one by age, the next oldest by size
    assert len(removed) == 4  # each with its HTML
    assert (folder / ".being-written.db").exists()  # never touched
    newest = folder / names[-1]
    prune(folder, max_bytes=1, max_age_s=24 * 3600, now=now, keep=newest)
    assert sorted(p.name for p in folder.glob("mlcost-*.db")) == [newest.name]  # over, but kept


def test_snapshot_table_is_only_in_snapshots(source):
    conn = sqlite3.connect(source)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert SNAPSHOT_TABLE not in tables
    assert read_facts(source) is None


def test_a_snapshot_of_a_range_reaching_before_the_store_says_where_its_ticks_begin(source,
                                                                                  tmp_path):
    """`mlcostd snapshot --since 30m` of a store 40 s old said "40 ticks from <30 minutes ago>":
    it says from its first tick, and when the range asked for began."""
    from daemon import clock
    from daemon.commands.snapshot import describe

    young = write_snapshot(source, tmp_path / "young.db", T0 - 1800, T0 + TICKS + 0.5)
    assert young.ticks == TICKS and young.first_tick == pytest.approx(T0 + 1)
    text = describe(dict(young.as_dict(), through="test"))
    assert f"{TICKS} ticks from {clock.local_time(T0 + 1)} to " in text
    assert f"(the range asked for began {clock.local_time(T0 - 1800)}: nothing" in text
    inside = write_snapshot(source, tmp_path / "inside.db", T0 + 10.5, T0 + 30.5)
    text = describe(dict(inside.as_dict(), through="test"))
    assert f"20 ticks from {clock.local_time(T0 + 11)} to " in text
    assert "range asked for" not in text
    # a range that began 50 s before the store (it said "from <the range's start>", with no
    # note, under a minute)
    early = write_snapshot(source, tmp_path / "early.db", T0 - 49, T0 + TICKS + 0.5)
    text = describe(dict(early.as_dict(), through="test"))
    assert f"{TICKS} ticks from {clock.local_time(T0 + 1)} to " in text
    assert f"(the range asked for began {clock.local_time(T0 - 49)}: nothing" in text


def _snapshot_cli(*args: str) -> subprocess.CompletedProcess[str]:
    from tests.livedaemon import ROOT

    return subprocess.run([sys.executable, "-m", "daemon.commands.cli", "snapshot", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          stdin=subprocess.DEVNULL)


def test_a_snapshot_of_a_range_that_holds_no_tick_is_refused_and_nothing_is_written(source,
                                                                                  tmp_path):
    """`snapshot --since 2h --until <a day before the store>` wrote "0 ticks" quietly; its
    replay then asked whether mlcostd was running. Refused (exit 2), naming the range the
    store holds as `mlcostd report` does; no file, not even a temporary one."""
    from daemon import clock

    folder = tmp_path / "out"
    folder.mkdir()
    until = int(T0) - 86400  # a day before the store began
    for out in (folder / "incident.db", folder):
        done = _snapshot_cli("--db", str(source), "--socket", str(tmp_path / "none.sock"),
                             "--since", "2h", "--until", str(until), "--out", str(out))
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
        assert (f"no tick from {clock.local_time(until - 7200)} to "
                f"{clock.local_time(until)}") in done.stderr
        assert f"{source} holds {clock.local_time(T0 + 1)} to " in done.stderr, done.stderr
        assert "--until" in done.stderr
        assert os.listdir(folder) == []
    with pytest.raises(SnapshotError, match="no tick from"):
        write_snapshot(source, folder / "x.db", T0 + TICKS + 60, T0 + TICKS + 120)
    assert os.listdir(folder) == []
    # an incident trigger's range keeps what triggered it, whatever the store holds
    kept = write_snapshot(source, folder / "trigger.db", T0 + TICKS + 60, T0 + TICKS + 120,
                          trigger={"kind": "gpu_lost", "reason": "GPU 0 is lost"},
                          empty_ok=True)
    assert kept.ticks == 0 and read_facts(folder / "trigger.db")["trigger"]["kind"] == "gpu_lost"


def test_a_store_with_no_tick_at_all_says_so(tmp_path):
    from daemon.store.writer import Store

    Store(str(tmp_path / "empty.db")).close()
    with pytest.raises(SnapshotError, match="empty.db holds no samples at all; is mlcostd "
                                            "recording into it"):
        write_snapshot(tmp_path / "empty.db", tmp_path / "x.db", T0, T0 + 60)
    assert [name for name in os.listdir(tmp_path) if not name.startswith("empty.db")] == []


def test_snapshot_and_report_refuse_a_file_that_is_no_store_alike(snapshot, tmp_path):
    """`mlcostd snapshot --db` of a text file or a damaged store exited 1 (a failure) where
    `mlcostd report --db` of the same file exits 2 (a refusal): both refuse it, by name."""
    bad = _bad_files(snapshot, tmp_path)
    for what in ("text", "truncated", "corrupt", "missing"):
        path = bad[what][0]
        for command in (["snapshot", "--db", str(path), "--out", str(tmp_path / "out.db")],
                        ["report", "--db", str(path)]):
            done = subprocess.run([sys.executable, "-m", "daemon", *command],
                                  capture_output=True, text=True, timeout=60,
                                  stdin=subprocess.DEVNULL)
            assert done.returncode == 2, (what, command[0], done.stderr)
            assert str(path) in done.stderr and "Traceback" not in done.stderr, (what, command)
    assert not (tmp_path / "out.db").exists()
