"""The recommendation book: each recommendation over time (first and last seen) and its snooze.

The rules run every ~30 s and return what they find now; the book remembers across
evaluations, so the API and the TUI can say how long a finding has stood and hide a snoozed one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from daemon.analysis.rules import Finding


@dataclass
class BookEntry:
    recommendation: Finding
    first_seen: float
    last_seen: float
    snoozed_until: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.recommendation.as_dict(), "first_seen": self.first_seen,
                "last_seen": self.last_seen, "snoozed_until": self.snoozed_until}


class RecommendationBook:
    """Recommendations over time: first and last seen, snoozes. `active()` lists those seen in
    the latest evaluation and not snoozed."""

    def __init__(self, max_entries: int = 1000) -> None:
        self.entries: dict[str, BookEntry] = {}
        self.max_entries = max_entries
        self.last_evaluated: float | None = None

    def record(self, recommendations: Iterable[Finding], now: float) -> None:
        for rec in recommendations:
            entry = self.entries.get(rec.id)
            if entry is None:
                self.entries[rec.id] = BookEntry(rec, now, now)
            else:
                entry.recommendation, entry.last_seen = rec, now
        self.last_evaluated = now
        if len(self.entries) > self.max_entries:
            oldest = sorted(self.entries.values(), key=lambda e: e.last_seen)
            for entry in oldest[: len(self.entries) - self.max_entries]:
                del self.entries[entry.recommendation.id]

    def snooze(self, rec_id: str, until: float) -> bool:
        entry = self.entries.get(rec_id)
        if entry is None:
            return False
        entry.snoozed_until = until
        return True

    def active(self, now: float | None = None) -> list[BookEntry]:
        now = self.last_evaluated if now is None else now
        if self.last_evaluated is None:
            return []
        live = [e for e in self.entries.values() if e.last_seen >= self.last_evaluated
                and not (e.snoozed_until is not None and now is not None
                         and e.snoozed_until > now)]
        return sorted(live, key=lambda e: -e.recommendation.savings_per_month)

    def history(self) -> list[BookEntry]:
        return sorted(self.entries.values(), key=lambda e: -e.last_seen)
