"""A store records one host (probe 141 M2): a simulated run never records into a store a real
host recorded, nor a real run into a simulated host's, nor one scenario into another's; each is
refused at start in one line, exit status 2, the store left as it was. `mlcostd run --simulate`
without --db and --socket records into a store and serves on a socket of the scenario's own, in
the user's state and runtime folders, never this host's defaults."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import livedaemon
import pytest
from lifeline import spawn_options
from livedaemon import MLCOSTD, ROOT
from simhost import poll

from daemon.sources.sample import ProcessSample, Sample
from daemon.store.reader import StoreReader
from daemon.store.writer import Store


def _run(folder: Path, *args: str, env: dict[str, str] | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(MLCOSTD + ["run", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL,
                          env=env or dict(os.environ, TMPDIR=str(folder)))


def _refused(done: subprocess.CompletedProcess[str], *says: str) -> str:
    """Exit 2 and one line on stderr that says all of `says`."""
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mlcostd: "), output
    for text in says:
        assert text in lines[0], lines[0]
    return lines[0]


def _host_and_ticks(db: Path) -> tuple[dict, int]:
    reader = StoreReader(str(db))
    try:
        host = reader.meta("host")
        assert isinstance(host, dict)
        return host, len(reader.ticks())
    finally:
        reader.close()


def _real_store(folder: Path) -> Path:
    """A store `mlcostd run` recorded from this host (no --simulate: NVML if the host has one,
    else the host without GPUs), stopped after its first ticks."""
    db = folder / "real" / "mlcost.db"
    log_path = folder / "real.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            MLCOSTD + ["run", "--db", str(db), "--socket", str(folder / "real-api" / "s.sock"),
                       "--interval", "0.5"],
            cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(os.environ, TMPDIR=str(folder)), **spawn_options())
        try:
            def ticks() -> int:
                assert proc.poll() is None, log_path.read_text()
                if not db.exists():
                    return 0
                try:
                    return _host_and_ticks(db)[1] >= 2
                except (sqlite3.Error, AssertionError):
                    return 0
            poll(ticks, 60, "2 ticks of a real mlcostd run", explain=log_path.read_text)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(30) == 0, log_path.read_text()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return db


def test_a_simulated_run_on_a_store_a_real_host_recorded_is_refused(tmp_path):
    db = _real_store(tmp_path)
    host, ticks = _host_and_ticks(db)
    assert "simulated" not in host
    done = _run(tmp_path, "--simulate", "single-gpu", "--db", str(db),
                "--socket", str(tmp_path / "sim-api" / "s.sock"))
    line = _refused(done, str(db), "the recording of a real host", "'single-gpu'",
                    "pass --db with another file", "simulated/single-gpu/mlcost.db")
    assert "Traceback" not in line
    assert _host_and_ticks(db) == (host, ticks), "the real host's store was written into"
    assert not (tmp_path / "sim-api").exists()  # (no workload, no socket: refused at start)


def test_a_real_run_on_a_simulated_host_s_store_is_refused(tmp_path):
    daemon = livedaemon.start(tmp_path / "sim", "idle-host", interval=0.5)
    try:
        daemon.wait_for_ticks(2)
    finally:
        assert daemon.stop() == 0
    host, ticks = _host_and_ticks(daemon.db)
    assert host["simulated"] == "idle-host"
    done = _run(tmp_path, "--db", str(daemon.db), "--socket", str(tmp_path / "real-api" / "s"))
    _refused(done, str(daemon.db), "the simulated host of scenario 'idle-host'",
             "this host's GPUs", "move")
    assert _host_and_ticks(daemon.db) == (host, ticks)
    # nor another scenario into it: its report would name one scenario for both
    done = _run(tmp_path, "--simulate", "single-gpu", "--db", str(daemon.db),
                "--socket", str(tmp_path / "other-api" / "s"))
    _refused(done, "'idle-host'", "'single-gpu'")
    assert _host_and_ticks(daemon.db) == (host, ticks)


def test_a_simulated_run_without_db_or_socket_uses_the_scenario_s_own_not_this_host_s(
        tmp_path, request):
    state = tmp_path / "state"
    # a short runtime folder of its own: a socket's path is at most 107 bytes
    runtime = Path(tempfile.mkdtemp(prefix="mlc-rt-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(runtime, ignore_errors=True))
    env = dict(os.environ, TMPDIR=str(tmp_path), XDG_STATE_HOME=str(state),
               XDG_RUNTIME_DIR=str(runtime), HOME=str(tmp_path / "home"))
    defaults = subprocess.run(
        MLCOSTD[:1] + ["-c", "from daemon import config as c; "
                             "print(c.default_db_path()); print(c.default_socket_path())"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout.split()
    if os.geteuid() == 0:  # this host's store and socket are root's fixed paths
        assert defaults == ["/var/lib/mlcost/mlcost.db", "/run/mlcost/mlcostd.sock"]
    else:
        assert defaults == [str(state / "mlcost/mlcost.db"), str(runtime / "mlcost/mlcostd.sock")]
    defaults_before = [Path(d).exists() for d in defaults]
    folder = tmp_path / "daemon"
    folder.mkdir()
    log_file = open(folder / "mlcostd.log", "wb")
    proc = subprocess.Popen(MLCOSTD + ["run", "--simulate", "idle-host", "--interval", "0.5"],
                            cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, **spawn_options())
    daemon = livedaemon.LiveDaemon(folder, proc, log_file)
    daemon.db = state / "mlcost" / "simulated" / "idle-host" / "mlcost.db"
    daemon.socket = runtime / "mlcost" / "simulated" / "idle-host" / "mlcostd.sock"
    try:
        poll(daemon.healthy, livedaemon.START_TIMEOUT_S, f"mlcostd on {daemon.socket} healthy",
             explain=daemon.log_tail)
        daemon.wait_for_ticks(1)
        log = daemon.log()
        assert f"records into {daemon.db}" in log, log
        assert f"mlcost-top --connect unix:{daemon.socket}" in log, log
        assert not any(d in log for d in defaults), log
        assert [Path(d).exists() for d in defaults] == defaults_before
    finally:
        assert daemon.stop() == 0, daemon.log_tail()
    assert _host_and_ticks(daemon.db)[0]["simulated"] == "idle-host"
    assert [Path(d).exists() for d in defaults] == defaults_before


@pytest.mark.parametrize("scenario, folder", [
    ("demo", "demo"),
    ("some/where/my scenario.toml", "my_scenario"),
    ("../../..toml", "scenario"),
])
def test_a_scenario_s_own_store_is_a_folder_of_its_name(monkeypatch, tmp_path, scenario, folder):
    from daemon.config import simulated_db_path, simulated_socket_path

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "rt"))
    assert simulated_db_path(scenario) == tmp_path / "state/mlcost/simulated" / folder / "mlcost.db"
    assert simulated_socket_path(scenario) == (
        tmp_path / "rt/mlcost/simulated" / folder / "mlcostd.sock")


@pytest.mark.parametrize("command", [["report"], ["snapshot", "--since", "1m"]])
def test_no_store_points_at_where_a_simulated_run_records(tmp_path, command):
    """After `mlcostd run --simulate demo`, a `report` or `snapshot` without --db reads the
    real daemon's store, which is not there: its refusal names the demo's own."""
    state = tmp_path / "state"
    env = dict(os.environ, TMPDIR=str(tmp_path), XDG_STATE_HOME=str(state))
    done = subprocess.run(MLCOSTD + [*command, "--db", str(tmp_path / "none.db")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env=env)
    assert done.returncode == 2, done.stderr
    assert f"records into {state}/mlcost/simulated/demo/mlcost.db" in done.stderr, done.stderr


def _damaged_store(db: Path) -> Path:
    """A store at `db` with every page past its header overwritten, as a failing disk leaves
    it: SQLite reads "database disk image is malformed"."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with Store(db) as store:
        now = time.time()
        for tick in range(1, 40):
            store.write(Sample(ts=now - 40 + tick, tick=tick, processes=(
                ProcessSample(10, now - 50, 1, "alice", "python train.py"),)))
        store.pragma("wal_checkpoint", "TRUNCATE")
    size = db.stat().st_size
    assert size > 4096
    with open(db, "r+b") as damaged:
        damaged.seek(4096)
        damaged.write(b"\xde\xad\xbe\xef" * ((size - 4096) // 4))
    return db


def _check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`mlcostd check ARGS` with a state folder of its own; and that folder."""
    state = tmp_path / "state"
    env = dict(os.environ, TMPDIR=str(tmp_path), XDG_STATE_HOME=str(state),
               HOME=str(tmp_path / "home"))
    done = subprocess.run(MLCOSTD + ["check", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, env=env)
    return done, state


def test_check_simulate_checks_the_store_run_simulate_records_into(tmp_path):
    """`check --simulate single-gpu` checked /var/lib/mlcost/mlcost.db (this host's default,
    absent) and said ok, while `run --simulate single-gpu` records into the scenario's own
    store, found damaged and moved aside at its start (probe 155 M2)."""
    db = _damaged_store(tmp_path / "state" / "mlcost" / "simulated" / "single-gpu" / "mlcost.db")
    before = db.read_bytes()
    done, _ = _check(tmp_path, "--simulate", "single-gpu")
    [line] = [line for line in done.stdout.splitlines() if "database:" in line]
    assert line.startswith(f"[FAIL] database: {db} cannot be read: the file is damaged"), (
        done.stdout + done.stderr)
    assert done.returncode == 1, done.stdout + done.stderr
    assert db.read_bytes() == before  # checked, not moved aside or changed


def test_check_simulate_finds_no_store_where_run_simulate_would_make_one(tmp_path):
    done, state = _check(tmp_path, "--simulate", "idle-host", "--json")
    database = next(c for c in json.loads(done.stdout) if c["name"] == "database")
    own = state / "mlcost" / "simulated" / "idle-host" / "mlcost.db"
    assert (database["status"], database["detail"]) == ("ok", f"{own} is writable"), database
    assert not own.parent.exists()  # looked at, not made


def test_run_and_check_decide_a_simulated_host_s_paths_in_one_place(monkeypatch, tmp_path):
    """The scenario's own store and socket where neither the config nor a flag names one;
    a path the config or a flag names stays."""
    from daemon import config as config_module

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "rt"))
    plain = config_module.Config()
    assert config_module.with_simulated_paths(plain, None) is plain
    own = config_module.with_simulated_paths(plain, "demo")
    assert own.daemon.db == str(config_module.simulated_db_path("demo"))
    assert own.api.socket == str(config_module.simulated_socket_path("demo"))
    named = config_module.from_dict({"daemon": {"db": "/x/m.db"}, "api": {"socket": "/x/s"}})
    kept = config_module.with_simulated_paths(named, "demo")
    assert (kept.daemon.db, kept.api.socket) == ("/x/m.db", "/x/s")


def test_check_simulate_with_db_or_config_checks_that_store(tmp_path):
    """As `run --simulate`: --db, or [daemon].db in --config, names the store checked."""
    db = _damaged_store(tmp_path / "named" / "m.db")
    config = tmp_path / "c.toml"
    config.write_text(f'[daemon]\ndb = "{db}"\n')
    for args in (["--db", str(db)], ["--config", str(config)]):
        done, _ = _check(tmp_path, "--simulate", "idle-host", *args)
        assert f"[FAIL] database: {db} cannot be read: the file is damaged" in done.stdout, (
            args, done.stdout)
