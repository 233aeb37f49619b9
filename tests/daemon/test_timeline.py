"""The report's timeline (daemon.analysis.timeline): fixed buckets over raw samples for short
windows and over rollups for long ones, agreeing with the raw rows they summarize."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.analysis import timeline
from daemon.analysis.cost import HostPrice
from daemon.store.writer import Store
from tests.daemon.test_store import T0, drain, fill, rows

PRICE = HostPrice.from_dict({"per_hour": 8.0, "gpu_count": 2})


@pytest.fixture(scope="module")
def two_hours(tmp_path_factory) -> tuple[Path, float]:
    path = tmp_path_factory.mktemp("timeline") / "s.db"
    with Store(path) as store:
        last = fill(store, 2 * 3600, n_gpus=2, n_processes=2)
        drain(store)
    return path, last


def test_a_short_window_reads_raw_samples_with_processes(two_hours):
    path, last = two_hours
    with Store.reader(path) as reader:
        found = timeline.build(reader, last - 300, last, PRICE)
    assert found["source"] == "raw" and found["bucket_s"] == 5
    buckets = found["buckets"]
    assert 60 <= len(buckets) <= 61
    first = buckets[1]  # a whole bucket: 5 ticks
    lo, hi = round(first["ts"] * 1000), round((first["ts"] + 5) * 1000)
    raw = rows(path, "SELECT util, mem FROM gpu_samples WHERE ts >= ? AND ts < ?", (lo, hi))
    assert first["samples"] == 5
    assert first["utilization"] == pytest.approx(sum(r[0] for r in raw) / len(raw) / 10)
    assert first["memory_used_bytes"] == pytest.approx(sum(r[1] for r in raw) / 5)
    assert first["burn_per_hour"] == pytest.approx(8.0)
    assert 0 <= first["wasted_per_hour"] <= 8.0
    assert set(first["gpus"]) == {"0", "1"}
    assert len(first["processes"]) == 2
    assert all(0 <= p["sm_share"] <= 100 for p in first["processes"].values())


def test_a_long_window_reads_rollups_and_keeps_the_mean(two_hours):
    path, last = two_hours
    with Store.reader(path) as reader:
        found = timeline.build(reader, T0, last, None)
    assert found["source"] == "rollups" and found["bucket_s"] == 60
    buckets = found["buckets"]
    assert 118 <= len(buckets) <= 121
    assert all(b["burn_per_hour"] is None and "processes" not in b for b in buckets)
    raw = rows(path, "SELECT avg(util) FROM gpu_samples")[0][0] / 10
    mean = sum(b["utilization"] for b in buckets) / len(buckets)
    assert mean == pytest.approx(raw, abs=0.5)  # equal minutes; the last one may be partial
