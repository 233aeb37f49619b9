"""Signals a daemon meets from its surroundings, under a real mlcostd (the fault suite)."""

from __future__ import annotations

import signal

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
