"""`mlcost-top --demo`: an embedded mlcostd on the simulated host, stopped with everything it
started when mlcost-top exits.

The simulated host acts like an EC2 instance: a local moto server (daemon.sim.ec2, the `demo`
extra) holds an instance of the scenario's type beside a simulated SSM (daemon.sim.ssm), and the
daemon's boto3 talks to them (AWS_ENDPOINT_URL_EC2, AWS_ENDPOINT_URL_SSM, [instance].id), so `a` on the resize recommendation runs AWS's dry run,
the confirmation and the resize itself through the daemon's real code. Without moto the demo
runs on, and the resize shows its commands only. A resize done reboots the simulated host as on
AWS: its daemon stops (and its workloads with it) and starts again on the scenario as the host
booted, the new type with that type's GPUs (daemon.sim.ec2 says when and what), so it reads the
new type and its GPUs and prices them as mlcostd does after a real resize.

The demo's snapshots outlive it: they go to $XDG_STATE_HOME/mlcost/demo (~/.local/state/...),
and the exit line says where they are and how to replay them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from daemon.lifetime import die_with_parent
from daemon.wire import SOCKET_PATH_MAX

STOP_WAIT_S = 15.0
SOCKET_NAME = "api/mlcostd.sock"  # in the demo's folder
EC2_START_S = 60.0  # the simulated EC2's first answer (moto loads its EC2 models first)
# What the environment of the demo's daemon must not carry over: its EC2 is the local one, and
# a profile or endpoint of the user's would send the demo's calls to a real account.
AWS_ENV_DROPPED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
                   "AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL_SSM", "AWS_SESSION_TOKEN",
                   "AWS_SECURITY_TOKEN")
# Runs detached after mlcost-top quits: waits for the daemon (which stops its workloads), then
# kills what is left of its session and removes the demo's temporary folder.
REAPER = """
import os, shutil, signal, sys, time
pid, folder, wait_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
deadline = time.monotonic() + wait_s
while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
    time.sleep(0.1)
try:
    os.killpg(pid, signal.SIGKILL)
except (ProcessLookupError, PermissionError):
    pass
shutil.rmtree(folder, ignore_errors=True)
"""


def state_home(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """$XDG_STATE_HOME, else ~/.local/state (the XDG base directory default)."""
    xdg = environ.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg)
    return Path(environ.get("HOME") or Path.home()) / ".local" / "state"


def snapshots_folder() -> Path:
    """Where the demo's snapshots are kept between demos."""
    return state_home() / "mlcost" / "demo"


class EmbeddedDaemon:
    """`mlcostd run --simulate SCENARIO` in its own session, with a temporary db and socket, and
    beside it the simulated EC2 (when moto is installed)."""

    def __init__(self, scenario: str = "demo", allow_actions: bool = True,
                 ec2: bool = True) -> None:
        self.scenario = scenario
        self.allow_actions = allow_actions
        self.want_ec2 = ec2
        self.folder = Path(tempfile.mkdtemp(prefix="mlcost-demo-"))
        if len(os.fsencode(self.folder / SOCKET_NAME)) > SOCKET_PATH_MAX:
            # A long $TMPDIR: the socket could not be bound there (the daemon would refuse).
            os.rmdir(self.folder)
            self.folder = Path(tempfile.mkdtemp(prefix="mlcost-demo-", dir="/tmp"))
        os.chmod(self.folder, 0o700)
        self.snapshots = snapshots_folder()
        self.socket = self.folder / SOCKET_NAME
        self.log = self.folder / "mlcostd.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.ec2_process: subprocess.Popen[bytes] | None = None
        self.ec2: dict[str, Any] | None = None  # instance_id, type, env (endpoint, credentials)
        self.ec2_note = ""  # why there is no simulated EC2, if there is none
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._boot: threading.Thread | None = None
        self.simulated = scenario  # what --simulate runs: after a resize, the host as it booted
        self.boots = 0  # how many times the simulated host booted again (resizes done)
        self._rebooting = False
        self._lock = threading.Lock()  # the daemon process, against stop() during a reboot
        self._boots: queue.Queue[str | None] = queue.Queue()  # scenarios booted; None: stop

    @property
    def target(self) -> str:
        return f"unix:{self.socket}"

    def start(self) -> None:
        """Start the simulated EC2, then the daemon, in a thread: mlcost-top draws its first
        frame meanwhile. The thread lives until stop(): the daemon's parent-death signal is tied
        to the thread that started it."""
        self._boot = threading.Thread(target=self._run, name="demo-daemon", daemon=True)
        self._boot.start()

    def _run(self) -> None:
        try:
            if self.want_ec2 and not self._stopping.is_set():
                self.ec2 = self._start_ec2()
            if not self._stopping.is_set():
                self._start_daemon()
        finally:
            self._started.set()
        # Reboots start the daemon from this thread too: its parent-death signal is tied to
        # the thread that started it, and this one lives until stop().
        while (booted := self._boots.get()) is not None:
            self.reboot(booted)

    def _start_ec2(self) -> dict[str, Any] | None:
        with open(self.folder / "ec2.log", "wb") as log:
            process = self.ec2_process = subprocess.Popen(
                [sys.executable, "-m", "daemon.sim.ec2", "--scenario", self.scenario],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM))
        assert process.stdout is not None
        deadline = time.monotonic() + EC2_START_S
        line = b""
        while time.monotonic() < deadline and not self._stopping.is_set():
            ready, _, _ = select.select([process.stdout], [], [], 0.2)
            if ready:
                line = process.stdout.readline()
                break
            if process.poll() is not None:
                break
        try:
            found = json.loads(line)
            started = {"instance_id": str(found["instance_id"]), "type": str(found["type"]),
                       "env": {str(k): str(v) for k, v in dict(found["env"]).items()}}
        except (ValueError, KeyError, TypeError, AttributeError):
            tail = (self.folder / "ec2.log").read_text(errors="replace").strip().splitlines()
            self.ec2_note = (tail[-1] if tail else "the simulated EC2 did not start") + \
                "; the resize shows its commands only"
            return None
        threading.Thread(target=self._watch_boots, args=(process.stdout,),
                         name="demo-ec2-boots", daemon=True).start()
        return started

    def _watch_boots(self, said: Any) -> None:
        """The simulated EC2's further lines: each boot of the instance (a resize done)."""
        for line in said:
            try:
                booted = json.loads(line)
                scenario_text = str(booted["scenario"])
            except (ValueError, KeyError, TypeError):
                continue
            self._boots.put(scenario_text)

    def reboot(self, scenario_text: str) -> None:
        """The simulated host boots again as `scenario_text` says (a scenario's TOML): the
        daemon is stopped as a shutdown stops it (SIGTERM: it stops its workloads) and started
        again, on the same store and socket, as the host's service manager would."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._rebooting = True
            old = self.process
        try:
            if old is not None and old.poll() is None:
                old.send_signal(signal.SIGTERM)
                try:
                    old.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass
            if old is not None:
                _kill_session(old)
            with self._lock:
                if self._stopping.is_set():
                    return
                # named as the scenario: the name it keeps, and its GPUs' UUIDs with it
                booted = self.folder / f"{Path(self.scenario).stem}.toml"
                booted.write_text(scenario_text)
                self.simulated = str(booted)
                self.boots += 1
                self._start_daemon()
        finally:
            self._rebooting = False

    def config_text(self) -> str:
        """The daemon's config: the simulated host's settings, the API's, the snapshots folder
        that outlives the demo, and the simulated EC2's instance."""
        text = simulate_config_text()
        text += f"\n[api]\nallow_actions = {'true' if self.allow_actions else 'false'}\n"
        folder = f"folder = {json.dumps(str(self.snapshots))}\n"
        text = text.replace("[snapshots]\n", "[snapshots]\n" + folder, 1) \
            if "[snapshots]\n" in text else text + "\n[snapshots]\n" + folder
        if self.ec2 is not None:
            text += f"\n[instance]\nid = {json.dumps(self.ec2['instance_id'])}\n"
        return text

    def daemon_environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in AWS_ENV_DROPPED}
        if self.ec2 is not None:
            env.update(self.ec2["env"], AWS_CONFIG_FILE=str(self.folder / "no-aws-config"),
                       AWS_SHARED_CREDENTIALS_FILE=str(self.folder / "no-aws-credentials"))
        return env

    def _start_daemon(self) -> None:
        config = self.folder / "mlcostd.toml"
        config.write_text(self.config_text())
        with open(self.log, "ab") as log:  # a reboot's lines after the first boot's
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daemon", "run", "--simulate", self.simulated,
                 "--config", str(config), "--db", str(self.folder / "demo.db"),
                 "--socket", str(self.socket)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.daemon_environment(),
                start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM))

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.socket.exists():
                return True
            if self._started.is_set() and (self.process is None or
                                           self.process.poll() is not None):
                return False
            time.sleep(0.05)
        return False

    def failure(self) -> str | None:
        """Why the daemon exited, if it did (not a reboot's stop), and how to have one again:
        nothing restarts it. Then its log's last line, less what points into the demo's folder
        (its "everything recorded is in .../demo.db" pointed at a file the demo deletes as it
        exits; the snapshots outlive it, exit_note)."""
        if self._rebooting or self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        try:
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        except ValueError:
            how = f"exit code {code}"
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        said = self._outside_folder(lines[-1]) if lines else ""
        return (f"the demo's mlcostd exited ({how}): run `mlcost-top --demo` again for a new "
                "one" + (f"; its log's last line: {said}" if said else ""))

    def _outside_folder(self, line: str) -> str:
        """A log line without its time and level, and without its clauses that send the reader
        into the demo's folder (the folder itself named as such elsewhere)."""
        parts = line.split(" ", 3)  # "01:23:56 mlcostd ERROR stopped after ..."
        if len(parts) == 4 and parts[1] == "mlcostd":
            line = parts[3]
        folder = str(self.folder)
        kept = [clause.replace(folder, "<the demo's temporary folder>")
                for clause in line.split("; ")
                if not (folder in clause and "everything recorded is in" in clause)]
        return "; ".join(kept)[:300]

    def stop(self, wait: bool = True) -> None:
        """SIGTERM the daemon (it stops its workloads) and the simulated EC2. wait: until they
        are gone, then SIGKILL anything left in their sessions and remove the temporary folder;
        else a detached reaper does that, so quitting returns the shell at once."""
        with self._lock:  # a reboot under way starts no daemon after this
            self._stopping.set()
        self._boots.put(None)
        if self._boot is not None and self._boot is not threading.current_thread():
            self._boot.join(EC2_START_S)  # a boot under way stops at its next step
        for process in (self.ec2_process, self.process):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        if not wait:
            self._reap_in_background()
            return
        for process in (self.ec2_process, self.process):
            if process is None:
                continue
            try:
                process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            _kill_session(process)
        self.process = self.ec2_process = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def _reap_in_background(self) -> None:
        pid = self.process.pid if self.process is not None and self.process.poll() is None \
            else None
        if self.ec2_process is not None and self.ec2_process.poll() is None:
            try:
                os.killpg(self.ec2_process.pid, signal.SIGKILL)  # nothing to save in it
            except (ProcessLookupError, PermissionError):
                pass
        if pid is None:
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        subprocess.Popen([sys.executable, "-c", REAPER, str(pid), str(self.folder),
                          str(STOP_WAIT_S)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)

    def snapshot_files(self) -> list[Path]:
        """The demo's snapshots (this demo's and earlier ones'), newest first."""
        try:
            found = [p for p in self.snapshots.iterdir() if p.suffix == ".db" and p.is_file()]
        except OSError:
            return []
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)

    def exit_note(self) -> str:
        """The line printed after quitting: where the snapshots are and how to replay them."""
        files = self.snapshot_files()
        where = str(self.snapshots).replace(str(Path.home()), "~", 1)
        if not files:
            return (f"mlcost-top: the demo stopped; snapshots (s) are kept in {where}/ "
                    "(none taken this time)")
        newest = str(files[0]).replace(str(Path.home()), "~", 1)
        return (f"mlcost-top: the demo stopped; its snapshots are kept in {where}/ "
                f"({len(files)} there). Replay the newest: mlcost-top --replay {newest}")


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL what is left in the session of `process` (workloads left behind, if any), and
    reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if process.poll() is None:
        process.wait(5)


def simulate_config_text() -> str:
    """daemon/sim/simulate.toml: what `mlcostd run --simulate` uses without --config."""
    spec = importlib.util.find_spec("daemon")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(list(spec.submodule_search_locations)[0])
    return (folder / "sim" / "simulate.toml").read_text()
