"""A store file handed to mlcost may be damaged or built to hurt (issue 20, item 9): a text in a
numeric column, a recursive view where a table belongs, a generated column computed on every
read, a missing column, a virtual table, a JSON value that does not parse. Each reader path a
user can point at a file (`mlcostd snapshot --render FILE`, `mlcostd report --db FILE`,
`mlcost-top --replay FILE`) fails with one line on stderr naming the file, exit status 2, no
traceback, in seconds (the recursive view ran 30 s into a traceback). The files are real
snapshots, then changed with sqlite3 as a hostile user would."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.store.snapshot import write_snapshot
from tests.daemon.scripted import T0, recording_daemon
from tests.livedaemon import ROOT, poll

RECURSIVE = ("WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM r) SELECT n AS ts, "
             "0 AS gpu, 0 AS status, 1 AS util, 1 AS sm, 1 AS mem, 1 AS power_mw, 1 AS temp, "
             "1 AS sm_clock, 1 AS mem_clock, NULL AS error FROM r")
# What a hostile user does to a good snapshot, and the words the one line must hold.
HOSTILE = {
    "text-in-a-numeric-column": (
        ["UPDATE gpu_samples SET util = 'lots', power_mw = 'x' WHERE gpu = 0"],
        "a value of the wrong type"),
    "recursive-view-for-a-table": (
        ["DROP TABLE gpu_samples", f"CREATE VIEW gpu_samples AS {RECURSIVE}"],
        "'gpu_samples' is a view, not a table"),
    "recursive-view-for-ticks": (
        ["DROP TABLE ticks", "CREATE VIEW ticks AS WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL "
         "SELECT n + 1 FROM r) SELECT n AS tick, n AS ts, 1 AS n_gpus, 0 AS n_processes, "
         "NULL AS nvml_status, 0 AS io_some, 0 AS io_full, 0 AS cpu_some, 0 AS io_some_us, "
         "0 AS io_full_us, 0 AS cpu_some_us FROM r"],
        "'ticks' is a view, not a table"),
    "generated-column": (
        ["DROP TABLE stacks", "CREATE TABLE stacks (hash TEXT PRIMARY KEY, frames TEXT "
         "GENERATED ALWAYS AS (hex(zeroblob(50000000))) VIRTUAL)"],
        "generated column(s) frames"),
    "missing-column": (
        ["ALTER TABLE gpu_samples DROP COLUMN temp"],
        "table 'gpu_samples' lacks the column(s) temp"),
    "virtual-table": (
        ["DROP TABLE stacks", "CREATE VIRTUAL TABLE stacks USING fts5(hash, frames)"],
        "'stacks' is not a plain table"),
    "circular-view": (
        ["DROP TABLE events", "CREATE VIEW events AS SELECT * FROM events"],
        "'events' is a view, not a table"),
    "recursive-view-for-kind-history": (
        ["DROP TABLE process_kinds", "CREATE VIEW process_kinds AS WITH RECURSIVE r(n) AS "
         "(SELECT 0 UNION ALL SELECT n + 1 FROM r) SELECT 1 AS proc, n AS ts, 'training' AS "
         "kind, '{}' AS body FROM r"],
        "'process_kinds' is a view, not a table"),
}
# mlcost-top would start its screen on a file whose damage is in the rows (it shows the error
# there, in the app); the others it refuses before it starts.
REFUSED_AT_OPEN = {"recursive-view-for-a-table", "recursive-view-for-ticks", "generated-column",
                   "missing-column", "virtual-table", "circular-view",
                   "recursive-view-for-kind-history"}


@pytest.fixture(scope="module")
def good_snapshot(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    daemon = recording_daemon(folder, 5.0, ticks=20)
    assert daemon.store is not None
    daemon.store.close()
    snapshot = folder / "good.db"
    write_snapshot(folder / "mlcost.db", snapshot, T0, T0 + 21)
    return snapshot


def hostile_copy(good: Path, folder: Path, name: str) -> Path:
    path = folder / f"{name}.db"
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    try:
        for statement in HOSTILE[name][0]:
            conn.execute(statement)
        conn.commit()
    except sqlite3.OperationalError as exc:  # e.g. an SQLite built without fts5
        pytest.skip(f"this SQLite cannot build the {name} case: {exc}")
    finally:
        conn.close()
    return path


def run(*command: str) -> subprocess.CompletedProcess[str]:
    """The command's outcome; its bound is the timeout (a recursive view used to run 30 s and
    end in a traceback): speed itself is bench/'s to measure, never a test's."""
    return subprocess.run(list(command), capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "TERM": "dumb"}, stdin=subprocess.DEVNULL)


def assert_one_line(done: subprocess.CompletedProcess[str], path: Path, words: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done.stderr
    assert str(path) in done.stderr and words in done.stderr, done.stderr


MLCOSTD = [sys.executable, "-m", "daemon"]
MLCOST_TOP = [sys.executable, "-c", "import sys; from mlcost_tui.cli import main; "
              "sys.exit(main(sys.argv[1:]))"]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_snapshot_render_of_a_hostile_store_is_one_line(good_snapshot, tmp_path, name):
    path = hostile_copy(good_snapshot, tmp_path, name)
    done = run(*MLCOSTD, "snapshot", "--render", str(path), "--out",
                     str(tmp_path / "out.html"))
    assert_one_line(done, path, HOSTILE[name][1])
    assert not (tmp_path / "out.html").exists()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_report_of_a_hostile_store_is_one_line(good_snapshot, tmp_path, name):
    path = hostile_copy(good_snapshot, tmp_path, name)
    done = run(*MLCOSTD, "report", "--db", str(path), "--since", "1d")
    assert_one_line(done, path, HOSTILE[name][1])


@pytest.mark.parametrize("name", sorted(REFUSED_AT_OPEN))
def test_replay_of_a_hostile_store_is_one_line(good_snapshot, tmp_path, name):
    path = hostile_copy(good_snapshot, tmp_path, name)
    done = run(*MLCOST_TOP, "--replay", str(path))
    assert_one_line(done, path, HOSTILE[name][1])


@pytest.mark.parametrize("name", sorted(REFUSED_AT_OPEN))
def test_a_snapshot_of_a_hostile_store_is_one_line_and_leaves_no_file(good_snapshot, tmp_path,
                                                                      name):
    """Probe 126 F2: `snapshot --db` ran a recursive view where `ticks` belongs for its whole
    copy deadline, then past it, and a kill left its temporary file behind: the shape check
    `report` and `--render` run comes first, with the same line."""
    path = hostile_copy(good_snapshot, tmp_path, name)
    out = tmp_path / "out"
    out.mkdir()
    done = run(*MLCOSTD, "snapshot", "--db", str(path), "--out", str(out / "x.db"))
    assert_one_line(done, path, HOSTILE[name][1])
    assert list(out.iterdir()) == []


def test_a_snapshot_stopped_by_sigterm_removes_the_file_it_began(good_snapshot, tmp_path):
    """Probe 126 F2: SIGTERM (`timeout`, systemd, a Ctrl-C'd wrapper) ended `snapshot --db` where
    it stood and left its `.NAME.tmp-PID-...` file in the --out folder. A store whose command
    line is 60 MB copies (redacted) for seconds: SIGTERM once the temporary file is there ends
    the command with one line and exit 143, and nothing is left."""
    path = tmp_path / "long-command.db"
    shutil.copyfile(good_snapshot, path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE processes SET command = ? WHERE rowid = (SELECT min(rowid) FROM "
                 "processes)", ("python " + "B" * 60_000_000,))
    conn.commit()
    conn.close()
    out = tmp_path / "out"
    out.mkdir()
    command = subprocess.Popen([*MLCOSTD, "snapshot", "--db", str(path), "--out",
                                str(out / "x.db")], cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: list(out.iterdir()) or command.poll() is not None, 60,
             "the snapshot's temporary file", every=0.02)
        begun = [p.name for p in out.iterdir()]
        command.send_signal(signal.SIGTERM)
        _, stderr = command.communicate(timeout=120)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    assert begun and begun[0].startswith(".x.db.tmp-"), begun
    assert command.returncode == 143, (command.returncode, stderr)
    assert stderr.count("\n") == 1 and "SIGTERM" in stderr and "Traceback" not in stderr, stderr
    assert list(out.iterdir()) == []


def test_a_damaged_store_is_damaged_to_every_command(good_snapshot, tmp_path):
    """Probe 126 F4: bytes written over a snapshot's pages, its schema's text among them, read
    "not an mlcostd database (Could not decode to UTF-8 column 'sql' ...); pass the daemon's
    database" from `report` and `--render`, and "damaged ... salvage it with .recover" from
    `snapshot --db`: one file, one word for it, and what to do with it."""
    path = tmp_path / "damaged.db"
    shutil.copyfile(good_snapshot, path)
    conn = sqlite3.connect(path)
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    at = data.find(b'"kind" TEXT')  # events' schema: a byte that is no UTF-8 in a name
    assert at > 0
    data[at + 2] = 0xFF
    data[(root - 1) * size:(root - 1) * size + 8] = b"\x0d" + b"\xff" * 7  # its root page
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    out.mkdir()
    for command in (["report", "--db", str(path), "--since", "1d"],
                    ["snapshot", "--render", str(path), "--out", str(out / "x.html")],
                    ["snapshot", "--db", str(path), "--out", str(out / "x.db")]):
        done = run(*MLCOSTD, *command)
        assert_one_line(done, path, "the file is damaged")
        assert f"sqlite3 {path} .recover" in done.stderr, done.stderr
    assert list(out.iterdir()) == []


def test_a_store_from_a_newer_mlcost_is_refused_alike_by_every_command(good_snapshot, tmp_path):
    """Probe 126 F4: `snapshot --db` of a store of schema 99 exited 1 (a failure), where
    `report` and `--render` exit 2 (a refusal, as the README says refusals do)."""
    path = tmp_path / "future.db"
    shutil.copyfile(good_snapshot, path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    out = tmp_path / "out"
    out.mkdir()
    said = set()
    for command in (["report", "--db", str(path), "--since", "1d"],
                    ["snapshot", "--db", str(path), "--out", str(out / "x.db")]):
        done = run(*MLCOSTD, *command)
        assert_one_line(done, path, "its schema version is 99")
        said.add(done.stderr.split(": ", 1)[1])
    assert len(said) == 1, said  # the same line after the command's name
    assert list(out.iterdir()) == []


def test_the_good_snapshot_still_renders_reports_and_opens(good_snapshot, tmp_path):
    from daemon.replay import Replay

    done = run(*MLCOSTD, "snapshot", "--render", str(good_snapshot), "--out",
                  str(tmp_path / "good.html"))
    assert done.returncode == 0, done.stderr
    done = run(*MLCOSTD, "report", "--db", str(good_snapshot), "--since", "1d")
    assert done.returncode == 0, done.stderr
    with Replay(good_snapshot) as replay:
        assert replay.times()


def test_text_an_edited_store_holds_is_written_out_in_every_page_not_passed_on(good_snapshot,
                                                                             tmp_path):
    """A live process's text is cleaned on its way in; a store from elsewhere is not: raw ESC,
    C1 and U+202E bytes in its host name, users and commands went into the pages' title, h1
    and tables (a terminal that `cat`s the file acts on them; a browser reorders text)."""
    edited = tmp_path / "edited.db"
    shutil.copyfile(good_snapshot, edited)
    conn = sqlite3.connect(edited)
    hostile = "\x1b]0;pwned\x07\x9b2J\u202eevil"
    conn.execute("UPDATE processes SET user = ?, command = ?", (hostile, "python " + hostile))
    conn.commit()
    conn.close()
    pages = {"render": tmp_path / "render.html", "report": tmp_path / "report.html"}
    done = run(*MLCOSTD, "snapshot", "--render", str(edited), "--out", str(pages["render"]))
    assert done.returncode == 0, done.stderr
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d", "--html",
               str(pages["report"]))
    assert done.returncode == 0, done.stderr
    for name, page in pages.items():
        text = page.read_text()
        assert not any(c in text for c in "\x1b\x07\x9b\u202e"), name
    text = pages["render"].read_text()  # (the snapshot page lists the processes)
    assert "\\x1b]0;pwned" in text and "\\u202eevil" in text


def test_a_cpu_figure_no_process_can_have_is_shown_as_none(good_snapshot, tmp_path):
    """An edited store's `cpu_ms = 1e300` on a process's last sample printed a 300-digit CPU %
    in the report; a figure beyond every core of the largest host is no figure: "-"."""
    edited = tmp_path / "edited.db"
    shutil.copyfile(good_snapshot, edited)
    conn = sqlite3.connect(edited)
    last = conn.execute("SELECT max(ts) FROM proc_samples").fetchone()[0]
    assert conn.execute("UPDATE proc_samples SET cpu_ms = 1e300 WHERE ts = ?",
                        (last,)).rowcount > 0
    conn.commit()
    conn.close()
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d")
    assert done.returncode == 0, done.stderr
    assert "e+" not in done.stdout and not any(len(word) > 40 for word in done.stdout.split())
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d", "--json")
    assert done.returncode == 0, done.stderr
    processes = json.loads(done.stdout)["processes"]
    assert processes and any(p["cpu_percent"] is None for p in processes)
    assert all(p["cpu_percent"] is None or 0 <= p["cpu_percent"] <= 819200 for p in processes)


@pytest.mark.parametrize("column", ["user", "command"])
def test_a_null_user_or_command_is_a_blank_not_a_traceback(good_snapshot, tmp_path, column):
    """Both columns allow NULL: `report` stopped with a TypeError from one_line(None)."""
    edited = tmp_path / "edited.db"
    shutil.copyfile(good_snapshot, edited)
    conn = sqlite3.connect(edited)
    assert conn.execute(f"UPDATE processes SET {column} = NULL").rowcount > 0
    conn.commit()
    conn.close()
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "Processes" in done.stdout
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d", "--json")
    assert done.returncode == 0, done.stderr
    assert all(p[column] == "" for p in json.loads(done.stdout)["processes"])


def test_a_piped_report_shows_command_lines_whole(good_snapshot, tmp_path):
    """Piped or redirected no line is cut (README), but the process table and the phase lines
    cut command lines at 48 and 40 characters with an ellipsis: a grep missed them."""
    edited = tmp_path / "edited.db"
    shutil.copyfile(good_snapshot, edited)
    long = ("python -m train.main --config configs/llama-7b-finetune.yaml --lr 3e-4 "
            "--batch-size 64 --run-name nightly-2026-12-05")
    conn = sqlite3.connect(edited)
    assert conn.execute("UPDATE processes SET command = ?", (long,)).rowcount > 0
    conn.commit()
    conn.close()
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(long) == 2, done.stdout  # the process table and the phase lines


SECRETS = ("hunter2", "sk-abcdefghijklmnopqrstuvwxyz123456", "bob:pw123",
           "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


def test_a_stores_command_lines_are_redacted_on_every_way_out(good_snapshot, tmp_path):
    """Probe 126 F13: a store's command line holding secrets (written before a redaction rule
    existed, by another writer, or edited): `snapshot --db` hid them, but `snapshot --render`,
    `report` (text, JSON, HTML) and replay printed them whole. And a 1 MB one is cut before the
    redaction reads it (bounded work), as the daemon cuts a long argument."""
    from daemon.replay import Replay
    from daemon.sources.redact import STORED_LIMIT

    edited = tmp_path / "secret.db"
    shutil.copyfile(good_snapshot, edited)
    secret = ("python train.py --password=hunter2 --api-key sk-abcdefghijklmnopqrstuvwxyz123456 "
              "https://bob:pw123@host/x AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    conn = sqlite3.connect(edited)
    assert conn.execute("UPDATE processes SET command = ?", (secret,)).rowcount > 0
    conn.commit()
    conn.close()
    out = {"render": tmp_path / "render.html", "html": tmp_path / "report.html"}
    done = run(*MLCOSTD, "snapshot", "--render", str(edited), "--out", str(out["render"]))
    assert done.returncode == 0, done.stderr
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d", "--html",
               str(out["html"]))
    assert done.returncode == 0, done.stderr
    texts = {name: path.read_text() for name, path in out.items()}
    for how in ("text", "json"):
        done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d",
                   *(["--json"] if how == "json" else []))
        assert done.returncode == 0, done.stderr
        texts[how] = done.stdout
    processes = json.loads(texts["json"])["processes"]
    assert processes and all("--password=<redacted>" in p["command"] for p in processes)
    with Replay(edited) as replay:
        state = replay.state_at(replay.times()[-1])
    texts["replay"] = json.dumps(state)
    assert any("<redacted>" in p["command"] for p in state["processes"])
    for name, text in texts.items():
        # (the review page lists jobs and users, not command lines)
        assert name == "html" or ("&lt;redacted&gt;" if name in out else "<redacted>") in text
        assert not any(word in text for word in SECRETS), name
    conn = sqlite3.connect(edited)  # a hostile 1 MB line: cut, then redacted
    conn.execute("UPDATE processes SET command = ?", ("python x.py --token=" + "a" * (1 << 20),))
    conn.commit()
    conn.close()
    done = run(*MLCOSTD, "report", "--db", str(edited), "--since", "1d", "--json")
    assert done.returncode == 0, done.stderr
    commands = [p["command"] for p in json.loads(done.stdout)["processes"]]
    assert commands and all(len(c) < STORED_LIMIT + 64 and "<truncated: " in c and "aaaa" not in c
                            for c in commands), [c[:80] for c in commands]


# ------------------------------------------------ a damaged store

@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory) -> tuple[Path, Path]:
    """A small real store, and a copy with garbage over every page but the first (its WAL
    checkpointed in first): SQLite says "database disk image is malformed" of it."""
    folder = tmp_path_factory.mktemp("damaged")
    daemon = recording_daemon(folder, 5.0, ticks=20)
    assert daemon.store is not None
    daemon.store.close()
    good = folder / "mlcost.db"
    conn = sqlite3.connect(good)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = good.read_bytes()
    damaged = folder / "damaged.db"
    damaged.write_bytes(data[:page] + b"\xa5" * (len(data) - page))
    return good, damaged


# Each command that reads a store a user names, and its status for a file it cannot read.
READERS_OF_A_DAMAGED_STORE = {
    "report": (lambda bad, good, tmp: [*MLCOSTD, "report", "--db", bad], 2),
    "snapshot": (lambda bad, good, tmp: [*MLCOSTD, "snapshot", "--db", bad, "--out",
                                         str(tmp / "s.db")], 2),  # (as report: it was 1)
    "snapshot --render": (lambda bad, good, tmp: [*MLCOSTD, "snapshot", "--render", bad,
                                                  "--out", str(tmp / "s.html")], 2),
    "compare FILES": (lambda bad, good, tmp: [*MLCOSTD, "compare", good, bad], 1),
    "compare RANGES": (lambda bad, good, tmp: [*MLCOSTD, "compare", "--db", bad, "10m",
                                               "5m"], 1),
    "prices --observed": (lambda bad, good, tmp: [*MLCOSTD, "prices", "--observed", "--db",
                                                  bad], 1),
    "mlcost-top --replay": (lambda bad, good, tmp: [*MLCOST_TOP, "--replay", bad], 2),
}


@pytest.mark.parametrize("name", sorted(READERS_OF_A_DAMAGED_STORE))
def test_a_damaged_store_is_said_to_be_damaged_with_how_to_salvage_it(damaged_store, tmp_path,
                                                                       name):
    """`report` said it was "not an mlcostd database" (pass the daemon's database: it was
    the daemon's database), `snapshot` "unable to open database: file:...?mode=ro",
    `prices --observed` a traceback."""
    from daemon.store.errors import damaged_store as damaged_line

    good, bad = damaged_store
    command, status = READERS_OF_A_DAMAGED_STORE[name]
    done = run(*command(str(bad), str(good), tmp_path))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == status, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr
    assert damaged_line(bad, "database disk image is malformed") in done.stderr, done.stderr
    assert done.stderr.count(str(bad)) == 2, done.stderr  # named once, and in the command


def test_check_runs_quick_check_on_the_store_and_fails_a_damaged_one(damaged_store):
    """`check --db DAMAGED` said "[ok] database: ... is writable" and exited 0."""
    from daemon.store.errors import damaged_store_advice, store_damage

    good, bad = damaged_store
    done = run(*MLCOSTD, "check", "--simulate", "idle-host", "--json", "--db", str(bad))
    assert done.returncode == 1, done.stderr
    database = {c["name"]: c for c in json.loads(done.stdout)}["database"]
    assert database["status"] == "fail"
    assert database["detail"] == store_damage(bad, "database disk image is malformed")
    assert database["fix"] == damaged_store_advice(bad)
    done = run(*MLCOSTD, "check", "--simulate", "idle-host", "--json", "--db", str(good))
    database = {c["name"]: c for c in json.loads(done.stdout)}["database"]
    assert database["status"] == "ok", database
    assert database["detail"].endswith("is writable; PRAGMA quick_check: ok"), database


def test_check_reports_a_damaged_store_once_not_again_as_stack_sampling(damaged_store):
    """After the database's FAIL line, `check` said "[warn] stack sampling: cannot read
    DAMAGED: database disk image is malformed": one damaged file, two lines. The stacks of a
    store that can be read are still listed."""
    good, bad = damaged_store
    done = run(*MLCOSTD, "check", "--simulate", "idle-host", "--db", str(bad))
    assert done.returncode == 1, done.stderr
    assert "[FAIL] database: " in done.stdout, done.stdout
    assert done.stdout.count("malformed") == 1, done.stdout
    assert "stack sampling" not in done.stdout, done.stdout
    done = run(*MLCOSTD, "check", "--simulate", "idle-host", "--db", str(good))
    assert "[ok  ] stack sampling: " in done.stdout, done.stdout


def test_check_says_how_long_a_slow_quick_check_took(damaged_store, monkeypatch):
    from daemon.commands import check

    good, _ = damaged_store
    monkeypatch.setattr(check, "SLOW_QUICK_CHECK_S", 0.0)
    assert re.search(r"PRAGMA quick_check: ok in \d+\.\d s$", check.check_database(good).detail)


# ------------------------------------------------ what a store's facts carry out of it

METER_URL = "http://127.0.0.1:9/metrics"
METER_NAME = f"svc {METER_URL} requests_total"
SECRET_LINE = ("python train.py --password=hunter2 --api-key sk-abcdefghijklmnopqrstuvwxyz123456 "
               "https://bob:pw123@host/x AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


@pytest.fixture(scope="module")
def store_with_facts(tmp_path_factory) -> Path:
    """A store the daemon's own writer filled: ticks of a process, an event of each shape the
    readers show (a text detail, a document), a recommendation with an action to copy, a
    process kind, a stack sample's reason and a sampler's error; all of them clean."""
    from daemon.store import facts

    folder = tmp_path_factory.mktemp("facts")
    daemon = recording_daemon(folder, 5.0, ticks=20)
    store = daemon.store
    assert store is not None
    facts.write_stacks(store, [facts.StackRow(
        ts=T0 + 12, pid=4242, start_time=1000.5, thread_id=1, stack_hash="s1",
        frames=(("read_shard", "/srv/train.py", 88),), phase="data_wait", gpu_util=2.0,
        reason="reading a pipe (`chunk = os.read(fd, n)`)")])
    facts.write_stack_status(store, 4242, 1000.5, T0 + 12, "permission_denied",
                             "py-spy: permission denied")
    facts.write_event(store, {"kind": "gpu_held_idle", "target": "gpu:0", "started_at": T0 + 5,
                              "ended_at": None, "cost_so_far": 0.2,
                              "detail": "pid 4242 (python train.py) holds GPU 0"})
    facts.write_event(store, {"kind": "action", "target": "4242:1000.500",
                              "started_at": T0 + 8, "ended_at": T0 + 8, "cost_so_far": None,
                              "detail": {"who": "uid 1000", "recommendation": "r1",
                                         "action": "sigterm", "dry_run": True,
                                         "command": "python train.py", "outcome": "done"}})
    facts.write_recommendations(store, [{
        "id": "r1", "rule": "gpu_held_idle", "target": "4242:1000.500",
        "summary": "pid 4242 (python train.py) holds GPU 0 idle", "headline": "release GPU 0",
        "savings_per_month": 812.0, "method": "idle share x GPU price",
        "evidence": {"process": {"pid": 4242, "command": "python train.py", "gpus": [1]}},
        "action": {"kind": "copy_commands", "text": "look at what python train.py runs",
                   "commands": ["sudo py-spy dump --pid 4242", "kill -TERM 4242"]}}], T0 + 15)
    facts.write_process_kinds(store, {(4242, 1000.5): {
        "kind": "training", "kind_confidence": 0.6, "kind_source": "observed", "serves": False,
        "kind_evidence": ["'train' on its command line: python train.py"]}}, T0 + 15)
    for at in (T0 + 10, T0 + 18):  # what the meters read: a storage walk, a counter, a histogram
        facts.write_meter_readings(store, at, [
            ("storage", "/data", float(2**30), {"price_per_gb_month": 0.1, "files": 3,
                                               "complete": False,
                                               "error": "/data/u/run-7: Permission denied"}),
            ("unit", METER_NAME, 100.0 + at - T0, {
                "target": "svc", "unit": "requests", "per": 1000.0, "url": METER_URL,
                "metric": "requests_total", "labels": {}}),
            ("latency", METER_NAME, 10.0 + at - T0, {
                "target": "svc", "url": METER_URL, "metric": "latency_seconds", "labels": {},
                "buckets": [["0.1", 5.0], ["+Inf", 10.0 + at - T0]]})])
    store.close()
    return folder / "mlcost.db"


def test_a_stores_event_details_and_recommendations_are_redacted_on_every_way_out(
        store_with_facts, tmp_path):
    """Probe 126 F13's rest: the README says event details and recommendation bodies go
    through the redaction once more on the way out, as command lines do, but a store whose
    events and recommendations hold secrets (another writer's, one from before a rule, an
    edited one) printed them whole from `report` (text, JSON, HTML), `snapshot --render`,
    replay and `check`; only `snapshot --db` hid them. Every way out hides them now."""
    from daemon.store.schema import pack_text

    edited = tmp_path / "secret.db"
    shutil.copyfile(store_with_facts, edited)
    conn = sqlite3.connect(edited)
    body = json.loads(conn.execute("SELECT body FROM recommendations").fetchone()[0])
    body["summary"] = f"pid 4242 ({SECRET_LINE}) holds GPU 0 idle"
    body["method"] = f"seen in {SECRET_LINE}"
    body["evidence"]["process"]["command"] = SECRET_LINE
    body["evidence"]["token"] = "sk-abcdefghijklmnopqrstuvwxyz123456"
    body["action"] = {"kind": "copy_commands", "text": f"look at {SECRET_LINE}",
                      "commands": [f"sudo py-spy dump --pid 4242 # {SECRET_LINE}",
                                   "curl https://bob:pw123@host/x"]}
    text = json.dumps(body)
    with conn:
        assert conn.execute("UPDATE recommendations SET body = ?", (text,)).rowcount == 1
        assert conn.execute("UPDATE recommendation_texts SET body = ?",
                            (pack_text(text),)).rowcount >= 1
        assert conn.execute("UPDATE events SET detail = ? WHERE kind = 'gpu_held_idle'",
                            (json.dumps(f"pid 4242 ({SECRET_LINE}) holds GPU 0"),)).rowcount == 1
        assert conn.execute("UPDATE events SET detail = ? WHERE kind = 'action'", (json.dumps(
            {"who": "uid 1000", "recommendation": "r1", "action": "sigterm", "dry_run": True,
             "command": SECRET_LINE, "outcome": "done"}),)).rowcount == 1
        assert conn.execute("UPDATE process_kinds SET body = ?", (json.dumps({
            "kind": "training", "kind_confidence": 0.6, "kind_source": "observed",
            "serves": False, "kind_evidence": [f"'train' on its command line: {SECRET_LINE}"]}),
        )).rowcount == 1
        assert conn.execute("UPDATE stack_samples SET reason = ?",
                            (f"reading a pipe (`{SECRET_LINE}`)",)).rowcount == 1
        assert conn.execute("UPDATE stack_status SET error = ?",
                            (f"py-spy failed on {SECRET_LINE}",)).rowcount == 1
    conn.close()
    texts = _every_way_out(edited, tmp_path)
    document = json.loads(texts["json"])
    recommendation = next(r for r in document["recommendations"] if r["id"] == "r1")
    assert recommendation["evidence"]["process"]["command"].startswith(
        "python train.py --password=<redacted> --api-key <redacted>"), recommendation
    assert recommendation["evidence"]["token"] == "<redacted>"
    assert "https://<redacted>@host/x" in recommendation["action"]["commands"][1]
    details = {e["kind"]: e["detail"] for e in document["events"]}
    assert "AWS_SECRET_ACCESS_KEY=<redacted>" in details["action"]["command"], details
    assert "--password=<redacted>" in details["gpu_held_idle"], details
    assert "--password=<redacted>" in texts["text"]  # the review's and the list's summary
    state = json.loads(texts["replay"])  # (its last tick's)
    shown = {r["id"]: r for r in state["recommendations"]}
    assert "--password=<redacted>" in shown["r1"]["summary"], state["recommendations"]
    assert any("--password=<redacted>" in e.get("detail", "") for e in state["events"]), \
        state["events"]
    kinds = [p.get("kind_evidence") for p in state["processes"]]
    assert any("--password=<redacted>" in " ".join(k or ()) for k in kinds), kinds
    for name, text in texts.items():
        assert not any(word in text for word in SECRETS), (name, [
            text[max(text.find(w) - 80, 0):text.find(w) + 40] for w in SECRETS if w in text])


def test_a_store_the_daemon_wrote_reads_as_it_was_written(store_with_facts):
    """Redacting twice changes nothing: what the daemon wrote (redacted at its source) reads
    back through the output redaction exactly as written."""
    from daemon.store import queries
    from daemon.store.reader import StoreReader

    conn = sqlite3.connect(store_with_facts)
    details = {kind: json.loads(detail) for kind, detail in conn.execute(
        "SELECT kind, detail FROM events")}
    body = json.loads(conn.execute("SELECT body FROM recommendations").fetchone()[0])
    conn.close()
    reader = StoreReader(store_with_facts)
    try:
        read = {e["kind"]: e["detail"] for e in queries.events(reader, T0 - 60, T0 + 60)}
        recommendations = queries.recommendations(reader, T0 - 60)
        texts = queries.recommendation_texts(reader, T0 - 60, T0 + 60)
        kinds = queries.process_kinds(reader, T0 + 60)
        samples = queries.stack_samples(reader, T0 - 60, T0 + 60)
        reasons = {s["reason"] for s in samples}
        readings = queries.meter_readings(reader, T0 - 60, T0 + 60,
                                          kinds=("storage", "unit", "latency"))
        host = queries.recorded_host(reader)
    finally:
        reader.close()
    assert [s["frames"] for s in samples] == [(("read_shard", "/srv/train.py", 88),)]
    assert readings[("storage", "/data")][-1][2]["error"] == "/data/u/run-7: Permission denied"
    assert readings[("unit", METER_NAME)][-1][2]["url"] == METER_URL
    assert readings[("latency", METER_NAME)][-1][2]["buckets"] == [["0.1", 5.0], ["+Inf", 28.0]]
    assert host["hostname"] == "testhost" and host["interval_s"] == 1.0
    assert read == details
    assert [{k: v for k, v in r.items() if k in body} for r in recommendations] == [body]
    assert texts["r1"][1] == body
    assert kinds[(4242, 1000.5)]["kind_evidence"] == [
        "'train' on its command line: python train.py"]
    assert reasons == {"reading a pipe (`chunk = os.read(fd, n)`)"}


# Secrets a process, a user's folder or the host's surroundings may put where the daemon reads:
# a function named like an AWS key, a file `password=...`, a folder named after a token, a
# hostname and an instance id from outside.
FRAME_SECRETS = ("AKIAIOSFODNN7EXAMPLE", "hunter2", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                 "sk-abcdefghijklmnopqrstuvwxyz123456")


def test_a_stores_frames_meter_readings_and_host_facts_are_redacted_on_every_way_out(
        store_with_facts, tmp_path):
    """Probe (redaction, third round): a store's stack frames (function and file names),
    meter readings (a storage walk's error, a meter's name and URL) and host facts (hostname,
    instance) were shown as stored by `report` (text, JSON, HTML), `snapshot --render`,
    `snapshot --db` (the copy and its page) and replay, secrets and all; the rest of a store
    went through the output redaction. Every way out hides them now."""

    edited = tmp_path / "secret.db"
    shutil.copyfile(store_with_facts, edited)
    frames = [["AKIAIOSFODNN7EXAMPLE", "/srv/password=hunter2/train.py", 88],
              ["login", "/srv/ghp_abcdefghijklmnopqrstuvwxyz0123456789.py", 3]]
    url = "http://127.0.0.1:9/metrics?token=sk-abcdefghijklmnopqrstuvwxyz123456"
    name = f"svc {url} requests_total"
    conn = sqlite3.connect(edited)
    with conn:
        assert conn.execute("UPDATE stacks SET frames = ?", (json.dumps(frames),)).rowcount == 1
        assert conn.execute(
            "UPDATE meter_readings SET detail = json_set(detail, '$.error', ?) WHERE kind = "
            "'storage'", ("/data/u/password=hunter2: Permission denied",)).rowcount == 2
        assert conn.execute(
            "UPDATE meter_readings SET name = ?, detail = json_set(detail, '$.url', ?) "
            "WHERE kind IN ('unit', 'latency')", (name, url)).rowcount == 4
        host = json.loads(conn.execute(
            "SELECT value FROM meta WHERE key = 'json:host'").fetchone()[0])
        host["hostname"] = "gpu-AKIAIOSFODNN7EXAMPLE"
        host["instance"] = {"provider": "aws", "type": "p4d.24xlarge", "region": "us-east-1",
                            "id": "i-0abc password=hunter2", "source": "metadata"}
        assert conn.execute("UPDATE meta SET value = ? WHERE key = 'json:host'",
                            (json.dumps(host),)).rowcount == 1
        # its GPU at low utilization all along: its time goes where its stacks say
        conn.execute("INSERT INTO events (kind, target, started_at, ended_at, cost, detail) "
                     "VALUES ('low_utilization', '4242:1000.500', ?, ?, 0, '{}')",
                     (round(T0 * 1000), round((T0 + 60) * 1000)))
    conn.close()
    texts = _every_way_out(edited, tmp_path)
    leaks = {page: [w for w in FRAME_SECRETS if w in text] for page, text in texts.items()}
    assert not any(leaks.values()), json.dumps({page: w for page, w in leaks.items() if w})
    document = json.loads(texts["json"])
    # each is shown, redacted: the host, the storage walk's error, the meters' URL, the
    # frames of the phase the process's time went to
    assert document["host"]["hostname"] == "gpu-<redacted>", document["host"]
    assert document["host"]["instance"]["id"] == "i-0abc password=<redacted>"
    storage = document["spend"]["storage_items"]
    assert storage and storage[0]["error"].startswith("/data/u/password=<redacted>"), storage
    assert document["spend"]["unit_costs"][0]["url"].endswith("?token=<redacted>")
    assert document["spend"]["latency"][0]["url"].endswith("?token=<redacted>")
    stack = document["processes"][0]["phases"]["data_wait"]["top_stacks"][0]
    assert stack["frames"] == ["/srv/password=<redacted>:88 <redacted>",
                               "/srv/<redacted>.py:3 login"], stack
    assert "data_wait: /srv/password=<redacted>:88 <redacted>" in texts["text"]
    assert "gpu-&lt;redacted&gt;" in texts["html"] and "gpu-&lt;redacted&gt;" in texts["render"]


def _every_way_out(store: Path, folder: Path) -> dict[str, str]:
    """What each way out of `store` shows, by name: `report` (text, --json, --html),
    `snapshot --render`, `snapshot --db` (every row of the copy, and its page) and replay (its
    last tick's state, its host). Each command must succeed."""
    from daemon.replay import Replay

    out = {"render": folder / "render.html", "html": folder / "report.html",
           "snapshot": folder / "copy.db"}
    texts: dict[str, str] = {}
    done = run(*MLCOSTD, "snapshot", "--render", str(store), "--out", str(out["render"]))
    assert done.returncode == 0, done.stderr
    done = run(*MLCOSTD, "report", "--db", str(store), "--since", "1d", "--html",
               str(out["html"]))
    assert done.returncode == 0, done.stderr
    for how in ("text", "json"):
        done = run(*MLCOSTD, "report", "--db", str(store), "--since", "1d",
                   *(["--json"] if how == "json" else []))
        assert done.returncode == 0, done.stderr
        texts[how] = done.stdout
    done = run(*MLCOSTD, "snapshot", "--db", str(store), "--out", str(out["snapshot"]),
               "--since", "1d", "--html")
    assert done.returncode == 0, done.stderr
    for page in ("render", "html"):
        texts[page] = out[page].read_text()
    texts["snapshot page"] = out["snapshot"].with_suffix(".html").read_text()
    dumped = sqlite3.connect(out["snapshot"])
    texts["snapshot"] = "\n".join(dumped.iterdump())
    dumped.close()
    with Replay(store) as replay:
        texts["replay"] = json.dumps(replay.state_at(replay.times()[-1]))
        texts["replay host"] = json.dumps(replay.host)
    return texts


def test_a_stores_gpu_names_errors_owners_and_meter_names_are_redacted_and_kept_apart(
        store_with_facts, tmp_path):
    """Probe (redaction, fourth round): a store's GPU names and uuids (the `gpus` table: the
    driver's or a scenario's text), NVML's error text (`gpu_samples.error`) and each process's
    owner (a pod, namespace, container: whoever made the pod named them) were shown as stored
    on every way out. And two meters whose names differ only in a URL's token redacted to one
    name: `report` added their readings up into one unit cost, and `snapshot --db` failed on
    the copy's key (kind, name, ts). Every way out hides them now, and keeps the two meters
    apart, each name with a tag of what was hidden (redact.redact_name)."""
    edited = tmp_path / "secret.db"
    shutil.copyfile(store_with_facts, edited)
    first = "http://127.0.0.1:9/metrics?token=hunter2"
    second = "http://127.0.0.1:9/metrics?token=AKIAIOSFODNN7EXAMPLE"
    conn = sqlite3.connect(edited)
    gpu_name, gpu_uuid = "NVIDIA A10G ghp_abcdefghijklmnopqrstuvwxyz0123456789", \
        "GPU-AKIAIOSFODNN7EXAMPLE"
    with conn:
        # GPU 1's facts: its row in `gpus` and the reading of them its range is reported by
        assert conn.execute("UPDATE gpus SET name = ?, uuid = ? WHERE gpu = 1",
                            (gpu_name, gpu_uuid)).rowcount == 1
        assert conn.execute(
            "UPDATE meter_readings SET detail = json_set(detail, '$.name', ?, '$.uuid', ?) "
            "WHERE kind = 'gpu' AND name = '1'", (gpu_name, gpu_uuid)).rowcount == 1
        assert conn.execute("UPDATE gpu_samples SET status = 1, error = ? WHERE gpu = 1", (
            "nvmlDeviceGetPowerUsage: Unknown Error password=hunter2",)).rowcount > 0
        assert conn.execute("UPDATE processes SET owner = ? WHERE pid = 4242", (json.dumps({
            "pod_uid": "1a2b3c4d-1a2b-3c4d-1a2b-3c4d1a2b3c4d", "namespace": "ml",
            "pod": "sk-abcdefghijklmnopqrstuvwxyz123456",
            "container": "AKIAIOSFODNN7EXAMPLE"}),)).rowcount == 1
        # the first meter's URL holds one token; a second meter, alike but for its token,
        # counted ten times as much
        assert conn.execute(
            "UPDATE meter_readings SET name = ?, detail = json_set(detail, '$.url', ?) "
            "WHERE kind = 'unit'", (f"svc {first} requests_total", first)).rowcount == 2
        conn.execute(
            "INSERT INTO meter_readings (kind, name, ts, value, detail) SELECT kind, ?, ts, "
            "value * 10, json_set(detail, '$.url', ?) FROM meter_readings WHERE kind = 'unit'",
            (f"svc {second} requests_total", second))
    conn.close()
    texts = _every_way_out(edited, tmp_path)
    leaks = {page: [w for w in FRAME_SECRETS if w in text] for page, text in texts.items()}
    assert not any(leaks.values()), json.dumps({page: w for page, w in leaks.items() if w})
    document = json.loads(texts["json"])
    # the GPU's name, shown redacted; the process's pod
    assert document["gpus"][1]["name"] == "NVIDIA A10G <redacted>", document["gpus"]
    replayed = json.loads(texts["replay"])["gpus"][1]
    assert (replayed["uuid"], replayed["error"]) == (
        "GPU-<redacted>", "nvmlDeviceGetPowerUsage: Unknown Error password=<redacted>"), replayed
    assert re.fullmatch(r"<redacted> \[[0-9a-f]{4}\]", document["processes"][0]["owner"]["pod"]), \
        document["processes"][0]
    # two meters, each with its own readings: 8 requests counted by one, 80 by the other
    units = document["spend"]["unit_costs"]
    names = sorted(u["url"] for u in units)
    assert len(units) == 2 and names == [
        "http://127.0.0.1:9/metrics?token=<redacted>"] * 2, units
    assert sorted(u.get("units") for u in units) == [8.0, 80.0], units
    copied = sqlite3.connect(tmp_path / "copy.db")
    kept = copied.execute("SELECT DISTINCT name FROM meter_readings WHERE kind = 'unit' "
                          "ORDER BY name").fetchall()
    copied.close()
    assert len(kept) == 2 and all(
        re.fullmatch(r"svc http://127\.0\.0\.1:9/metrics\?token=<redacted> requests_total "
                     r"\[[0-9a-f]{4}\]", name) for (name,) in kept), kept
