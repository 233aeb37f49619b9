"""The rollup rows of a span of raw ticks: (kind, key, metric, n, sum, min, max) for each GPU
metric and each process metric, in the rollups' units.

Maintenance writes them for each finished minute (daemon.store.maintenance); a report from
rollups adds them for the minute or two not rolled up yet (StoreReader.rollup_summary), so a
process that started a minute ago and the last minute's readings are in a 24-hour report too.
"""

from __future__ import annotations

import sqlite3

from daemon.store.schema import KIND_GPU, KIND_PROCESS, PROCESS_METRICS

CPU_LOOKBACK_MS = 30 * 1000  # a cpu_percent pair needs its previous sample this close

Row = tuple[int, int, int, int, int, int, int]  # kind, key, metric, n, sum, min, max

# Each GPU metric's count, sum, min and max over [:b, :e) (metric codes: schema.GPU_METRICS).
GPU_ROWS = f"""
SELECT {KIND_GPU}, gpu, metric, count(v), sum(v), min(v), max(v) FROM (
    SELECT gpu, 0 AS metric, util AS v FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 1, sm FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 2, mem FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 3, power_mw FROM gpu_samples WHERE ts >= :b AND ts < :e
    UNION ALL SELECT gpu, 4, temp FROM gpu_samples WHERE ts >= :b AND ts < :e
) GROUP BY gpu, metric HAVING count(v) > 0
"""

# Per sample, a process's SM share and GPU memory are summed over the GPUs it holds.
_PROCESS_GPU = """
SELECT proc, count(sm), sum(sm), min(sm), max(sm), count(mem), sum(mem), min(mem), max(mem)
FROM (
    SELECT proc, sum(sm) AS sm, sum(mem) AS mem FROM proc_gpu_samples
    WHERE ts >= :b AND ts < :e GROUP BY ts, proc
) GROUP BY proc
"""


def gpu_rows(conn: sqlite3.Connection, begin: int, end: int) -> list[Row]:
    """The GPU rows of the ticks in [begin, end) (ms)."""
    return conn.execute(GPU_ROWS, {"b": begin, "e": end}).fetchall()


def process_rows(conn: sqlite3.Connection, begin: int, end: int) -> list[Row]:
    """The process rows of the ticks in [begin, end) (ms); cpu_percent (tenths) from
    consecutive samples, the first paired with the tick before `begin` when it is recent.

    Computed in Python: SQLite's window functions cost 3x more here.
    """
    rows: list[Row] = []
    for proc, *values in conn.execute(_PROCESS_GPU, {"b": begin, "e": end}):
        if values[0]:
            rows.append((KIND_PROCESS, proc, PROCESS_METRICS["sm_share"], *values[0:4]))
        if values[4]:
            rows.append((KIND_PROCESS, proc, PROCESS_METRICS["gpu_memory_bytes"], *values[4:8]))
    stats: dict[tuple[int, int], list[int]] = {}
    previous: dict[int, tuple[int, int]] = {}
    cpu_metric = PROCESS_METRICS["cpu_percent"]
    rss_metric = PROCESS_METRICS["rss_bytes"]

    def add(key: tuple[int, int], value: int) -> None:
        acc = stats.get(key)
        if acc is None:
            stats[key] = [1, value, value, value]
            return
        acc[0] += 1
        acc[1] += value
        if value < acc[2]:
            acc[2] = value
        elif value > acc[3]:
            acc[3] = value

    for ts, proc, cpu_ms, rss in conn.execute(
        "SELECT ts, proc, cpu_ms, rss FROM proc_samples WHERE ts >= ? AND ts < ?",
        (previous_tick(conn, begin), end),
    ):
        before = previous.get(proc)
        previous[proc] = (ts, cpu_ms)
        if ts < begin:
            continue
        if rss is not None:
            add((proc, rss_metric), rss)
        if before is not None and ts > before[0] and cpu_ms >= before[1]:
            # tenths of a percent of one CPU, rounded half up
            add((proc, cpu_metric), ((cpu_ms - before[1]) * 2000 // (ts - before[0]) + 1) // 2)
    rows.extend((KIND_PROCESS, proc, metric, *acc)  # type: ignore[misc]
                for (proc, metric), acc in stats.items())
    return rows


def previous_tick(conn: sqlite3.Connection, ts: int) -> int:
    """The tick before `ts` if it is recent enough to pair CPU counters with, else `ts`."""
    row = conn.execute(
        "SELECT max(ts) FROM ticks WHERE ts < ? AND ts >= ?", (ts, ts - CPU_LOOKBACK_MS)
    ).fetchone()
    return ts if row[0] is None else row[0]
