"""`q` on the demo, in a real terminal (a pty): mlcost-top exits at once (bench/tui_quit.py
measures how fast), says where the demo's snapshots are kept, and the daemon, its workloads and
the simulated EC2 are all gone afterwards (stopped in the background), with the demo's temporary
folder."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import subprocess
import sys
import tempfile
import termios
import threading
from pathlib import Path

import psutil
import pytest
from lifeline import spawn_options
from simhost import poll

pytestmark = pytest.mark.xdist_group("serial")  # a whole demo host


@pytest.mark.parametrize("key", [b"q", b"\x03"], ids=["q", "ctrl+c"])
def test_q_exits_says_where_the_snapshots_are_and_leaves_nothing_running(tmp_path, key):
    # Ctrl-C (0x03: the terminal is raw, so a key, not SIGINT) quits as `q` does: it only
    # showed Textual's "Press [b]ctrl+q[/b] to quit", markup and all (probe 125 F11).
    # The demo's temporary folder goes in a TMPDIR of the test's own, short enough for the
    # daemon's socket path (a worker's tmp_path is not: the demo then falls back to /tmp).
    temp = Path(tempfile.mkdtemp(prefix="mq-", dir="/tmp"))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, b"\x18\x00\x50\x00\x00\x00\x00\x00")  # 24 x 80
    env = dict(os.environ, TERM="xterm-256color", PYTHONPATH=os.pathsep.join(sys.path),
               HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"),
               TMPDIR=str(temp))
    proc = subprocess.Popen([sys.executable, "-m", "mlcost_tui", "--demo"], stdin=slave,
                            stdout=slave, stderr=slave, env=env, **spawn_options())
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
    try:
        # A bound on a hang (the simulated EC2 starts before the daemon).
        poll(lambda: b"live" in screen and b"tick" in screen, 180, "the demo's first live frame",
             explain=lambda: bytes(screen[-2000:]).decode(errors="replace"))
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert any("--simulate" in " ".join(p.cmdline()) for p in tree)
        assert any("daemon.sim.ec2" in " ".join(p.cmdline()) for p in tree)
        os.write(master, key)
        assert proc.wait(60) == 0
        poll(lambda: b"snapshots" in screen[-2000:], 10, "the exit line")
        text = re.sub(r"\x1b\[[0-9;?<>]*[a-zA-Z]", " ", bytes(screen[-2000:]).decode())
        assert f"kept in {tmp_path / 'state' / 'mlcost' / 'demo'}/" in text
        gone, alive = psutil.wait_procs(tree, timeout=60)
        assert not alive, [p.cmdline() for p in alive]
        poll(lambda: not list(temp.glob("mlcost-demo-*")), 30,
             "the demo's temporary folder removed")
    finally:
        shutil.rmtree(temp, ignore_errors=True)
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
