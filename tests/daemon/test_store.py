"""daemon.store.writer: real SQLite files, one transaction per tick, rollups, retention, recovery."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from daemon.sources.sample import GpuSample, GpuUse, HostPressure, ProcessSample, Sample
from daemon.store import facts
from daemon.store.schema import GPU_METRICS, MINUTE, PROCESS_METRICS, SCHEMA_VERSION
from daemon.store.writer import ReaderTimeout, Store

T0 = 1_750_000_000.0  # a round start time, seconds


def gpu(index: int, rng: random.Random, **fields: object) -> GpuSample:
    values: dict[str, object] = dict(
        index=index,
        uuid=f"GPU-{index:04d}",
        name="NVIDIA H100 80GB HBM3",
        utilization=float(rng.randint(0, 100)),
        sm_activity=rng.randint(0, 1000) / 10,
        memory_used_bytes=rng.randint(0, 80 * 1024) << 20,
        memory_total_bytes=80 << 30,
        power_watts=rng.randint(60_000, 700_000) / 1000,
        temperature_c=rng.randint(30, 85),
        sm_clock_mhz=1980,
        memory_clock_mhz=2619,
    )
    values.update(fields)
    return GpuSample(**values)  # type: ignore[arg-type]


def process(
    pid: int, tick: int, rng: random.Random, n_gpus: int, **fields: object
) -> ProcessSample:
    values: dict[str, object] = dict(
        pid=pid,
        start_time=T0 - 1000 + pid,
        ppid=1,
        user="alice",
        command=f"python train.py --rank {pid}",
        gpus=(GpuUse(pid % n_gpus, rng.randint(1, 70_000) << 20, rng.randint(0, 1000) / 10),),
        cpu_seconds=tick * 0.9 + rng.random() * 0.5,
        rss_bytes=rng.randint(1, 5_000_000) * 4096,
        read_bytes=tick * 1_000_000,
        write_bytes=tick * 10_000,
        iowait_seconds=tick * 0.01,
        threads=12,
    )
    values.update(fields)
    return ProcessSample(**values)  # type: ignore[arg-type]


def make_sample(
    tick: int, ts: float, rng: random.Random, n_gpus: int = 2, n_processes: int = 3
) -> Sample:
    return Sample(
        ts=ts,
        tick=tick,
        gpus=tuple(gpu(i, rng) for i in range(n_gpus)),
        processes=tuple(process(100 + j, tick, rng, n_gpus) for j in range(n_processes)),
        host=HostPressure(1.5, 0.25, 3.0, tick * 100, tick * 50, tick * 300),
    )


def fill(store: Store, ticks: int, interval: float = 1.0, seed: int = 1, **kw: int) -> float:
    """Write `ticks` ticks from T0; returns the last ts."""
    rng = random.Random(seed)
    ts = T0
    for tick in range(1, ticks + 1):
        ts = T0 + (tick - 1) * interval
        assert store.write(make_sample(tick, ts, rng, **kw))
    return ts


def drain(store: Store) -> None:
    for _ in range(100_000):
        if not store.maintain(0.5):
            return
    raise AssertionError("maintain never finished")


def rows(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# ------------------------------------------------------------------------ round trip


def test_round_trip_keeps_values_and_none_fields(tmp_path: Path) -> None:
    sample = Sample(
        ts=T0 + 0.123,
        tick=7,
        gpus=(
            GpuSample(
                index=0,
                uuid="GPU-a",
                name="H100",
                utilization=37.5,
                sm_activity=12.3,
                memory_used_bytes=40 << 30,
                memory_total_bytes=80 << 30,
                power_watts=123.456,
                temperature_c=61,
                sm_clock_mhz=1980,
                memory_clock_mhz=2619,
            ),
            GpuSample(index=1, uuid="GPU-b", name="H100", status="lost", error="GPU is lost"),
        ),
        processes=(
            ProcessSample(
                pid=42,
                start_time=T0 - 10.5,
                ppid=1,
                user="bob",
                command="python serve.py",
                gpus=(GpuUse(0, 1 << 30, 25.5), GpuUse(1, None, 0.0)),
                cpu_seconds=12.345,
                rss_bytes=4096 * 1000,
                read_bytes=None,
                write_bytes=77,
                iowait_seconds=None,
                state="D",
                threads=9,
                threads_in_d=2,
            ),
            ProcessSample(pid=43, start_time=T0 - 1, ppid=42, user="bob", command="worker"),
        ),
        host=HostPressure(io_some_avg10=1.25, io_some_total_us=123456),
        nvml_status="ok",
    )
    path = tmp_path / "s.db"
    with Store(path) as store:
        assert store.write(sample)
    with Store.reader(path) as reader:
        got = reader.latest()
    assert got is not None
    assert got.gpus == sample.gpus  # None stays None (lost GPU), never 0
    assert got.gpus[1].utilization is None and got.gpus[1].memory_used_bytes is None
    assert got.processes == sample.processes
    assert got.host == sample.host
    assert (got.ts, got.tick, got.nvml_status) == (round(sample.ts, 3), 7, "ok")


def test_empty_store_and_unknown_status_text(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        assert Store.reader(path).latest() is None
        store.write(Sample(ts=T0, tick=1, nvml_status="driver/library version mismatch"))
        assert store.health.schema_version == SCHEMA_VERSION
    with Store.reader(path) as reader:
        latest = reader.latest()
        assert latest is not None and latest.nvml_status == "driver/library version mismatch"
        assert reader.query("PRAGMA user_version")[0]["user_version"] == SCHEMA_VERSION
        assert reader.query("PRAGMA journal_mode")[0]["journal_mode"] == "wal"


def test_a_finished_store_is_one_file_that_reading_leaves_alone(tmp_path: Path) -> None:
    """A read-only reader, the last to close a WAL-mode file, left its -wal and -shm beside it;
    finish() leaves a store no writer records into any more as one file, and refuses (the file
    as it was) while a writer still records into it."""
    from daemon.store.writer import StoreError, finish

    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 5)
        with pytest.raises(StoreError, match="cannot finish the store"):
            finish(path, timeout_s=0.1)
        assert rows(path, "PRAGMA journal_mode") == [("wal",)]
    finish(path)
    with Store.reader(path) as reader:  # read-only, as compare and the HTML page read it
        assert len(reader.query("SELECT ts FROM ticks")) == 5
        assert reader.query("PRAGMA journal_mode")[0]["journal_mode"] == "delete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]
    with Store(path) as store:  # a writer that opens it again records in WAL mode
        assert rows(path, "PRAGMA journal_mode") == [("wal",)]
    with pytest.raises(StoreError, match="cannot finish the store"):
        finish(tmp_path / "none.db")
    assert not (tmp_path / "none.db").exists()


def test_static_facts_are_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 50, n_gpus=2, n_processes=3)
    assert rows(path, "SELECT count(*) FROM gpus") == [(2,)]
    assert rows(path, "SELECT count(*) FROM processes") == [(3,)]
    assert rows(path, "SELECT count(*) FROM proc_samples") == [(150,)]
    # Reopen: the cached ids are reloaded, not re-inserted.
    with Store(path) as store:
        rng = random.Random(5)
        store.write(make_sample(51, T0 + 51, rng))
    assert rows(path, "SELECT count(*) FROM processes") == [(3,)]


def test_pid_reuse_is_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    rng = random.Random(2)
    first = process(500, 1, rng, 1, start_time=T0 - 100)
    second = process(500, 1, rng, 1, start_time=T0 + 5)
    with Store(path) as store:
        store.write(Sample(ts=T0, tick=1, processes=(first,)))
        store.write(Sample(ts=T0 + 10, tick=2, processes=(second,)))
        store.write(Sample(ts=T0 + 11, tick=3, processes=(second,)))
    assert rows(path, "SELECT pid, start_ms FROM processes ORDER BY start_ms") == [
        (500, round((T0 - 100) * 1000)),
        (500, round((T0 + 5) * 1000)),
    ]
    with Store.reader(path) as reader:
        summary = reader.window_summary(T0, T0 + 20)
        assert [(p["pid"], p["start_time"]) for p in summary["processes"]] == [
            (500, T0 - 100),
            (500, T0 + 5),
        ]
        assert reader.process_history(500, T0 + 5, "rss_bytes", T0, T0 + 20) != []
        assert len(reader.process_history(500, T0 - 100, "rss_bytes", T0, T0 + 20)) == 1


def test_each_tick_s_rows_name_its_own_processes_as_the_list_changes(tmp_path: Path) -> None:
    """The writer reuses the last tick's process ids while the list is the same; a list in
    another order, a pid reused, a process back after a gap, a tick that waited while the
    database was locked: each row still names the process it was written for."""
    path = tmp_path / "s.db"
    rng = random.Random(4)
    a, b = process(700, 1, rng, 1), process(701, 1, rng, 1)
    reused = process(700, 1, rng, 1, start_time=T0 + 30)
    lists = [(a, b), (a, b), (a, b), (b, a), (b, a), (b, reused), (b, reused), (a, b),
             (a, b), (), (a, b)]
    written: set[tuple[int, int, int, int]] = set()
    with Store(path) as store:
        for tick, procs in enumerate(lists, start=1):
            # each process's CPU time says which tick and process it was written for
            sample = Sample(ts=T0 + tick, tick=tick, processes=tuple(
                dataclasses.replace(p, cpu_seconds=tick + p.start_time % 1000)
                for p in procs))
            if tick == 6:  # the database locked: this tick waits in memory, the next
                other = sqlite3.connect(path)  # commits both
                other.execute("BEGIN IMMEDIATE")
                assert store.write(sample) is False
                other.rollback()
                other.close()
            else:
                assert store.write(sample)
            written |= {(round(sample.ts * 1000), p.pid, round(p.start_time * 1000),
                         round(p.cpu_seconds * 1000)) for p in sample.processes}
    stored = rows(path, "SELECT s.ts, p.pid, p.start_ms, s.cpu_ms FROM proc_samples s "
                  "JOIN processes p ON p.id = s.proc")
    assert set(stored) == written and len(stored) == len(written)


# ------------------------------------------------------------------------ rollups


def _aggregate(values: dict[tuple, list[int]]) -> dict[tuple, tuple[int, int, int, int]]:
    return {k: (len(v), sum(v), min(v), max(v)) for k, v in values.items() if v}


def _expected_rollups(path: Path, res_s: int) -> dict[tuple, tuple[int, int, int, int]]:
    """Recompute n, sum, min, max per bucket straight from raw rows, in Python."""
    width = res_s * 1000
    done = rows(path, "SELECT value FROM meta WHERE key = 'minute_done'")[0][0]
    if res_s == 3600:
        done = rows(path, "SELECT value FROM meta WHERE key = 'hour_done'")[0][0]
    columns = ["util", "sm", "mem", "power_mw", "temp"]
    values: dict[tuple, list[int]] = {}
    for ts, g, *vals in rows(
        path, f"SELECT ts, gpu, {', '.join(columns)} FROM gpu_samples WHERE ts < ?", (done,)
    ):
        for name, v in zip(GPU_METRICS, vals, strict=True):
            if v is not None:
                values.setdefault((ts - ts % width, 0, g, GPU_METRICS[name]), []).append(v)
    per_sample: dict[tuple[int, int], list[int]] = {}
    for ts, p, mem, sm in rows(
        path, "SELECT ts, proc, mem, sm FROM proc_gpu_samples WHERE ts < ?", (done,)
    ):
        acc = per_sample.setdefault((ts, p), [0, 0])
        acc[0] += mem
        acc[1] += sm
    for (ts, p), (mem, sm) in per_sample.items():
        bucket = ts - ts % width
        values.setdefault((bucket, 1, p, PROCESS_METRICS["gpu_memory_bytes"]), []).append(mem)
        values.setdefault((bucket, 1, p, PROCESS_METRICS["sm_share"]), []).append(sm)
    previous: dict[int, tuple[int, int]] = {}
    for ts, p, cpu, rss in rows(
        path, "SELECT ts, proc, cpu_ms, rss FROM proc_samples WHERE ts < ? ORDER BY ts", (done,)
    ):
        bucket = ts - ts % width
        values.setdefault((bucket, 1, p, PROCESS_METRICS["rss_bytes"]), []).append(rss)
        if p in previous:
            pts, pcpu = previous[p]
            rate = (cpu - pcpu) * 1000 / (ts - pts)
            values.setdefault((bucket, 1, p, PROCESS_METRICS["cpu_percent"]), []).append(
                int(rate + 0.5)
            )
        previous[p] = (ts, cpu)
    return _aggregate(values)


def test_rollups_equal_aggregates_of_raw_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 3 * 3600 + 300, n_gpus=2, n_processes=2)  # 3 h 5 min of 1 s ticks
        drain(store)
        assert store.hour_done - store.minute_done <= 0
    for res in (60, 3600):
        got = {
            (b, k, key, m): (n, s, lo, hi)
            for b, k, key, m, n, s, lo, hi in rows(
                path,
                "SELECT bucket, kind, key, metric, n, sum, min, max FROM rollups WHERE res = ?",
                (res,),
            )
        }
        expected = _expected_rollups(path, res)
        assert len(expected) > (100 if res == 60 else 10)
        assert got == expected
    hours = rows(path, "SELECT count(DISTINCT bucket) FROM rollups WHERE res = 3600")[0][0]
    assert hours == 3


def test_minute_rollups_tallied_as_ticks_are_written_equal_those_read_from_raw_rows(
        tmp_path: Path) -> None:
    """The writer tallies each minute's process rollups as its ticks commit (no re-read of the
    raw rows); a store reopened mid-minute cannot, and reads them. Both give the same rows, with
    processes coming and going, two GPUs a process, unknown memory, gaps between ticks."""
    rng = random.Random(7)
    samples, ts = [], T0 + 17.3
    for tick in range(1, 400):
        procs = []
        for j in range(8):
            if rng.random() < 0.2:
                continue  # not seen this tick
            uses: tuple[GpuUse, ...] = (GpuUse(j % 2, rng.randint(1, 9) << 20, 12.5),)
            if j % 3 == 0:
                uses = (GpuUse(0, None, rng.randint(0, 1000) / 10),
                        GpuUse(1, rng.choice([None, 5 << 20]), 1.25))
            procs.append(process(100 + j, tick, rng, 2, gpus=uses))
        samples.append(Sample(ts=ts, tick=tick, gpus=(gpu(0, rng), gpu(1, rng)),
                              processes=tuple(procs)))
        ts += rng.choice([0.5, 1.0, 1.0, 2.0, 7.0, 40.0])
    tallied, reopened = tmp_path / "tallied.db", tmp_path / "reopened.db"
    with Store(tallied) as store:
        for sample in samples:
            store.write(sample)
            store.maintain(1.0)  # between ticks, as the daemon does
    store = Store(reopened)
    for i, sample in enumerate(samples):
        store.write(sample)
        if i % 97 == 0:  # a restart: the minute it falls in is read from the raw rows
            store.close()
            store = Store(reopened)
    store.close()
    with Store(reopened) as store:
        drain(store)
    query = "SELECT * FROM rollups WHERE res = 60 AND kind = ? ORDER BY bucket, key, metric"
    expected = rows(reopened, query, (1,))
    assert len(expected) > 1000
    assert rows(tallied, query, (1,)) == expected


def test_history_reads_raw_minute_and_hour_data(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        last = fill(store, 3 * 3600, n_gpus=1, n_processes=1)
        drain(store)
    raw = rows(path, "SELECT util FROM gpu_samples WHERE gpu = 0 ORDER BY ts")
    mean = sum(r[0] for r in raw) / len(raw) / 10
    with Store.reader(path) as reader:
        short = reader.gpu_history(0, "utilization", last - 600, last, max_points=600)
        assert len(short) == 600  # raw: one point per tick
        assert short[-1][1] == raw[-1][0] / 10
        day = reader.gpu_history(0, "utilization", T0 - 1, last, max_points=300)
        assert 100 < len(day) <= 300
        lows = [p[2] for p in day]
        highs = [p[3] for p in day]
        assert min(lows) == min(r[0] for r in raw) / 10
        assert max(highs) == max(r[0] for r in raw) / 10
        long = reader.gpu_history(0, "power_watts", T0 - 30 * 86400, last, max_points=300)
        assert long and all(lo <= avg <= hi for _, avg, lo, hi in long)
        cpu = reader.process_history(100, T0 - 900, "cpu_percent", T0, last)
        assert cpu and all(0 <= avg <= 200 for _, avg, _, _ in cpu)
        util_all = reader.gpu_history(0, "utilization", T0 - 1, last, max_points=1)
        assert len(util_all) == 1 and util_all[0][1] == pytest.approx(mean)
        with pytest.raises(ValueError, match="unknown GPU metric"):
            reader.gpu_history(0, "fan_speed", T0, last)


def test_the_peak_memory_of_a_range_is_the_same_from_raw_rows_and_from_rollups(
        tmp_path: Path) -> None:
    """`memory_peak_bytes` (a GPU) and `gpu_memory_peak_bytes` (a process) are the most held
    at one tick, read from raw rows or from the minute rollups alike."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        last = fill(store, 300, n_gpus=2, n_processes=3)
        drain(store)
    # The minutes rolled up (the rollups leave out the last minute or two, still raw).
    buckets = rows(path, "SELECT min(bucket), max(bucket) FROM rollups WHERE res = ?",
                   (MINUTE,))[0]
    lo, hi = buckets[0], buckets[1] + MINUTE * 1000 - 1
    assert hi - lo >= 3 * 60_000 and hi < round(last * 1000)
    gpu_peak = dict(rows(path, "SELECT gpu, max(mem) FROM gpu_samples WHERE ts BETWEEN ? AND ?"
                               " GROUP BY gpu", (lo, hi)))
    proc_peak = dict(rows(path, "SELECT p.pid, max(g.mem) FROM proc_gpu_samples g JOIN processes"
                                " p ON p.id = g.proc WHERE g.ts BETWEEN ? AND ? GROUP BY g.proc",
                          (lo, hi)))
    with Store.reader(path) as reader:
        for summary in (reader.window_summary(lo / 1000, hi / 1000),
                        reader.rollup_summary(lo / 1000, hi / 1000)):
            assert {g["index"]: g["memory_peak_bytes"] for g in summary["gpus"]} == gpu_peak
            assert {p["pid"]: p["gpu_memory_peak_bytes"]
                    for p in summary["processes"]} == proc_peak
    assert len(set(gpu_peak.values())) == 2  # two GPUs, each its own figure


def test_a_report_from_rollups_counts_the_minutes_not_rolled_up_yet(tmp_path: Path) -> None:
    """The last minute or two are raw until maintenance rolls them up: a report from the
    rollups left them out of its averages and peaks, and left out a process that started in
    them (a job started a minute ago was missing from `report --since 24h`)."""
    path = tmp_path / "s.db"
    start = -(-T0 // 60) * 60  # a whole minute
    rng = random.Random(3)
    with Store(path) as store:
        for tick in range(1, 301):
            sample = make_sample(tick, start + tick - 1, rng, n_gpus=2, n_processes=2)
            if tick > 280:  # a process of the last 20 s, never rolled up here
                sample = dataclasses.replace(
                    sample, processes=(*sample.processes, process(999, tick, rng, 2)))
            assert store.write(sample)
        drain(store)
    last = start + 299
    assert rows(path, "SELECT max(bucket) FROM rollups WHERE res = ?", (MINUTE,))[0][0] < \
        round((last - 20) * 1000)  # its minute is not rolled up
    with Store.reader(path) as reader:
        raw = reader.window_summary(start, last)
        rolled = reader.rollup_summary(start, last)
    assert rolled["window"]["ticks"] == raw["window"]["ticks"] == 300
    assert [p["pid"] for p in rolled["processes"]] == [p["pid"] for p in raw["processes"]] \
        == [100, 101, 999]
    for a, b in zip(raw["gpus"], rolled["gpus"], strict=True):
        assert b["utilization"] == pytest.approx(a["utilization"])
        assert b["power_watts"] == pytest.approx(a["power_watts"])
        assert b["memory_peak_bytes"] == a["memory_peak_bytes"]
    for a, b in zip(raw["processes"], rolled["processes"], strict=True):
        assert b["sm_share"] == pytest.approx(a["sm_share"])
        assert b["gpu_memory_peak_bytes"] == a["gpu_memory_peak_bytes"]
    newest = rolled["processes"][2]
    assert newest["first_seen"] == start + 280 and newest["last_seen"] == last


def test_events_a_run_left_open_end_at_its_last_tick(tmp_path: Path) -> None:
    """Each event left open ends at the last tick of the run it started in: the first tick
    after its start that no tick follows within the gap (a store on which a version that did
    not end them ran again, and stopped with them open), marked as ended by the recording's
    stop; ended events, other kinds and a detail that is not an object are dealt with."""
    path = tmp_path / "m.db"
    rng = random.Random(3)
    store = Store(str(path))
    runs = [(T0, 100), (T0 + 3600, 50)]  # two runs an hour apart
    for start, count in runs:
        for i in range(count):
            assert store.write(make_sample(i + 1, start + i, rng))
    opened = [("gpu_unheld_idle", "gpu:1", T0 + 10, None, {"gpu": 1}),
              ("host_idle", "host", T0 + 3600 + 5, None, {"why": "every GPU is idle"}),
              ("gpu_held_idle", "gpu:0", T0 + 20, T0 + 30, {"gpu": 0}),  # ended: kept
              ("budget_exceeded", "host", T0 + 40, None, {"period": "daily"}),  # not lasting
              ("low_utilization", "1:2.000", T0 + 3600 + 40, None, [1, 2])]
    # and one from a run whose ticks retention removed: it ends where its spend reached
    opened.append(("host_idle", "host", T0 - 86400, None, {}))
    store.set_meta("spend_through", T0 - 86400 + 600.5)
    for kind, target, started, ended, detail in opened:
        facts.write_event(store, {"kind": kind, "target": target, "started_at": started,
                                  "ended_at": ended, "cost_so_far": 0.5, "detail": detail})
    facts.end_events_left_open(
        store, ("gpu_unheld_idle", "gpu_held_idle", "host_idle", "low_utilization"), 60.0)
    store.close()
    found = {(kind, target, started): (ended, json.loads(detail))
             for kind, target, started, ended, detail in rows(
                 path, "SELECT kind, target, started_at / 1000, ended_at, detail FROM events")}
    assert found == {
        ("host_idle", "host", T0 - 86400): ((T0 - 86400 + 600.5) * 1000,
                                            {"recording_stopped": True}),
        ("gpu_unheld_idle", "gpu:1", T0 + 10): ((T0 + 99) * 1000,
                                                {"gpu": 1, "recording_stopped": True}),
        ("host_idle", "host", T0 + 3605): ((T0 + 3649) * 1000,
                                           {"why": "every GPU is idle", "recording_stopped": True}),
        ("gpu_held_idle", "gpu:0", T0 + 20): ((T0 + 30) * 1000, {"gpu": 0}),
        ("budget_exceeded", "host", T0 + 40): (None, {"period": "daily"}),
        ("low_utilization", "1:2.000", T0 + 3640): ((T0 + 3649) * 1000,
                                                    {"recording_stopped": True}),
    }


def test_a_store_from_before_the_covering_series_index_is_migrated(tmp_path: Path) -> None:
    """The series index carries the rollups' values once a daemon opens an older store; the
    history it serves reads the same points, from the index alone."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        last = fill(store, 2 * 3600, n_gpus=1, n_processes=1)
        drain(store)
    history = "SELECT bucket, n, sum FROM rollups INDEXED BY rollups_series WHERE kind = 0" \
        " AND key = 0 AND metric = 0 AND res = 60"
    conn = sqlite3.connect(path)  # the index as schema version 9 made it
    conn.execute("DROP INDEX rollups_series")
    conn.execute("CREATE INDEX rollups_series ON rollups (kind, key, metric, res, bucket)")
    conn.execute("PRAGMA user_version = 9")
    conn.commit()
    assert "COVERING INDEX" not in str(conn.execute("EXPLAIN QUERY PLAN " + history).fetchall())
    conn.close()
    with Store.reader(path) as reader:
        before = reader.gpu_history(0, "utilization", T0 - 1, last, max_points=100)
    with Store(path) as store:
        assert store.health.schema_version == SCHEMA_VERSION
    assert [r[2] for r in rows(path, "PRAGMA index_info(rollups_series)")] == [
        "kind", "key", "metric", "res", "bucket", "n", "sum", "min", "max"]
    assert "COVERING INDEX rollups_series" in str(rows(path, "EXPLAIN QUERY PLAN " + history))
    with Store.reader(path) as reader:
        assert reader.gpu_history(0, "utilization", T0 - 1, last, max_points=100) == before
        assert len(before) > 50


# ------------------------------------------------------------------------ retention


def test_retention_by_age_keeps_what_is_not_rolled_up(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(
        path, raw_retention_s=600, minute_retention_s=2 * 3600, hour_retention_s=3 * 3600
    ) as store:
        last = fill(store, 4 * 360 + 30, interval=10.0, n_gpus=2, n_processes=2)
        drain(store)
        minute_done, hour_done = store.minute_done, store.hour_done
    newest = round(last * 1000)
    oldest_raw = rows(path, "SELECT min(ts) FROM ticks")[0][0]
    cut = newest - 600_000  # raw rows go a whole minute at a time: the cut's minute is kept
    assert cut - cut % 60_000 <= oldest_raw < cut - cut % 60_000 + 10_000
    for table in ("gpu_samples", "proc_samples", "proc_gpu_samples"):
        assert rows(path, f"SELECT min(ts) FROM {table}")[0][0] >= oldest_raw
    oldest_minute = rows(path, "SELECT min(bucket) FROM rollups WHERE res = 60")[0][0]
    assert oldest_minute >= min(newest - 2 * 3600_000, hour_done)
    assert oldest_minute < newest - 2 * 3600_000 + 3600_000
    assert rows(path, "SELECT min(bucket) FROM rollups WHERE res = 3600")[0][0] >= (
        newest - 3 * 3600_000
    )
    # Every minute between the minute rollups and the raw rows is still covered.
    assert minute_done >= oldest_raw


def test_raw_rows_past_their_retention_go_a_minute_at_a_time_once_a_minute(
        tmp_path: Path) -> None:
    """Past its raw retention a store deletes a minute of raw rows once a minute, not a tick's
    every tick, and keeps every raw row for at least the retention, at most a minute longer."""
    path = tmp_path / "s.db"
    rng = random.Random(3)
    oldest_seen = []
    with Store(path, raw_retention_s=120) as store:
        for tick in range(1, 8 * 60):
            ts = T0 + tick
            assert store.write(make_sample(tick, ts, rng))
            assert store.maintain(0.5) is False
            if tick > 4 * 60:  # past the retention (and its minute) for 3 minutes and more
                oldest = rows(path, "SELECT min(ts) FROM ticks")[0][0]
                newest = round(ts * 1000)
                assert newest - 120_000 - 60_000 < oldest <= newest - 120_000
                for table in ("gpu_samples", "proc_samples", "proc_gpu_samples"):
                    assert rows(path, f"SELECT min(ts) FROM {table}")[0][0] == oldest
                oldest_seen.append(oldest)
    changes = [(a, b) for a, b in zip(oldest_seen, oldest_seen[1:], strict=False) if a != b]
    assert len(changes) in (3, 4)  # once in each of the minutes written past the retention
    assert all(b - a == 60_000 and b % 60_000 == 0 for a, b in changes)


def test_retention_keeps_each_recommendation_text_in_force_at_the_oldest_tick(
        tmp_path: Path) -> None:
    from daemon.store import facts

    path = tmp_path / "s.db"
    with Store(path, raw_retention_s=600) as store:
        growing = {"id": "grows", "rule": "idle_gpu_held", "target": "gpu:0"}
        steady = {"id": "steady", "rule": "spot", "target": "host", "summary": "use spot",
                  "savings_per_month": 50.0}
        facts.write_recommendations(store, [steady], T0)  # said once, long before the cut
        for minute in range(40):  # a new text every minute for 40 minutes
            facts.write_recommendations(
                store, [dict(growing, summary=f"idle for {minute} min",
                             savings_per_month=float(minute))], T0 + 60 * minute + 5)
        fill(store, 40 * 6, interval=10.0)
        drain(store)
    oldest_tick = rows(path, "SELECT min(ts) FROM ticks")[0][0]
    assert oldest_tick > round(T0 * 1000) + 20 * 60_000  # the raw retention did cut
    kept = rows(path, "SELECT id, ts FROM recommendation_texts ORDER BY id, ts")
    grows = [ts for rec_id, ts in kept if rec_id == "grows"]
    # the text in force at the oldest tick, and every later one; nothing older
    assert grows[0] <= oldest_tick < grows[1]
    assert len(grows) == 40 - (grows[0] - round((T0 + 5) * 1000)) // 60_000
    assert grows[-1] == round((T0 + 60 * 39 + 5) * 1000)
    assert [ts for rec_id, ts in kept if rec_id == "steady"] == [round(T0 * 1000)]


def test_retention_keeps_each_meter_reading_in_force_at_the_cut(tmp_path: Path) -> None:
    """A price recorded once, at a start long before the hour retention, still prices the ticks
    after the cut; the readings before it go, and so do those of a meter read often."""
    path = tmp_path / "s.db"
    with Store(path, hour_retention_s=3 * 3600) as store:
        facts.write_meter_readings(store, T0, [("price", "host", 1.0, {"per_hour": 1.0})])
        facts.write_meter_readings(store, T0 + 60, [("price", "host", 2.0, {"per_hour": 2.0})])
        for minute in range(0, 5 * 60, 10):
            facts.write_meter_readings(store, T0 + 60 * minute,
                                       [("storage", "/data", float(minute), {})])
        fill(store, 5 * 360, interval=10.0)
        drain(store)
    newest = rows(path, "SELECT max(ts) FROM ticks")[0][0]
    cut = newest - 3 * 3600_000
    prices = rows(path, "SELECT ts, value FROM meter_readings WHERE kind = 'price'")
    assert prices == [(round((T0 + 60) * 1000), 2.0)]  # the one in force at the cut
    storage = [ts for (ts,) in rows(path, "SELECT ts FROM meter_readings "
                                          "WHERE kind = 'storage' ORDER BY ts")]
    assert storage[0] <= cut < storage[1]  # the one in force at the cut, and every later one
    assert storage[-1] == round((T0 + 60 * 290) * 1000)


def test_a_start_records_its_price_only_when_it_charges_another(tmp_path: Path) -> None:
    from daemon.analysis.cost import HostPrice
    from daemon.runtime.resume import record_price

    def price(per_hour: float, warning: str = "") -> HostPrice:
        return HostPrice(per_hour, 8, "on-demand", "p5.48xlarge", "aws", "us-east-1",
                         "catalog", None, warning=warning)

    path = tmp_path / "s.db"
    with Store(path) as store:
        assert record_price(store, price(55.0), T0) is True
        drain(store)
        # started again at the same price, its warning a day older: nothing new
        assert record_price(store, price(55.0, "460 days old"), T0 + 86400) is False
        assert record_price(store, price(60.0), T0 + 2 * 86400) is True  # a refreshed price
        drain(store)
    assert rows(path, "SELECT ts, value FROM meter_readings WHERE kind = 'price' "
                      "ORDER BY ts") == [(round(T0 * 1000), 55.0),
                                         (round((T0 + 2 * 86400) * 1000), 60.0)]


def test_retention_by_size_shrinks_file_and_keeps_unrolled_ticks(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    limit = 1 << 20
    with Store(path, max_bytes=limit) as store:
        fill(store, 30 * 60 + 30, n_gpus=8, n_processes=16)
        before = store.health.bytes_on_disk
        assert before > 2 * limit
        drain(store)
        minute_done = store.minute_done
        ticks_left = Store.reader(path).ticks(since=minute_done / 1000)
        assert os.path.getsize(path) <= limit
        assert store.health.bytes_on_disk <= limit
        assert store.health.rows_pruned > 0
    # Nothing not yet rolled up was deleted: the unfinished minute is complete.
    assert ticks_left == list(range(ticks_left[0], 30 * 60 + 31))
    assert ticks_left[0] == (minute_done - round(T0 * 1000)) // 1000 + 1
    assert rows(path, "SELECT count(DISTINCT bucket) FROM rollups WHERE res = 60")[0][0] >= 29


def test_maintain_respects_its_budget(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 2 * 3600, n_gpus=2, n_processes=4)
        assert store.maintain(budget_s=0.005) is True  # work left: one bounded unit done
        assert 0 < store.minute_done < round(T0 * 1000) + 2 * 3600_000 - 120_000
        calls = 1
        while store.maintain(budget_s=0.005):
            calls += 1
        assert calls > 5
        assert store.minute_done >= round(T0 * 1000) + 2 * 3600_000 - 60_000


def test_maintain_moves_on_each_call_however_little_budget_is_left(tmp_path: Path) -> None:
    """CI, on a loaded machine: the budget ran out before the first step, and a call did
    nothing; a daemon so starved would never roll a minute up nor delete a raw row. Each call
    rolls one minute up at least (and an hour, once its minutes are)."""
    with Store(tmp_path / "s.db") as store:
        fill(store, 2 * 3600, n_gpus=1, n_processes=2)
        before = store.minute_done
        assert store.maintain(budget_s=0.0) is True
        first = store.minute_done
        assert first > before
        assert store.maintain(budget_s=0.0) is True
        assert store.minute_done == first + 60_000  # one minute a call, no more
        calls = 2
        while store.maintain(budget_s=0.0) and calls < 1000:
            calls += 1
        assert store.minute_done >= round(T0 * 1000) + 2 * 3600_000 - 60_000
        assert store.reader(store.path).query(
            "SELECT count(*) AS n FROM rollups WHERE res = 3600")[0]["n"] > 0


# ------------------------------------------------------------------------ recovery


def test_file_that_is_not_a_database_is_moved_aside(tmp_path: Path, caplog) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not sqlite " * 500)
    with caplog.at_level("ERROR", logger="daemon.store.writer"), Store(path) as store:
        aside = store.health.corrupt_moved_aside
        assert aside and aside.startswith(str(path) + ".corrupt-")
        # said in the log, not only in /v1/health
        assert any(f"moved it aside to {aside}" in r.getMessage() for r in caplog.records)
        assert Path(aside).read_bytes().startswith(b"this is not sqlite")
        assert store.write(make_sample(1, T0, random.Random(1)))
    assert Store.reader(path).ticks() == [1]


def test_a_damaged_store_read_says_it_is_damaged_not_which_file_to_give(tmp_path: Path):
    """A report of a store damaged while a daemon records into it said "give the daemon's
    database": the daemon's database was the one given."""
    import sqlite3

    from daemon.store.shape import read_failure

    said = read_failure("/var/lib/mlcost/mlcost.db",
                        sqlite3.DatabaseError("database disk image is malformed"))
    assert "the file is damaged" in said and ".recover" in said
    assert "give the daemon's database" not in said
    assert "give the daemon's database" in read_failure("x.db", sqlite3.OperationalError("no"))


def test_store_failing_quick_check_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 300, n_gpus=4, n_processes=8)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 20 * page
    for offset in range(5 * page, len(data) - page, 3 * page):  # scribble over b-tree pages
        data[offset : offset + 200] = os.urandom(200)
    path.write_bytes(bytes(data))
    with Store(path) as store:
        assert store.health.corrupt_moved_aside is not None
        assert store.write(make_sample(1, T0, random.Random(1)))
    assert rows(path, "PRAGMA integrity_check") == [("ok",)]


def _big_sample(tick: int) -> Sample:
    # New processes with long command lines every tick: every tick needs new pages.
    return Sample(
        ts=T0 + tick,
        tick=tick,
        processes=tuple(
            ProcessSample(pid=tick * 10 + j, start_time=T0, ppid=1, user="u", command="x" * 3000)
            for j in range(4)
        ),
    )


def test_disk_full_buffers_then_writes_and_counts_drops(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, buffer_limit=5) as store:
        for tick in (1, 2, 3):
            assert store.write(_big_sample(tick))
        (pages,) = store.pragma("page_count")
        store.pragma("max_page_count", pages)
        for tick in range(4, 11):
            assert store.write(_big_sample(tick)) is False  # no exception
        health = store.health
        assert health.writes_failed >= 7
        assert health.samples_buffered == 5
        assert health.samples_dropped == 2  # ticks 4 and 5, the oldest
        assert "full" in (health.last_error or "")
        assert Store.reader(path).ticks() == [1, 2, 3]
        store.pragma("max_page_count", 1073741823)  # space returns
        assert store.write(_big_sample(11)) is True
        assert store.health.samples_buffered == 0
    assert Store.reader(path).ticks() == [1, 2, 3, 6, 7, 8, 9, 10, 11]


def test_disk_full_prunes_old_rolled_up_raw_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 600, n_gpus=8, n_processes=16)
        drain(store)
        (pages,) = store.pragma("page_count")
        (free,) = store.pragma("freelist_count")
        store.pragma("max_page_count", pages)
        rng = random.Random(9)
        written = 0
        for tick in range(601, 601 + 40 + free):
            written += store.write(make_sample(tick, T0 + tick, rng, n_gpus=8, n_processes=16))
        health = store.health
        assert health.rows_pruned > 0  # space came from the oldest rolled-up minutes
        assert written > 0
        assert health.samples_dropped == 0


def test_locked_database_buffers_then_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    rng = random.Random(3)
    with Store(path, busy_timeout_ms=20) as store:
        assert store.write(make_sample(1, T0, rng))
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        assert store.write(make_sample(2, T0 + 1, rng)) is False
        assert store.write(make_sample(3, T0 + 2, rng)) is False
        health = store.health
        assert health.samples_buffered == 2 and health.samples_dropped == 0
        assert "locked" in (health.last_error or "")
        other.execute("ROLLBACK")
        other.close()
        assert store.write(make_sample(4, T0 + 3, rng)) is True
    assert Store.reader(path).ticks() == [1, 2, 3, 4]


# ------------------------------------------------------------------------ readers


def test_reader_deadline_cuts_a_slow_query(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 5)
        reader = Store.reader(path, timeout_s=0.2)
        with pytest.raises(ReaderTimeout, match=r"cut off after .* \(deadline 0.2 s\)"):
            reader.query(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
                " SELECT count(*) FROM c"
            )
        assert not reader.conn.in_transaction  # no read snapshot left to starve checkpoints
        assert reader.ticks() == [1, 2, 3, 4, 5]
        busy, _, _ = store.pragma("wal_checkpoint", "TRUNCATE")
        assert busy == 0
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.conn.execute("DELETE FROM ticks")
        reader.close()


def test_window_summary_figures(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    a_start, b_start = T0 - 500, T0 - 50

    def a(cpu: float, read: int, iowait: float | None, d: int, uses: tuple) -> ProcessSample:
        return ProcessSample(
            pid=10, start_time=a_start, ppid=1, user="ann", command="python train.py",
            gpus=uses, cpu_seconds=cpu, rss_bytes=cpu * 1000 * 4096, read_bytes=read,
            iowait_seconds=iowait, threads_in_d=d, owner={"slurm_job": "42", "slurm_step": "0"},
        )  # fmt: skip

    b = ProcessSample(
        pid=11, start_time=b_start, ppid=10, user="ann", command="worker", cpu_seconds=5.0,
        rss_bytes=8192, read_bytes=None, write_bytes=3,
    )  # fmt: skip

    def g(util: float | None, power: float | None, mem: int | None, status: str = "ok"):
        ok = status == "ok"  # a lost GPU's reading has no memory facts
        return GpuSample(
            index=0, uuid="GPU-x", name="A100", status=status, utilization=util,
            power_watts=power, memory_used_bytes=mem, memory_total_bytes=40 << 30,
            memory_reserved_bytes=(512 << 20) if ok else None,
        )  # fmt: skip

    ticks = [
        Sample(T0, 1, (g(10, 100, 1 << 30),),
               (a(1.0, 100, None, 0, (GpuUse(0, 1 << 30, 50.0), GpuUse(1, 2 << 30, 10.0))),)),
        Sample(T0 + 2, 2, (g(20, 200, 2 << 30),),
               (a(2.0, 200, 0.5, 3, (GpuUse(0, 3 << 30, 30.0),)), b)),
        Sample(T0 + 4, 3, (g(None, 300, None, "lost"),), (a(3.0, 1100, 1.5, 1, ()),)),
        Sample(T0 + 6, 4, (g(90, 900, 9 << 30),), ()),  # outside the window
    ]  # fmt: skip
    with Store(path) as store:
        for sample in ticks:
            assert store.write(sample)
    with Store.reader(path) as reader:
        summary = reader.window_summary(T0, T0 + 4)
    assert summary["window"] == {"since": T0, "until": T0 + 4, "ticks": 3}
    (gpu0,) = summary["gpus"]
    assert gpu0 == {
        "index": 0,
        "uuid": "GPU-x",
        "name": "A100",
        "utilization": 15.0,  # mean of 10 and 20: the lost tick is not a 0
        "sm_activity": None,  # never read
        "memory_used_bytes": None,  # latest: lost
        "memory_peak_bytes": 2 << 30,  # the 9 GiB tick is outside the window
        "memory_total_bytes": 40 << 30,
        "memory_reserved_bytes": 512 << 20,  # kept from before the GPU was lost
        "power_watts": 200.0,
        "samples": 3,
        "status": "lost",
    }
    pa, pb = summary["processes"]
    assert pa == {
        "pid": 10,
        "start_time": a_start,
        "ppid": 1,
        "user": "ann",
        "command": "python train.py",
        "owner": {"slurm_job": "42", "slurm_step": "0"},  # read once, kept with its facts
        "workload": "slurm 42",
        "gpus": [0, 1],
        "gpu_memory_bytes": 0,  # holds nothing at its last sample
        # the most at one tick, over its GPUs: 1 + 2 GiB, then 3 GiB (not each GPU's peak
        # summed, 3 + 2)
        "gpu_memory_peak_bytes": 3 << 30,
        "sm_share": 30.0,  # (60 + 30 + 0) / 3 samples
        "cpu_percent": 50.0,  # 2 CPU seconds over 4 s
        "rss_bytes": 3000 * 4096,
        "io_wait_seconds": 1.0,  # first known 0.5 -> 1.5
        "read_bytes": 1000,
        "write_bytes": None,  # never known
        "threads_in_d_max": 3,
        "first_seen": T0,
        "last_seen": T0 + 4,
    }
    assert pb["pid"] == 11 and pb["ppid"] == 10 and pb["gpus"] == []
    assert (pb["owner"], pb["workload"]) == ({}, None)
    assert (pb["cpu_percent"], pb["write_bytes"], pb["read_bytes"]) == (0.0, 0, None)
    assert pb["first_seen"] == pb["last_seen"] == T0 + 2
    assert pb["sm_share"] == 0.0
    assert pb["gpu_memory_peak_bytes"] == 0  # never held a GPU


# ------------------------------------------------------------------------ size on disk


def test_bytes_per_gpu_sample_at_most_64(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    rng = random.Random(4)
    gpus = [tuple(gpu(i, rng) for i in range(8)) for _ in range(50)]
    with Store(path) as store:
        for tick in range(1, 10_001):
            store.write(Sample(ts=T0 + tick, tick=tick, gpus=gpus[tick % 50]))
    sizes = Store.reader(path).table_bytes()
    per_gpu_sample = sizes["gpu_samples"] / 80_000
    print(f"bytes per GPU-sample: {per_gpu_sample:.1f}, ticks per tick {sizes['ticks'] / 1e4:.1f}")
    assert per_gpu_sample <= 64


def test_bytes_per_process_sample(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 1000, n_gpus=8, n_processes=64)
    sizes = Store.reader(path).table_bytes()
    per_process = sizes["proc_samples"] / 64_000
    per_use = sizes["proc_gpu_samples"] / 64_000
    print(f"bytes per process-sample: {per_process:.1f} + per (process, GPU): {per_use:.1f}")
    assert per_process <= 64 and per_use <= 40


# ------------------------------------------------------------------------ crash safety

_WRITER = textwrap.dedent(
    """
    import random, sys, time
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
    from daemon.store.writer import Store

    store = Store(sys.argv[1], busy_timeout_ms=1000)
    tick = store.last_tick + 1
    rng = random.Random()
    while True:
        gpus = tuple(GpuSample(i, f"GPU-{i}", "H100", utilization=rng.random() * 100,
                               memory_used_bytes=rng.randint(0, 1 << 36)) for i in range(4))
        procs = tuple(ProcessSample(pid=100 + j, start_time=1.0, ppid=1, user="u",
                                    command="c", gpus=(GpuUse(j % 4, 1 << 30, 5.0),),
                                    cpu_seconds=tick * 0.5) for j in range(8))
        store.write(Sample(ts=time.time(), tick=tick, gpus=gpus, processes=procs))
        tick += 1
        store.maintain(0.002)
    """
)


def test_kill_9_loses_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    rng = random.Random()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    seen_max = 0
    for _ in range(5):
        writer = subprocess.Popen([sys.executable, str(script), str(path)], env=env)
        try:
            deadline = time.monotonic() + 0.3 + rng.random() * 0.7
            while time.monotonic() < deadline or seen_max == 0:
                if path.exists():
                    try:
                        got = rows(path, "SELECT max(tick) FROM ticks")[0][0]
                    except sqlite3.OperationalError:
                        got = None  # schema not created yet
                    seen_max = max(seen_max, got or 0)
                time.sleep(0.003)
                assert writer.poll() is None, "writer died on its own"
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        present = [r[0] for r in rows(path, "SELECT tick FROM ticks ORDER BY ts")]
        assert present == list(range(1, len(present) + 1)), "gap in committed ticks"
        assert present[-1] >= seen_max, "a tick a reader saw committed is gone"
    assert rows(path, "PRAGMA integrity_check") == [("ok",)]
    with Store(path) as store:
        assert store.health.corrupt_moved_aside is None


def test_the_process_id_cache_is_bounded_and_a_process_seen_again_keeps_its_row(tmp_path,
                                                                               monkeypatch):
    """Caches keyed by process are bounded (a host running short jobs sees thousands a day);
    a process that falls out of the cache and shows again keeps its one row, and a restart
    finds the rows of the processes it recorded before."""
    from daemon.store import writer
    from daemon.store.reader import StoreReader

    monkeypatch.setattr(writer, "PROCESS_CACHE_MAX", 8)
    path = tmp_path / "s.db"

    def one(tick: int, pid: int) -> Sample:
        proc = ProcessSample(pid=pid, start_time=1000.0 + pid, ppid=1, user="u", command="c")
        return Sample(ts=T0 + tick, tick=tick, gpus=(), processes=(proc,))

    store = Store(str(path))
    for tick, pid in enumerate([7, *range(100, 120), 7], start=1):
        assert store.write(one(tick, pid))
        assert store.processes_cached <= 9
    store.close()
    again = Store(str(path))
    assert again.write(one(100, 7)) and again.write(one(101, 105))
    again.close()
    reader = StoreReader(str(path))
    try:
        rows = reader.query("SELECT pid, count(*) AS n FROM processes GROUP BY pid")
        samples = reader.query("SELECT count(*) AS n FROM proc_samples")
    finally:
        reader.close()
    assert {r["pid"]: r["n"] for r in rows} == {7: 1, **{pid: 1 for pid in range(100, 120)}}
    assert samples[0]["n"] == 24


def _sqlite_library() -> ctypes.CDLL:
    """The SQLite library this interpreter's sqlite3 module runs on (found in our own maps)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libsqlite3" in line:
            library = ctypes.CDLL(line.split()[-1])
            library.sqlite3_memory_used.restype = ctypes.c_int64
            return library
    raise AssertionError("sqlite3 is not linked against a shared libsqlite3 here")


def test_the_writer_page_cache_stays_bounded_as_the_store_grows(tmp_path: Path) -> None:
    """The writer's page cache filled with the store up to 16 MB: the daemon's RSS grew with
    its database (bench/soak.py, target flat within 10 MB). A 20 MB store now holds a few."""
    sqlite = _sqlite_library()
    before = sqlite.sqlite3_memory_used()
    store = Store(str(tmp_path / "mlcost.db"))
    rng, tick = random.Random(7), 0
    while os.path.getsize(tmp_path / "mlcost.db") < 20 << 20:
        for _ in range(200):
            tick += 1
            assert store.write(make_sample(tick, T0 + tick, rng, n_gpus=8, n_processes=64))
            store.maintain(0.05)
        store.pragma("wal_checkpoint", "PASSIVE")
    held = sqlite.sqlite3_memory_used() - before
    store.close()
    assert held < 8 << 20, f"{held / 1e6:.1f} MB for a {tick}-tick store"


def test_fact_writes_in_a_batch_land_together_when_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path) as store:
        fill(store, 2)
        events = [{"kind": "low_utilization", "target": f"100:{n}.000", "started_at": T0 + n,
                   "ended_at": None, "detail": {"n": n}} for n in range(3)]
        with store.facts_batched():
            for event in events:
                facts.write_event(store, event)
            facts.write_event(store, dict(events[0], ended_at=T0 + 5))  # the same event, later
            assert rows(path, "SELECT count(*) FROM events") == [(0,)]  # none written yet
            assert store.health.facts_pending == 3
        assert store.health.facts_pending == 0
        assert rows(path, "SELECT target, ended_at FROM events ORDER BY target") == [
            ("100:0.000", round((T0 + 5) * 1000)), ("100:1.000", None), ("100:2.000", None)]
        facts.write_event(store, dict(events[1], ended_at=T0 + 6))  # outside: at once
        assert rows(path, "SELECT ended_at FROM events WHERE target = '100:1.000'") == [
            (round((T0 + 6) * 1000),)]


def test_a_process_that_execs_has_its_recorded_command_updated_across_restarts(
        tmp_path: Path) -> None:
    """The command line was written once, at first sight: a process that exec'd (a shim that
    became the program) kept the shim's in the store, and so in every report and replay."""
    path = tmp_path / "s.db"

    def tick(ts: float, tick: int, command: str) -> Sample:
        return Sample(ts=ts, tick=tick, processes=(
            ProcessSample(pid=42, start_time=T0 - 5, ppid=1, user="bob", command=command,
                          gpus=(GpuUse(0, 1 << 30, 10.0),)),))

    def recorded() -> list[str]:
        with Store.reader(path) as reader:
            return [r["command"] for r in reader.query("SELECT command FROM processes")]

    with Store(path) as store:
        assert store.write(tick(T0, 1, "bash /root/.pyenv/libexec/pyenv exec python train.py"))
        assert store.write(tick(T0 + 1, 2, "python train.py"))
        assert store.write(tick(T0 + 2, 3, "python train.py"))
    assert recorded() == ["python train.py"]
    with Store(path) as store:  # a restart: the row is found, its command compared with it
        assert store.write(tick(T0 + 3, 4, "python train.py --resumed"))
    assert recorded() == ["python train.py --resumed"]


def test_a_second_name_of_the_wal_left_by_a_killed_writer_is_taken_back(tmp_path: Path) -> None:
    """A writer killed between making `<db>-wal.kept-PID` (its WAL's second name, made while
    it checks a file cut short) and removing it left the WAL with two names: the next start
    refused the store as a file another may hold (CI, test_kill_9_loses_nothing_committed).
    The name of a writer that is gone is removed, or put back as the WAL where the WAL is
    not at its path; a live process's is left alone."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        assert store.write(make_sample(1, 1000.0, random.Random(1)))
    gone = subprocess.Popen(["true"])
    gone.wait()
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")
    os.chmod(wal, 0o600)
    os.link(wal, f"{wal}.kept-{gone.pid}")
    live = f"{wal}.kept-{os.getppid()}"  # a process that is there: not ours to touch
    Path(live).write_bytes(b"")
    with Store(path) as store:  # the old code: StoreError, "has 2 hard links"
        assert store.write(make_sample(2, 1001.0, random.Random(2)))
    assert not os.path.lexists(f"{wal}.kept-{gone.pid}") and os.path.lexists(live)
    assert [r[0] for r in rows(path, "SELECT tick FROM ticks ORDER BY tick")] == [1, 2]
    # the WAL gone from its path (the close had deleted it): its second name is put back
    os.unlink(live)
    kept = Path(f"{wal}.kept-{gone.pid}")
    kept.write_bytes(b"")
    os.chmod(kept, 0o600)
    if wal.exists():
        wal.unlink()
    with Store(path) as store:
        assert store.write(make_sample(3, 1002.0, random.Random(3)))
    assert not kept.exists()
    assert [r[0] for r in rows(path, "SELECT tick FROM ticks ORDER BY tick")] == [1, 2, 3]
