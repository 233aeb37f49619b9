"""The release gates of `mlcostd profile` fail closed where the run's cost or GPUs cannot be
known (probe 140 F1): a host with no price, a CI runner without NVML, a command that fell back
to the CPU each read $0 and passed every cost gate (--max-regression at -100%). Real profiles
of the programs in programs/ (gpu_steps.py, cpu_steps.py); and, without a run, the regression
gate on other hardware (F4), the gates' dollars (F11) and what --help says (F5, F11)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from test_profile import document, profile

from daemon.commands import gates
from daemon.commands.gates import GATE_EXIT_STATUS

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parent / "programs"
GPU_STEPS = str(PROGRAMS / "gpu_steps.py")
CPU_STEPS = str(PROGRAMS / "cpu_steps.py")
STEP_REGEX = r"step (\d+)/"

NO_PRICE_SCENARIO = """\
description = "an on-prem box: an instance type the catalog has no price for"
[instance]
provider = "none"
type = "custom"
region = "dc1"
lifecycle = "on-demand"
[gpu]
model = "NVIDIA A10G"
count = 1
"""


def baseline(path: Path, *, cost_per_step: float = 0.0000303, price: float = 1.006,
             gpus: int = 1, instance_type: str | None = "g5.xlarge") -> Path:
    """A profile.json as `mlcostd profile` writes it, of 10 steps on `gpus` A10Gs."""
    path.write_text(json.dumps({
        "burn": {"price_per_gpu": price},
        "host": {"instance": {"type": instance_type}},
        "gpus": [{"index": i, "name": "NVIDIA A10G"} for i in range(gpus)],
        "profile": {"steps": 10, "cost_per_step": cost_per_step,
                    "gpus_used": list(range(gpus))}}))
    return path


def gates_of(out: Path) -> dict[str, dict[str, Any]]:
    return {g["gate"]: g for g in document(out)["profile"]["gates"]}


def test_a_host_with_no_price_fails_every_cost_gate_closed(tmp_path):
    """An off-catalog instance has no price: its host price was 0.0, not unknown, so the run
    cost $0.0000 and --max-cost, --max-cost-per-1k-steps and --max-regression (-100%) all
    passed, exit 0. The cost is unknown now, and each cost gate fails saying why."""
    scenario = tmp_path / "noprice.toml"
    scenario.write_text(NO_PRICE_SCENARIO)
    out = tmp_path / "noprice"
    result = profile(out, "--simulate", str(scenario), "--progress", STEP_REGEX,
                     "--max-cost", "1", "--max-cost-per-1k-steps", "1", "--max-regression",
                     "10%", "--baseline", str(baseline(tmp_path / "old.json")), "--",
                     sys.executable, GPU_STEPS)
    assert result.returncode == GATE_EXIT_STATUS, result.stderr
    facts = document(out)["profile"]
    assert facts["gpus_used"] == [0] and facts["steps"] == 10
    assert facts["cost"] is None and facts["cost_per_1k_steps"] is None
    assert facts["host_cost"] is None and facts["instance_type"] == "custom"
    assert facts["cost_unknown"] == ("no price for this host: set [instance].price_per_hour "
                                     "(none/custom is not in the catalog)")
    found = gates_of(out)
    assert set(found) == {"max-cost", "max-cost-per-1k-steps", "max-regression"}
    for gate in found.values():
        assert not gate["passed"] and gate["value"] is None, gate
        assert gate["message"] == (f"gate {gate['flag']} {gate['limit_text']}: cannot be "
                                   f"checked, {facts['cost_unknown']}")
        assert f"  FAILED {gate['message']}\n" in result.stderr
    assert "mlcostd profile: FAILED: 3 of 3 gates crossed\n" in result.stderr
    assert "  cost: unknown (no price for this host: " in result.stderr
    assert "Cost: unknown (no price for this host: " in (out / "summary.md").read_text()


def nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(nvml_works(), reason="NVML works here: this is the CI runner without it")
def test_without_nvml_the_gpu_and_cost_gates_fail_saying_nvml_is_unavailable(tmp_path):
    """A CI runner without the NVIDIA driver (no --simulate): NVML could not be read, and the
    profile said only "the command used no GPU"; its cost, $0, passed --max-cost and
    --max-regression (-100%). Now the verdict, the warnings and summary.md say NVML was
    unavailable, and the GPU and cost gates fail saying so."""
    out = tmp_path / "nonvml"
    result = profile(out, "--progress", STEP_REGEX, "--max-cost", "1",
                     "--max-regression", "10%", "--baseline",
                     str(baseline(tmp_path / "old.json")), "--min-utilization", "10%", "--",
                     sys.executable, CPU_STEPS)
    assert result.returncode == GATE_EXIT_STATUS, result.stderr
    facts = document(out)["profile"]
    assert facts["nvml_unavailable"] and facts["cost"] is None
    assert [w["code"] for w in facts["warnings"]].count("no_nvml") == 1
    assert "no_gpu" not in [w["code"] for w in facts["warnings"]]
    found = gates_of(out)
    assert set(found) == {"max-cost", "max-regression", "min-utilization"}
    for gate in found.values():
        assert not gate["passed"], gate
        assert gate["message"].endswith(
            ": cannot be checked, NVML unavailable: no GPU was read (see the warning)"), gate
    assert ("mlcostd profile: FAILED: 3 of 3 gates crossed (NVML unavailable: no GPU was "
            "read)\n") in result.stderr
    assert "the command used no GPU" not in result.stderr
    summary = (out / "summary.md").read_text()
    assert "**FAILED: 3 of 3 gates crossed (NVML unavailable: no GPU was read)**" in summary
    assert "- NVML unavailable (" in summary


@pytest.mark.skipif(nvml_works(), reason="NVML works here: this is the CI runner without it")
def test_without_nvml_a_profile_says_once_in_its_own_words_what_it_cannot_read(tmp_path):
    """Without NVML (no --simulate) the profile logged the daemon's line, "NVML unavailable:
    ...; retrying in 1 s", and went on: a profile records one run and retries nothing. It
    says once, before the command's run, that no GPU will be read and what that leaves
    unknown."""
    result = profile(tmp_path / "out", "--", sys.executable, "-c", "print('ran')")
    assert result.returncode == 0, result.stderr  # (no gate: the run itself did not fail)
    assert result.stdout == "ran\n"
    assert "retrying" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "no GPU will be read" in line]
    assert len(said) == 1, result.stderr
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d mlcostd profile WARNING NVML unavailable \(.+\): no GPU will be read "
        r"in this profile; the run's cost and its GPUs are unknown, and gates on them fail",
        said[0]), said[0]
    assert result.stderr.index(said[0]) < result.stderr.index("mlcostd profile: done")


def test_a_command_that_fell_back_to_the_cpu_fails_the_cost_gates(tmp_path):
    """NVML read and the host priced, but the command touched no GPU (a PR that silently fell
    back to the CPU): by the cost model, which charges a GPU's share while one is held, it
    cost $0, so --max-cost passed and --max-regression read -100% and passed."""
    out = tmp_path / "cpu"
    result = profile(out, "--simulate", "--progress", STEP_REGEX, "--max-cost", "0.005",
                     "--max-cost-per-1k-steps", "1", "--max-regression", "10%", "--baseline",
                     str(baseline(tmp_path / "old.json")), "--", sys.executable, CPU_STEPS)
    assert result.returncode == GATE_EXIT_STATUS, result.stderr
    facts = document(out)["profile"]
    assert facts["gpus_used"] == [] and facts["cost"] == 0 and facts["cost_unknown"] is None
    found = gates_of(out)
    assert not any(g["passed"] for g in found.values()), found
    for name in ("max-cost", "max-cost-per-1k-steps"):
        assert found[name]["message"].endswith(
            ": cannot be checked, the command used no GPU (the cost model charges a GPU's share "
            "while one is held: a run on the CPU reads $0)"), found[name]
    assert found["max-regression"]["message"].startswith(
        "gate --max-regression 10%: cannot be checked, this run used no GPU; the baseline "
        "used 1 (")


def test_a_regression_gate_on_a_figure_of_0_cannot_be_checked():
    """-100% passed any limit: a cost of $0 is no measure of the code."""
    zero = gates.max_regression(10, {"steps": 10, "cost_per_step": 0.0},
                                {"steps": 10, "cost_per_step": 0.0000303}, "old.json")
    assert not zero.passed and zero.value is None
    assert zero.message.startswith("gate --max-regression 10%: cannot be checked, this run's "
                                   "cost per step is $0 (")
    old_zero = gates.max_regression(10, {"steps": 10, "cost_per_step": 0.00003},
                                    {"steps": 10, "cost_per_step": 0.0}, "old.json")
    assert not old_zero.passed and "the baseline's cost per step is $0" in old_zero.message
    unknown = gates.max_regression(10, {"steps": 10, "cost_per_step": None},
                                   {"steps": 10, "cost_per_step": 0.00003}, "old.json",
                                   "no price for this host")
    assert not unknown.passed and unknown.message == (
        "gate --max-regression 10%: cannot be checked, no price for this host")


def test_a_baseline_on_another_instance_type_is_other_hardware_not_a_price_move(tmp_path):
    """A baseline on a g5.xlarge (1 A10G, $1.006/GPU-h) against a run on a g5.12xlarge (4
    A10Gs, $1.418/GPU-h): the same GPU model, so the baseline was re-priced as if the catalog
    price had moved, and the instance's premium written off. Only the same models, as many,
    on the same instance type are re-priced; else the costs are compared as they were, and
    the gate line names both sides' GPUs."""
    old = gates.read_baseline(str(baseline(tmp_path / "old.json")))
    assert old["instance_type"] == "g5.xlarge"  # (read from its report: an older profile)
    new = gates.read_baseline(str(baseline(tmp_path / "new.json", cost_per_step=0.0001707,
                                           price=1.418, gpus=4, instance_type="g5.12xlarge")))
    gate = gates.max_regression(10, new, old, "old.json")
    assert gate.value == pytest.approx(100 * (0.0001707 / 0.0000303 - 1))
    assert gate.message == (
        "gate --max-regression 10%: cost per 1k steps was $0.1707 against the baseline's "
        "$0.0303 (+463%, 453 points over); the baseline ran at $1.0060/GPU-h, this run at "
        "$1.4180/GPU-h, on 4 x NVIDIA A10G (g5.12xlarge) against 1 x NVIDIA A10G (g5.xlarge): "
        "the change is the hardware's and its price's as well as the code's; the gate has no "
        "noise allowance: `mlcostd compare` of the two profiles says whether the change is "
        "beyond the runs' noise")
    # as many GPUs of the same model on another instance type: not re-priced either
    one = dict(new, gpus_used=[0], cost_per_step=0.0000400)
    assert "not counted" not in gates.max_regression(10, one, old, "old.json").message
    assert gates.max_regression(10, one, old, "old.json").value == pytest.approx(
        100 * (0.00004 / 0.0000303 - 1))
    # the same instance type and GPUs at a new price: re-priced, as before
    cut = dict(old, price_per_gpu_hour=0.503, cost_per_step=0.0000303 * 1.2 / 2)
    repriced = gates.max_regression(10, cut, old, "old.json")
    assert repriced.value == pytest.approx(20.0)
    assert repriced.message.endswith("the price's change is not counted; " +
                                     gates.NO_NOISE_ALLOWANCE)
    # other hardware at the same price per GPU-hour is said too
    same_price = dict(new, price_per_gpu_hour=1.006, cost_per_step=0.0000303)
    assert gates.max_regression(10, same_price, old, "old.json").message.endswith(
        "(+0%); on 4 x NVIDIA A10G (g5.12xlarge) against 1 x NVIDIA A10G (g5.xlarge): the "
        "change is the hardware's as well as the code's")


def test_a_baseline_instance_type_of_the_wrong_type_is_refused(tmp_path):
    path = baseline(tmp_path / "old.json")
    raw = json.loads(path.read_text())
    raw["profile"]["instance_type"] = 5
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="profile.instance_type is 5, not a string"):
        gates.read_baseline(str(path))


def test_dollar_gates_show_enough_digits_to_tell_the_figure_from_the_limit():
    """--max-cost 0.000001 read `gate --max-cost $0.0000: the run cost $0.0000 ($0.0000
    over)`: a limit and a figure that look equal, and a failure of nothing."""
    over = gates.max_cost(0.000001, 0.0000012)
    assert not over.passed and over.message == (
        "gate --max-cost $0.000001: the run cost $0.0000012 ($0.0000002 over)")
    assert over.limit_text == "$0.000001"
    under = gates.max_cost_per_1k_steps(0.0301, 0.03009, 10)
    assert under.passed and under.message == (
        "gate --max-cost-per-1k-steps $0.0301: 1k steps cost $0.03009")
    # as before where four decimals tell them apart
    assert gates.max_cost(0.10, 0.23).message == (
        "gate --max-cost $0.1000: the run cost $0.2300 ($0.1300 over)")
    from daemon.commands.profile import summary_markdown

    doc = {"profile": {"gates": [over.as_dict()], "exit_status": 0, "command": "x",
                       "stopped_after_duration": False, "phase_balance": {}, "cost": 0.0000012,
                       "duration_s": 40.0, "steps": 0, "warnings": [], "left_running": 0,
                       "gpu_utilization": None, "workload_kind": None, "cost_per_hour": None,
                       "unit_costs": []}, "host": {}}
    assert "| --max-cost | $0.000001 | $0.0000012 | FAILED |" in summary_markdown(doc)


def test_a_progress_pattern_that_is_no_regex_is_shown_as_typed(tmp_path, capsys):
    """--progress 'step (\\d+' was shown as 'step (\\\\d+' (its repr doubles each
    backslash), not as the user typed it."""
    from daemon.commands.cli import main

    status = main(["profile", "--out", str(tmp_path / "x"), "--progress", "step (\\d+\x1b",
                   "--", sys.executable, "-c", "pass"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("mlcostd profile: --progress 'step (\\d+\\x1b' is not a regular "
                          "expression: missing ), unterminated subpattern"), err
    assert not (tmp_path / "x").exists()


def test_the_help_and_readme_say_what_the_regression_gate_leaves_out(capsys):
    """A 20 s start-up before the first GPU use passed --max-regression at +0% (the cost model
    charges a GPU's share only while one is held): --help and the README say so, and name
    host_cost, the figure that holds it."""
    from daemon.commands.cli import main

    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    # (argparse breaks a line after a word's hyphen: "start-" then "up")
    help_text = " ".join(capsys.readouterr().out.split()).replace("start- up", "start-up")
    assert ("--max-regression PCT fail when the cost per step (the total cost where neither "
            "run counted steps) is up by more than PCT on --baseline's; the cost model charges "
            "a GPU's share only while a GPU is held: start-up before the first GPU use is not "
            "in the cost per step (profile.json's host_cost is the host's price over the whole "
            "run); a plain threshold, no noise allowance (mlcostd compare says whether a change "
            "is beyond the runs' noise)") in help_text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "start-up before the first GPU use is not in the cost per step" in readme
    assert "no price for this host" in readme and "NVML unavailable" in readme


# A fixed workload on the simulated GPU, ten steps of KERNEL_S seconds each, printing no step
# lines: what a CI job that runs the same smoke test each time looks like without --progress.
FIXED_WORK = ("import sys\nfrom daemon.sim.device import Device\nwith Device(0) as gpu:\n"
              "    gpu.alloc(2 << 30)\n    for _ in range(10):\n"
              "        gpu.kernel(float(sys.argv[1]), sm=0.8)\n")
SAME_WORK = ("no steps counted: taken as the same work both runs; add --progress for cost per "
             "step")
NO_NOISE = ("the gate has no noise allowance: `mlcostd compare` of the two profiles says "
            "whether the change is beyond the runs' noise")


def test_without_steps_the_regression_gate_compares_the_runs_total_cost(tmp_path):
    """Probe 150 F1: without --progress the gate compared the cost per hour, which on a GPU
    the command holds alone is the GPU's price whatever the code does: a program 4x slower
    passed at +0%. The same fixed work, each kernel 3x longer, now fails on its total cost,
    and the line says what it took as given."""
    old, new = tmp_path / "old", tmp_path / "new"
    first = profile(old, "--simulate", "--", sys.executable, "-c", FIXED_WORK, "0.15")
    assert first.returncode == 0, first.stderr
    result = profile(new, "--simulate", "--max-regression", "10%", "--baseline", str(old),
                     "--", sys.executable, "-c", FIXED_WORK, "0.45")
    assert result.returncode == GATE_EXIT_STATUS, result.stderr
    before, after = document(old)["profile"], document(new)["profile"]
    assert before["steps"] == after["steps"] == 0
    assert after["cost"] > 1.5 * before["cost"] > 0  # (per hour, both are the GPU's price)
    (gate,) = after["gates"]
    assert not gate["passed"] and gate["value"] == pytest.approx(
        100 * (after["cost"] / before["cost"] - 1), abs=0.01)
    assert re.fullmatch(
        r"gate --max-regression 10%: total cost was \$0\.\d{4} against the baseline's "
        rf"\$0\.\d{{4}} \(\+\d+%, \d+ points over\); {re.escape(SAME_WORK)}(; the baseline "
        r"is not representative: [^;]+)?; " + re.escape(NO_NOISE), gate["message"]), gate["message"]
    assert f"  FAILED {gate['message']}\n" in result.stderr


def test_a_regression_gate_without_steps_on_a_run_cut_by_duration_cannot_be_checked():
    """A run stopped by --duration has a fixed length: its total cost is price x time (and
    its cost per hour the GPU's price) however slow the code. Where --progress was given
    but counted no steps (refused up front without it), the gate fails closed, and says so;
    so does a baseline cut so."""
    done = {"steps": 0, "cost": 0.0042, "gpus_used": [0], "stopped_after_duration": False}
    cut = dict(done, cost=0.0043, stopped_after_duration=True)
    for new, old, who in ((cut, done, "this run was"), (done, cut, "the baseline was"),
                          (cut, cut, "this run and the baseline were")):
        gate = gates.max_regression(10, new, old, "old")
        assert not gate.passed and gate.value is None
        assert gate.message == (
            f"gate --max-regression 10%: cannot be checked, no steps were counted and {who} "
            "stopped by --duration: a run cut by --duration has a fixed length, so its total "
            "cost is the price times that length however slow the code is (and its cost per "
            "hour the GPU's price); count steps with --progress REGEX"), gate.message
    # with steps counted, a cut run is compared per step as before
    assert gates.max_regression(10, dict(cut, steps=100, cost_per_step=0.00004),
                                dict(done, steps=90, cost_per_step=0.00004), "old").passed
    # a run the command ended before --duration's time: its total cost, as any run's
    assert gates.max_regression(10, done, done, "old").message.endswith(SAME_WORK)


def test_a_regression_gate_between_a_run_with_steps_and_one_without_fails_saying_so():
    """Cost per step against a total cost is no measure of a regression: it fails closed
    and says which side counted what."""
    with_steps = {"steps": 300, "cost": 0.0042, "cost_per_step": 0.000014, "gpus_used": [0]}
    without = {"steps": 0, "cost": 0.0044, "gpus_used": [0]}
    gate = gates.max_regression(10, without, with_steps, "base/\x1b[2J")
    assert not gate.passed and gate.message == (
        "gate --max-regression 10%: cannot be checked, this run counted no steps (total cost) "
        "and the baseline (base/\\x1b[2J) counted 300 steps (cost per step): not the same "
        "measure; count steps in both (--progress) or in neither")
    gate = gates.max_regression(10, dict(with_steps, steps=1), without, "old")
    assert "this run counted 1 step (cost per step) and the baseline (old) counted no steps " \
           "(total cost)" in gate.message
    # a figure a baseline's gate reads is checked when it is read, the total cost too
    with pytest.raises(ValueError, match="profile.cost is 'x', not a number"):
        gates._check_baseline("b.json", {"cost": "x"})


def test_max_regression_with_duration_and_no_progress_is_refused_before_the_run(tmp_path,
                                                                                 capsys):
    """A run cut by --duration without steps has only price x time to compare: the gate
    could never fail. Refused before the run (exit 2), as --max-cost-per-1k-steps is without
    --progress, saying why and naming --progress."""
    from daemon.commands.cli import main

    old = baseline(tmp_path / "old.json")
    marker = tmp_path / "ran"
    status = main(["profile", "--out", str(tmp_path / "x"), "--duration", "5m",
                   "--max-regression", "10%", "--baseline", str(old), "--", sys.executable,
                   "-c", f"open({str(marker)!r}, 'w')"])
    assert status == 2
    err = capsys.readouterr().err
    assert err == (
        "mlcostd profile: --max-regression with --duration needs --progress REGEX to count "
        "steps: a run cut by --duration has a fixed length, so its total cost is the price "
        "times that length however slow the code is (and its cost per hour the GPU's price): "
        "the gate could not see slower code; count steps in the command's output, e.g. "
        "--progress 'step (\\d+)'\n"), err
    assert not marker.exists() and not (tmp_path / "x").exists()


def test_the_data_wait_gate_counts_the_loops_own_input_preparation():
    """Probe 150 F3: --max-data-wait counted the data_wait phase only, so a loop decoding in
    its main thread (host_preprocess 78%, its GPU idle until the next batch exists) passed
    at "data_wait was 0%". It counts the input-bound time, data_wait and host_preprocess,
    and says the split; an idle wait (a sleep in the loader) is not counted."""
    from daemon.commands.profile import check_gates

    decoding = {"host_preprocess": 0.7826, "compute": 0.2065, "unknown": 0.0109}
    gate = gates.max_data_wait(20, decoding, samples=92)
    assert not gate.passed and gate.value == pytest.approx(78.26)
    assert gate.message == ("gate --max-data-wait 20%: input wait was 78% (data_wait 0%, "
                            "host_preprocess 78%; 58 points over)")
    both = gates.max_data_wait(50, {"data_wait": 0.30, "host_preprocess": 0.25,
                                    "compute": 0.45}, samples=60)
    assert not both.passed and both.value == pytest.approx(55.0)
    assert both.message == ("gate --max-data-wait 50%: input wait was 55% (data_wait 30%, "
                            "host_preprocess 25%; 5 points over)")
    # a loader that sleeps reads idle ("sleeping or waiting: `time.sleep(0.15)` with the GPU
    # idle"): not input the gate sees; --min-utilization does
    sleeping = gates.max_data_wait(20, {"idle": 0.6874, "compute": 0.3126}, samples=80)
    assert sleeping.passed and sleeping.message == (
        "gate --max-data-wait 20%: input wait was 0% (data_wait 0%, host_preprocess 0%)")
    # still fails closed on few samples, whichever phase the share is in
    few = gates.max_data_wait(90, decoding, samples=15)
    assert not few.passed and few.message.startswith(
        "gate --max-data-wait 90%: cannot be checked, input wait was 78% (data_wait 0%, "
        "host_preprocess 78%) on only 15 stack samples (under 20)")
    # and the profile hands the gate the whole balance (it handed data_wait's share alone)
    facts = {"nvml_unavailable": None, "cost_unknown": None, "gpus_used": [0],
             "phase_balance": decoding, "duration_s": 46.1, "stack_samples": 92}
    (checked,) = check_gates({"max_data_wait": 20.0}, facts, None, None)
    assert checked == gate
    (none,) = check_gates({"max_data_wait": 20.0}, dict(facts, phase_balance={}), None, None)
    assert not none.passed and "no phase balance was recorded" in none.message


def test_the_help_and_readme_say_what_the_input_and_regression_gates_count(capsys):
    """--max-data-wait's help said "the share of time the GPU processes waited for input"
    where it counted the data_wait phase alone (F3); neither said that --max-regression is a
    plain threshold while `mlcostd compare` weighs the runs' noise, so a red gate that
    compare calls within noise went unexplained (F6); and the help said "per hour when no
    steps are counted" (F1)."""
    from daemon.commands.cli import main

    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for said in ("the share of the GPU processes' time their GPU waited for input: data_wait "
                 "(reading it) plus host_preprocess (preparing it in the loop), as their stack "
                 "samples read; an idle wait (a sleep or poll in the loader reads idle) is not "
                 "counted: the phases line shows it, and --min-utilization gates it",
                 "where neither counted steps, the run's total cost (taken as the same work "
                 "both runs; refused with --duration and no --progress",
                 "A plain threshold, without a noise allowance: `mlcostd compare OLD OUT` says "
                 "whether a change is beyond the runs' noise"):
        assert said in help_text, said
    assert "per hour when no steps" not in help_text
    readme = " ".join((ROOT / "README.md").read_text().split())
    for said in ("`data_wait` (reading input: storage, a pipe, a DataLoader's workers) plus "
                 "`host_preprocess` (preparing it in the loop",
                 "A wait that shows no input is not counted: a loader that sleeps or polls",
                 "Where neither run counted steps, the run's total `cost` is compared",
                 "`--max-regression` with `--duration` and no `--progress` is refused before "
                 "the run (exit 2",
                 "The limit is a plain threshold, with no allowance for the runs' noise",
                 gates.NO_NOISE_ALLOWANCE, gates.SAME_WORK):
        assert said in readme, said
    assert "per hour when neither run counted steps" not in readme
