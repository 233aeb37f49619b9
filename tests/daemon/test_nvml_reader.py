"""A GPU reader thread survives an exception that is not NVML's (issue 10, item 5), and a step
of the wall clock."""

from __future__ import annotations

import threading
import time

from simhost import host_toml, wait_until

from daemon.config import NvmlConfig
from daemon.sources.nvml import NvmlSource, _Device
from daemon.sources.sample import GPU_ERROR, GPU_OK

FAST = NvmlConfig(call_deadline=0.5, retry_initial=0.2, retry_max=0.5)


def test_a_non_nvml_exception_marks_one_gpu_and_the_reader_goes_on(sim_host, monkeypatch):
    sim_host(host_toml(gpus=2), init=False)
    real_read = _Device.read
    failures = {"left": 3}
    lock = threading.Lock()

    def flaky_read(self):
        if self.index == 0:
            with lock:
                if failures["left"] > 0:
                    failures["left"] -= 1
                    raise ValueError("a driver answer we did not expect")
        return real_read(self)

    monkeypatch.setattr(_Device, "read", flaky_read)
    src = NvmlSource(FAST, 0.5)
    src.start()
    try:
        gpu0 = wait_until(lambda: next((g for g in src.latest()[1]
                                        if g.index == 0 and g.status == GPU_ERROR), None),
                          timeout=8)
        assert "ValueError: a driver answer we did not expect" in gpu0.error
        assert "retrying" in gpu0.error
        # the same thread reads GPU 0 again once the fault is gone
        wait_until(lambda: failures["left"] == 0 and next(
            (g for g in src.latest()[1] if g.index == 0 and g.status == GPU_OK), None),
            timeout=10)
        assert any(t.name.startswith("nvml-reader") and t.is_alive() for t in threading.enumerate())
    finally:
        src.stop()


def test_a_wall_clock_stepped_back_does_not_hold_the_reads(sim_host, monkeypatch):
    """The reads were due on the wall clock: stepped back an hour (NTP at boot, a VM resumed),
    each reader waited the hour and every GPU read "timeout" meanwhile (probe 115 F10)."""
    sim_host(host_toml(gpus=2), init=False)
    src = NvmlSource(FAST, 0.2)
    src.start()
    try:
        wait_until(lambda: src.read_at(0) is not None and src.read_at(1) is not None, timeout=8)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() - 3600.0)
        # both GPUs read again after the step, and again after that: the cadence goes on
        for _ in range(2):
            since = time.monotonic()
            wait_until(lambda since=since: all((src.read_at(i) or 0.0) > since for i in (0, 1)),
                       timeout=5)
        assert all(g.status == GPU_OK for g in src.latest()[1]), src.latest()[1]
    finally:
        src.stop()
