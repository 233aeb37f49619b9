"""The daemon's collector settings (daemon/runtime/memory.py): in force while it runs, and gone
after, so a daemon run inside another program (a test, `mlcostd profile`) leaves no trace."""

from __future__ import annotations

import gc

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

