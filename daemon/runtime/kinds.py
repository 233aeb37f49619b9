"""Workload kinds, kept up to date beside the tick: the facts each GPU process shows
(daemon.sources.kindfacts, read at most every few seconds per process) and the frame markers the
stack sampler saw in any of its threads (runtime/attribution.py), classified by
daemon.analysis.kinds. `refresh` runs in discovery's thread; `kinds` is swapped whole, so
readers on the event loop see one round or the next, never half of one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from daemon.analysis.kinds import Kind, classify_kind
from daemon.sources.kindfacts import KindFactsReader
from daemon.wire import process_key

# A kind is classified again only when its facts or markers change, or after this long (the
# evidence ages out of the 30-minute window; a minute late is soon enough).
RECLASSIFY_EVERY_S = 60.0


class KindTracker:
    def __init__(self, reader: KindFactsReader | None = None) -> None:
        self.reader = reader if reader is not None else KindFactsReader()
        self.kinds: dict[str, Kind] = {}  # by 'pid:start_time'
        self._memo: dict[tuple[int, float], tuple[object, Kind]] = {}

    def refresh(self, processes: Iterable[tuple[int, float, str]],
                markers: Mapping[tuple[int, float], Mapping[str, float]], now: float) -> None:
        """(pid, start_time, command) of each GPU process, and the frame markers seen in its
        stacks (a copy taken on the loop): read what is due, classify all."""
        procs = list(processes)
        self.reader.refresh(((pid, start) for pid, start, _ in procs), now)
        memo: dict[tuple[int, float], tuple[object, Kind]] = {}
        for pid, start, command in procs:
            key = (pid, start)
            facts = self.reader.get(key)
            seen = dict(markers.get(key) or {})
            signature = (facts, frozenset(seen.items()), command, now // RECLASSIFY_EVERY_S)
            last = self._memo.get(key)
            kind = last[1] if last is not None and last[0] == signature else classify_kind(
                command, facts, seen, now=now)
            memo[key] = (signature, kind)
        self._memo = memo
        self.kinds = {process_key(*key): kind for key, (_, kind) in memo.items()}
