"""A command that holds no GPU is never in a "sync": the repeated-line rule (a host sync such as
.item() leaves no Python frame, so its line repeats while the host waits) named a CPU-only
`python -c` that only sleeps `sync 83%` (probe 150 F7): a sync waits on a GPU's work, and it
had none. A real `mlcostd profile` of such a command on the simulated host."""

from __future__ import annotations

import sys

from test_profile import document, profile

from daemon.wire import IDLE, SYNC

SLEEPER = "import time\nfor _ in range(4):\n    time.sleep(1)\nprint('cpu only')\n"


def test_a_command_that_holds_no_gpu_and_sleeps_is_idle_not_in_a_sync(tmp_path):
    out = tmp_path / "nogpu"
    result = profile(out, "--simulate", "--", sys.executable, "-c", SLEEPER)
    assert result.returncode == 0, result.stderr
    facts = document(out)["profile"]
    assert facts["gpus_used"] == [], facts["gpus_used"]
    assert facts["stack_samples"] > 0, result.stderr  # its stacks were read: the rule ran
    balance = facts["phase_balance"]
    assert SYNC not in balance, balance
    assert balance.get(IDLE, 0) > 0.5, balance
