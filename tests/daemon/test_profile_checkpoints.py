"""The checkpoint advice of `mlcostd profile` on a training script that checkpoints as users
write it (profile_programs/checkpoint_train.py, on the simulated GPU): saved on the loop's
thread, it is told to save asynchronously; saved in a saver thread joined at the end, it is
told nothing of the one wait for its last save (probe 140 F11: it was told to checkpoint
asynchronously, pointing at that join); saved in a saver that is still writing when the next
save is due, it is told that, not to go async."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from test_profile import PROGRAMS, document, profile

from daemon.analysis.phase_balance import checkpoint_starts
from daemon.analysis.rules.phases import SAVER_BEHIND
from daemon.wire import CHECKPOINT, COMPUTE, DATA_WAIT

TRAIN = str(PROGRAMS / "checkpoint_train.py")
STEP_REGEX = r"step (\d+)/"
GO_ASYNC = "checkpoint asynchronously or less often"


def checkpoint_advice(out: Path, *args: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The profile's facts and its blocking_checkpoint recommendations, of the script run with
    `args` (its checkpoints in a folder of the test's own)."""
    folder = out.parent / f"{out.name}-checkpoints"
    folder.mkdir()
    result = profile(out, "--simulate", "--progress", STEP_REGEX, "--", sys.executable, TRAIN,
                     "--dir", str(folder), *args)
    assert result.returncode == 0, result.stderr
    found = document(out)
    return found["profile"], [r for r in found["recommendations"]
                              if r["rule"] == "blocking_checkpoint"]


def test_a_saver_thread_joined_at_the_end_is_not_told_to_checkpoint_asynchronously(tmp_path):
    # its last save, joined before it exits, is a wait the profile sees: 2 s of 12
    facts, advice = checkpoint_advice(tmp_path / "async")
    assert facts["phase_balance"].get(CHECKPOINT, 0) > 0.05, facts["phase_balance"]
    assert advice == []
    # the same script saving on its loop's thread is told to save asynchronously
    facts, advice = checkpoint_advice(tmp_path / "blocking", "--blocking")
    (blocking,) = advice
    assert GO_ASYNC in blocking["summary"] and "checkpoint_train.py:" in blocking["summary"]
    assert "(now every " in blocking["action"]["patch"]  # each of its saves was seen


def test_a_saver_thread_still_writing_at_the_next_save_is_told_so(tmp_path):
    """A save every 5 steps (0.75 s) that takes 2 s: the loop waits for its saver at each
    save. It saves asynchronously already; what it should change is how often."""
    _, advice = checkpoint_advice(tmp_path / "behind", "--save-every", "5", "--steps", "30")
    (behind,) = advice
    assert SAVER_BEHIND in behind["summary"] and GO_ASYNC not in behind["summary"]
    assert "waits here for its saver" in behind["action"]["patch"]


def test_checkpoints_are_told_apart_by_the_training_between_them():
    """One low-utilization window may span a profile's whole run: its checkpoints were one
    (checkpoint_times held the window's start), so a script saving every 3 s had no cadence,
    and a saver joined at each save read as one wait."""
    window = [(100.0, 130.0)]
    run = [(101.0, COMPUTE), (102.0, CHECKPOINT), (102.5, CHECKPOINT), (103.0, COMPUTE),
           (105.0, CHECKPOINT), (105.5, DATA_WAIT), (106.0, CHECKPOINT), (107.0, COMPUTE),
           (108.0, CHECKPOINT)]
    assert checkpoint_starts(run, window) == [102.0, 105.0, 108.0]
    # another window is another checkpoint; a sample in none is not counted
    assert checkpoint_starts([(102.0, CHECKPOINT), (121.0, CHECKPOINT), (140.0, CHECKPOINT)],
                             [(100.0, 110.0), (120.0, 125.0)]) == [102.0, 121.0]
    # one wait at the end, however long
    assert checkpoint_starts([(101.0, COMPUTE), (128.0, CHECKPOINT), (129.0, CHECKPOINT)],
                             window) == [128.0]
