"""What a rule is (data plus one function), what it finds, and the helpers rules share to word
their savings and evidence.

A `Rule` is name, signal, threshold, evidence, text and savings method, plus `check(analysis,
rule)`. What it returns are `Finding`s: exactly the wire's Recommendation shape (`as_dict()`,
`as_wire()`). Savings are upper bounds (fixing one bottleneck exposes the next); every method
says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon import wire
from daemon.analysis.rules.thresholds import MIN_PHASE_SAMPLES, SPOT_CADENCE_TOLERANCE
from daemon.analysis.rules.window import Analysis, ProcessWindow, checkpoint_interval
from daemon.wire import money
from pricing.offer import HOURS_PER_MONTH

UPPER_BOUND = "an upper bound: fixing one bottleneck exposes the next"


def recommendation_id(rule: str, target: str) -> str:
    """The stable id of a rule's finding about a target (the same across evaluations)."""
    return hashlib.sha1(f"{rule}\0{target}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Finding:
    """What one rule found about one target: the wire's Recommendation, as the rules make it
    (savings always a number here; the wire also reads documents without one)."""

    id: str
    rule: str
    target: str
    summary: str
    savings_per_month: float
    method: str
    evidence: Mapping[str, Any]
    action: Mapping[str, Any]
    # What its savings concern (combine.py): {"frees": GPUs freed whole, "gpus": GPUs made
    # cheaper by a fraction, "whole_host": bool}.
    scope: Mapping[str, Any] = field(default_factory=dict)
    # Observed evidence it needs before it is confident (None: no such need), and what the
    # window showed; the book adds how long the finding has stood.
    evidence_needed_s: float | None = None
    evidence_window_s: float = 0.0
    # Thresholds this finding passed that the config set below their defaults (a simulated host):
    # name -> {"value": seconds, "default": seconds}.
    shortened: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # Its share after the ones before it in the stated order (combine.py), and its place there.
    combined_savings_per_month: float | None = None
    savings_order: int | None = None
    # What the finding is one of, when a rule finds one at a time for something wider than its
    # target (a job has one straggler; the target is the rank): the book shows one finding of
    # the rule per slot, a new one superseding a held one at once. Not on the wire.
    slot: str | None = None
    # Ids of other rules' findings this one replaces: the book resolves them at once, held or
    # not (a hung job's ranks were communication-bound a round ago: they are not slow, they
    # stopped). Not on the wire.
    supersedes: tuple[str, ...] = ()
    # The advice in a few words, for a screen too narrow for the summary (80 columns show 40
    # characters of it: the subject, never the advice): who, what, what to do. "" for none.
    headline: str = ""

    def evidence_seconds(self, standing_s: float = 0.0,
                         first_window_s: float | None = None) -> float:
        """Observed evidence: the time the windows it was found over cover together, the
        window it was first found over (`first_window_s`; else this evaluation's) and the
        `standing_s` it has stood since, and at least this evaluation's window. In the
        daemon's first 30 minutes the window runs from its start and grows with the standing
        time: the two overlap, and adding this window to the standing time counted the same
        minutes twice (15 min of evidence shown 8 minutes in)."""
        first = self.evidence_window_s if first_window_s is None else first_window_s
        return max(self.evidence_window_s, first + max(standing_s, 0.0))

    def as_dict(self, standing_s: float = 0.0,
                first_window_s: float | None = None) -> dict[str, Any]:
        """The wire document of a daemon.wire.Recommendation (the store and the API send it);
        `standing_s`, how long it has stood since it was first found over a window of
        `first_window_s` (the book knows), counts as observed evidence."""
        seen = self.evidence_seconds(standing_s, first_window_s)
        needed = self.evidence_needed_s
        preliminary = needed is not None and seen < needed
        return {"id": self.id, "rule": self.rule, "target": self.target,
                "summary": self.summary, "headline": self.headline or None,
                "savings_per_month": self.savings_per_month,
                "method": self.method, "evidence": dict(self.evidence),
                "action": dict(self.action),
                "combined_savings_per_month": self.combined_savings_per_month,
                "savings_order": self.savings_order, "savings_scope": dict(self.scope),
                "evidence_seconds": seen, "evidence_needed_seconds": needed,
                "preliminary": preliminary,
                "confidence": None if needed is None else ("low" if preliminary else "high"),
                "thresholds_shortened": bool(self.shortened),
                "shortened_thresholds": {k: dict(v) for k, v in self.shortened.items()}}

    def as_wire(self) -> wire.Recommendation:
        return wire.Recommendation.from_dict(self.as_dict())


@dataclass(frozen=True)
class Rule:
    """A recommendation rule: its description as data, and `check`, which reads an Analysis."""

    name: str
    signal: str
    threshold: str
    evidence: str
    text: str
    savings: str
    check: Callable[[Analysis, Rule], list[Finding]]
    # The Analysis limits (thresholds.DEFAULT_LIMITS) it reads: a config that sets one below
    # its default makes the finding say its thresholds are shortened.
    limits: tuple[str, ...] = ()

    def make(self, target: str, summary: str, savings_per_month: float, method: str,
             evidence: Mapping[str, Any], action: Mapping[str, Any], *,
             scope: Mapping[str, Any] | None = None,
             evidence_needed_s: float | None = None, slot: str | None = None,
             headline: str = "", supersedes: tuple[str, ...] = ()) -> Finding:
        return Finding(recommendation_id(self.name, target), self.name, target, summary,
                       max(savings_per_month, 0.0), method,
                       {"signal": self.signal, "threshold": self.threshold, **evidence},
                       action, scope=dict(scope or {}), evidence_needed_s=evidence_needed_s,
                       slot=slot, headline=headline, supersedes=supersedes)


def share_savings(proc: ProcessWindow, share: float, what: str) -> tuple[float, str]:
    monthly = proc.burn_per_hour * share * HOURS_PER_MONTH
    return monthly, (f"{money(proc.burn_per_hour)}/h burn x {share:.0%} of the window in {what} "
                     f"x {HOURS_PER_MONTH:g} h/month = {money(monthly)}/month; {UPPER_BOUND}")


def phase_share(proc: ProcessWindow, phase: str) -> tuple[float, list[Mapping[str, Any]]]:
    entry = proc.phases.get(phase) or {}
    return float(entry.get("share", 0.0) or 0.0), list(entry.get("top_stacks", []) or [])


def phase_samples(stacks: Sequence[Mapping[str, Any]]) -> int:
    """The stack samples behind a phase, counted from its top stacks (all of them unless it
    has more than the top few stacks, and then more than a rule asks for). A phase given
    without stacks (no counts to read) counts as enough."""
    if not stacks:
        return MIN_PHASE_SAMPLES
    return sum(int(s.get("samples") or 0) for s in stacks)


def where_in(stacks: Sequence[Mapping[str, Any]]) -> str | None:
    for stack in stacks:
        if stack.get("file"):
            return f"{stack['file']}:{stack.get('line')}"
    return None


def stack_evidence(stacks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"file": s.get("file"), "line": s.get("line"), "function": s.get("function"),
             "samples": s.get("samples"), "reason": s.get("reason"),
             "frames": list(s.get("frames", []))[:12]}
            for s in stacks[:3]]


def process_evidence(a: Analysis, proc: ProcessWindow) -> dict[str, Any]:
    return {"process": {"id": proc.id, "pid": proc.pid, "user": proc.user,
                        "command": proc.command, "job": proc.job, "gpus": list(proc.gpus),
                        "burn_per_hour": proc.burn_per_hour},
            "window": {"start": a.start, "end": a.end, "seconds": a.window_s},
            "phases": {k: {"share": v.get("share"), "seconds": v.get("seconds")}
                       for k, v in proc.phases.items()}}


# What a patch is for and what restarts it, in the words of the workload's kind
# (daemon.analysis.kinds): a server is no "training script".
_PROGRAM_OF_KIND = {
    "training": ("training script", "the training loop", "restart the job"),
    "batch_inference": ("inference script", "the inference loop", "restart the job"),
    "online_inference": ("server", "the serving loop", "restart the server"),
    "notebook": ("notebook", "the notebook's code", "re-run the cell"),
}
_PROGRAM = ("script", "the loop", "restart it")


def program_words(proc: ProcessWindow) -> tuple[str, str, str]:
    """(what its code is, its loop, how a change takes effect) for the process's kind."""
    return _PROGRAM_OF_KIND.get(proc.kind.kind, _PROGRAM)


def patch_text(proc: ProcessWindow, file: str | None) -> str:
    """The action's line for a patch: where it goes, fitted to the workload's kind."""
    program, _, restart = program_words(proc)
    return f"a patch for {file or 'your ' + program}: review it, apply it, {restart}"


def phase_window_s(proc: ProcessWindow) -> float:
    """The time its phase balance covers (its time in the rules' window): the phase seconds
    summed, else its seconds seen."""
    total = sum(float(v.get("seconds") or 0.0) for v in proc.phases.values())
    return total if total > 0 else proc.seconds


def plural(count: int, one: str, many: str | None = None) -> str:
    """'1 GPU', '2 GPUs': a count with its noun, for the texts people read."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def checkpoint_cadence(times: Sequence[float]) -> float | None:
    """The one estimate of a job's checkpoint interval (window.checkpoint_interval); rules read
    it as ProcessWindow.checkpoint_interval_s."""
    return checkpoint_interval(times)


def regular_cadence(times: Sequence[float]) -> bool:
    cadence = checkpoint_cadence(times)
    if cadence is None or cadence <= 0:
        return False
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # A gap of about k cadences is a checkpoint that was not observed, not an irregular one.
    return all(round(g / cadence) >= 1
               and abs(g - round(g / cadence) * cadence) <= SPOT_CADENCE_TOLERANCE * cadence
               for g in gaps)
