"""The budget rule: each budget crossed (daemon.analysis.budgets) becomes a recommendation."""

from __future__ import annotations

from daemon.analysis.rules.base import Finding, Rule
from daemon.analysis.rules.window import Analysis


def check_budget(a: Analysis, rule: Rule) -> list[Finding]:
    found = []
    for event in a.budget_events:
        d = getattr(event, "detail", {}) or {}
        target = f"{event.target}:{d.get('period')}:{d.get('period_id')}"
        found.append(rule.make(
            target, d.get("summary") or f"{event.target} exceeded its budget", 0.0,
            "no savings figure: a budget says what may be spent, not what is wasted",
            {"budget": dict(d), "event": event.as_dict() if hasattr(event, "as_dict") else {}},
            {"kind": "none"}))
    return found


BUDGET_EXCEEDED = Rule(
    "budget_exceeded", "spend per budget period", "spend >= limit",
    "budget, period, spend", "review the spend", "none", check_budget)
