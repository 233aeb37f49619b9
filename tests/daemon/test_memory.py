"""The daemon's collector settings (daemon/runtime/memory.py): in force while it runs, and gone
after, so a daemon run inside another program (a test, `mlcostd profile`) leaves no trace."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from daemon.runtime import memory


def test_the_collector_is_tuned_while_the_daemon_runs_and_as_it_was_after() -> None:
    before = gc.get_threshold()
    with memory.collector_tuned():
        assert gc.get_threshold()[0] >= memory.GC_YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
        memory.freeze_start_up()
        assert gc.get_freeze_count() > 0  # what start-up built is out of the collections
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0  # ... and back in them



def test_tuning_the_allocator_starts_no_process():
    """libc is found among the process's own symbols: ctypes.util.find_library ran
    `/sbin/ldconfig -p` in a child at every daemon start, before any start-up check, so a
    refused start had a child below it (test_startup_errors saw one now and then)."""
    code = ("import subprocess, sys\n"
            "started = []\n"
            "real = subprocess.Popen.__init__\n"
            "def record(self, args, *a, **k):\n"
            "    started.append(args)\n"
            "    real(self, args, *a, **k)\n"
            "subprocess.Popen.__init__ = record\n"
            "from daemon.runtime import memory, snapshots\n"
            "assert memory._LIBC is not None and snapshots._malloc_trim() is not None\n"
            "print(started)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
