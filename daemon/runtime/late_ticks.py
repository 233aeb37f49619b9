"""Ticks that came late: the daemon's loop held past an interval by a call in it that blocked.

A held loop takes no samples and answers no request meanwhile. Probe 146 (L3) held it 3-4 s
at a time, 37 times in a row, and ~115 ticks were never taken, while /v1/health listed no
problem and the log said nothing. Now a tick at least LATE_S behind (two intervals, if
longer) is counted here: /v1/health says so while one came within the last LATE_PROBLEM_S, and
the log says so at most once per LOG_EVERY_S (the ones held back counted in the next line). A
shorter hiccup (a loaded host's scheduling) is only counted in ticks_late.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("daemon.runtime.daemon")

# How far behind a tick is late here (two intervals, if that is longer): a held loop (probe 146's
# were 3-8 s), not a loaded host's scheduling, which a test or a 2-core CI machine meets now and
# then at a second (its /v1/health would say a problem for a minute).
LATE_S = 2.5
LATE_PROBLEM_S = 60.0  # /v1/health says so while a tick came late within this
LOG_EVERY_S = 60.0  # one log line at most this often


class LateTicks:
    """The late ticks of the last LATE_PROBLEM_S: when, how many ticks not taken, how far
    behind the loop was."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._late: deque[tuple[float, int, float]] = deque()  # (when, missed, behind s)
        self._logged_at = -float("inf")
        self._held_back = 0

    def late(self, missed: int, behind_s: float) -> None:
        """The loop fell `behind_s` behind its ticks: `missed` ticks were not taken."""
        if behind_s < max(LATE_S, 2 * self.interval_s):
            return
        now = self._clock()
        self._late.append((now, missed, behind_s))
        self._forget(now)
        if now - self._logged_at < LOG_EVERY_S:
            self._held_back += 1
            return
        more = (f" ({self._held_back} more late ticks in the last {now - self._logged_at:.0f} s)"
                if self._held_back and self._logged_at > -float("inf") else "")
        log.warning("ticks came late: the daemon's loop fell %.1f s behind (a call in it "
                    "blocked it) and %d tick(s) of %g s were not taken%s", behind_s, missed,
                    self.interval_s, more)
        self._logged_at, self._held_back = now, 0

    @property
    def problem(self) -> str | None:
        """The late ticks of the last LATE_PROBLEM_S in words (for /v1/health); None if
        none."""
        self._forget(self._clock())
        if not self._late:
            return None
        missed = sum(m for _, m, _ in self._late)
        worst = max(b for _, _, b in self._late)
        return (f"ticks came late: {len(self._late)} time(s) in the last "
                f"{LATE_PROBLEM_S:.0f} s the daemon's loop fell behind (a call in it "
                f"blocked it), up to {worst:.1f} s; {missed} tick(s) were not taken (see the "
                "log)")

    def _forget(self, now: float) -> None:
        while self._late and now - self._late[0][0] > LATE_PROBLEM_S:
            self._late.popleft()
