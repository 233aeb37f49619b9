"""Signals a daemon meets from its surroundings, under a real mlcostd (the fault suite)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys

import pytest
from simhost import poll


@pytest.mark.fault("SIGHUP", "a hangup sent twice while recording (logrotate, a reload asked)")
def test_a_sighup_neither_stops_nor_reloads_and_says_so(mlcostd) -> None:
    """SIGHUP killed the daemon outright (exit 129): no flush, no last round's spend, the lock
    and socket left behind, as a SIGKILL (probe 115 F7)."""
    daemon = mlcostd("idle-host", interval=0.2)
    before = daemon.wait_for_ticks(3)[-1]
    for said in (1, 2):  # (one at a time: two signals before the handler runs are one)
        daemon.proc.send_signal(signal.SIGHUP)
        poll(lambda said=said: daemon.log().count("SIGHUP: mlcostd does not reload") == said,
             30, f"{said} line(s) saying what a SIGHUP does", explain=daemon.log_tail)
    assert daemon.proc.poll() is None, daemon.log_tail()
    daemon.wait_for_ticks(len(daemon.ticks()) + 3)  # recording goes on
    assert daemon.healthy()
    assert daemon.stop() == 0, daemon.log_tail()
    assert daemon.ticks()[-1] > before
    assert "everything recorded is in" in daemon.log(), daemon.log_tail()


@pytest.mark.fault("SIGHUP from a terminal", "the terminal `mlcostd run` logs to hangs up")
def test_a_terminal_that_hangs_up_stops_it_as_sigterm_does(tmp_path) -> None:
    """Run in a terminal that closes (an ssh session ends), SIGHUP is a hang-up: it stops,
    flushed, as for SIGTERM, rather than record on with nobody to read it."""
    main, child = pty.openpty()
    socket_path = tmp_path / "api" / "mlcostd.sock"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "run", "--simulate", "idle-host", "--interval", "0.2",
         "--db", str(tmp_path / "mlcost.db"), "--socket", str(socket_path)],
        stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=env, start_new_session=True)
    os.close(child)
    said = bytearray()

    def read_some() -> str:
        while select.select([main], [], [], 0)[0]:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # (the other side closed: everything was read)
                break
            if not chunk:
                break
            said.extend(chunk)
        return said.decode(errors="replace")

    try:
        poll(lambda: "recording into" in read_some(), 60, "the daemon recording",
             explain=read_some)
        proc.send_signal(signal.SIGHUP)
        poll(lambda: proc.poll() is not None, 30, "the daemon to stop", explain=read_some)
        assert proc.returncode == 0, read_some()
        text = read_some()
        assert "its terminal hung up; stopping as for SIGTERM" in text, text
        assert "everything recorded is in" in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)
