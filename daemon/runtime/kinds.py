"""Workload kinds, kept up to date beside the tick: the facts each GPU process shows
(daemon.sources.kindfacts, read at most every few seconds per process) and the frame markers the
stack sampler saw in any of its threads (runtime/attribution.py), classified by
daemon.analysis.kinds. `refresh` runs in discovery's thread; `kinds` is swapped whole, so
readers on the event loop see one round or the next, never half of one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from daemon.analysis.kinds import Kind, classify_kind, gpu_use_shape
from daemon.sources.kindfacts import KindFactsReader
from daemon.wire import process_key

# A kind is classified again only when its facts or markers change, or after this long (the
# evidence ages out of the 30-minute window; a minute late is soon enough).
RECLASSIFY_EVERY_S = 60.0
# Reads of whether its kernels ran, kept per process for the shape of its GPU use: at one read
# per discovery round (2 s), the last minute.
GPU_USE_READS = 30


class KindTracker:
    def __init__(self, reader: KindFactsReader | None = None) -> None:
        self.reader = reader if reader is not None else KindFactsReader()
        self.kinds: dict[str, Kind] = {}  # by 'pid:start_time'
        self._memo: dict[tuple[int, float], tuple[object, Kind]] = {}
        self._gpu_use: dict[tuple[int, float], deque[bool]] = {}

    def refresh(self, processes: Iterable[tuple[int, float, str]],
                markers: Mapping[tuple[int, float], Mapping[str, float]], now: float,
                gpu_active: Mapping[tuple[int, float], bool] | None = None) -> None:
        """(pid, start_time, command) of each GPU process, the frame markers seen in its
        stacks (a copy taken on the loop) and whether its kernels ran at this read
        (`gpu_active`, by (pid, start_time)): read what is due, classify all."""
        procs = list(processes)
        uses: dict[tuple[int, float], deque[bool]] = {}
        for pid, start, _ in procs:
            key = (pid, start)
            uses[key] = self._gpu_use.get(key) or deque(maxlen=GPU_USE_READS)
            if gpu_active is not None and key in gpu_active:
                uses[key].append(gpu_active[key])
        self._gpu_use = uses
        self.reader.refresh(((pid, start) for pid, start, _ in procs), now)
        memo: dict[tuple[int, float], tuple[object, Kind]] = {}
        for pid, start, command in procs:
            key = (pid, start)
            facts = self.reader.get(key)
            seen = dict(markers.get(key) or {})
            shape = gpu_use_shape(uses[key])
            signature = (facts, frozenset(seen.items()), command, shape,
                         now // RECLASSIFY_EVERY_S)
            last = self._memo.get(key)
            kind = last[1] if last is not None and last[0] == signature else classify_kind(
                command, facts, seen, now=now, gpu_use=shape)
            memo[key] = (signature, kind)
        self._memo = memo
        self.kinds = {process_key(*key): kind for key, (_, kind) in memo.items()}
