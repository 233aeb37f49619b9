"""A real Daemon (store, analyzer, tick path) whose sources are scripted: `collect` returns
known samples, so tests can drive ticks on their own loop and know every value exactly."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from daemon import config as config_module
from daemon.analysis.cost import HostPrice
from daemon.runtime.daemon import Daemon
from daemon.runtime.price_host import build_analyzer
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store

PRICE = HostPrice(per_hour=4.0, gpu_count=2, lifecycle="on-demand", instance_type="g5.12xlarge",
                  provider="aws", region="us-east-1", source="test price", as_of=None)
T0 = time.time() - 30  # when this module is imported: under xdist, possibly minutes before a test


def sample(i: int, utilization: tuple[float, float] = (12.0, 80.0), t0: float = T0) -> Sample:
    """Tick i: GPU 0 at 12 % (between the 5 % default and a 20 % setting), GPU 1 at 80 %; one
    process on GPU 1 that reads and computes."""
    gpus = tuple(GpuSample(n, f"GPU-{n}", "A10G", utilization=u, memory_used_bytes=1 << 30,
                           memory_total_bytes=24 << 30) for n, u in enumerate(utilization))
    proc = ProcessSample(4242, 1000.5, 1, "alice", "python train.py",
                         gpus=(GpuUse(1, 2 << 30, 70.0),), cpu_seconds=0.5 * i, rss_bytes=1 << 28,
                         read_bytes=1_000_000 * i, write_bytes=0, iowait_seconds=0.1 * i)
    return Sample(ts=t0 + i, tick=i, gpus=gpus, processes=(proc,))


def scripted_daemon(tmp_path: Path, idle_utilization: float = 5.0) -> Daemon:
    """A Daemon with its store (tmp_path/mlcost.db), host and analyzer at PRICE, its sources
    not yet scripted: set its `collect`."""
    config = config_module.from_dict({
        "daemon": {"db": str(tmp_path / "mlcost.db")},
        "idle": {"utilization": idle_utilization}}, where="test")
    daemon = Daemon(config)
    daemon.store = Store(str(daemon.db))
    daemon.host = {"hostname": "testhost", "interval_s": 1.0, "price": PRICE.as_dict(),
                   "idle_utilization_pct": idle_utilization}
    daemon.store.set_meta("host", daemon.host)
    daemon.analyzer = build_analyzer(config, PRICE, None)
    return daemon


def recording_daemon(tmp_path: Path, idle_utilization: float, ticks: int = 5,
                     t0: float = T0) -> Daemon:
    """A Daemon that has recorded `ticks` scripted samples through its real tick path (its
    store open: close it with daemon.store.close()), the first at t0 + 1. A test that asks for
    the last minutes (`since_s`, a phase window) passes t0=time.time() - 30: T0 is fixed at
    import, which may be long before the test runs."""
    daemon = scripted_daemon(tmp_path, idle_utilization)
    script = (sample(i, t0=t0) for i in itertools.count(1))  # more ticks: call daemon.tick_now()
    daemon.collect = lambda: next(script)  # type: ignore[method-assign]
    for _ in range(ticks):
        daemon.tick_now()
    return daemon
