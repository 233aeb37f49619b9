"""A careless operator at start-up (issue 10, item 14): every start mlcostd refuses is one clear
line and exit status 2, never a traceback or a hang; what can be refused before anything is
created leaves nothing behind (no database, lock file or token, no workload started); a clean
stop removes the lock file; Ctrl-C, even twice, stops without a traceback."""

from __future__ import annotations

import os
import re
import signal
import socket
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
from daemon.commands.cli import _command_parser, build_parser
from daemon.config import ConfigError, parse_address
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


def test_a_db_that_is_a_directory_names_where_its_path_came_from(tmp_path):
    """A [daemon].db in the config that is a directory was told "pass --db with a file path",
    a flag the operator had not used (probe 155 L4): the refusal names [daemon].db and the file,
    or --db when that gave it."""
    folder = tmp_path / "dbdir"
    folder.mkdir()
    config = tmp_path / "c.toml"
    config.write_text(f'[daemon]\ndb = "{folder}"\n')
    command = MLCOSTD + ["run", "--simulate", "demo", "--socket", str(tmp_path / "api/s.sock")]
    before = files(tmp_path)
    done = subprocess.run(command + ["--config", str(config)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    line = assert_refused(done, f"the database path {folder} ([daemon].db in {config}) is a "
                          "directory; set [daemon].db there to a file path, e.g. db = "
                          f'"{folder / "mlcost.db"}"')
    assert "pass --db with a file path" not in line, line
    done = subprocess.run(command + ["--db", str(folder)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert_refused(done, f"the database path {folder} (--db) is a directory; pass --db with a "
                   f"file path, e.g. --db {folder / 'mlcost.db'}")
    assert files(tmp_path) == before
    # a [daemon].db in a folder others can write (not sticky): the fix is said where the path was set, too
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    config.write_text(f'[daemon]\ndb = "{shared / "m.db"}"\n')
    done = subprocess.run(command + ["--config", str(config)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert_refused(done, f"set [daemon].db in {config} to a path in a folder of its own, "
                   f'e.g. db = "{shared / "mlcost" / "m.db"}", or pass --db with one '
                   "(mlcostd creates that folder 0700)")


@pytest.mark.parametrize("flag, address, says", [
    ("--metrics-listen", "1.2.3:99", "HOST '1.2.3' is not an IP address"),  # bound 1.2.0.3
    ("--listen", "127.1:0", "HOST '127.1' is not an IP address"),  # inet_aton's 127.0.0.1
    ("--listen", "0x7f000001:0", "HOST '0x7f000001' is not an IP address"),
    ("--metrics-listen", "example.com:0", "other names are not resolved"),
    ("--metrics-listen", "::1:0", "an IPv6 address goes in brackets: [::1]:0"),
], ids=["short-ipv4", "two-part-ipv4", "hex-ipv4", "name", "bare-ipv6"])
def test_an_address_inet_aton_would_fix_up_is_refused_before_anything_is_created(
        tmp_path, flag, address, says):
    """`--metrics-listen 1.2.3:99` passed as HOST:PORT, the store was created, and then
    bind() failed on ('1.2.0.3', 99): the C library's inet_aton reads 1.2.3 as 1.2.0.3."""
    done = run(tmp_path, flag, address, "--token-file", str(tmp_path / "token"),
               scenario="demo")
    assert_refused(done, flag, repr(address), says)
    assert files(tmp_path) == set()


@pytest.mark.parametrize("make_token", [
    lambda folder: (folder / "token").mkdir(), lambda folder: (folder / "token").write_text("x"),
    lambda folder: None], ids=["a-directory", "a-file", "missing"])
def test_a_token_file_without_listen_is_refused_before_anything_is_created(tmp_path,
                                                                             make_token):
    """`mlcostd run --token-file DIR` without --listen started and recorded: only the TCP
    listener reads the token, so a --token-file nothing reads (a directory as much as a good
    file) was silently unused. Refused in one line that says where it goes, exit 2, nothing
    created; with [api].listen in the config the flag is read (a directory refused as such)."""
    make_token(tmp_path)
    before = files(tmp_path)
    done = run(tmp_path, "--token-file", str(tmp_path / "token"), scenario="demo")
    assert_refused(done, "--token-file is used only with --listen", "--listen HOST:PORT")
    assert files(tmp_path) == before and "simulating" not in done.stderr
    if (tmp_path / "token").is_dir():
        config = tmp_path / "listen.toml"
        config.write_text('[api]\nlisten = "127.0.0.1:0"\n')
        done = run(tmp_path, "--config", str(config), "--token-file", str(tmp_path / "token"))
        assert_refused(done, "is a directory", "--token-file")


def test_localhost_is_the_loopback_address_and_no_other_name_is_taken():
    """A user's `--metrics-listen localhost:9400` binds 127.0.0.1, whatever /etc/hosts says
    (not resolved); the short forms inet_aton would fix up stay refused."""
    assert parse_address("localhost:9400") == ("127.0.0.1", 9400)
    assert parse_address("LOCALHOST:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    for refused in ("localhost.localdomain:1", "127.1:0", "[localhost]:1"):
        with pytest.raises(ValueError, match="not an IP address"):
            parse_address(refused)


def refused_daemon(folder: Path, *args: str) -> tuple[str, livedaemon.LiveDaemon]:
    """A real `mlcostd run --simulate demo` (five workloads) with `args`, expected to refuse
    to start: its one line (exit 2, nothing else in its output), once it has exited, and
    itself. Nothing in its folder but its log and its empty $TMPDIR, where the simulated host
    would be; no process of its own was seen below it."""
    daemon = livedaemon.start(folder, "demo", wait=False, args=args)
    assert daemon.wait_exit() == 2, daemon.log_tail()
    lines = [line for line in daemon.log().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mlcostd: "), daemon.log()
    assert files(folder) == {"mlcostd.log", "tmp"}  # no store, lock, socket folder, token
    assert set(daemon.tree) == {daemon.pid}  # no workload was started
    return lines[0], daemon


def held_port() -> socket.socket:
    """A TCP port this test holds: bound and listening on 127.0.0.1."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    held.listen()
    return held


@pytest.mark.parametrize("flag", ["--listen", "--metrics-listen"])
def test_a_port_in_use_is_refused_before_anything_is_created(tmp_path, flag):
    """The store was created and a token file generated, then the bind failed."""
    with held_port() as held:
        port = held.getsockname()[1]
        token = ["--token-file", str(tmp_path / "d" / "token")] if flag == "--listen" else []
        line, _ = refused_daemon(tmp_path / "d", flag, f"127.0.0.1:{port}", *token)
    assert f"cannot listen on 127.0.0.1:{port} ({flag}): Address already in use" in line, line


def test_a_socket_another_daemon_serves_is_refused_before_anything_is_created(tmp_path):
    """The simulation started its five workloads and the store was created before the
    refusal, which came fifth of five lines ("stopped after 0 ticks" before it)."""
    first = livedaemon.start(tmp_path / "first")
    try:
        line, _ = refused_daemon(tmp_path / "second", "--socket", str(first.socket))
        assert line == (f"mlcostd: another mlcostd (or another program) serves {first.socket}; "
                        "stop it or pass a different --socket")
        assert first.healthy()  # its socket left alone
    finally:
        assert first.stop() == 0


def test_a_socket_another_program_listens_on_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "other"
    folder.mkdir(mode=0o700)
    path = folder / "listening.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listening:
        listening.bind(str(path))
        listening.listen()
        line, _ = refused_daemon(tmp_path / "d", "--socket", str(path))
        assert f"serves {path}; stop it or pass a different --socket" in line, line
        assert path.is_socket()


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


# ------------------------------------------------ --interval: the config's durations

@pytest.mark.parametrize("given, seconds", [("500ms", 0.5), ("2s", 2.0), ("1m", 60.0),
                                            ("0.25", 0.25), ("2", 2.0)])
def test_interval_takes_the_config_s_durations_and_plain_seconds(given, seconds):
    assert build_parser().parse_args(["run", "--interval", given]).interval == seconds


@pytest.mark.parametrize("given, says", [
    ("5 m", "'5 m' is not a duration (ASCII digits and a unit, no spaces"),
    ("soon", "'soon' is not a duration"),
    ("-1", "'-1' is negative"),
    ("5m", "'5m': must be between 0.1 and 60 seconds"),
    ("50ms", "'50ms': must be between 0.1 and 60 seconds"),
])
def test_a_bad_interval_is_argparse_s_one_line_error(capsys, given, says):
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["run", "--interval", given])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("mlcostd run: error: argument --interval: "), error
    assert says in error, error


def test_interval_help_says_it_takes_durations():
    run_parser = _command_parser(build_parser(), "run")
    assert "500ms" in run_parser.format_help()


def test_a_daemon_started_with_a_duration_interval_samples_at_it(tmp_path):
    """`mlcostd run --interval 500ms` was "invalid float value", though the README says the
    config's durations work on the command line too."""
    daemon = livedaemon.start(tmp_path, args=["--interval", "200ms"])
    try:
        assert daemon.now()["host"]["interval_s"] == 0.2
    finally:
        assert daemon.stop() == 0


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
    stopped = re.search(r"stopped after (\d+) (ticks?);", log)
    assert stopped is not None, log
    assert (stopped[2] == "tick") == (stopped[1] == "1"), stopped[0]  # "1 tick", "2 ticks"


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
