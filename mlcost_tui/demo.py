"""`mlcost-top --demo`: an embedded mlcostd on the simulated host, stopped with everything it
started when mlcost-top exits."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from daemon.lifetime import die_with_parent

STOP_WAIT_S = 15.0


class EmbeddedDaemon:
    """`mlcostd run --simulate SCENARIO` in its own session, with a temporary db and socket."""

    def __init__(self, scenario: str = "demo", allow_actions: bool = True) -> None:
        self.scenario = scenario
        self.allow_actions = allow_actions
        self.folder = Path(tempfile.mkdtemp(prefix="mlcost-demo-"))
        os.chmod(self.folder, 0o700)
        self.socket = self.folder / "api" / "mlcostd.sock"
        self.log = self.folder / "mlcostd.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"unix:{self.socket}"

    def start(self) -> None:
        config = self.folder / "mlcostd.toml"
        # The simulated host's own settings (short idle and advice thresholds), plus the API's.
        config.write_text(simulate_config_text() +
                          f"\n[api]\nallow_actions = {'true' if self.allow_actions else 'false'}\n")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daemon", "run", "--simulate", self.scenario,
                 "--config", str(config), "--db", str(self.folder / "demo.db"),
                 "--socket", str(self.socket)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM))

    def wait_ready(self, timeout_s: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.socket.exists():
                return True
            if self.process is not None and self.process.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def failure(self) -> str | None:
        """Why the daemon exited, if it did."""
        if self.process is None or self.process.poll() is None:
            return None
        tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
        return f"the demo mlcostd exited ({self.process.returncode}): " + " / ".join(tail)

    def stop(self) -> None:
        """SIGTERM (the daemon stops its workloads), then SIGKILL anything left in its session."""
        process = self.process
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(process.pid, signal.SIGKILL)  # workloads left behind, if any
            except (ProcessLookupError, PermissionError):
                pass
            if process.poll() is None:
                process.wait(5)
            self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)


def simulate_config_text() -> str:
    """daemon/sim/simulate.toml: what `mlcostd run --simulate` uses without --config."""
    spec = importlib.util.find_spec("daemon")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(list(spec.submodule_search_locations)[0])
    return (folder / "sim" / "simulate.toml").read_text()
