"""The recommendation rules, one module per family; `RULES` lists them and `evaluate` runs them.

Each rule is data (name, signal, threshold, evidence, text, savings method) plus one function
that reads an `Analysis` (window.py) and returns Findings (base.py), exactly the wire's
Recommendation shape. Families: idle.py (a GPU held idle, a host idle), provisioning.py (shrink,
spot, commitment, dynamic batching), phases.py (the phase rules and their patches, storage-bound
input), budget.py. Thresholds, with their sources, are in thresholds.py. A new rule goes in its
family's module and gets one line in RULES.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.analysis.rules import budget, idle, phases, provisioning
from daemon.analysis.rules.base import Finding, Rule
from daemon.analysis.rules.window import Analysis, build_analysis

__all__ = ["RULES", "Analysis", "Finding", "Rule", "build_analysis", "evaluate"]

RULES: tuple[Rule, ...] = (
    idle.IDLE_GPU_HELD,
    idle.HOST_IDLE,
    provisioning.OVER_PROVISIONED,
    phases.DATALOADER_STARVATION,
    phases.MAIN_THREAD_PREPROCESSING,
    phases.STORAGE_BOUND,
    phases.BLOCKING_CHECKPOINT,
    phases.EVAL_DOMINATING,
    phases.HOST_SYNC,
    phases.COMMUNICATION_BOUND,
    provisioning.SPOT_TRAINING,
    provisioning.STEADY_INFERENCE_COMMITMENT,
    provisioning.UNDERBATCHED_INFERENCE,
    budget.BUDGET_EXCEEDED,
)


def evaluate(analysis: Analysis, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule's findings, deduplicated by id, largest savings first."""
    found: dict[str, Finding] = {}
    for rule in rules:
        for rec in rule.check(analysis, rule):
            if rec.id not in found or rec.savings_per_month > found[rec.id].savings_per_month:
                found[rec.id] = rec
    return sorted(found.values(), key=lambda r: (-r.savings_per_month, r.rule, r.target))
