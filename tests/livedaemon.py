"""A real `mlcostd run --simulate` in a subprocess, for the tests that need a running daemon.

Each daemon gets its own folder (database, API socket, log, config) and is stopped by the test
that started it, or by the `mlcostd` fixture in tests/conftest.py. While it runs we record its
process tree (the simulated workloads, py-spy dumps); after it stops we check that exactly those
processes are gone. Nothing here looks at processes the test did not start, so the suite passes
while another mlcostd or `mlcost-top --demo` runs on the same machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
import pytest
from lifeline import kill_group, spawn_options
from simhost import poll

from daemon.client import Client, ClientError
from daemon.store.reader import StoreReader

ROOT = Path(__file__).resolve().parents[1]
MLCOSTD = [sys.executable, "-m", "daemon"]
START_TIMEOUT_S = 60.0  # a cold start imports pricing and starts the workloads: seconds
STOP_TIMEOUT_S = 30.0

# "simulating 'demo': 8 x ..., workloads healthy (pid 123), starved (pid 124)" (runtime.daemon)
_WORKLOAD_PID = re.compile(r"\(pid (\d+)\)")
_TCP_PORT = re.compile(r"API on http://[^:]+:(\d+) ")


class LiveDaemon:
    """One running mlcostd: its folder, its API, its log and the processes it started."""

    def __init__(self, folder: Path, proc: subprocess.Popen, log_file: Any) -> None:
        self.folder = folder
        self.db = folder / "mlcost.db"
        self.socket = folder / "api" / "mlcostd.sock"
        self.log_path = folder / "mlcostd.log"
        self.proc = proc
        self._log_file = log_file
        self.tree: dict[int, psutil.Process] = {}  # pid -> itself and every descendant seen
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- what it says ------------------------------------------------------------------

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 3000) -> str:
        return f"--- mlcostd log ({self.log_path}) ---\n{self.log()[-chars:]}"

    def workload_pids(self) -> set[int]:
        """The simulated workloads' pids, as the daemon logged them when it started them."""
        for line in self.log().splitlines():
            if "simulating " in line and "workloads" in line:
                return {int(pid) for pid in _WORKLOAD_PID.findall(line)}
        return set()

    def tcp_port(self) -> int | None:
        found = _TCP_PORT.search(self.log())
        return int(found.group(1)) if found else None

    # -- its API -----------------------------------------------------------------------

    def client(self, **kwargs: Any) -> Client:
        return Client(f"unix:{self.socket}", **kwargs)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """One call of daemon.client.Client (e.g. "now", "health") on a fresh client."""
        async def main() -> Any:
            async with self.client() as client:
                return await getattr(client, method)(*args, **kwargs)

        return asyncio.run(main())

    def now(self) -> dict[str, Any]:
        return self.call("now_raw")

    def healthy(self) -> bool:
        self.record_tree()
        if self.proc.poll() is not None:
            pytest.fail(f"mlcostd exited with {self.proc.returncode} before it was healthy\n"
                        f"{self.log_tail()}")
        try:
            return self.call("health").ok
        except ClientError:
            return False

    def ticks(self) -> list[int]:
        """The ticks in its store so far (read with a reader, like the report does)."""
        self.record_tree()
        if not self.db.exists():
            return []
        reader = StoreReader(str(self.db))
        try:
            return reader.ticks()
        finally:
            reader.close()

    def wait_for_ticks(self, count: int, timeout: float = 60.0) -> list[int]:
        return poll(lambda: (ticks := self.ticks()) and len(ticks) >= count and ticks,
                    timeout, f"{count} ticks in {self.db}", explain=self.log_tail)

    # -- its processes -----------------------------------------------------------------

    def record_tree(self) -> set[int]:
        """Remember every process below the daemon now; returns their pids."""
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return set()
        for child in children:
            self.tree.setdefault(child.pid, child)
        for pid in self.workload_pids() - set(self.tree):
            try:
                self.tree[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass
        return {child.pid for child in children}

    def still_running(self) -> list[psutil.Process]:
        """What the daemon started (itself included) that is still alive. A pid reused by an
        unrelated process does not count: psutil compares the start time."""
        alive = []
        for proc in self.tree.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                pass
        return alive

    def wait_tree_gone(self, timeout: float = 10.0) -> None:
        poll(lambda: not self.still_running(), timeout,
             f"processes started by mlcostd (pid {self.pid}) still running after it stopped",
             explain=lambda: "\n".join(f"  pid {p.pid}: {' '.join(p.cmdline())}"
                                       for p in self.still_running()) + "\n" + self.log_tail())

    def wait_exit(self, timeout: float = START_TIMEOUT_S) -> int:
        """Wait for a daemon expected to exit on its own (a start-up error); its exit status."""
        poll(lambda: self.record_tree() is not None and self.proc.poll() is not None, timeout,
             f"mlcostd (pid {self.pid}) exiting", explain=self.log_tail)
        return self.stop()

    def stop(self, sig: int = signal.SIGTERM, check_tree: bool = True) -> int:
        """Signal the daemon, wait for it (SIGKILL the group on a hang), check its tree is gone.
        Returns its exit status."""
        if self.returncode is None:
            self.record_tree()
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                kill_group(self.proc.pid)
                self.proc.wait()
                self._log_file.close()
                pytest.fail(f"mlcostd did not stop within {STOP_TIMEOUT_S:g} s of signal "
                            f"{sig}\n{self.log_tail()}")
            self.returncode = self.proc.returncode
            self._log_file.close()
        if check_tree:
            self.wait_tree_gone()
        return self.returncode


# The demo host's config for the tests that wait on its events and advice:
# daemon/sim/simulate.toml with its one-minute waits cut to the shortest the config allows, so
# every event and rule has fired within ~30 s (tests/daemon/test_service.py,
# test_snapshot_live.py).
DEMO_CONFIG: dict[str, dict[str, Any]] = {
    "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "2m"},
    "cost": {"evaluate_every": "5s", "shrink_min_window": "10s", "spot_min_runtime": "10s"},
}


def config_file(folder: Path, tables: dict[str, dict[str, Any]]) -> Path:
    """A TOML config from {section: {key: value}} (strings, numbers, booleans; a list of
    tables, such as [[cost.unit_costs]], as an array of tables)."""
    lines = []
    for section, values in tables.items():
        lines.append(f"[{section}]")
        arrays = {key: value for key, value in values.items() if isinstance(value, list)
                  and value and all(isinstance(v, dict) for v in value)}
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()
                  if key not in arrays]
        for key, entries in arrays.items():
            for entry in entries:
                lines.append(f"[[{section}.{key}]]")
                lines += [f"{k} = {json.dumps(v)}" for k, v in entry.items()]
    path = folder / "mlcostd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start(folder: Path, scenario: str = "idle-host", *, interval: float | None = None,
          config: dict[str, dict[str, Any]] | None = None, args: Iterable[str] = (),
          prepare: Callable[[Path], None] | None = None, wait: bool = True) -> LiveDaemon:
    """`mlcostd run --simulate SCENARIO` with its own db, socket and log in `folder`.

    `config` replaces the simulated host's config (daemon/sim/simulate.toml) with these
    tables; `prepare(folder)` runs first (e.g. to write a store the daemon goes on from).
    With `wait`, returns once /v1/health says ok (a tick is recorded and served)."""
    folder.mkdir(parents=True, exist_ok=True)
    if prepare is not None:
        prepare(folder)
    command = MLCOSTD + ["run", "--simulate", scenario, "--db", str(folder / "mlcost.db"),
                         "--socket", str(folder / "api" / "mlcostd.sock")]
    if interval is not None:
        command += ["--interval", str(interval)]
    if config is not None:
        command += ["--config", str(config_file(folder, config))]
    command += list(args)
    log_file = open(folder / "mlcostd.log", "wb")
    # What it and its workloads make in $TMPDIR (the simulated host's folder) stays in its own
    # folder, also when a test SIGKILLs it and nothing gets to remove it.
    temp = folder / "tmp"
    temp.mkdir(exist_ok=True)
    # Its own session: if it hangs on stop, its whole group can be killed without touching ours;
    # and SIGKILL when pytest dies (its workloads then get their own parent-death SIGTERM).
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=dict(os.environ, TMPDIR=str(temp)),
                            **spawn_options())
    daemon = LiveDaemon(folder, proc, log_file)
    daemon.tree[proc.pid] = psutil.Process(proc.pid)
    if wait:
        try:
            poll(daemon.healthy, START_TIMEOUT_S, f"mlcostd on {daemon.socket} healthy",
                 explain=daemon.log_tail)
        except BaseException:
            daemon.stop(signal.SIGKILL, check_tree=False)
            raise
    return daemon
