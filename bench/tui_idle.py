"""mlcost-top beside nvitop at idle: CPU % and RSS of each TUI over the same 60 s, on the same
simulated host, at the same time (so both see the same machine load). Prints figures.

One mlcostd runs `--simulate SCENARIO` (the demo, or with --procs a host of 8 GPUs x N real
workload processes, as bench/collector.py builds it). Then, per run, side by side, each on its
own pty of --size:
- mlcost-top connected to that daemon (main screen, nothing pressed; it polls every 1 s);
- nvitop's TUI reading the same simulated NVML (daemon.sim.nvml installed in its process, as
  tests/sim/test_nvitop.py does), at `--interval 1` (mlcost-top's cadence) and at its default
  2 s;
- "Textual": the smallest Textual app that shows the same pids (a DataTable of them, one cell
  updated a second), what the framework alone holds: mlcost-top's RSS above it is its own.
Once each screen shows the host's data (a workload's pid, as /v1/now gives it, found in what the
terminal shows: its output with the escape sequences removed, so neither a style change inside
a word nor a narrow column that drops a command's interpreter hides it) and a few seconds more
have passed, each process's CPU time (user + system) is read at the start and the end of the
window, its RSS every second, and the bytes it wrote to its terminal counted (what it repaints). nvitop's CPU includes its own
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
import re
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
from mlcost_tui.messages import HostSnapshot  # noqa: E402
from mlcost_tui.prefetch import first_snapshot  # noqa: E402

# nvitop's own entry point, in a process whose pynvml reads the simulated host.
NVITOP = ("import sys\nfrom daemon.sim import nvml\nnvml.install()\n"
          "from nvitop.cli import main\nsys.exit(main())\n")
# What Textual alone costs: an App with a header line and one DataTable of the workloads' pids
# (given as arguments), one cell updated a second, as a live view's refresh does. mlcost-top's
# RSS less this one's is what mlcost-top adds to the framework the product card fixes.
TEXTUAL_FLOOR = (
    "import sys\nfrom textual.app import App\nfrom textual.widgets import DataTable, Static\n"
    "class Floor(App):\n"
    "    def compose(self):\n"
    "        yield Static('a Textual app, one table')\n"
    "        yield DataTable()\n"
    "    def on_mount(self):\n"
    "        self.table = self.query_one(DataTable)\n"
    "        self.table.add_columns('pid', 'tick')\n"
    "        for pid in sys.argv[1:]:\n"
    "            self.table.add_row(pid, 0, key=pid)\n"
    "        self.ticks = 0\n"
    "        self.set_interval(1.0, self.tick)\n"
    "    def tick(self):\n"
    "        self.ticks += 1\n"
    "        self.table.update_cell(sys.argv[1], self.table.ordered_columns[1].key, self.ticks)\n"
    "Floor().run()\n")
READY_TIMEOUT_S = 120.0
SETTLE_S = 5.0  # after the first frame with figures: the startup's imports and first layout
MB = 1 << 20
ROOT = str(Path(__file__).resolve().parents[1])  # this checkout


# What a terminal shows, without how it is drawn: escape sequences (CSI, OSC, charset
# designations) and control bytes removed. A style change (SGR, CSI ... m) joins the text on either
# side (it can fall inside a word: "A1" bold, "00" not); any other sequence (a cursor move) becomes
# a space, so text from two places on the screen never runs together into a false match.
_SGR = re.compile(rb"\x1b\[[0-9;:]*m")
_ESCAPE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]"  # CSI: cursor moves, styles, modes
                     rb"|\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, clipboard
                     rb"|[ -/]+[0-~]"  # charset designations (curses' line drawing)
                     rb"|[0-Z\\^-~])")  # one-byte escapes (ESC 7, ESC =, ESC M)
_INCOMPLETE_MAX = 4096  # an unterminated sequence longer than this is noise: shown as is
_CONTROL = bytes(range(32)).replace(b"\n", b"") + b"\x7f"
_BLANK_CONTROL = bytes.maketrans(_CONTROL, b" " * len(_CONTROL))


@dataclass
class Screen:
    """One run's terminal output: its size and what it showed (`visible_text`)."""

    written: int = 0
    text: bytearray = field(default_factory=bytearray)


def visible_text(stream: bytes) -> bytes:
    """`stream` (complete escape sequences only) as the text it puts on a screen."""
    return _ESCAPE.sub(b" ", _SGR.sub(b"", stream)).translate(_BLANK_CONTROL)


@dataclass
class Tool:
    """One TUI on its own pty. `ready` is the data it must show (a workload's pid, from
    mlcostd's /v1/now): each a regular expression over what the screen
    shows (`visible_text`), so a word split by a style change still counts, and a drawing that
    only moves the cursor does not."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ROOT  # `python -m` imports from here first
    ready: tuple[re.Pattern[bytes], ...] = ()
    process: subprocess.Popen | None = None
    screen: Screen = field(default_factory=Screen)  # this run's
    master: int = -1

    def start(self, rows: int, columns: int) -> None:
        self.screen = Screen()
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.process = subprocess.Popen(self.argv, stdin=slave, stdout=slave, stderr=slave,
                                        env=self.env, cwd=self.cwd, start_new_session=True)
        os.close(slave)
        # This run's descriptor and screen, passed in: a reader left from the last run can
        # never read this run's terminal (a reused descriptor number) or write to its screen.
        threading.Thread(target=self._drain, args=(self.master, self.screen),
                         name=f"drain {self.name}", daemon=True).start()

    @staticmethod
    def _drain(master: int, screen: Screen) -> None:
        pending = b""  # an escape sequence cut at the end of a read: completed by the next
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            screen.written += len(chunk)
            data = pending + chunk
            cut = data.rfind(b"\x1b")
            pending = b""
            if cut >= 0 and not _ESCAPE.match(data, cut) and len(data) - cut < _INCOMPLETE_MAX:
                data, pending = data[:cut], data[cut:]
            screen.text.extend(visible_text(data))

    def is_ready(self) -> bool:
        return all(pattern.search(self.screen.text) for pattern in self.ready)

    def tail(self) -> str:
        return " ".join(bytes(self.screen.text[-1200:]).decode(errors="replace").split())

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


def shows_data(snapshot: HostSnapshot) -> tuple[re.Pattern[bytes], ...]:
    """What a screen with the host's data shows, whichever tool draws it: the pid of at least
    one workload (a whole number, never part of a longer one). It comes from the data, so it
    is neither a column title drawn before the data nor anything a narrow screen drops (a
    command line's interpreter is, in a narrow command column; mlcost-top's GPU model column
    goes before the PID column does)."""
    assert snapshot.now is not None
    pids = b"|".join(str(p.pid).encode() for p in snapshot.now.processes)
    return (re.compile(rb"(?<!\d)(?:" + pids + rb")(?!\d)"),)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def one_run(tools: list[Tool], seconds: float, rows: int, columns: int) -> dict[str, dict]:
    for tool in tools:
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
                    raise SystemExit(f"{tool.name} shows no data (looked for "
                                     f"{[p.pattern for p in tool.ready]}): {tool.tail()!r}")
            time.sleep(0.05)
        time.sleep(SETTLE_S)
        handles = {t.name: psutil.Process(t.process.pid) for t in tools  # type: ignore[union-attr]
                   }
        cpu0 = {name: cpu_seconds(p) for name, p in handles.items()}
        bytes0 = {t.name: t.screen.written for t in tools}
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
                "terminal_kb_per_s": (tool.screen.written - bytes0[tool.name]) / wall / 1024,
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
            ready = shows_data(snap)
            tools = [
                Tool("mlcost-top", [sys.executable, "-m", "mlcost_tui", "--connect",
                                    daemon.target], env, ready=ready),
                Tool("nvitop 1s", [sys.executable, "-c", NVITOP, "--interval", "1"], env,
                     ready=ready),
                Tool("nvitop 2s", [sys.executable, "-c", NVITOP], env, ready=ready),
                Tool("Textual", [sys.executable, "-c", TEXTUAL_FLOOR,
                                 *(str(p.pid) for p in snap.now.processes)], env, ready=ready),
            ]
            if args.compare:
                other = os.path.abspath(args.compare)
                tools.insert(1, Tool(f"{os.path.basename(other)}:top", [
                    sys.executable, "-m", "mlcost_tui", "--connect", daemon.target],
                    dict(env, PYTHONPATH=os.pathsep.join(
                        [other] + [p for p in sys.path if p and not p.startswith(ROOT)])),
                    cwd=other, ready=ready))
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
    floor = medians["Textual"]
    print(f"Textual alone (one table of the pids, a cell updated a second) holds "
          f"{floor['rss_mb']:.1f} MB, {floor['rss_mb'] / theirs['rss_mb']:.2f}x nvitop's RSS: "
          f"mlcost-top adds {ours['rss_mb'] - floor['rss_mb']:.1f} MB to it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
