"""The processes' minute rollups, tallied as ticks are committed, so that rolling a minute up
does not read its raw rows back (at 256 processes 15 000 proc_samples and as many GPU uses a
minute: ~55 ms a minute, most of the writer's housekeeping; issue 23).

`ProcessMinutes` is fed each committed tick's process and GPU-use rows (daemon.store.tick_rows)
and keeps, per process and metric, count, sum, min and max: the rows of `rollups` that
`Maintenance._process_minute_rows` computes from the raw rows, the same numbers. It answers only
for a minute whose every tick it saw, from the tick before it on (the CPU percentage of a
minute's first sample pairs with the tick before, as the SQL path does); for any other (the
minute a daemon started in, one dropped from the bound) the caller reads the raw rows as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.store.schema import KIND_PROCESS, MINUTE, PROCESS_METRICS
from daemon.store.tick_rows import GpuUseRow, ProcessSampleRow

MINUTE_MS = MINUTE * 1000
CPU_LOOKBACK_MS = 30 * 1000  # a cpu_percent pair needs its previous sample this close
FINISHED_KEPT = 5  # finished minutes kept for maintenance to roll up (it runs between ticks)

_SM, _MEM, _CPU, _RSS = (PROCESS_METRICS[name] for name in
                         ("sm_share", "gpu_memory_bytes", "cpu_percent", "rss_bytes"))
# A process's tally: [n, sum, min, max] of each metric, in this order.
_ORDER = (_SM, _MEM, _CPU, _RSS)

RollupRow = tuple[int, ...]


def _add(acc: list[int] | None, value: int) -> list[int]:
    if acc is None:
        return [1, value, value, value]
    acc[0] += 1
    acc[1] += value
    if value < acc[2]:
        acc[2] = value
    elif value > acc[3]:
        acc[3] = value
    return acc


class ProcessMinutes:
    """Count, sum, min and max of each process's metrics per minute, from committed ticks."""

    def __init__(self, newest_ts: int) -> None:
        self.forget(newest_ts)

    def forget(self, newest_ts: int) -> None:
        """Start again as if the store were opened now, its newest tick at `newest_ts`."""
        # Ticks already in the store when the writer opened it are not seen here: the minute
        # they are in (and the next, when they are its previous tick) is left to the raw rows.
        self._opened_after = newest_ts
        self._bucket: int | None = None
        self._complete = False
        self._tally: dict[int, list[list[int] | None]] = {}  # process id -> [acc per metric]
        self._previous: dict[int, tuple[int, int]] = {}  # process id -> (ts, cpu_ms) last seen
        self._last_ts = 0
        self._last_rows: Sequence[ProcessSampleRow] = ()
        self._finished: dict[int, list[RollupRow]] = {}  # bucket -> its rows

    def add(self, ts: int, proc_rows: Sequence[ProcessSampleRow],
            use_rows: Sequence[GpuUseRow]) -> None:
        """A committed tick's proc_samples and proc_gpu_samples rows; ticks in ts order."""
        bucket = ts - ts % MINUTE_MS
        if bucket != self._bucket:
            self._finish()
            self._bucket = bucket
            self._tally = {}
            self._complete = self._opened_after < bucket - CPU_LOOKBACK_MS or (
                self._last_ts > self._opened_after)
            self._previous = ({row[1]: (self._last_ts, row[2]) for row in self._last_rows}
                              if self._last_ts >= bucket - CPU_LOOKBACK_MS else {})
        tally, previous = self._tally, self._previous
        for row in proc_rows:
            proc, cpu_ms, rss = row[1], row[2], row[3]
            accs = tally.get(proc)
            if accs is None:
                accs = tally[proc] = [None, None, None, None]
            if rss is not None:
                accs[3] = _add(accs[3], rss)
            before = previous.get(proc)
            previous[proc] = (ts, cpu_ms)
            if before is not None and ts > before[0] and cpu_ms >= before[1]:
                # tenths of a percent of one CPU, rounded half up
                accs[2] = _add(accs[2], ((cpu_ms - before[1]) * 2000
                                         // (ts - before[0]) + 1) // 2)
        # Per tick, a process's SM share and GPU memory are summed over the GPUs it holds.
        sm_sums: dict[int, int] = {}
        mem_sums: dict[int, int | None] = {}
        for _, proc, _, mem, sm in use_rows:
            if proc not in sm_sums:
                sm_sums[proc], mem_sums[proc] = sm, mem
                continue
            sm_sums[proc] += sm
            if mem is not None:
                held = mem_sums[proc]
                mem_sums[proc] = mem if held is None else held + mem
        for proc, sm in sm_sums.items():
            mem = mem_sums[proc]
            accs = tally.get(proc)
            if accs is None:
                accs = tally[proc] = [None, None, None, None]
            accs[0] = _add(accs[0], sm)
            if mem is not None:
                accs[1] = _add(accs[1], mem)
        self._last_ts, self._last_rows = ts, proc_rows

    def rows(self, bucket: int) -> list[RollupRow] | None:
        """The finished minute `bucket`'s rollup rows of every process (and forgotten), or None
        when this tally did not see all of it."""
        if bucket == self._bucket:
            return None  # not finished: a tick of a later minute finishes it
        return self._finished.pop(bucket, None)

    def _finish(self) -> None:
        if self._bucket is None or not self._complete:
            return
        head = (MINUTE, self._bucket, KIND_PROCESS)
        self._finished[self._bucket] = [
            (*head, proc, metric, *acc)
            for proc, accs in self._tally.items()
            for metric, acc in zip(_ORDER, accs, strict=True) if acc is not None]
        while len(self._finished) > FINISHED_KEPT:
            del self._finished[min(self._finished)]
