"""The recommendation rules, one module per family; `RULES` lists them and `evaluate` runs them.

Each rule is data (name, signal, threshold, evidence, text, savings method) plus one function
that reads an `Analysis` (window.py) and returns Findings (base.py), exactly the wire's
Recommendation shape. Families: idle.py (a GPU held idle, a host idle), provisioning.py (shrink,
spot, commitment, dynamic batching), phases.py (the phase rules and their patches, storage-bound
input), stragglers.py (a rank the others wait for), hung.py (a job whose ranks all wait on their
peers with their GPUs idle), budget.py. Thresholds, with their sources, are in thresholds.py. A
new rule goes in its family's module and gets one line in RULES. `evaluate` then combines the
host's findings (combine.py) so that their savings add up to no more than the bill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from daemon import clock
from daemon.analysis.rules import budget, hung, idle, output, phases, provisioning, stragglers
from daemon.analysis.rules.base import Finding, Rule
from daemon.analysis.rules.combine import bill_per_month, combine
from daemon.analysis.rules.thresholds import DEFAULT_LIMITS
from daemon.analysis.rules.window import Analysis, build_analysis

__all__ = ["RULES", "Analysis", "Finding", "Rule", "build_analysis", "evaluate"]

RULES: tuple[Rule, ...] = (
    idle.IDLE_GPU_HELD,
    idle.IDLE_SERVER,
    idle.HOST_IDLE,
    provisioning.OVER_PROVISIONED,
    phases.DATALOADER_STARVATION,
    phases.MAIN_THREAD_PREPROCESSING,
    phases.STORAGE_BOUND,
    phases.BLOCKING_CHECKPOINT,
    phases.EVAL_DOMINATING,
    phases.HOST_SYNC,
    phases.COMMUNICATION_BOUND,
    output.WRITING_OUTPUT,
    stragglers.STRAGGLER,
    hung.HUNG_JOB,
    provisioning.SPOT_TRAINING,
    provisioning.STEADY_INFERENCE_COMMITMENT,
    provisioning.UNDERBATCHED_INFERENCE,
    provisioning.LOPSIDED_GPUS,
    budget.BUDGET_EXCEEDED,
)


def _shortened(analysis: Analysis, rule: Rule) -> dict[str, dict[str, float]]:
    """The limits this rule read that the config set below their defaults."""
    return {name: {"value": analysis.limit(name), "default": DEFAULT_LIMITS[name]}
            for name in rule.limits if analysis.limit(name) < DEFAULT_LIMITS[name]}


def _threshold_text(default: str, shortened: dict[str, dict[str, float]]) -> str:
    """A rule's threshold as it fired: '>= 30 min by default; here host_idle_min_s = 60 s (the
    config's)'."""
    here = ", ".join(f"{name} = {clock.duration(limit['value'])}"
                     for name, limit in shortened.items())
    return f"{default} by default; here {here} (the config's)"


def evaluate(analysis: Analysis, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule's findings, deduplicated by id, with the window as their evidence time, the
    thresholds the config shortened, and their combined savings; largest combined first."""
    found: dict[str, Finding] = {}
    for rule in rules:
        shortened = _shortened(analysis, rule)
        for rec in rule.check(analysis, rule):
            rec = replace(rec, evidence_window_s=analysis.window_s, shortened=shortened)
            if shortened:  # the threshold it fired at, not only the default it describes
                rec = replace(rec, evidence={**rec.evidence, "threshold": _threshold_text(
                    str(rec.evidence.get("threshold", rule.threshold)), shortened)})
            if rec.id not in found or rec.savings_per_month > found[rec.id].savings_per_month:
                found[rec.id] = rec
    combined = combine([r.as_dict() for r in found.values()],
                       bill_per_month(analysis.price.per_hour), [g.index for g in analysis.gpus])
    out = [replace(r, combined_savings_per_month=combined[r.id].combined_per_month,
                   savings_order=combined[r.id].order) for r in found.values()]
    return sorted(out, key=lambda r: (-(r.combined_savings_per_month or 0.0),
                                      -r.savings_per_month, r.rule, r.target))
