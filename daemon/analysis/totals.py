"""Per-GPU running totals since mlcostd started: dollars burned, dollars wasted, joules used.

The Prometheus counters (daemon.api.metrics) are these sums. They grow tick by tick over the
same interval the cost ledger charges (`CostLedger.add` returns it), so a GPU's dollars summed
over GPUs equal the host's GPU burn in the ledger, and `increase()` over any range gives dollars;
except while no GPU is read (NVML not started: `Burn.unread_gpus`), when the ledger charges the
host's price and no GPU is there to count it under (the host's counters have it).
They only grow while mlcostd runs; a restart starts them at 0 again, which Prometheus reads as a
counter reset. Energy is the GPU's measured power times the interval; a tick without a power
reading (unsupported, GPU lost) adds nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from daemon.analysis.cost import Burn
from daemon.sources.sample import Sample


@dataclass(frozen=True, slots=True)
class GpuTotal:
    """One GPU's totals so far."""

    index: int
    uuid: str
    name: str
    burn_dollars: float
    wasted_dollars: float
    energy_joules: float


class GpuTotals:
    """The running totals of every GPU seen, keyed by UUID (the index may be reused by another
    GPU after a reboot of the driver; the UUID may not). (The waste a workload's processes hold
    is charged by the ledger: CostLedger.by_workload.)"""

    def __init__(self) -> None:
        self._totals: dict[str, list[float]] = {}  # uuid -> [burn $, wasted $, joules]
        self._names: dict[str, tuple[int, str]] = {}  # uuid -> (index, model name)
        self.lock = threading.Lock()  # the loop adds, the API's render reads

    def add(self, sample: Sample, burn: Burn, seconds: float) -> None:
        """Charge one tick of `seconds` (what the ledger charged for it; 0 adds nothing, but a
        new GPU is listed at 0 at once: a counter shows from its first scrape)."""
        seconds = max(seconds, 0.0)
        hours = seconds / 3600.0
        by_index = {g.index: g for g in burn.gpus}
        with self.lock:
            for gpu in sample.gpus:
                key = gpu.uuid or f"gpu{gpu.index}"
                totals = self._totals.get(key)
                if totals is None:
                    totals = self._totals[key] = [0.0, 0.0, 0.0]
                self._names[key] = (gpu.index, gpu.name)
                priced = by_index.get(gpu.index)
                if priced is not None:
                    totals[0] += priced.price_per_hour * hours
                    totals[1] += priced.wasted_per_hour * hours
                if gpu.power_watts is not None and gpu.power_watts >= 0:
                    totals[2] += gpu.power_watts * seconds

    def snapshot(self) -> list[GpuTotal]:
        with self.lock:
            return [GpuTotal(self._names[key][0], key, self._names[key][1], *totals)
                    for key, totals in self._totals.items()]
