"""The report's timeline (daemon.analysis.timeline): fixed buckets over raw samples for short
windows and over rollups for long ones, agreeing with the raw rows they summarize."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.analysis import timeline
from daemon.analysis.cost import HostPrice
from daemon.analysis.price_history import PriceHistory
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
        found = timeline.build(reader, last - 300, last, PriceHistory.fixed(PRICE))
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
        found = timeline.build(reader, T0, last, PriceHistory.fixed(None))
    assert found["source"] == "rollups" and found["bucket_s"] == 60
    buckets = found["buckets"]
    assert 118 <= len(buckets) <= 121
    assert all(b["burn_per_hour"] is None and "processes" not in b for b in buckets)
    raw = rows(path, "SELECT avg(util) FROM gpu_samples")[0][0] / 10
    mean = sum(b["utilization"] for b in buckets) / len(buckets)
    assert mean == pytest.approx(raw, abs=0.5)  # equal minutes; the last one may be partial


def test_a_report_reads_a_crowded_host_s_ticks_once_within_the_row_budget(tmp_path,
                                                                         monkeypatch):
    """`report --since 1h` on a host of many processes: the raw ticks are read (and priced)
    once for the timeline, the cost and the energy, and no more of them than the process-row
    budget allows, so a short range costs no more than a long one read from the rollups."""
    from daemon.commands import report
    from daemon.store.reader import StoreReader

    path = tmp_path / "crowded.db"
    processes = 2 * 4096 // 30  # twice the rows of 30 ticks in the budget of process rows
    with Store(path) as store:
        store.set_meta("host", {"interval_s": 1.0, "price": {"per_hour": 8.0, "gpu_count": 2,
                                                             "electricity_per_kwh": 0.2}})
        last = fill(store, 120, n_gpus=2, n_processes=processes)
    reads: list[int] = []
    real = StoreReader.samples

    def counted(self, since, until, max_samples=600):
        found = real(self, since, until, max_samples=max_samples)
        if until > since:  # a window, not the latest tick alone (reader.latest)
            reads.append(len(found))
        return found

    monkeypatch.setattr(StoreReader, "samples", counted)
    with Store.reader(path) as reader:
        document = report.build(reader, 120, until=last)
    assert reads == [30]  # one read, 30 of the 120 ticks
    assert document["timeline"]["source"] == "raw" and document["timeline"]["bucket_s"] == 5
    buckets = document["timeline"]["buckets"]  # no narrower than the ticks read: none empty
    assert len(buckets) >= 120 // 5 - 1 and all(b["samples"] >= 1 for b in buckets)
    assert document["burn"]["total_per_hour"] == pytest.approx(8.0)
    assert document["energy"]["watts"] > 0 and document["spend"]["total"] > 0
    assert timeline.raw_sample_count(3) == timeline.MAX_RAW_SAMPLES  # a profile's few: all
