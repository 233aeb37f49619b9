"""Processes a test starts die with the test run, even when pytest itself is killed.

`spawn_options()` goes into subprocess.Popen for anything long-lived a test starts (a daemon, a
server, a browser): the child gets its own process group, which the fixture that started it
kills on exit, and a parent-death signal (prctl PR_SET_PDEATHSIG), which the kernel sends when
pytest dies however it dies: SIGKILL, an OOM kill, a CI timeout. The simulated workloads of a
daemon carry their own parent-death signal (daemon/sim/scenario.py), so killing the daemon takes
them too. tests/faults/test_killed_test_run.py kills a pytest run midway and checks that nothing
it started is left.

The kernel sends the signal when the *thread* that forked the child exits, so start these
processes from the test's own thread, never from a short-lived worker thread.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from daemon.lifetime import die_with_parent


def spawn_options(sig: int = signal.SIGKILL) -> dict[str, Any]:
    """Popen keyword arguments: a new session (its own process group, so `kill_group` reaches
    everything it forks that stays in it) and `sig` when the process that spawns it dies."""
    return {"start_new_session": True, "preexec_fn": die_with_parent(sig)}


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left in a process group started with spawn_options (idempotent)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
