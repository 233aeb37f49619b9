"""A careless operator at start-up (issue 10, item 14): every start mlcostd refuses is one clear
line and exit status 2, never a traceback or a hang; what can be refused before anything is
created leaves nothing behind (no database, lock file or token, no workload started); a clean
stop removes the lock file; Ctrl-C, even twice, stops without a traceback."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import livedaemon
import mounts
import pytest
from livedaemon import MLCOSTD, ROOT
from simhost import poll

from daemon import config as config_module
from daemon.api.server import ApiError, check_token_path
from daemon.config import ConfigError
from daemon.store.schema import SCHEMA_VERSION


def run(folder: Path, *args: str, scenario: str = "idle-host") -> subprocess.CompletedProcess:
    """`mlcostd run --simulate SCENARIO` with its db and socket in `folder`, and `args`."""
    command = MLCOSTD + ["run", "--simulate", scenario, "--db", str(folder / "state/mlcost.db"),
                         "--socket", str(folder / "api/mlcostd.sock"), *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def assert_refused(done: subprocess.CompletedProcess, *says: str) -> str:
    """Exit 2 and one line on stderr (no traceback, nothing else), which says all of `says`."""
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mlcostd: "), output
    for text in says:
        assert text in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------ refused before anything is created

def _non_utf8(folder: Path) -> str:
    path = folder / "latin1.toml"
    path.write_bytes('[daemon]\n# caf\xe9 in Latin-1\ninterval = 1\n'.encode("latin-1"))
    return str(path)


def _fifo(folder: Path) -> str:
    os.mkfifo(folder / "config.fifo")  # a start that opened it for reading would block
    return str(folder / "config.fifo")


def _folder(folder: Path) -> str:
    (folder / "conf.d").mkdir()
    return str(folder / "conf.d")


def _huge(folder: Path) -> str:
    path = folder / "huge.toml"
    with open(path, "wb") as out:
        out.write(b"# " + b"x" * (2 << 20) + b"\n")
    return str(path)


@pytest.mark.parametrize("make_config, says", [
    (_non_utf8, ["not UTF-8", "line 2", "0xe9"]),
    (_fifo, ["not a regular file"]),
    (lambda folder: "/dev/zero", ["/dev/zero", "not a regular file"]),
    (_folder, ["not a regular file"]),
    (_huge, ["larger than 1 MiB"]),
], ids=["non-utf8", "fifo", "dev-zero", "directory", "huge"])
def test_a_config_that_is_not_a_small_utf8_file_is_refused_with_its_path(tmp_path, make_config,
                                                                         says):
    config = make_config(tmp_path)
    with pytest.raises(ConfigError) as refused:  # without blocking on the FIFO or /dev/zero
        config_module.load(config)
    for text in [config, *says]:
        assert text in str(refused.value)


def test_a_config_refused_at_start_is_one_line_and_leaves_nothing(tmp_path):
    """End to end, once for the class: mlcostd loads the config before anything is created."""
    config = _fifo(tmp_path)  # a start that opened it for reading would block
    before = files(tmp_path)
    line = assert_refused(run(tmp_path, "--config", config), "config error", "not a regular file")
    assert config in line
    assert files(tmp_path) == before  # no database, no lock, no socket folder


def _listen_in_config(folder: Path) -> list[str]:
    path = folder / "mlcostd.toml"
    path.write_text('[api]\nlisten = "localhost"\n')
    return ["--config", str(path)]


def _token_folder(folder: Path) -> list[str]:
    (folder / "token").mkdir()
    return ["--listen", "127.0.0.1:0", "--token-file", str(folder / "token")]


def _db_folder(folder: Path) -> list[str]:
    (folder / "state/mlcost.db").mkdir(parents=True)
    return []


def test_a_bad_listen_address_or_token_path_is_refused_by_the_checks(tmp_path):
    # end to end below for --listen and --db, which run the same checks at start
    with pytest.raises(ConfigError, match=r"\[api\]\.listen.*'localhost' is not HOST:PORT"):
        config_module.load(_listen_in_config(tmp_path)[1])
    with pytest.raises(ApiError, match="is a directory.*--token-file"):
        check_token_path(Path(_token_folder(tmp_path)[-1]))


@pytest.mark.parametrize("make_args, says", [
    (lambda folder: ["--listen", "nonsense"], ["--listen", "'nonsense' is not HOST:PORT"]),
    (lambda folder: ["--listen", "127.0.0.1:99999"],
     ["--listen", "'127.0.0.1:99999'", "port 99999 is out of range (0-65535)"]),
    (_db_folder, ["is a directory", "--db"]),
], ids=["listen-flag", "listen-port-range", "db-folder"])
def test_a_bad_setting_is_refused_before_anything_is_created(tmp_path, make_args, says):
    args = make_args(tmp_path)
    before = files(tmp_path)
    done = run(tmp_path, *args, scenario="demo")
    assert_refused(done, *says)
    assert files(tmp_path) == before  # no database, lock file, socket folder or token
    assert "simulating" not in done.stderr  # and no workload was started


def test_an_unknown_scenario_is_refused_before_the_store_is_created(tmp_path):
    assert_refused(run(tmp_path, scenario="nosuch"), "nosuch", "demo")
    assert files(tmp_path) == set()


def test_a_fifo_at_the_price_cache_path_does_not_hold_the_start(tmp_path):
    fifo = tmp_path / "prices.json"
    os.mkfifo(fifo)  # no writer: an open that waits for one never returns (nor stops on SIGTERM)
    daemon = livedaemon.start(tmp_path / "d", interval=0.2,
                              config={"pricing": {"cache": str(fifo)}})
    try:  # (it held the start after "NVML started": no live price there, the catalog's)
        assert daemon.now()["host"]["price"]["per_hour"] > 0
    finally:
        assert daemon.stop() == 0
    assert fifo.is_fifo()


# ------------------------------------------------ refused by the file system or the store

def test_a_read_only_file_system_is_one_line(tmp_path):
    with mounts.tmpfs(tmp_path / "state", size="1m", read_only=True):
        assert_refused(run(tmp_path), "read-only", "--db")


def test_a_read_only_folder_is_one_line(tmp_path):
    (tmp_path / "state").mkdir()
    with mounts.read_only(tmp_path / "state"):
        assert_refused(run(tmp_path), "mlcost.db", "read-only")


def test_a_read_only_database_file_is_one_line(tmp_path):
    first = livedaemon.start(tmp_path, "idle-host", interval=0.2)
    first.wait_for_ticks(2)
    assert first.stop() == 0
    db = tmp_path / "mlcost.db"
    with mounts.read_only(db):
        done = subprocess.run(MLCOSTD + ["run", "--simulate", "idle-host", "--db", str(db),
                                         "--socket", str(tmp_path / "api/mlcostd.sock")],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert_refused(done, str(db), "Read-only")


def test_a_store_from_a_newer_mlcostd_is_one_line(tmp_path):
    (tmp_path / "state").mkdir()
    db = tmp_path / "state/mlcost.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    assert_refused(run(tmp_path), f"schema version {SCHEMA_VERSION + 1}", "upgrade mlcostd")
    assert not (tmp_path / "state/mlcost.db.lock").exists()


# ------------------------------------------------ the lock file

def test_a_clean_stop_removes_the_lock_file_and_a_refusal_names_it(tmp_path):
    first = livedaemon.start(tmp_path / "first", "idle-host", interval=0.2)
    lock = first.db.with_name("mlcost.db.lock")
    try:
        assert lock.read_text() == str(first.pid)
        done = subprocess.run(MLCOSTD + ["run", "--simulate", "idle-host", "--db", str(first.db),
                                         "--socket", str(tmp_path / "second.sock")],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert_refused(done, f"pid {first.pid}", f"writer lock {lock}")
        assert lock.read_text() == str(first.pid)  # the refused one took nothing
    finally:
        assert first.stop() == 0
    assert not lock.exists()
    assert first.db.exists()


# ------------------------------------------------ Ctrl-C

def test_interrupts_while_stopping_print_no_traceback(tmp_path):
    """`timeout -s INT` signals mlcostd and then its whole group, and a user presses Ctrl-C
    twice: SIGINT to the process group until it is gone. Each one only asks again."""
    daemon = livedaemon.start(tmp_path, "demo", interval=0.5)
    daemon.wait_for_ticks(2)
    daemon.record_tree()

    def interrupted() -> bool:
        try:
            os.killpg(daemon.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        return daemon.proc.poll() is not None

    poll(interrupted, 60, "mlcostd to stop on SIGINT", every=0.05, explain=daemon.log_tail)
    code = daemon.stop()
    log = daemon.log()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert code == 0, log
    assert "stopped after" in log, log


def test_a_socket_path_too_long_to_bind_is_refused_with_its_length(tmp_path):
    """bind() failed with 'AF_UNIX path too long' in a traceback in the log, and mlcost-top's
    demo waited on it for ever (a deep $TMPDIR)."""
    deep = tmp_path / ("s" * 80) / ("t" * 40)
    done = subprocess.run(MLCOSTD + ["run", "--simulate", "idle-host",
                                     "--db", str(tmp_path / "state/mlcost.db"),
                                     "--socket", str(deep / "mlcostd.sock")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    assert "can be at most 107: pass a shorter --socket" in output, output
