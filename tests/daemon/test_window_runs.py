"""The rules' window reads stretches of ticks with one process layout by columns
(daemon.analysis.rules.window `_Run`), and concludes exactly as it does reading tick by tick."""

import pytest

from daemon.analysis.cost import burn, host_price
from daemon.analysis.rules import window
from daemon.analysis.rules.thresholds import CHECKPOINT_WRITE_MIN_BYTES
from daemon.analysis.rules.window import Analysis, analysis_of_ticks
from daemon.analysis.window_ticks import WindowTick, window_tick
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from pricing.catalog import Catalog
from pricing.detect import Instance

GIB = 2**30
CATALOG = Catalog.load()
PRICE = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", None, "t"), CATALOG)
STEP = 5.0
TICKS = 120  # 10 minutes of window ticks
BURST = CHECKPOINT_WRITE_MIN_BYTES


def host_at(i: int) -> Sample:
    """Tick i of a steady host with a few events: a trainer on GPU 0 (writing a checkpoint at
    ticks 29-30 and 80, its I/O counters unread at ticks 50-52); a DataLoader worker of it from
    tick 30 to 89; a second trainer on GPU 1 that exits after tick 99; an evaluation job that
    moves from GPU 2 to GPU 3 at tick 60; every GPU idle from tick 100."""
    ts = 1000.0 + STEP * i
    written = 3 * GIB + BURST * ((i >= 29) + (i >= 30) + (i >= 80)) + i * 4096
    unread = 50 <= i <= 52
    processes = [ProcessSample(
        7, 50.0, 1, "ann", "python train.py", (GpuUse(0, (8 + i % 3) * GIB, 40.0),),
        iowait_seconds=None if unread else 1.5 + 0.1 * i,
        read_bytes=None if unread else 10 * GIB + i * 2**20,
        write_bytes=None if unread else written, state="D" if i % 17 == 0 else "S",
        # 0.9 of a CPU while it trains, 0.02 once its GPU idles (tick 100 on)
        cpu_seconds=STEP * (0.9 * min(i, 100) + 0.02 * max(i - 100, 0)))]
    if 30 <= i < 90:
        processes.append(ProcessSample(9, 60.0, 7, "ann", "loader", read_bytes=i * 2**22,
                                       write_bytes=i * 2**10, iowait_seconds=0.5 * i,
                                       state="D" if i % 7 == 0 else "S"))
    if i < 100:
        processes.append(ProcessSample(11, 70.0, 1, "bob", "python train.py",
                                       (GpuUse(1, 20 * GIB, 60.0),), write_bytes=i * 2**20))
    processes.append(ProcessSample(13, 80.0, 1, "cy", "python eval.py",
                                   (GpuUse(2 if i < 60 else 3, 4 * GIB, 10.0),)))
    util = 0.0 if i >= 100 else 40.0 + i % 50
    gpus = tuple(GpuSample(g, f"u{g}", "A100", "ok", util, None, 8 * GIB, 40 * GIB)
                 for g in range(8))
    return Sample(ts, i, gpus=gpus, processes=tuple(processes))


def steady_window() -> list[WindowTick]:
    ticks: list[WindowTick] = []
    for i in range(TICKS):
        s = host_at(i)
        ticks.append(window_tick(s, burn(s, PRICE), ticks[-1] if ticks else None))
    return ticks


def analysis(ticks: list[WindowTick]) -> Analysis:
    return analysis_of_ticks(ticks, {}, PRICE, CATALOG, host_cpus=8)


def test_a_steady_host_s_window_is_a_few_runs():
    runs = window._layout_runs(steady_window())
    assert [(run.start, run.stop) for run in runs] == [(0, 30), (30, 60), (60, 90), (90, 100),
                                                       (100, TICKS)]


def test_read_by_runs_it_concludes_as_read_tick_by_tick(monkeypatch: pytest.MonkeyPatch):
    ticks = steady_window()
    by_runs = analysis(ticks)
    monkeypatch.setattr(window, "SHORT_RUN", TICKS + 1)  # every run read tick by tick
    assert repr(analysis(ticks)) == repr(by_runs)


def test_what_crosses_a_run_s_edge_is_read_as_one():
    processes = {p.pid: p for p in analysis(steady_window()).processes}
    trainer, second, evaluation = processes[7], processes[11], processes[13]
    # The burst at ticks 29 (one run) and 30 (the next, its worker appearing) is one checkpoint.
    assert trainer.checkpoint_times == (1000.0 + 29 * STEP, 1000.0 + 80 * STEP)
    # Idle from tick 100 to the end, across the run edge where the second trainer exited.
    assert trainer.trailing_idle_s == (TICKS - 1 - 100) * STEP
    assert second.trailing_idle_s == 0.0  # gone before the end
    assert evaluation.gpus == (2, 3) and evaluation.memory_by_gpu == {2: 4 * GIB, 3: 4 * GIB}
    # Its I/O: its own counters and its worker's, first to last reading (some unread).
    seconds = (TICKS - 1) * STEP
    read = (TICKS - 1) * 2**20 + (89 - 30) * 2**22
    assert trainer.read_bytes_per_s == read / seconds
    # D state: its own ticks (multiples of 17) or its worker's (multiples of 7, ticks 30-89).
    in_d = {i for i in range(TICKS) if i % 17 == 0 or (i % 7 == 0 and 30 <= i < 90)}
    assert trainer.d_state_fraction == len(in_d) / TICKS
    assert trainer.memory_peak_bytes == 10 * GIB
    # Its CPU over its idle span only (the rules' hung_job reads it): not its training's.
    assert trainer.cpu_idle_cores == pytest.approx(0.02)
    assert second.cpu_idle_cores is None  # no idle span
