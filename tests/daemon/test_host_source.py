"""The host's CPU, memory and load (daemon/sources/host.py) read from /proc as top does: CPU
jiffies cumulative in the raw sample, the busy share derived between two ticks, memory used =
MemTotal - MemAvailable, the load averages; and how the /v1/now document carries them."""

from __future__ import annotations

import dataclasses
import os

import pytest

from daemon.analysis.derive import HostUsageModel, TickModel
from daemon.api.document import now_document
from daemon.sources.host import HostReader, read_host_usage
from daemon.sources.sample import HostUsageSample, Sample
from daemon.wire import Now


def write_proc(folder, busy: int, idle: int, iowait: int = 0) -> None:
    (folder / "stat").write_text(f"cpu  {busy} 0 0 {idle} {iowait} 0 0 0 0 0\n"
                                 "cpu0 1 0 0 1 0 0 0 0\nintr 12345 0 0\n")
    (folder / "meminfo").write_text("MemTotal:       16384000 kB\nMemFree:  1000 kB\n"
                                    "MemAvailable:    4096000 kB\nBuffers: 10 kB\n")


def test_cpu_share_between_two_readings_and_memory_used(tmp_path):
    write_proc(tmp_path, busy=100, idle=900)
    before = read_host_usage(tmp_path)
    write_proc(tmp_path, busy=130, idle=960, iowait=10)  # 30 busy of 100 jiffies since
    now = read_host_usage(tmp_path)
    assert (now.cpu_busy_ticks, now.cpu_total_ticks) == (130, 1100)  # iowait is not busy
    model = HostUsageModel.from_samples(now, before)
    assert model.cpu_percent == pytest.approx(30.0)
    assert model.memory_total_bytes == 16384000 * 1024
    assert model.memory_used_bytes == (16384000 - 4096000) * 1024
    assert model.load is not None and len(model.load) == 3 and min(model.load) >= 0
    assert model.cpus == (os.cpu_count() or 1)


def test_the_first_reading_has_no_cpu_share_yet(tmp_path):
    write_proc(tmp_path, busy=100, idle=900)
    model = HostUsageModel.from_samples(read_host_usage(tmp_path), None)
    assert model.cpu_percent is None and model.memory_total_bytes == 16384000 * 1024


def test_iowait_stepping_back_never_reads_beyond_0_to_100(tmp_path):
    write_proc(tmp_path, busy=100, idle=900, iowait=50)
    before = read_host_usage(tmp_path)
    write_proc(tmp_path, busy=100, idle=1000, iowait=0)  # iowait went back (tickless kernels)
    share = HostUsageModel.from_samples(read_host_usage(tmp_path), before).cpu_percent
    assert share is not None and 0.0 <= share <= 100.0


def test_no_proc_reads_as_unknown_not_as_zero(tmp_path):
    usage = read_host_usage(tmp_path)
    assert usage.cpu_busy_ticks is None and usage.memory_total_bytes is None
    assert usage.memory_used_bytes is None
    assert HostUsageModel.from_samples(usage, usage).cpu_percent is None


def test_a_garbled_proc_stat_reads_as_unknown(tmp_path):
    (tmp_path / "stat").write_text("cpu  one two three four five\n")
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\n")  # no MemAvailable: used unknown
    usage = read_host_usage(tmp_path)
    assert usage.cpu_total_ticks is None
    assert (usage.memory_used_bytes, usage.memory_total_bytes) == (None, 100 * 1024)


def test_this_machines_proc_reads_in_range():
    first = read_host_usage()
    assert first.cpu_total_ticks is not None and first.cpu_busy_ticks is not None
    assert 0 <= first.cpu_busy_ticks <= first.cpu_total_ticks
    assert first.memory_used_bytes is not None and first.memory_total_bytes is not None
    assert 0 < first.memory_used_bytes <= first.memory_total_bytes


def usage(busy: int, total: int) -> HostUsageSample:
    return HostUsageSample(cpu_busy_ticks=busy, cpu_total_ticks=total,
                           memory_used_bytes=3 << 30, memory_total_bytes=8 << 30,
                           load=(0.5, 0.25, 0.125), cpus=4)


def test_the_document_carries_the_host_usage_and_the_wire_reads_it():
    previous = Sample(ts=100.0, tick=1, host_usage=usage(1000, 4000))
    sample = Sample(ts=101.0, tick=2, host_usage=usage(1100, 4400))  # 100 of 400 jiffies
    doc = now_document(host={"hostname": "gpu1"}, sample=sample, previous=previous, tick=2,
                       idle_utilization_pct=5.0)
    assert doc["host_usage"] == {"cpu_percent": pytest.approx(25.0), "cpus": 4,
                                 "memory_used_bytes": 3 << 30, "memory_total_bytes": 8 << 30,
                                 "load": [0.5, 0.25, 0.125]}
    host = Now.from_dict(doc).host_usage
    assert host is not None and host.cpu_percent == pytest.approx(25.0) and host.cpus == 4
    assert host.load == (0.5, 0.25, 0.125) and host.memory_used_bytes == 3 << 30


def test_a_sample_without_host_usage_gives_none_in_the_document():
    """A replayed tick (the store does not record host usage) and a document before the first
    tick say nothing about the host, rather than zeros."""
    replayed = Sample(ts=101.0, tick=2)
    assert TickModel.from_samples(replayed, None, {}).host_usage is None
    doc = now_document(host={}, sample=replayed, previous=None, tick=2,
                       idle_utilization_pct=5.0)
    assert doc["host_usage"] is None and Now.from_dict(doc).host_usage is None
    before_first = now_document(host={}, sample=None, previous=None, tick=0,
                                idle_utilization_pct=5.0)
    assert before_first["host_usage"] is None


def test_an_older_daemons_document_parses_with_no_host_usage():
    old = {"version": 1, "ts": 1.0, "tick": 3, "host": {"hostname": "old"}, "gpus": [],
           "processes": []}
    assert Now.from_dict(old).host_usage is None
    odd = dict(old, host_usage={"cpu_percent": "high", "load": [1.0, "x", 2.0]})
    host = Now.from_dict(odd).host_usage
    assert host is not None and host.cpu_percent is None and host.load is None


def test_a_kept_reader_reads_each_tick_what_the_files_say_now(tmp_path):
    write_proc(tmp_path, busy=100, idle=900)
    reader = HostReader(tmp_path)
    try:
        first = reader.read()
        write_proc(tmp_path, busy=130, idle=960)  # rewritten in place, as /proc changes
        now = reader.read()
    finally:
        reader.close()
    assert (first.cpu_busy_ticks, first.cpu_total_ticks) == (100, 1000)
    assert (now.cpu_busy_ticks, now.cpu_total_ticks) == (130, 1090)
    assert now == dataclasses.replace(read_host_usage(tmp_path), load=now.load)


def test_a_kept_reader_picks_up_a_file_that_was_missing(tmp_path):
    reader = HostReader(tmp_path)
    try:
        assert reader.read().cpu_total_ticks is None  # no /proc/stat yet: unknown
        write_proc(tmp_path, busy=100, idle=900)
        assert reader.read().cpu_total_ticks == 1000  # opened at the next read
    finally:
        reader.close()


def test_a_kept_reader_closes_its_files(tmp_path):
    write_proc(tmp_path, busy=100, idle=900)
    before = set(os.listdir("/proc/self/fd"))
    reader = HostReader(tmp_path)
    reader.read()
    assert len(set(os.listdir("/proc/self/fd")) - before) == 2  # stat and meminfo, kept
    reader.close()
    assert set(os.listdir("/proc/self/fd")) - before == set()
