"""Stack dumps start at a random point within their tick: dumps only at the tick read a loop
whose period divides the interval between them at the same point of its step every time (the
starved profile's loop, two steps to a dump on a loaded host, read half compute for a third)."""

from __future__ import annotations

import asyncio

from daemon.config import AttributionConfig
from daemon.runtime.attribution import Attribution
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.sources.stacks import NOT_PYTHON, DumpResult
from daemon.store.writer import Store

SPREAD_S = 0.2
TICKS = 12


class StartTimes:
    """A sampler without py-spy that notes when each dump starts, on the loop's clock."""

    def __init__(self) -> None:
        self.started: list[float] = []

    def available(self) -> int:
        return 1

    async def dump(self, pid: int) -> DumpResult:
        self.started.append(asyncio.get_running_loop().time())
        return DumpResult(pid, 0.0, NOT_PYTHON, error="not a Python process")


def test_each_dump_starts_at_a_random_point_within_its_tick(tmp_path):
    store = Store(tmp_path / "mlcost.db")
    proc = ProcessSample(50_000, 1000.0, 1, "ann", "python train.py", (GpuUse(0, 1 << 30, 0.0),))
    gpu = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 40 << 30, 40 << 30)
    config = AttributionConfig(min_window=0.5, dump_interval=1.0, dumps_per_second=1.0)
    sampler = StartTimes()
    attribution = Attribution(config, store, sampler,  # type: ignore[arg-type]
                              interval_s=1.0, dump_spread_s=SPREAD_S)
    offsets = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for tick in range(TICKS):
            taken = loop.time()
            attribution.on_tick(Sample(4000.0 + tick, tick, gpus=(gpu,), processes=(proc,)))
            await attribution.dumps_finished()
            offsets.append(sampler.started[-1] - taken)
        await attribution.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()
    assert len(sampler.started) == TICKS  # one a tick: the spread takes none away
    # Each waited a uniform 0..0.2 s first: three in four wait 0.05 s or more (at least 3 of
    # 12 fall short of that once in ~30,000 runs); without the spread none do.
    assert sum(offset >= 0.05 for offset in offsets) >= 3, offsets
    assert len({round(offset, 3) for offset in offsets}) > 1, offsets


def test_the_spread_is_at_most_half_the_dump_interval_and_the_samplers_limit_leaves_room(
        tmp_path):
    """The turns come every dump_interval on the tick grid; two dumps a turn apart, the first
    late in its tick and the second early, are dump_interval less the spread apart: the
    sampler's own limit per process is that, so it does not refuse the second."""
    store = Store(tmp_path / "mlcost.db")
    try:
        config = AttributionConfig(dump_interval=0.5)
        wide = Attribution(config, store, interval_s=0.25, dump_spread_s=1.0)
        assert wide.dump_spread_s == 0.25 and wide.sampler.min_interval_s == 0.25
        at_tick = Attribution(config, store, interval_s=0.25)
        assert at_tick.dump_spread_s == 0.0 and at_tick.sampler.min_interval_s == 0.5
    finally:
        store.close()
