"""The recommendation book: each recommendation over time (first and last seen).

The rules run every ~30 s and return what they find now; the book remembers across
evaluations, so the API and the TUI can say how long a finding has stood. How long it has
stood without a break counts as observed evidence: advice that needs a day of evidence (a
smaller instance, spot, a commitment) is "preliminary" until the window plus that time reach it.
Snoozes are not kept here: the runtime holds them (and the store persists them), in one place.
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
    standing_since: float | None = None  # seen in every evaluation since then

    @property
    def standing_s(self) -> float:
        since = self.first_seen if self.standing_since is None else self.standing_since
        return max(self.last_seen - since, 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {**self.recommendation.as_dict(self.standing_s), "first_seen": self.first_seen,
                "last_seen": self.last_seen, "standing_since": self.standing_since}


class RecommendationBook:
    """Recommendations over time: first and last seen. `active()` lists those seen in the latest
    evaluation."""

    def __init__(self, max_entries: int = 1000) -> None:
        self.entries: dict[str, BookEntry] = {}
        self.max_entries = max_entries
        self.last_evaluated: float | None = None

    def record(self, recommendations: Iterable[Finding], now: float) -> None:
        previous = self.last_evaluated
        for rec in recommendations:
            entry = self.entries.get(rec.id)
            if entry is None:
                self.entries[rec.id] = BookEntry(rec, now, now, now)
            else:
                if previous is not None and entry.last_seen < previous:
                    entry.standing_since = now  # it lapsed: its evidence starts again
                entry.recommendation, entry.last_seen = rec, now
        self.last_evaluated = now
        if len(self.entries) > self.max_entries:
            oldest = sorted(self.entries.values(), key=lambda e: e.last_seen)
            for entry in oldest[: len(self.entries) - self.max_entries]:
                del self.entries[entry.recommendation.id]

    def active(self) -> list[BookEntry]:
        if self.last_evaluated is None:
            return []
        live = [e for e in self.entries.values() if e.last_seen >= self.last_evaluated]
        return sorted(live, key=lambda e: (-(e.recommendation.combined_savings_per_month or 0.0),
                                           -e.recommendation.savings_per_month))

    def history(self) -> list[BookEntry]:
        return sorted(self.entries.values(), key=lambda e: -e.last_seen)
