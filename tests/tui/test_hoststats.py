"""The host line reads this machine's /proc as top does: CPU busy share between two readings,
memory used (total - available), and the load averages."""

from __future__ import annotations

from mlcost_tui.hoststats import HostMeter
from mlcost_tui.panels.gpus import host_title
from tests.tui.conftest import FIXED_HOST


def write_proc(folder, busy: int, idle: int) -> None:
    (folder / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0\n")
    (folder / "meminfo").write_text("MemTotal:       16384000 kB\nMemFree:  1000 kB\n"
                                    "MemAvailable:    4096000 kB\n")


def test_cpu_share_between_readings_and_memory_used(tmp_path):
    write_proc(tmp_path, busy=100, idle=900)
    meter = HostMeter(tmp_path)
    write_proc(tmp_path, busy=130, idle=970)  # 30 busy of 100 jiffies since
    stats = meter.read()
    assert stats.cpu_percent is not None and round(stats.cpu_percent) == 30
    assert stats.memory_total_bytes == 16384000 * 1024
    assert stats.memory_used_bytes == (16384000 - 4096000) * 1024
    assert stats.load is not None and len(stats.load) == 3


def test_no_proc_reads_as_unknown(tmp_path):
    stats = HostMeter(tmp_path).read()
    assert stats.cpu_percent is None and stats.memory_total_bytes is None


def test_the_host_line():
    assert host_title(FIXED_HOST) == \
        "GPUs · host CPU 23% of 16 · memory 5.0G/16.0G · load 1.20 0.90 0.70"
    assert host_title(None) == "GPUs"
