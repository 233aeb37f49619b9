"""No escape sequence from recorded data reaches a terminal: a store full of hostile strings
(as an older mlcostd or a hand-edited snapshot could hold them: nothing cleaned on the way in)
is shown by the real `mlcost-top --replay FILE` and `mlcostd report --db FILE` on a real
pseudo-terminal, and the bytes the terminal received are searched.

mlcost-top writes escape sequences of its own to draw, so the test looks for the payloads: a
title set (`ESC ]0;`), a screen cleared (`ESC [2J`) or a clipboard written (`ESC ]52;`) with the
hostile text after it, a hyperlink from markup (`ESC ]8;`), and every time a marker is on the
screen it is in its visible form (`\\x1b]0;PWNED-TITLE`, the four characters `\\x1b`).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from daemon import config as config_module
from daemon.runtime.daemon import Daemon
from daemon.runtime.price_host import build_analyzer
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from tests.daemon.scripted import PRICE

ROOT = Path(__file__).resolve().parents[2]
COLUMNS, ROWS = 240, 50
TIMEOUT_S = 120.0  # a bound for a loaded machine, not a speed figure

TITLE = "\x1b]0;PWNED-TITLE\x07"
CLEAR = "\x1b[2JCLEARED"
CLIPBOARD = "\x1b]52;c;UFdORUQtQ0xJUA==\x07"
COMMAND = (f"python {TITLE} {CLEAR} {CLIPBOARD} [bold]MARKUP[/bold] "
           "[link=https://evil.example]LINK[/link] \x9b31mCSI8BIT")
HOSTNAME = "gpu-host\x1b]0;HOST-TITLE\x07"
USER = "\x1b[8mUSER"
POD = "pod\x1b]0;POD-TITLE\x07"


def hostile_sample(i: int, t0: float) -> Sample:
    gpus = (GpuSample(0, "GPU-0", "A10G\x1b]0;GPU-TITLE\x07", utilization=3.0,
                      memory_used_bytes=4 << 30, memory_total_bytes=24 << 30),)
    proc = ProcessSample(4242, 1000.5, 1, USER, COMMAND, gpus=(GpuUse(0, 4 << 30, 3.0),),
                         cpu_seconds=0.1 * i, rss_bytes=1 << 28,
                         owner={"pod": POD, "namespace": "ns\x1b[2J"})
    return Sample(ts=t0 + i, tick=i, gpus=gpus, processes=(proc,))


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory) -> Path:
    """A store recorded through the daemon's real tick path from samples that were never
    cleaned: the sources are bypassed, as in a store from before the sanitizer."""
    db = tmp_path_factory.mktemp("hostile") / "hostile.db"
    config = config_module.from_dict({"daemon": {"db": str(db)}}, where="test")
    daemon = Daemon(config)
    daemon.store = Store(str(db))
    daemon.host = {"hostname": HOSTNAME, "interval_s": 1.0, "price": PRICE.as_dict(),
                   "idle_utilization_pct": 5.0}
    daemon.store.set_meta("host", daemon.host)
    daemon.analyzer = build_analyzer(config, PRICE, None)
    t0 = time.time() - 30
    script = (hostile_sample(i, t0) for i in itertools.count(1))
    daemon.collect = lambda: next(script)  # type: ignore[method-assign]
    for _ in range(6):
        daemon.tick_now()
    daemon.store.close()
    return db


def run_in_pty(argv: list[str], *, quit_when: bytes | None = None) -> bytes:
    """Run `argv` on a new pseudo-terminal COLUMNS x ROWS; every byte it wrote there. With
    `quit_when`, press q once those bytes have been written (mlcost-top's quit key)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(ROOT),
           "COLUMNS": str(COLUMNS), "LINES": str(ROWS)}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env,
                            start_new_session=True)
    os.close(slave)
    out = bytearray()
    pressed = False
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the program closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            if quit_when is not None and not pressed and quit_when in out:
                os.write(master, b"q")
                pressed = True
            if not ready and proc.poll() is not None:
                break
        else:
            pytest.fail(f"{argv[2:]} did not finish within {TIMEOUT_S:g} s; it wrote:\n"
                        f"{bytes(out[-3000:])!r}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(master)
    return bytes(out)


def assert_no_payload_reached(out: bytes) -> None:
    for raw in (TITLE, CLEAR, CLIPBOARD, HOSTNAME, "\x1b]0;GPU-TITLE", "\x1b]0;POD-TITLE",
                "\x9b31m", "ns\x1b[2J"):
        assert raw.encode("utf-8") not in out, f"{raw!r} reached the terminal raw"
    assert b"\x1b]0;" not in out, "something set the terminal's title"
    assert b"\x1b]52;" not in out, "something wrote the clipboard"
    assert re.search(rb"\x1b]8;[^\x07\x1b]*evil", out) is None, "markup made a hyperlink"
    # Every time a marker is on the screen, it is in its visible form.
    for visible, marker in ((b"\\x1b]0;PWNED-TITLE", b"PWNED-TITLE"),
                            (b"\\x1b[2JCLEARED", b"CLEARED"),
                            (b"\\x1b]0;HOST-TITLE", b"HOST-TITLE")):
        assert out.count(marker) == out.count(visible), (marker, out.count(marker))


def test_mlcost_top_replay_shows_hostile_strings_without_sending_them(hostile_store):
    out = run_in_pty([sys.executable, "-c",
                      "import sys; from mlcost_tui.cli import main; sys.exit(main())",
                      "--replay", str(hostile_store)], quit_when=b"CLEARED")
    assert_no_payload_reached(out)
    assert b"\\x1b]0;PWNED-TITLE" in out and b"\\x1b[2JCLEARED" in out, out[-2000:]
    assert b"[bold]MARKUP" in out, "the command line's markup is shown as text"
    assert b"\\x1b]0;HOST-TITLE" in out, "the host name is in the header, visibly"


def test_mlcostd_report_shows_hostile_strings_without_sending_them(hostile_store):
    out = run_in_pty([sys.executable, "-m", "daemon", "report", "--db", str(hostile_store),
                      "--since", "1h"])
    assert_no_payload_reached(out)
    assert b"\x1b" not in out, "the report writes no escape sequence at all"
    assert b"\\x1b]0;HOST-TITLE" in out and b"\\x1b]0;PWNED-TITLE" in out, out[-2000:]
