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


class KindTracker:
    def __init__(self, reader: KindFactsReader | None = None) -> None:
        self.reader = reader if reader is not None else KindFactsReader()
        self.kinds: dict[str, Kind] = {}  # by 'pid:start_time'

    def refresh(self, processes: Iterable[tuple[int, float, str]],
                markers: Mapping[tuple[int, float], Mapping[str, float]], now: float) -> None:
        """(pid, start_time, command) of each GPU process, and the frame markers seen in its
        stacks (a copy taken on the loop): read what is due, classify all."""
        procs = list(processes)
        self.reader.refresh(((pid, start) for pid, start, _ in procs), now)
        self.kinds = {
            process_key(pid, start): classify_kind(command, self.reader.get((pid, start)),
                                                   dict(markers.get((pid, start)) or {}),
                                                   now=now)
            for pid, start, command in procs}
