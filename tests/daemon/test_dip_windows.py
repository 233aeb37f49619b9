"""A dip becomes a low-utilization window once it has lasted [attribution].min_window by the
tick grid, whatever the ticks' jitter of a few milliseconds: on the demo host, a 4-s checkpoint
stall whose first and fourth ticks were 2.999 s apart was no window at all (in 150 s, 15 of its
~21 stalls were windows, 19 now), and the job's checkpoint share read 29% (36% now)."""

from __future__ import annotations

import dataclasses

import pytest

from daemon.config import AttributionConfig
from daemon.runtime.attribution import Attribution
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store

GPU = GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 0.0, None, 1 << 30, 40 << 30)
# a pid no process has: with stacks off, its window's samples come from /proc, which has none
PROC = ProcessSample(2**22 + 17, 1000.0, 1, "ann", "python train.py", ())


def tick(n: int, ts: float, sm_share: float) -> Sample:
    """Tick n at `ts`: the process holds 1 GiB of GPU 0 at this SM share (%)."""
    proc = dataclasses.replace(PROC, gpus=(GpuUse(0, 1 << 30, sm_share),))
    return Sample(ts, n, gpus=(GPU,), processes=(proc,))


def windows_after(tmp_path, shares_at: list[tuple[float, float]], *, min_window: float = 3.0,
                  interval_s: float = 1.0) -> int:
    """Low-utilization windows open after the ticks (ts, SM share %) of one process."""
    store = Store(tmp_path / "mlcost.db")
    try:
        attribution = Attribution(AttributionConfig(min_window=min_window, stacks=False), store,
                                  interval_s=interval_s)
        for n, (ts, share) in enumerate(shares_at):
            attribution.on_tick(tick(n, ts, share))
        return len(attribution.active_windows())
    finally:
        store.close()


# The demo's ticks as recorded (Unix seconds less a start): a 4-tick stall, first to last 2.999 s
JITTERED_4 = [(16.000, 80.0), (17.001, 0.0), (18.001, 0.0), (19.001, 0.0), (20.000, 0.0)]
EXACT_4 = [(16.0, 80.0), (17.0, 0.0), (18.0, 0.0), (19.0, 0.0), (20.0, 0.0)]
LATE_FIRST_4 = [(16.0, 80.0), (17.4, 0.0), (18.0, 0.0), (19.0, 0.0), (20.0, 0.0)]


@pytest.mark.parametrize("ticks", [JITTERED_4, EXACT_4, LATE_FIRST_4],
                         ids=["2.999 s apart", "3.000 s apart", "first tick 0.4 s late"])
def test_a_dip_seen_on_four_ticks_is_a_three_second_window_whatever_the_jitter(tmp_path, ticks):
    assert windows_after(tmp_path, ticks) == 1


@pytest.mark.parametrize("ticks, min_window", [
    (JITTERED_4[:4], 3.0),  # three ticks below: 2 s apart, not 3
    ([(16.0, 80.0), (17.0, 0.0)], 0.5),  # one tick below: not yet 0.5 s
    ([(16.0, 0.0), (17.0, 0.0), (18.0, 0.0), (19.0, 0.0)], 5.0),
], ids=["3 ticks for 3 s", "1 tick for 0.5 s", "4 ticks for 5 s"])
def test_a_dip_shorter_than_min_window_by_a_tick_is_no_window(tmp_path, ticks, min_window):
    assert windows_after(tmp_path, ticks, min_window=min_window) == 0


def test_at_a_two_second_interval_the_window_waits_for_two_ticks_past_the_first(tmp_path):
    """min_window 3 s at --interval 2: the second tick after the first (4 s) opens it, whatever
    the jitter; the first after it (2 s) does not."""
    ticks = [(10.0, 80.0), (12.004, 0.0), (14.0, 0.0)]
    assert windows_after(tmp_path, ticks, interval_s=2.0) == 0
    assert windows_after(tmp_path, [*ticks, (15.999, 0.0)], interval_s=2.0) == 1
