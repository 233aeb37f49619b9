"""The TUI tests see a fixed host line (CPU, memory, load of 'this machine'), so what they
render does not depend on the machine that runs them."""

from __future__ import annotations

import pytest

from mlcost_tui.hoststats import HostStats

FIXED_HOST = HostStats(cpu_percent=23.0, memory_used_bytes=5 << 30,
                       memory_total_bytes=16 << 30, load=(1.2, 0.9, 0.7), cpus=16)


class FixedMeter:
    def read(self) -> HostStats:
        return FIXED_HOST


@pytest.fixture(autouse=True)
def fixed_host_line(monkeypatch):
    monkeypatch.setattr("mlcost_tui.app.HostMeter", FixedMeter)
