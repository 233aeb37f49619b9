"""A process in a low-utilization window gets its turn (a stack dump, or a /proc sample where
there are no stacks) every dump_interval by the tick grid, whatever the ticks' jitter of a few
milliseconds. `ts - last >= dump_interval` made a tick that came 0.999 s after the last turn's
wait for one more tick: in the accuracy bench (1 s ticks, dump_interval = 1 s) every process
was dumped at ticks 40, 41, 43, 45, 47, 48, ... (its recorded ticks were 1.001 and 0.999 s
apart in turn): half the samples it asked for, and a short window of a rank often had none."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import pytest

from daemon.config import AttributionConfig
from daemon.runtime.attribution import Attribution
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.sources.stacks import NOT_PYTHON, DumpResult
from daemon.store.writer import Store

GPU = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 1 << 30, 40 << 30)
# The ticks of one bench run as recorded (ms past a whole 100 s), 1.001 and 0.999 s apart by turns
RECORDED = [40.001, 41.002, 42.001, 43.002, 44.001, 45.002, 46.001, 47.001, 48.003, 49.002,
            50.001, 51.003, 52.001, 53.002, 54.003, 55.004]
EXACT = [40.0 + n for n in range(len(RECORDED))]


class CountingSampler:
    """A sampler without py-spy that never refuses: counts the dumps asked for, by tick."""

    def __init__(self) -> None:
        self.dumped_at: list[int] = []
        self.tick = 0

    def available(self) -> int:
        return 100

    async def dump(self, pid: int) -> DumpResult:
        self.dumped_at.append(self.tick)
        return DumpResult(pid, 0.0, NOT_PYTHON, error="not a Python process")


def in_window(pid: int) -> ProcessSample:
    return ProcessSample(pid, 1000.0, 1, "ann", "python train.py", (GpuUse(0, 1 << 30, 0.0),))


def dumps_at(tmp_path, ticks: list[float], dump_interval: float) -> list[int]:
    """The ticks (by number) at which one process in a window from the first tick on was
    handed to py-spy."""
    store = Store(tmp_path / "mlcost.db")
    config = AttributionConfig(min_window=0.5, dump_interval=dump_interval,
                               dumps_per_second=100.0)
    sampler = CountingSampler()
    attribution = Attribution(config, store, sampler, interval_s=1.0)  # type: ignore[arg-type]
    proc = in_window(50_000)

    async def run() -> None:
        for n, ts in enumerate(ticks):
            sampler.tick = n
            attribution.on_tick(Sample(1796566300.0 + ts, n, gpus=(GPU,), processes=(proc,)))
            await attribution.dumps_finished()
        await attribution.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()
    return sampler.dumped_at


@pytest.mark.parametrize("ticks", [RECORDED, EXACT], ids=["recorded ticks", "exact ticks"])
def test_at_a_one_second_dump_interval_every_tick_dumps(tmp_path, ticks):
    assert dumps_at(tmp_path, ticks, 1.0) == list(range(len(ticks)))


@pytest.mark.parametrize("ticks", [RECORDED, EXACT], ids=["recorded ticks", "exact ticks"])
def test_at_the_default_two_seconds_every_second_tick_dumps(tmp_path, ticks):
    assert dumps_at(tmp_path, ticks, 2.0) == list(range(0, len(ticks), 2))


def test_a_dump_interval_shorter_than_the_tick_dumps_every_tick(tmp_path):
    assert dumps_at(tmp_path, RECORDED, 0.5) == list(range(len(RECORDED)))


def test_without_stacks_the_proc_samples_come_every_dump_interval_by_the_grid(tmp_path):
    """Stacks off: a /proc sample of the process (this test's own, a real /proc) every tick at
    dump_interval = 1 s on the recorded ticks, each kept once the window opened."""
    store = Store(tmp_path / "mlcost.db")
    config = AttributionConfig(min_window=0.5, dump_interval=1.0, stacks=False)
    attribution = Attribution(config, store, interval_s=1.0)
    me = dataclasses.replace(in_window(os.getpid()), start_time=1000.0)
    try:
        for n, ts in enumerate(RECORDED):
            attribution.on_tick(Sample(1796566300.0 + ts, n, gpus=(GPU,), processes=(me,)))
    finally:
        store.close()
    assert attribution.samples_kept == len(RECORDED)
