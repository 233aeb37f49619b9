"""The release gates of `mlcostd profile`: limits on what a profile measured, each checked to a
passed or failed Gate with a message that says by how much, and written as JUnit test cases.

A gate that cannot be checked (no steps counted for a per-step limit, no GPU used for a
utilization floor, a phase share on too few stack samples; a cost where the host has no price,
NVML is unavailable, or the command used no GPU, which the cost model reads as $0) fails, and
its message says why: a CI gate fails closed.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.analysis.compare import (
    MIN_PHASE_SAMPLES,
    gpu_models,
    price_moved,
    price_per_gpu_hour,
)
from daemon.analysis.compare import same_hardware as sides_on_same_hardware
from daemon.sources.safe_text import lines, one_line
from daemon.wire import DATA_WAIT, HOST_PREPROCESS, money
from pricing.http import loads_finite
from pricing.small_file import SmallFileError, read_small_file

# A profile.json or report document read back (--baseline, `mlcostd compare`): the largest is
# a few MB.
MAX_PROFILE_BYTES = 64 << 20

GATE_EXIT_STATUS = 86  # outside 0-2, sysexits' 64-78, the shell's 126/127 and 128+signal
# A profile with fewer stack samples (MIN_PHASE_SAMPLES, the count compare judges phase shares
# from), or of a shorter run, may not stand for the workload (the profile's warnings
# few_stack_samples and too_short); a phase share on fewer samples cannot pass or fail a gate.
MIN_RUN_S = 30.0


@dataclass(frozen=True)
class Gate:
    flag: str  # "--max-data-wait"
    limit_text: str  # as the user wrote it, normalized: "20%", "$0.50"
    passed: bool
    message: str  # "gate --min-utilization 60%: GPU utilization was 14% (46 points under)"
    value: float | None = None
    limit: float | None = None

    @property
    def name(self) -> str:
        return f"{self.flag.lstrip('-')} {self.limit_text}"

    def as_dict(self) -> dict[str, Any]:
        return {"gate": self.flag.lstrip("-"), "flag": self.flag, "limit": self.limit,
                "limit_text": self.limit_text, "value": self.value, "passed": self.passed,
                "message": self.message}


def parse_percent(text: str) -> float:
    """'20%' or '20' -> 20.0; ValueError names the value."""
    value = _number(text.strip().removesuffix("%"), text)
    if not 0 <= value <= 100:
        raise ValueError(f"{text!r} is not a percentage from 0 to 100")
    return value


def fraction_warning(flag: str, text: str, value: float) -> str | None:
    """A percentage option given as a fraction (`--min-utilization 0.6`: a value above 0 and
    under 1 without a % sign) is read as a percentage, 0.6%, a gate that (nearly) always
    passes: the warning that says so, else None."""
    if "%" in text or not 0 < value < 1:
        return None
    return (f"{flag} {one_line(text.strip())[:40]} is read as {value:g}%; did you mean "
            f"{100 * value:g}%? (write {value:g}% to keep it without this warning)")


def parse_regression(text: str) -> float:
    """'10%' or '10' -> 10.0 (any non-negative percentage: 150% is a limit too)."""
    value = _number(text.strip().removesuffix("%"), text)
    if value < 0:
        raise ValueError(f"{text!r} must be a percentage of at least 0")
    return value


def parse_dollars(text: str) -> float:
    """'0.50' or '$0.50' -> 0.5; ValueError names the value."""
    value = _number(text.strip().removeprefix("$"), text)
    if value < 0:
        raise ValueError(f"{text!r} must be a number of dollars of at least 0")
    return value


def _number(text: str, shown: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{shown!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{shown!r} is not a finite number")
    return value


def decimals_beside(value: float, limit: float) -> int:
    """The fewest decimals (0 to 3) that show `value` on the side of `limit` it is on, and
    apart from it: 59.6 against 60 is "59.6" (0.4 under), not "60" (0 under); 29.96 s against
    30 s is "29.96"."""
    def side(number: float) -> int:
        return (number > limit) - (number < limit)

    for decimals in range(3):
        if side(round(value, decimals)) == side(value) and (
                value == limit or round(abs(value - limit), decimals) > 0):
            return decimals
    return 3


def beside(value: float, limit: float) -> str:
    """`value` with `decimals_beside` decimals."""
    return f"{value:.{decimals_beside(value, limit)}f}"


def points(value: float, limit: float) -> str:
    """How far `value` is from `limit`, in points of a percentage: "1 point", "0.4 points"."""
    gap = f"{abs(value - limit):.{decimals_beside(value, limit)}f}"
    return f"{gap} {'point' if gap == '1' else 'points'}"


# The most decimals a dollar figure of a gate is shown with: $0.0000000001 is a tenth of a
# nanodollar, below any limit a run's cost is held to.
MAX_DOLLAR_DECIMALS = 10


def dollars(value: float, limit: float | None = None) -> str:
    """A gate's dollars: as every profile figure (`money(small=True)`: four decimals below $1),
    with more where that would not show `value` apart from `limit` and on its side of it
    ($0.000001 against $0.0000012, not $0.0000 against $0.0000), or, for a limit itself
    (`limit` None), where it would not show the limit as given."""
    base = 4 if abs(value) < 1 else 2
    for decimals in range(base, MAX_DOLLAR_DECIMALS + 1):
        rounded = round(value, decimals)
        if limit is None:
            if abs(rounded - value) <= 1e-9 * abs(value):
                break
        elif ((rounded > limit) - (rounded < limit)) == ((value > limit) - (value < limit)) \
                and (value == limit or round(abs(value - limit), decimals) > 0):
            break
    else:
        decimals = MAX_DOLLAR_DECIMALS
    if decimals == base:
        return money(value, small=True)
    return f"-${abs(value):,.{decimals}f}" if value < 0 else f"${value:,.{decimals}f}"


def cannot_check(flag: str, shown: str, limit: float, why: str) -> Gate:
    """A gate that cannot be checked: failed (a CI gate fails closed), saying why."""
    return Gate(flag, shown, False, f"gate {flag} {shown}: cannot be checked, {why}", None,
                limit)


def max_cost(limit: float, cost: float | None, unchecked: str | None = None) -> Gate:
    """The run's cost against `limit`. `unchecked`: why its cost cannot be checked (no price
    for this host, NVML unavailable, no GPU used: by the cost model such a run reads $0)."""
    shown = dollars(limit)
    head = f"gate --max-cost {shown}"
    if unchecked is not None or cost is None:
        return cannot_check("--max-cost", shown, limit,
                            unchecked or "the run's cost is unknown")
    if cost > limit:
        return Gate("--max-cost", shown, False,
                    f"{head}: the run cost {dollars(cost, limit)} "
                    f"({dollars(cost - limit, 0.0)} over)", cost, limit)
    return Gate("--max-cost", shown, True,
                f"{head}: the run cost {dollars(cost, limit)}", cost, limit)


def max_cost_per_1k_steps(limit: float, per_1k: float | None, steps: int,
                          progress: str | None = None, progress_lines: int | None = None,
                          unchecked: str | None = None) -> Gate:
    """1k steps' cost against `limit`. Without steps it cannot be checked: `progress` (the
    --progress pattern, as typed) and `progress_lines` (the lines it matched) say why;
    `unchecked` says why the cost cannot be (as max_cost's)."""
    flag = "--max-cost-per-1k-steps"
    shown = dollars(limit)
    head = f"gate {flag} {shown}"
    if per_1k is None or unchecked is not None:
        if unchecked is not None:
            why = unchecked
        elif steps:
            why = "the run's cost is unknown"
        elif progress is None:
            why = "no steps were counted: pass --progress REGEX matching the command's step lines"
        elif not progress_lines:
            why = (f"no steps were counted: --progress '{one_line(progress)[:200]}' matched no "
                   "line of the command's output; check it against what the command prints")
        else:
            why = (f"no steps were counted: --progress '{one_line(progress)[:200]}' matched "
                   f"{progress_lines} line{'s' if progress_lines != 1 else ''} but its group "
                   "was never a step number above 0")
        return cannot_check(flag, shown, limit, why)
    if per_1k > limit:
        return Gate(flag, shown, False,
                    f"{head}: 1k steps cost {dollars(per_1k, limit)} "
                    f"({dollars(per_1k - limit, 0.0)} over)", per_1k, limit)
    return Gate(flag, shown, True, f"{head}: 1k steps cost {dollars(per_1k, limit)}", per_1k,
                limit)


# The phases in which a GPU process's GPU waits for its next input (--max-data-wait): read
# (data_wait: storage, a pipe, a DataLoader's workers) or prepared by its own loop
# (host_preprocess: decoding, tokenizing, augmenting in the main thread). A wait that shows
# no input (a time.sleep, a poll: `idle`, "sleeping or waiting: ... with the GPU idle") is
# not counted: the phases line shows it, and --min-utilization gates it.
INPUT_PHASES = (DATA_WAIT, HOST_PREPROCESS)


def input_wait(balance: dict[str, float] | None) -> tuple[float, dict[str, float]] | None:
    """The input-bound share of a phase balance (INPUT_PHASES together) and each phase's
    share of it, as fractions of the GPU processes' time; None without a balance."""
    if not balance:
        return None
    parts = {phase: float(balance.get(phase) or 0.0) for phase in INPUT_PHASES}
    return sum(parts.values()), parts


def max_data_wait(limit: float, balance: dict[str, float] | None, samples: int | None = None,
                  short_run_s: float | None = None) -> Gate:
    """The input-bound share of the GPU processes' time (`balance`, their phase balance:
    data_wait and host_preprocess together, INPUT_PHASES) against `limit` (%): a loop that
    decodes in its main thread (host_preprocess 78%, data_wait 0%) starves its GPU as much as
    one that waits on storage, and passed when only data_wait was counted (probe 150 F3). The
    line says the split. The share is counted in stack samples (two a second): on fewer than
    MIN_PHASE_SAMPLES it cannot decide a release (four identical 10 s runs of one script, ~15
    samples each, read 26%, 93%, 67% and 86%; over 120 steps, ~60 samples each, 53% to 71%),
    so the gate fails closed and says how to get enough. On a run shorter than MIN_RUN_S
    (`short_run_s`, its length) it decides, and says how many samples it rests on."""
    flag, shown = "--max-data-wait", f"{limit:g}%"
    head = f"gate {flag} {shown}"
    found = input_wait(balance)
    if found is None:
        return Gate(flag, shown, False,
                    f"{head}: cannot be checked, no phase balance was recorded (no stack "
                    "samples of a GPU process)", None, limit)
    share, parts = found
    pct = 100 * share
    split = ", ".join(f"{phase} {100 * part:.0f}%" for phase, part in parts.items())
    if samples is not None and samples < MIN_PHASE_SAMPLES:
        return Gate(flag, shown, False,
                    f"{head}: cannot be checked, input wait was {pct:.0f}% ({split}) on only "
                    f"{samples} stack samples (under {MIN_PHASE_SAMPLES}): too few to decide, "
                    "short runs of the same code read tens of points apart; profile a run of "
                    f"{MIN_RUN_S:.0f} s or more (two stack samples a second): more steps, or "
                    "--duration on a longer one", pct, limit)
    rests_on = ""
    if samples is not None and short_run_s is not None:
        rests_on = (f", on {samples} stack samples of a {beside(short_run_s, MIN_RUN_S)} s run "
                    f"(under {MIN_RUN_S:.0f} s: phases that come round less often may be "
                    "missed)")
    said = f"{head}: input wait was {beside(pct, limit)}% ({split}"
    if pct > limit:
        return Gate(flag, shown, False, f"{said}; {points(pct, limit)} over){rests_on}", pct,
                    limit)
    return Gate(flag, shown, True, f"{said}){rests_on}", pct, limit)


def min_utilization(limit: float, utilization: float | None, no_gpu: str | None = None
                    ) -> Gate:
    """Mean utilization of the GPUs the command used against `limit` (%). `no_gpu`: why no
    GPU was read, where it was not that the command used none ("NVML unavailable ...")."""
    head = f"gate --min-utilization {limit:g}%"
    if utilization is None or no_gpu is not None:
        return cannot_check("--min-utilization", f"{limit:g}%", limit,
                            no_gpu or "the command used no GPU")
    if utilization < limit:
        return Gate("--min-utilization", f"{limit:g}%", False,
                    f"{head}: GPU utilization was {beside(utilization, limit)}% "
                    f"({points(utilization, limit)} under)", utilization, limit)
    return Gate("--min-utilization", f"{limit:g}%", True,
                f"{head}: GPU utilization was {beside(utilization, limit)}%", utilization, limit)


def max_gpu_memory(limit: float, peak: dict[str, Any] | None, no_gpu: str | None = None
                   ) -> Gate:
    """The fullest GPU the command used, its peak memory as a share of the GPU's: a model that
    grew past what the production GPU holds fails here, not in an out-of-memory error there.
    `no_gpu` as min_utilization's."""
    head = f"gate --max-gpu-memory {limit:g}%"
    pct = None if peak is None else peak.get("percent")
    if peak is None or pct is None or no_gpu is not None:
        why = no_gpu or ("the command used no GPU" if peak is None
                         else "the GPU's total memory is unknown")
        return Gate("--max-gpu-memory", f"{limit:g}%", False,
                    f"{head}: cannot be checked, {why}", None, limit)
    said = (f"{head}: GPU {peak['gpu']} peaked at {peak['peak_bytes'] / 2**30:,.1f} GiB, "
            f"{beside(pct, limit)}% of its {peak['total_bytes'] / 2**30:,.0f} GiB")
    if pct > limit:
        return Gate("--max-gpu-memory", f"{limit:g}%", False,
                    f"{said} ({points(pct, limit)} over)", pct, limit)
    return Gate("--max-gpu-memory", f"{limit:g}%", True, said, pct, limit)


TOTAL_COST = "total cost"
# Said on a regression gate line that compares total costs.
SAME_WORK = ("no steps counted: taken as the same work both runs; add --progress for cost "
             "per step")
# Why a run cut by --duration, without steps, cannot be compared: said by the gate, and by
# the usage error that refuses --max-regression with --duration and no --progress.
FIXED_LENGTH = ("a run cut by --duration has a fixed length, so its total cost is the "
                "price times that length however slow the code is (and its cost per hour "
                "the GPU's price)")
# Said on a crossed regression gate: the limit is a plain threshold (probe 150 F6).
NO_NOISE_ALLOWANCE = ("the gate has no noise allowance: `mlcostd compare` of the two "
                      "profiles says whether the change is beyond the runs' noise")


def regression_figure(profile: dict[str, Any]) -> tuple[str, float | None]:
    """What a regression is measured on: ('cost per step', value) when the profile counted
    steps, else ('total cost', its `cost`): a CI job runs the same fixed workload each time,
    so the run's total cost sees slower code, where its cost per hour, on a GPU it holds
    alone, is the GPU's price whatever the code does (probe 150 F1: a 4x slower step passed
    at +0%)."""
    if profile.get("steps"):
        return "cost per step", profile.get("cost_per_step")
    return TOTAL_COST, profile.get("cost")


def _steps_said(profile: dict[str, Any]) -> str:
    steps = profile.get("steps")
    if not steps:
        return "counted no steps"
    return f"counted {steps:,} step{'s' if steps != 1 else ''}"


def gpu_count(profile: dict[str, Any]) -> int | None:
    """How many GPUs a profile's command used (its `gpus_used`), None when not known."""
    used = profile.get("gpus_used")
    return len(used) if isinstance(used, list) else None


def hardware(profile: dict[str, Any]) -> str:
    """A profile's GPUs as a gate says them: "4 x NVIDIA A10G (g5.12xlarge)"."""
    models = " + ".join(one_line(str(m)) for m in profile.get("gpu_models") or [])
    count = gpu_count(profile)
    said = f"{count} x {models}" if models and count else models or "unknown GPUs"
    kind = profile.get("instance_type")
    return f"{said} ({one_line(kind)[:80]})" if isinstance(kind, str) and kind else said


def same_hardware(profile: dict[str, Any], baseline: dict[str, Any]) -> bool:
    """Whether two profiles ran on the same hardware, as compare reads two sides
    (daemon.analysis.compare.same_hardware: the same GPU models, as many, on the same
    instance type). Only then is a price per GPU-hour that moved the catalog's doing."""
    def side(p: dict[str, Any]) -> dict[str, Any]:
        return {"gpu_models": p.get("gpu_models") or [], "gpus": p.get("gpus_used"),
                "instance_type": p.get("instance_type")}
    return sides_on_same_hardware(side(baseline), side(profile))


def max_regression(limit: float, profile: dict[str, Any], baseline: dict[str, Any],
                   baseline_path: str, unchecked: str | None = None) -> Gate:
    """This run's cost per step against the baseline's, or, where neither counted steps, its
    total cost (the same fixed workload each run: said so on the line; not where either was
    cut by --duration, a fixed length, whose total cost is price x time). A price
    that moved between the two runs is not the code's doing: on the same hardware (the same
    GPUs, as many, on the same instance type) the baseline is re-priced at this run's price
    per GPU-hour (a cut would hide a slower step, a rise fail a faster one); on other hardware
    the two costs are compared as they were, and the message says that the hardware and its
    price changed too. It cannot be checked (fails) where this run's cost cannot be
    (`unchecked`: no price, NVML unavailable), where it read $0 (the cost model charges a
    GPU's share while one is held: a run that fell back to the CPU reads $0, -100%), where
    this run used no GPU and the baseline did, or where one counted steps and the other did
    not (two measures). A crossed gate's line says that the limit is a plain threshold, and
    that `mlcostd compare` weighs the change against the runs' noise."""
    flag = "--max-regression"
    shown = f"{limit:g}%"
    head = f"gate {flag} {shown}"
    what, new = regression_figure(profile)
    old_what, old = regression_figure(baseline)
    if what != old_what:
        return cannot_check(flag, shown, limit,
                            f"this run {_steps_said(profile)} ({what}) and the baseline "
                            f"({one_line(baseline_path)[:200]}) {_steps_said(baseline)} "
                            f"({old_what}): not the same measure; count steps in both "
                            "(--progress) or in neither")
    if what == TOTAL_COST:
        cut = [side for side, p in (("this run", profile), ("the baseline", baseline))
               if p.get("stopped_after_duration") is True]
        if cut:
            return cannot_check(flag, shown, limit,
                                f"no steps were counted and {' and '.join(cut)} "
                                f"{'were' if len(cut) > 1 else 'was'} stopped by --duration: "
                                f"{FIXED_LENGTH}; count steps with --progress REGEX")
    if unchecked is not None:
        return cannot_check(flag, shown, limit, unchecked)
    count, old_count = gpu_count(profile), gpu_count(baseline)
    if count == 0 and old_count:
        return cannot_check(flag, shown, limit,
                            f"this run used no GPU; the baseline used {old_count} (a run "
                            "on the CPU costs $0 by the cost model, which charges a GPU's "
                            "share while one is held)")
    if new is None or old is None:
        return cannot_check(flag, shown, limit,
                            f"{what} is unknown in {'this run' if new is None else 'the baseline'}")
    if new <= 0:
        return cannot_check(flag, shown, limit,
                            f"this run's {what} is $0 (the cost model charges a GPU's share "
                            "while one is held: did the command use its GPU?)")
    if old <= 0:
        return cannot_check(flag, shown, limit,
                            f"the baseline's {what} is $0 (a run with no price or no GPU); "
                            "profile the baseline again where it has both")
    # A step costs fractions of a cent: said per 1k steps, as the profile's cost line says it
    # (per step, $0.0000 against $0.0001).
    label, scale = ("cost per 1k steps", 1000.0) if what == "cost per step" else (what, 1.0)
    against, note = f"the baseline's {money(old * scale, small=True)}", ""
    same = same_hardware(profile, baseline)
    moved = price_moved(baseline.get("price_per_gpu_hour"), profile.get("price_per_gpu_hour"))
    known = bool(profile.get("gpu_models")) and bool(baseline.get("gpu_models"))
    if moved is not None:
        old_price, price = moved
        prices = (f"the baseline ran at {money(old_price, 4)}/GPU-h, this run at "
                  f"{money(price, 4)}/GPU-h")
        if same:
            repriced = old * price / old_price
            against = (f"the baseline's {money(repriced * scale, small=True)} at this run's "
                       f"price ({money(old * scale, small=True)} at its own)")
            note = f"; {prices}: the price's change is not counted"
            old = repriced
        else:
            note = (f"; {prices}, on {hardware(profile)} against {hardware(baseline)}: the "
                    "change is the hardware's and its price's as well as the code's")
    elif known and not same:
        note = (f"; on {hardware(profile)} against {hardware(baseline)}: the change is the "
                "hardware's as well as the code's")
    change = 100 * (new - old) / old
    said = f"{head}: {label} was {money(new * scale, small=True)} against {against} " \
           f"({change:+.{decimals_beside(change, limit)}f}%"
    if what == TOTAL_COST:  # (a --progress that matched nothing: its no_steps warning says so)
        note = f"; {SAME_WORK}{note}"
    caveat = baseline_caveat(baseline)
    if caveat is not None:
        note += f"; {caveat}"
    if change > limit:
        return Gate(flag, shown, False,
                    f"{said}, {points(change, limit)} over){note}; {NO_NOISE_ALLOWANCE}",
                    change, limit)
    return Gate(flag, shown, True, f"{said}){note}", change, limit)


# A baseline's warnings (daemon.commands.profile `representativeness`) as a few words each,
# those that its own fields do not say better (interrupted, its exit status, its length).
BASELINE_WARNINGS = {
    "few_stack_samples": "few stack samples", "startup": "mostly start-up",
    "startup_steps": "its first step after half the run", "few_steps": "under 10 steps",
    "no_steps": "no steps counted", "shared_gpu": "a GPU shared with other processes",
    "no_gpu": "no GPU used", "no_gpu_work": "no GPU work", "failed": "a failed run",
    "no_nvml": "NVML unavailable",
}
MAX_CAVEATS = 6


def baseline_caveat(baseline: dict[str, Any]) -> str | None:
    """"the baseline is not representative: interrupted, exited 130, took 13 s (under 30 s)"
    ("was killed by SIGSEGV (status 139)" where a signal ended it) when the baseline profile
    said it may not stand for the workload (its `representative`, `warnings`), else None: a
    CI that rolls its baseline forward must see that it took an interrupted or failed run for
    one. The fields are read as they are (a file: each
    checked, one of the wrong type left out)."""
    warnings = baseline.get("warnings")
    codes: list[str] = [w["code"] for w in warnings if isinstance(w, dict) and isinstance(
        w.get("code"), str)] if isinstance(warnings, list) else []
    if baseline.get("representative") is not False and not codes:
        return None
    reasons = []
    if baseline.get("interrupted") is True or "interrupted" in codes:
        reasons.append("interrupted")
    status = baseline.get("exit_status")
    if (isinstance(status, int) and not isinstance(status, bool) and status != 0
            and baseline.get("stopped_after_duration") is not True):
        reasons.append(killed_by(baseline) or f"exited {status}")
    elif "failed" in codes:
        reasons.append(BASELINE_WARNINGS["failed"])
    duration = baseline.get("duration_s")
    if not isinstance(duration, int | float) or isinstance(duration, bool) or duration < 0:
        duration = None  # (finite: read_baseline refuses Infinity and NaN)
    if duration is not None and duration < MIN_RUN_S:
        reasons.append(f"took {beside(duration, MIN_RUN_S)} s (under {MIN_RUN_S:.0f} s)")
    elif "too_short" in codes:
        reasons.append("too short")
    for code in dict.fromkeys(codes):
        if code in ("interrupted", "failed", "too_short"):
            continue
        reasons.append(BASELINE_WARNINGS.get(code) or one_line(code.replace("_", " "))[:40])
    shown = reasons[:MAX_CAVEATS] + (["..."] if len(reasons) > MAX_CAVEATS else [])
    return "the baseline is not representative" + (f": {', '.join(shown)}" if shown else "")


def killed_by(profile: dict[str, Any]) -> str | None:
    """"was killed by SIGSEGV (status 139)" where a signal ended the command (its
    `exit_signal`), as the verdict says it; None where it exited (an exit(139) too), or where
    the profile.json is an older mlcostd's, without exit_signal."""
    name, status = profile.get("exit_signal"), profile.get("exit_status")
    if not isinstance(name, str) or not name:
        return None
    return f"was killed by {one_line(name)[:32]} (status {one_line(str(status))[:12]})"


def read_baseline(path: str) -> dict[str, Any]:
    """The `profile` key of an earlier profile.json (a regular file of at most
    MAX_PROFILE_BYTES: pricing.small_file), or of the profile.json in the folder `path`, as
    `mlcostd compare` takes a profile's folder; ValueError says what is wrong."""
    if os.path.isdir(path):
        inside = os.path.join(path, "profile.json")
        if not os.path.lexists(inside):
            raise ValueError(f"--baseline {path} is a folder without profile.json; pass the "
                             "folder an earlier `mlcostd profile --out` wrote, or its "
                             "profile.json")
        path = inside
    try:
        raw = read_small_file(path, MAX_PROFILE_BYTES)
    except SmallFileError as exc:
        raise ValueError(f"--baseline {path}{exc}; pass the profile.json an earlier "
                         "`mlcostd profile` wrote") from None
    try:  # every number finite: an Infinity baseline would pass any regression gate
        document = loads_finite(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path} is not JSON ({str(exc)[:120]}); pass the profile.json an "
                         "earlier `mlcostd profile` wrote") from None
    profile = document.get("profile") if isinstance(document, dict) else None
    if not isinstance(profile, dict):
        raise ValueError(f"{path} has no 'profile' key; pass the profile.json an earlier "
                         "`mlcostd profile` wrote")
    for key in ("burn", "gpus"):  # (read for a profile written before the two below)
        if key in document and not isinstance(document[key], (dict if key == "burn" else list)):
            raise ValueError(_wrong_type(path, key, document[key],
                                         "an object" if key == "burn" else "a list"))
    # (a profile written before these were kept has them in its report)
    if "price_per_gpu_hour" not in profile:
        profile["price_per_gpu_hour"] = price_per_gpu_hour(document)
    if "gpu_models" not in profile:
        used = profile.get("gpus_used")
        profile["gpu_models"] = gpu_models(document, used if isinstance(used, list) else [])
    if "instance_type" not in profile:
        profile["instance_type"] = instance_type(document)
    _check_baseline(path, profile)
    # text from a file: shown in the gate's message, on a terminal and in the JUnit file
    profile["gpu_models"] = [one_line(model)[:200] for model in profile["gpu_models"] or []]
    return profile


def instance_type(document: dict[str, Any]) -> str | None:
    """The instance type a report document's host was ("g5.12xlarge"), None off-cloud."""
    host = document.get("host")
    instance = host.get("instance") if isinstance(host, dict) else None
    kind = instance.get("type") if isinstance(instance, dict) else None
    return kind if isinstance(kind, str) and kind else None


# What max_regression reads of the baseline's `profile`, each None or of this type.
BASELINE_NUMBERS = ("cost", "cost_per_step", "cost_per_hour", "price_per_gpu_hour")


def _wrong_type(path: str, field: str, value: object, wanted: str) -> str:
    return (f"--baseline {one_line(path)[:200]}: {field} is {one_line(repr(value))[:60]}, not "
            f"{wanted}; pass the profile.json an earlier `mlcostd profile` wrote, unedited")


def _check_baseline(path: str, profile: dict[str, Any]) -> None:
    """The fields of a baseline's `profile` that the regression gate reads are of their
    types (checked before the run: a wrong one crashed the profile once the run was over,
    and no file was written); ValueError names the field."""
    def number(value: object) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    for key in BASELINE_NUMBERS:
        if profile.get(key) is not None and not number(profile[key]):
            raise ValueError(_wrong_type(path, f"profile.{key}", profile[key], "a number"))
    steps = profile.get("steps")
    if steps is not None and not (isinstance(steps, int) and not isinstance(steps, bool)):
        raise ValueError(_wrong_type(path, "profile.steps", steps, "a whole number"))
    kind = profile.get("instance_type")
    if kind is not None and not isinstance(kind, str):
        raise ValueError(_wrong_type(path, "profile.instance_type", kind, "a string"))
    used = profile.get("gpus_used")
    if used is not None and not isinstance(used, list):
        raise ValueError(_wrong_type(path, "profile.gpus_used", used, "a list of GPU indexes"))
    models = profile.get("gpu_models")
    if models is not None and not (isinstance(models, list)
                                   and all(isinstance(m, str) for m in models)):
        raise ValueError(_wrong_type(path, "profile.gpu_models", models,
                                     "a list of GPU model names"))


# Characters XML 1.0 does not allow, not even as a reference, past those `lines` shows as
# escapes (C0 controls but tab and newline, lone surrogates): U+FFFE and U+FFFF.
_NOT_XML = str.maketrans({"\ufffe": "\\ufffe", "\uffff": "\\uffff"})


def _xml_text(text: str) -> str:
    """`text` with every character XML 1.0 forbids made a visible escape (`\\x1b`), and the
    other control characters too: a JUnit file a CI cannot parse (expat: "not well-formed")
    shows no gate at all."""
    return lines(text).translate(_NOT_XML)


# How every JUnit file the profile writes begins: a profile clears one an earlier profile left
# in its --out folder by it (daemon.commands.profile `_clear_earlier_junit`).
JUNIT_HEAD = b"<?xml version='1.0' encoding='utf-8'?>\n<testsuites name=\"mlcostd profile\" "


def junit_xml(gates: list[Gate], *, suite: str = "mlcostd profile gates",
              seconds: float = 0.0, command_error: str | None = None) -> bytes:
    """The gates as one JUnit test suite, one test case per gate; a failed gate's failure
    message says by how much. `command_error` (the command failed: its exit status) is one
    more test case, in error: a CI that reads only this file must not show a crash as a
    pass."""
    failures = sum(1 for g in gates if not g.passed)
    errors = 1 if command_error else 0
    tests = len(gates) + errors
    suites = ET.Element("testsuites", name="mlcostd profile", tests=str(tests),
                        failures=str(failures), errors=str(errors), time=f"{seconds:.3f}")
    element = ET.SubElement(suites, "testsuite", name=suite, tests=str(tests),
                            failures=str(failures), errors=str(errors), skipped="0",
                            time=f"{seconds:.3f}")
    if command_error:
        said = _xml_text(command_error)
        case = ET.SubElement(element, "testcase", classname="mlcost.gates",
                             name="the command", time=f"{seconds:.3f}")
        error = ET.SubElement(case, "error", message=said, type="exit status")
        error.text = said
    for gate in gates:
        said = _xml_text(gate.message)
        case = ET.SubElement(element, "testcase", classname="mlcost.gates",
                             name=_xml_text(gate.name), time="0")
        if not gate.passed:
            failure = ET.SubElement(case, "failure", message=said, type="gate")
            failure.text = said
        else:
            ET.SubElement(case, "system-out").text = said
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(path: Path, gates: list[Gate], seconds: float,
                command_error: str | None = None) -> None:
    from daemon.store.files import write_private

    write_private(path, junit_xml(gates, seconds=seconds, command_error=command_error))
