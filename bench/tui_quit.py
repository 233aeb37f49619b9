"""How long `q` takes to give the shell back on the demo (target: under 2 s): `mlcost-top --demo`
on a real pty at 80x24, `q` pressed once the screen shows live figures, the time until the
process has exited; then how long the demo's daemon and workloads take to be gone after that
(stopped in the background). Prints figures; HOME and XDG_STATE_HOME are a temp dir.

    .venv/bin/python bench/tui_quit.py [--runs 3]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

import psutil


def one_run(home: str) -> tuple[float, float, str]:
    """(seconds from q to exit, seconds from q until every process it started is gone, the
    exit line)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", HOME=home,
               XDG_STATE_HOME=os.path.join(home, "state"),
               PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-m", "mlcost_tui", "--demo"], stdin=slave,
                            stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    screen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            screen.extend(chunk)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 180
    while not (b"live" in screen and b"tick" in screen and b"$/h" in screen):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("no live frame: " + bytes(screen[-500:]).decode(errors="replace"))
        time.sleep(0.1)
    time.sleep(3)  # a few ticks in, as a user would quit
    tree = psutil.Process(proc.pid).children(recursive=True)
    mark = len(screen)
    pressed = time.monotonic()
    os.write(master, b"q")
    proc.wait(60)
    quit_s = time.monotonic() - pressed
    psutil.wait_procs(tree, timeout=60)
    gone_s = time.monotonic() - pressed
    time.sleep(0.2)
    os.close(master)
    tail = bytes(screen[mark:]).decode(errors="replace")
    line = next((x.strip() for x in re.sub(r"\x1b\[[0-9;?<>]*[a-zA-Z]", "\n", tail).splitlines() if "snapshots" in x), "")
    return quit_s, gone_s, line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quits, gones = [], []
    with tempfile.TemporaryDirectory(prefix="mlcost-bench-quit-") as home:
        for run in range(args.runs):
            quit_s, gone_s, line = one_run(home)
            quits.append(quit_s)
            gones.append(gone_s)
            print(f"run {run + 1}: q -> shell {quit_s:.2f} s; daemon and workloads gone "
                  f"{gone_s:.2f} s after q")
        print(f"exit line: {line}")
    print(f"q -> shell: median {statistics.median(quits):.2f} s, max {max(quits):.2f} s "
          f"(target < 2 s) over {args.runs} runs")


if __name__ == "__main__":
    main()
