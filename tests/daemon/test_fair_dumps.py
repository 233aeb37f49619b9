"""Which processes in low-utilization windows get a stack dump when the sampler's rate limit
allows far fewer dumps than there are processes: every one in turn, not the first few again
and again."""

from __future__ import annotations

import asyncio
import math
from collections import Counter

from daemon.config import AttributionConfig
from daemon.runtime.attribution import SIGNAL_TICKS, Attribution
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.sources.stacks import NOT_PYTHON, RATE_LIMITED, DumpResult
from daemon.store.writer import Store

DUMPS_PER_TICK = 2  # py-spy's default dumps_per_second at a 1 s tick


class TokenSampler:
    """The real sampler's limits on the test's clock, without py-spy: DUMPS_PER_TICK tokens a
    tick (bursts up to twice that), one dump per process per `min_interval_s`; counts the dumps
    it ran and the requests it refused."""

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self.now = 0.0
        self.tokens = 0.0
        self.last_by_pid: dict[int, float] = {}
        self.dumps: Counter[int] = Counter()
        self.refused = 0

    def next_tick(self, now: float) -> None:
        self.now = now
        self.tokens = min(2.0 * DUMPS_PER_TICK, self.tokens + DUMPS_PER_TICK)

    def available(self) -> int:
        return int(self.tokens)

    async def dump(self, pid: int) -> DumpResult:
        last = self.last_by_pid.get(pid)
        if self.tokens < 1 or (last is not None and self.now - last < self.min_interval_s):
            self.refused += 1
            return DumpResult(pid, self.now, RATE_LIMITED, error="limit reached")
        self.tokens -= 1
        self.last_by_pid[pid] = self.now
        self.dumps[pid] += 1
        return DumpResult(pid, self.now, NOT_PYTHON, error="not a Python process")


def test_the_rate_limit_goes_round_every_process_in_a_window(tmp_path):
    """Forty processes in a window, two dumps a tick: after twenty ticks each has been dumped
    at least once and none more than ceil(2 x 20 / 40) + 1 times; no request is refused (the
    tick asks only for the dumps the sampler has), and the main thread's clock is read only for
    the processes whose dump is near (SIGNAL_TICKS x 2 a tick), not for all forty."""
    store = Store(tmp_path / "mlcost.db")
    procs = tuple(ProcessSample(50_000 + i, 1000.0 + i, 1, "ann", "python job.py",
                                (GpuUse(0, 1 << 30, 0.0),)) for i in range(40))
    gpu = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 40 << 30, 40 << 30)
    config = AttributionConfig(min_window=0.5, dump_interval=2.0,
                               dumps_per_second=float(DUMPS_PER_TICK))
    sampler = TokenSampler(config.dump_interval)
    attribution = Attribution(config, store, sampler, interval_s=1.0)  # type: ignore[arg-type]
    clocks_read = []
    times = attribution._main_threads.times

    def counted(pid: int, start_time: float):
        clocks_read[-1] += 1
        return times(pid, start_time)

    attribution._main_threads.times = counted  # type: ignore[method-assign]
    ticks = 20

    async def run() -> None:
        for tick in range(ticks):
            sampler.next_tick(4000.0 + tick)
            clocks_read.append(0)
            attribution.on_tick(Sample(4000.0 + tick, tick, gpus=(gpu,), processes=procs))
            await attribution.dumps_finished()
        await attribution.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()
    most = math.ceil(DUMPS_PER_TICK * ticks / len(procs)) + 1
    assert {p.pid for p in procs} <= set(sampler.dumps), sorted(sampler.dumps.items())
    assert max(sampler.dumps.values()) <= most, sampler.dumps.most_common(3)
    assert sampler.refused == 0
    assert max(clocks_read) <= SIGNAL_TICKS * DUMPS_PER_TICK < len(procs), clocks_read


def test_the_sampler_counts_a_dump_asked_for_and_not_yet_started_as_taken():
    """available() is what a caller may still ask for: the tokens, less the dumps waiting for
    the one py-spy at a time (they take theirs once they run)."""
    import os
    import sys

    from daemon.sources.stacks import StackSampler

    class NoPySpy(StackSampler):
        async def _run(self, pid: int, ts: float) -> DumpResult:
            return DumpResult(pid, ts, NOT_PYTHON, error="not run")

    now = [100.0]
    sampler = NoPySpy(py_spy=sys.executable, global_max_per_s=2.0, global_burst=4.0,
                      clock=lambda: now[0])

    async def run() -> list[int]:
        seen = [sampler.available()]
        await sampler._lock.acquire()  # a dump is running
        waiting = asyncio.create_task(sampler.dump(os.getpid()))
        while sampler._waiting == 0:
            await asyncio.sleep(0)
        seen.append(sampler.available())
        sampler._lock.release()
        result = await waiting
        assert result.status == NOT_PYTHON
        seen.append(sampler.available())
        return seen

    assert asyncio.run(run()) == [4, 3, 3]
