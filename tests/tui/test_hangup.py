"""A terminal closed under `make demo`: the closed terminal sends SIGHUP to its session leader
only (make, which waits for its children), so mlcost-top was never told and it, the demo's
daemon and its workloads ran on for good. Here a session leader that shrugs off SIGHUP (as make
does) runs `mlcost-top --demo` on a real pty; once the screen shows the burn, the terminal is
closed, and every process under the leader must go."""

from __future__ import annotations

import fcntl
import os
import pty
import subprocess
import sys
import termios
import threading

import psutil
from lifeline import spawn_options
from simhost import poll

# The session leader: takes the pty as its controlling terminal, ignores the hang-up like make,
# runs mlcost-top in the terminal's foreground process group and waits for it.
LEADER = """
import fcntl, signal, subprocess, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
signal.signal(signal.SIGHUP, lambda *_: None)
sys.exit(subprocess.call([sys.executable, "-m", "mlcost_tui", "--demo"]))
"""


def test_a_closed_terminal_stops_mlcost_top_its_demo_daemon_and_workloads():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, b"\x18\x00\x50\x00\x00\x00\x00\x00")  # 24 x 80
    env = dict(os.environ, TERM="xterm-256color", PYTHONPATH=os.pathsep.join(sys.path))
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdin=slave, stdout=slave,
                              stderr=slave, env=env, **spawn_options())
    os.close(slave)
    screen = bytearray()

    def drain() -> None:  # a terminal reads what the app writes, or its writes would block
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        poll(lambda: b"burn" in screen and b"live" in screen, 120, "the demo's first frame",
             explain=lambda: bytes(screen[-2000:]).decode(errors="replace"))
        tree = psutil.Process(leader.pid).children(recursive=True)
        daemons = [p for p in tree if "--simulate" in command_of(p)]
        assert daemons, [command_of(p) for p in tree]  # the demo daemon runs under it
        os.close(master)  # the terminal goes away
        master = -1
        gone, alive = psutil.wait_procs(tree, timeout=60)
        assert not alive, [command_of(p) for p in alive]
        assert leader.wait(30) == 128 + 1  # mlcost-top's own exit: hung up
    finally:
        if master >= 0:
            os.close(master)
        for proc in psutil.Process(leader.pid).children(recursive=True) if leader.poll() is None \
                else []:
            proc.kill()
        if leader.poll() is None:
            leader.kill()
            leader.wait()


def command_of(proc: psutil.Process) -> str:
    """Its command line; "" once it has exited (the demo's tree has short-lived helpers: one
    that exits between the listing and this read is no daemon)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.NoSuchProcess:
        return ""
