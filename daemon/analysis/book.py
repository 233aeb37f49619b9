"""The recommendation book: each recommendation over time (first and last seen), held through
brief lapses (hysteresis) and resolved with a notice when its condition stays false.

The rules run every ~30 s and return what they find now; the book remembers across
evaluations, so the API and the TUI can say how long a finding has stood. How long it has
stood without a break counts as observed evidence: advice that needs a day of evidence (a
smaller instance, spot, a commitment) is "preliminary" until the window plus that time reach it.

Hysteresis: a finding that an evaluation does not return stays shown ("holding", with the
figures of the last evaluation that found it and since when its condition has been false)
until its condition has been false for `hold_s` ([cost].recommendation_hold, default 5 min);
then it is resolved: it leaves the active list and a "recommendation_resolved" notice says so.
A lapse shorter than the hold does not restart its standing; a longer one does. Advice about a
process that has exited goes at once (no condition of a gone process can come back), with a
notice that says so. So does a held finding that a newer one of its rule supersedes: a rule that
finds one thing at a time for something wider than its target (one straggler per job, the
target its rank) gives its findings a slot (Finding.slot), and the book shows one per slot.
So does a SIGTERM (idle_gpu_held's kill action): it is offered only while its condition holds
(the process idles with no sign of work or of serving); an evaluation that does not find it
says the process worked or served since (a look first replaces the action under the same id:
that is found, not held). Held, with its evidence frozen at its last idle window, it listed a
kill for a process that had worked five times since (probe 143 F8). It goes with a notice;
found again, it stands anew.
Snoozes are not kept here: the runtime holds them (and the store persists them), in one place.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from daemon.analysis.rules import Finding
from daemon.clock import duration

# A recommendation stays shown this long after its condition was last true (our choice: ten
# evaluations at the default 30 s, longer than the flicker of a cadence or a phase share
# near its threshold, short enough that fixed advice goes within minutes).
DEFAULT_HOLD_S = 300.0
RESOLVED = "recommendation_resolved"  # the notice's kind, beside the idle and budget events
ACTIVE, HOLDING = "active", "holding"
RECENT_RESOLVED = 20
KILL_ACTIONS = frozenset({"sigterm"})  # actions never held past their condition


@dataclass
class BookEntry:
    recommendation: Finding
    first_seen: float
    last_seen: float
    standing_since: float | None = None  # seen in every evaluation (or within the hold) since
    # When an evaluation first did not find it (its condition false since); None while found.
    false_since: float | None = None
    # The window the evaluation at `standing_since` found it over (its evidence then)
    first_window_s: float | None = None

    @property
    def standing_s(self) -> float:
        since = self.first_seen if self.standing_since is None else self.standing_since
        return max(self.last_seen - since, 0.0)

    def as_dict(self, hold_s: float = DEFAULT_HOLD_S) -> dict[str, Any]:
        false_since = self.false_since
        return {**self.recommendation.as_dict(self.standing_s, self.first_window_s),
                "first_seen": self.first_seen,
                "last_seen": self.last_seen, "standing_since": self.standing_since,
                "status": ACTIVE if false_since is None else HOLDING,
                "condition_false_since": self.false_since,
                "hold_seconds": hold_s,
                "resolves_at": None if false_since is None else false_since + hold_s}


def is_kill(rec: Finding) -> bool:
    """Whether its action stops a process (KILL_ACTIONS): never held past its condition."""
    return (rec.action or {}).get("kind") in KILL_ACTIONS


def resolved_notice(entry: BookEntry, at: float, hold_s: float, exited: bool = False,
                    superseded_by: Finding | None = None, kill: bool = False
                    ) -> dict[str, Any]:
    """The event document that says a recommendation went: an Event of /v1/now's events."""
    rec = entry.recommendation
    if exited:
        why = "its process exited"
    elif kill:
        why = ("the process no longer idles as it did (it worked or served since): a SIGTERM "
               "is never held past its condition")
    elif superseded_by is not None:
        why = f"superseded by a newer {superseded_by.rule} finding, about {superseded_by.target}"
    else:
        why = (f"its condition has been false for {duration(at - (entry.false_since or at))}, "
               f"the hold is {duration(hold_s)}")
    return {"id": f"{RESOLVED}:{rec.id}:{at:.3f}", "kind": RESOLVED,
            "target": f"{rec.rule} {rec.target}", "started_at": entry.first_seen,
            "ended_at": at, "cost_so_far": None, "recommendation_id": rec.id,
            "rule": rec.rule,
            "detail": f"resolved: {rec.rule} no longer applies ({why}); it said: {rec.summary}"}


class RecommendationBook:
    """Recommendations over time: first and last seen. `active()` lists those found in the
    latest evaluation and those held through a lapse shorter than `hold_s`; `resolved` keeps
    the notices of those that went."""

    def __init__(self, max_entries: int = 1000, hold_s: float = DEFAULT_HOLD_S) -> None:
        self.entries: dict[str, BookEntry] = {}
        self.max_entries = max_entries
        self.hold_s = max(hold_s, 0.0)
        self.last_evaluated: float | None = None
        self.resolved: deque[dict[str, Any]] = deque(maxlen=RECENT_RESOLVED)

    def _shown(self, entry: BookEntry) -> bool:
        return entry.false_since is None or (
            self.last_evaluated is not None
            and self.last_evaluated - entry.false_since < self.hold_s)

    def record(self, recommendations: Iterable[Finding], now: float,
               exited: Callable[[str], bool] | None = None) -> list[dict[str, Any]]:
        """One evaluation's findings at `now`; returns the resolved notices it produced.
        `exited(target)`: whether a target is a process that has exited (resolved at once).
        A finding with a slot resolves at once the others of its rule in that slot; one that
        supersedes other findings (Finding.supersedes) resolves them at once."""
        found = {rec.id: rec for rec in recommendations}
        newest = {(rec.rule, rec.slot): rec for rec in found.values() if rec.slot is not None}
        replacing = {old: rec for rec in found.values() for old in rec.supersedes}
        for rec_id, rec in found.items():
            entry = self.entries.get(rec_id)
            if entry is None:
                self.entries[rec_id] = BookEntry(rec, now, now, now,
                                                 first_window_s=rec.evidence_window_s)
                continue
            if entry.false_since is not None and now - entry.false_since >= self.hold_s:
                entry.standing_since = now  # it lapsed past the hold: its evidence starts again
                entry.first_window_s = rec.evidence_window_s
            entry.recommendation, entry.last_seen, entry.false_since = rec, now, None
        notices = []
        for entry in self.entries.values():
            old = entry.recommendation
            if old.id in found:
                continue
            if entry.false_since is None:
                entry.false_since = now  # shown until now: its condition is false from here
            elif (self.last_evaluated is not None
                  and self.last_evaluated - entry.false_since >= self.hold_s):
                continue  # resolved before: said once
            newer = replacing.get(old.id) or (
                None if old.slot is None else newest.get((old.rule, old.slot)))
            if exited is not None and exited(old.target):
                entry.false_since = now - self.hold_s  # gone for good: not shown from now
                notices.append(resolved_notice(entry, now, self.hold_s, exited=True))
            elif newer is not None:
                entry.false_since = now - self.hold_s  # its slot has a newer one: not shown
                notices.append(resolved_notice(entry, now, self.hold_s, superseded_by=newer))
            elif is_kill(old):
                entry.false_since = now - self.hold_s  # a kill is not held: not shown
                notices.append(resolved_notice(entry, now, self.hold_s, kill=True))
            elif now - entry.false_since >= self.hold_s:
                notices.append(resolved_notice(entry, now, self.hold_s))
        self.resolved.extend(notices)
        self.last_evaluated = now
        if len(self.entries) > self.max_entries:
            oldest = sorted(self.entries.values(), key=lambda e: e.last_seen)
            for entry in oldest[: len(self.entries) - self.max_entries]:
                del self.entries[entry.recommendation.id]
        return notices

    def active(self) -> list[BookEntry]:
        if self.last_evaluated is None:
            return []
        live = [e for e in self.entries.values() if self._shown(e)]
        return sorted(live, key=lambda e: (-(e.recommendation.combined_savings_per_month or 0.0),
                                           -e.recommendation.savings_per_month))

    def history(self) -> list[BookEntry]:
        return sorted(self.entries.values(), key=lambda e: -e.last_seen)
