"""A phase decided from /proc alone (no stack: ptrace denied) is marked in the process table's
phase column and explained in the details' phase balance (README "When ptrace is denied")."""

from mlcost_tui.panels.processes import _phase_cell
from mlcost_tui.screens.details import phase_lines


def test_the_phase_column_marks_a_low_confidence_phase():
    assert _phase_cell(("data_wait", False, "low")).plain == "data_wait~"
    assert _phase_cell(("data_wait", False, "high")).plain == "data_wait"
    assert _phase_cell(("data_wait", False, None)).plain == "data_wait"  # an older daemon
    assert _phase_cell((None, False, "low")).plain == "-"


def test_the_details_say_which_phases_came_without_stacks():
    text = phase_lines({
        "idle": {"share": 0.7, "seconds": 70.0, "confidence": "low", "top_stacks": []},
        "compute": {"share": 0.3, "seconds": 30.0, "confidence": "high", "top_stacks": []},
    }).plain
    idle_line = next(line for line in text.splitlines() if line.strip().startswith("idle"))
    compute_line = next(line for line in text.splitlines() if line.strip().startswith("compute"))
    assert "idle~" in idle_line and "low confidence, no stacks" in idle_line
    assert "~" not in compute_line and "no stacks" not in compute_line


def test_a_top_stack_says_how_many_samples_it_has_in_words():
    stack = {"file": "/srv/train.py", "line": 42, "function": "train_step", "frames": []}
    text = phase_lines({"data_wait": {"share": 1.0, "seconds": 60.0, "top_stacks": [
        {**stack, "samples": 1}, {**stack, "line": 43, "samples": 12}, {**stack, "line": 44}]}}
    ).plain
    assert "(1 sample)" in text and "(12 samples)" in text and "(? samples)" in text
    assert "(1 samples)" not in text
