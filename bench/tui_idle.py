"""mlcost-top beside nvitop at idle: CPU % and RSS of each TUI over the same 60 s, on the same
simulated host, at the same time (so both see the same machine load). Prints figures.

One mlcostd runs `--simulate SCENARIO` (the demo, or with --procs a host of 8 GPUs x N real
workload processes, as bench/collector.py builds it). Then, per run, side by side, each on its
own pty of --size:
- mlcost-top connected to that daemon (main screen, nothing pressed; it polls every 1 s);
- nvitop's TUI reading the same simulated NVML (daemon.sim.nvml installed in its process, as
  tests/sim/test_nvitop.py does), at `--interval 1` (mlcost-top's cadence) and at its default
  2 s.
Once each screen shows the host's figures and a few seconds more have passed, each process's CPU
time (user + system) is read at the start and the end of the window, its RSS every second, and
the bytes it wrote to its terminal counted (what it repaints). nvitop's CPU includes its own
collection (NVML + /proc); mlcost-top's includes reading and parsing /v1/now.

    .venv/bin/python bench/tui_idle.py [--seconds 60] [--runs 3] [--size 200x50]
                                       [--procs 64] [--json]

Target (issue 23): mlcost-top's CPU % and RSS at or below nvitop's.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collector import scenario_text  # noqa: E402

from daemon.sim.state import STATE_DIR_ENV  # noqa: E402
from mlcost_tui.demo import EmbeddedDaemon  # noqa: E402
from mlcost_tui.prefetch import first_snapshot  # noqa: E402

# nvitop's own entry point, in a process whose pynvml reads the simulated host.
NVITOP = ("import sys\nfrom daemon.sim import nvml\nnvml.install()\n"
          "from nvitop.cli import main\nsys.exit(main())\n")
READY_TIMEOUT_S = 120.0
SETTLE_S = 5.0  # after the first frame with figures: the startup's imports and first layout
MB = 1 << 20
ROOT = str(Path(__file__).resolve().parents[1])  # this checkout


@dataclass
class Tool:
    """One TUI on its own pty; `ready` is what its screen shows once it has the host's data."""

    name: str
    argv: list[str]
    ready: tuple[bytes, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ROOT  # `python -m` imports from here first
    process: subprocess.Popen | None = None
    screen: bytearray = field(default_factory=bytearray)
    master: int = -1

    def start(self, rows: int, columns: int) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.process = subprocess.Popen(self.argv, stdin=slave, stdout=slave, stderr=slave,
                                        env=self.env, cwd=self.cwd, start_new_session=True)
        os.close(slave)
        threading.Thread(target=self._drain, name=f"drain {self.name}", daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.screen.extend(chunk)

    def is_ready(self) -> bool:
        return all(word in self.screen for word in self.ready)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def one_run(tools: list[Tool], seconds: float, rows: int, columns: int) -> dict[str, dict]:
    for tool in tools:
        tool.screen.clear()
        tool.start(rows, columns)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        started = time.monotonic()
        first: dict[str, float] = {}
        while len(first) < len(tools):
            for tool in tools:
                if tool.name not in first and tool.is_ready():
                    first[tool.name] = time.monotonic() - started
                assert tool.process is not None
                if tool.process.poll() is not None or time.monotonic() > deadline:
                    tail = bytes(tool.screen[-400:]).decode(errors="replace")
                    raise SystemExit(f"{tool.name} shows no data: {tail!r}")
            time.sleep(0.05)
        time.sleep(SETTLE_S)
        handles = {t.name: psutil.Process(t.process.pid) for t in tools  # type: ignore[union-attr]
                   }
        cpu0 = {name: cpu_seconds(p) for name, p in handles.items()}
        bytes0 = {t.name: len(t.screen) for t in tools}
        rss: dict[str, list[int]] = {name: [] for name in handles}
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < seconds:
            for name, p in handles.items():
                rss[name].append(p.memory_info().rss)
            time.sleep(min(1.0, max(seconds - elapsed, 0.0)))
        wall = time.monotonic() - began
        out = {}
        for tool in tools:
            p = handles[tool.name]
            out[tool.name] = {
                "cpu_percent": 100 * (cpu_seconds(p) - cpu0[tool.name]) / wall,
                "rss_mb": statistics.median(rss[tool.name]) / MB,
                "rss_max_mb": max(rss[tool.name]) / MB,
                "terminal_kb_per_s": (len(tool.screen) - bytes0[tool.name]) / wall / 1024,
                "first_data_s": first[tool.name],
            }
        return out
    finally:
        for tool in tools:
            tool.stop()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", default="200x50", help="terminal COLUMNSxROWS (default 200x50)")
    parser.add_argument("--procs", type=int, default=0,
                        help="simulate 8 GPUs x PROCS workload processes (default: the demo)")
    parser.add_argument("--compare", metavar="CHECKOUT",
                        help="also run the mlcost-top of another checkout (e.g. main, for a "
                             "before/after under the same load)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = parser.parse_args()
    columns, rows = (int(x) for x in args.size.lower().split("x"))

    with tempfile.TemporaryDirectory(prefix="mlcost-bench-idle-") as home:
        os.environ.update(HOME=home, XDG_STATE_HOME=os.path.join(home, "state"))
        scenario = "demo"
        if args.procs:
            path = Path(home) / f"bench-{args.procs}.toml"
            path.write_text(scenario_text(8, args.procs))
            scenario = str(path)
        daemon = EmbeddedDaemon(scenario, allow_actions=False, ec2=False)
        daemon.start()
        try:
            if not daemon.wait_ready(READY_TIMEOUT_S):
                raise SystemExit(daemon.failure() or "mlcostd did not start")
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:  # a tick with the workloads on their GPUs
                snap = first_snapshot(daemon.target, timeout_s=2.0)
                if snap is not None and snap.now is not None and \
                        len(snap.now.processes) >= (args.procs or 5):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("mlcostd shows no workload processes")
                time.sleep(0.5)
            assert daemon.process is not None
            sim_dir = next(child.environ()[STATE_DIR_ENV] for child in
                           psutil.Process(daemon.process.pid).children(recursive=True)
                           if STATE_DIR_ENV in child.environ())
            env = dict(os.environ, TERM="xterm-256color", PYTHONPATH=os.pathsep.join(sys.path),
                       **{STATE_DIR_ENV: sim_dir})
            env.pop("COLUMNS", None)
            env.pop("LINES", None)
            tools = [
                Tool("mlcost-top", [sys.executable, "-m", "mlcost_tui", "--connect",
                                    daemon.target], (b"$/h", b"python"), env),
                Tool("nvitop 1s", [sys.executable, "-c", NVITOP, "--interval", "1"],
                     (b"A100", b"MiB", b"python"), env),
                Tool("nvitop 2s", [sys.executable, "-c", NVITOP], (b"A100", b"MiB", b"python"),
                     env),
            ]
            if args.compare:
                other = os.path.abspath(args.compare)
                tools.insert(1, Tool(f"{os.path.basename(other)}:top", [
                    sys.executable, "-m", "mlcost_tui", "--connect", daemon.target],
                    tools[0].ready, dict(env, PYTHONPATH=os.pathsep.join(
                        [other] + [p for p in sys.path if p and not p.startswith(ROOT)])),
                    cwd=other))
            runs, loads = [], []
            for run in range(args.runs):
                loads.append(load())
                runs.append(one_run(tools, args.seconds, rows, columns))
                if not args.json:
                    print(f"run {run + 1}: load {loads[-1]}  " + "  ".join(
                        f"{name} {r['cpu_percent']:.1f}% {r['rss_mb']:.0f} MB"
                        for name, r in runs[-1].items()), flush=True)
        finally:
            daemon.stop()
    names = [t.name for t in tools]
    medians = {name: {key: statistics.median(r[name][key] for r in runs)
                      for key in runs[0][name]} for name in names}
    if args.json:
        print(json.dumps({"scenario": f"8 GPUs x {args.procs}" if args.procs else "demo",
                          "size": args.size, "seconds": args.seconds, "runs": runs,
                          "median": medians, "load": loads + [load()]}, indent=1))
        return 0
    print(f"\n{'8 GPUs x ' + str(args.procs) if args.procs else 'the demo'} at {args.size}, "
          f"{args.seconds:g} s per run, medians of {args.runs} (load before each run: "
          f"{'; '.join(loads)}; now {load()})")
    print(f"{'':28}" + "".join(f"{name:>14}" for name in names))
    for key, label, unit in (("cpu_percent", "CPU (user+system)", "%"),
                             ("rss_mb", "RSS (median of the window)", " MB"),
                             ("rss_max_mb", "RSS max", " MB"),
                             ("terminal_kb_per_s", "written to the terminal", " KB/s"),
                             ("first_data_s", "start to data on screen", " s")):
        print(f"{label:28}" + "".join(f"{medians[n][key]:>{14 - len(unit)}.1f}{unit}"
                                      for n in names))
    ours, theirs = medians["mlcost-top"], medians["nvitop 1s"]
    print(f"mlcost-top / nvitop at the same 1 s cadence: CPU "
          f"{ours['cpu_percent'] / max(theirs['cpu_percent'], 1e-9):.2f}x, RSS "
          f"{ours['rss_mb'] / theirs['rss_mb']:.2f}x (target <= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
