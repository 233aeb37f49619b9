"""The processes' minute rollups, tallied as ticks are committed, so that rolling a minute up
does not read its raw rows back (at 256 processes 15 000 proc_samples and as many GPU uses a
minute: ~55 ms a minute, most of the writer's housekeeping; issue 23).

`ProcessMinutes` is fed each committed tick's process and GPU-use rows (daemon.store.tick_rows),
keeps the minute's columns it needs, and when the minute ends tallies, per process and metric,
count, sum, min and max: the rows of `rollups` that `rollup_rows.process_rows` computes
from the raw rows, the same numbers. Column by column, in runs of ticks with the same processes:
a tally per row, as each tick came, cost 0.35 ms a tick at 256 processes. It answers only
for a minute whose every tick it saw, from the tick before it on (the CPU percentage of a
minute's first sample pairs with the tick before, as the SQL path does); for any other (the
minute a daemon started in, one dropped from the bound) the caller reads the raw rows as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import cast

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
# Columns of the rows (daemon.store.tick_rows), read column by column in C.
_ROW_PROC, _ROW_CPU_MS, _ROW_RSS = itemgetter(1), itemgetter(2), itemgetter(3)
_USE_MEM, _USE_SM = itemgetter(3), itemgetter(4)  # (and its proc: _ROW_PROC)

Stats = list[int]  # [n, sum, min, max] of one process's metric
# A tick's rows by column, one entry per process: its ts, the process ids and two metrics'
# values (cpu_ms and rss of proc_samples; SM share and GPU memory, summed over the GPUs).
TickColumns = tuple[int, tuple[int, ...], tuple[int, ...], tuple[int | None, ...]]


def _merge(stats: Stats | None, values: Sequence[int]) -> Stats:
    """`stats` with `values` added (`values` not empty)."""
    low, high = min(values), max(values)
    if stats is None:
        return [len(values), sum(values), low, high]
    return [stats[0] + len(values), stats[1] + sum(values), min(stats[2], low),
            max(stats[3], high)]


def _known(values: tuple[int | None, ...]) -> tuple[int, ...]:
    """The values that are known (most runs: all of them, the tuple itself)."""
    if None in values:
        return tuple(value for value in values if value is not None)
    return cast("tuple[int, ...]", values)


def _runs(ticks: list[TickColumns]) -> Iterator[tuple[tuple[int, ...], tuple[int, ...],
                                                      list[tuple[int, ...]],
                                                      list[tuple[int | None, ...]]]]:
    """The ticks in runs of the same processes in the same order (a minute is one run while
    no process comes or goes), each as its ts, its processes and, per process, each metric's
    values over the run: the columns turned around in C (zip) instead of a Python step per
    process per tick."""
    start = 0
    while start < len(ticks):
        procs = ticks[start][1]
        end = start + 1
        while end < len(ticks) and ticks[end][1] == procs:
            end += 1
        run = ticks[start:end]
        firsts = list(zip(*(tick[2] for tick in run), strict=True))
        seconds = list(zip(*(tick[3] for tick in run), strict=True))
        yield tuple(tick[0] for tick in run), procs, firsts, seconds
        start = end


def _summed_per_process(procs: tuple[int, ...], sms: tuple[int, ...],
                        mems: tuple[int | None, ...]) -> tuple[tuple[int, ...], tuple[int, ...],
                                                             tuple[int | None, ...]]:
    """A tick's GPU uses with a process on several GPUs: its SM share and memory summed (its
    memory None when no GPU knew it)."""
    sm_sums: dict[int, int] = {}
    mem_sums: dict[int, int | None] = {}
    for proc, sm, mem in zip(procs, sms, mems, strict=True):
        if proc not in sm_sums:
            sm_sums[proc], mem_sums[proc] = sm, mem
            continue
        sm_sums[proc] += sm
        if mem is not None:
            held = mem_sums[proc]
            mem_sums[proc] = mem if held is None else held + mem
    return tuple(sm_sums), tuple(sm_sums.values()), tuple(mem_sums.values())


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
        # The minute's ticks by column (tallied when it ends): cpu_ms and rss; SM and memory.
        self._samples: list[TickColumns] = []
        self._uses: list[TickColumns] = []
        self._previous: dict[int, tuple[int, int]] = {}  # process id -> (ts, cpu_ms) before
        self._last: tuple[int, tuple[int, ...], tuple[int, ...]] = (0, (), ())  # ts, procs, cpu
        self._finished: dict[int, list[RollupRow]] = {}  # bucket -> its rows

    def add(self, ts: int, proc_rows: Sequence[ProcessSampleRow],
            use_rows: Sequence[GpuUseRow]) -> None:
        """A committed tick's proc_samples and proc_gpu_samples rows; ticks in ts order."""
        bucket = ts - ts % MINUTE_MS
        if bucket != self._bucket:
            self._finish()
            last_ts, last_procs, last_cpus = self._last
            self._bucket = bucket
            self._samples, self._uses = [], []
            self._complete = self._opened_after < bucket - CPU_LOOKBACK_MS or (
                last_ts > self._opened_after)
            # a minute's first CPU sample pairs with the tick before it, if recent enough
            self._previous = ({proc: (last_ts, cpu) for proc, cpu in zip(last_procs, last_cpus,
                                                                         strict=True)}
                              if last_ts >= bucket - CPU_LOOKBACK_MS else {})
        procs: tuple[int, ...] = ()
        cpus: tuple[int, ...] = ()
        if proc_rows:
            procs, cpus = tuple(map(_ROW_PROC, proc_rows)), tuple(map(_ROW_CPU_MS, proc_rows))
            self._samples.append((ts, procs, cpus, tuple(map(_ROW_RSS, proc_rows))))
        if use_rows:
            use_procs = tuple(map(_ROW_PROC, use_rows))
            mems, sms = tuple(map(_USE_MEM, use_rows)), tuple(map(_USE_SM, use_rows))
            if len(set(use_procs)) < len(use_procs):
                use_procs, sms, mems = _summed_per_process(use_procs, sms, mems)
            self._uses.append((ts, use_procs, sms, mems))
        self._last = (ts, procs, cpus)

    def rows(self, bucket: int) -> list[RollupRow] | None:
        """The finished minute `bucket`'s rollup rows of every process (and forgotten), or None
        when this tally did not see all of it."""
        if bucket == self._bucket:
            return None  # not finished: a tick of a later minute finishes it
        return self._finished.pop(bucket, None)

    def _finish(self) -> None:
        if self._bucket is None or not self._complete:
            return
        tally: dict[int, list[Stats | None]] = {}  # process id -> stats per metric (_ORDER)
        previous = self._previous
        for stamps, procs, cpus, rsses in _runs(self._samples):
            steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
            first = stamps[0]
            for proc, cpu, rss in zip(procs, cpus, rsses, strict=True):
                stats = tally.get(proc)
                if stats is None:
                    stats = tally[proc] = [None, None, None, None]
                stats[3] = _merge(stats[3], cast("tuple[int, ...]", rss))  # never None
                # tenths of a percent of one CPU, rounded half up, from consecutive samples
                percents = [((after - before) * 2000 // step + 1) // 2 for before, after, step
                            in zip(cpu, cpu[1:], steps, strict=False) if after >= before]
                earlier = previous.get(proc)
                if earlier is not None and first > earlier[0] and cpu[0] >= earlier[1]:
                    percents.append(((cpu[0] - earlier[1]) * 2000 // (first - earlier[0])
                                     + 1) // 2)
                if percents:
                    stats[2] = _merge(stats[2], percents)
                previous[proc] = (stamps[-1], cpu[-1])
        for _, procs, sms, mems in _runs(self._uses):
            for proc, sm, mem in zip(procs, sms, mems, strict=True):
                stats = tally.get(proc)
                if stats is None:
                    stats = tally[proc] = [None, None, None, None]
                stats[0] = _merge(stats[0], sm)
                known = _known(mem)
                if known:
                    stats[1] = _merge(stats[1], known)
        head = (MINUTE, self._bucket, KIND_PROCESS)
        self._finished[self._bucket] = [
            (*head, proc, metric, *acc)
            for proc, accs in tally.items()
            for metric, acc in zip(_ORDER, accs, strict=True) if acc is not None]
        while len(self._finished) > FINISHED_KEPT:
            del self._finished[min(self._finished)]
