"""A GPU reader thread survives an exception that is not NVML's (issue 10, item 5)."""

from __future__ import annotations

import threading

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
