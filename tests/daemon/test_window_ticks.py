"""The rules' window keeps compact ticks: what the rules read, unchanged values kept once."""

import math
from dataclasses import replace

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.cost import burn, host_price
from daemon.analysis.rules.window import analysis_of_ticks, build_analysis
from daemon.analysis.window_ticks import WindowTick, window_tick
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from pricing.catalog import Catalog
from pricing.detect import Instance

GIB = 2**30
CATALOG = Catalog.load()
PRICE = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", None, "t"), CATALOG)


def trainer(ts: float, **changes: object) -> ProcessSample:
    """A fresh ProcessSample each call, as the /proc source builds one each tick."""
    fields: dict[str, object] = dict(
        pid=7, start_time=50.0, ppid=1, user="ann", command="python train.py",
        gpus=(GpuUse(0, 8 * GIB, 40.0),), iowait_seconds=1.5, read_bytes=10 * GIB,
        write_bytes=3 * GIB, owner={"pod": "trainer-0"})
    fields.update(changes)
    return ProcessSample(**fields)  # type: ignore[arg-type]


def sample(ts: float, *processes: ProcessSample, util: float = 80.0) -> Sample:
    gpus = tuple(GpuSample(g, f"u{g}", "A100", "ok", util, None, 8 * GIB, 40 * GIB)
                 for g in range(8))
    return Sample(ts, int(ts), gpus=gpus, processes=processes or (trainer(ts),))


def tick(s: Sample, previous: WindowTick | None = None) -> WindowTick:
    return window_tick(s, burn(s, PRICE), previous)


def test_a_steady_host_shares_keys_parents_and_commands_with_the_tick_before():
    first = tick(sample(0.0))
    second = tick(sample(5.0), first)
    assert second.keys is first.keys and second.ppids is first.ppids
    assert second.who is first.who
    assert second.ts == 5.0 and second.total_per_hour == first.total_per_hour


def test_a_tick_keeps_each_process_s_means_over_the_gpus_it_holds():
    """Worked out once as the tick enters the window: the utilization of the GPUs it holds
    that read OK, the GPM SM activity of those that report it, its own SM share per GPU."""
    gpus = (GpuSample(0, "u0", "H100", utilization=30.0, sm_activity=20.0),
            GpuSample(1, "u1", "H100", utilization=90.0),
            GpuSample(2, "u2", "H100", status="lost"),
            GpuSample(3, "u3", "H100", utilization=10.0, sm_activity=60.0))
    both = trainer(0.0, gpus=(GpuUse(0, GIB, 10.0), GpuUse(1, GIB, 30.0), GpuUse(2, GIB, 5.0)))
    lost = trainer(0.0, pid=8, gpus=(GpuUse(2, GIB, 7.0),))
    loader = ProcessSample(9, 60.0, 7, "ann", "loader")
    t = tick(Sample(0.0, 0, gpus=gpus, processes=(both, lost, loader)))
    assert t.util_mean[0] == 60.0 and t.gpm_mean[0] == 20.0 and t.own_sm[0] == 15.0
    assert math.isnan(t.util_mean[1]) and math.isnan(t.gpm_mean[1]) and t.own_sm[1] == 7.0
    assert all(math.isnan(column[2]) for column in (t.util_mean, t.gpm_mean, t.own_sm))


def test_a_tick_gives_back_what_its_sample_said():
    child = ProcessSample(9, 60.0, 7, "ann", "loader", state="D")
    s = sample(0.0, trainer(0.0), child)
    t = tick(s)
    parent, loader = t.process(0), t.process(1)
    assert parent.key == (7, 50.0) and parent.ppid == 1 and parent.pid == 7
    assert (parent.user, parent.command, parent.owner) == ("ann", "python train.py",
                                                           {"pod": "trainer-0"})
    assert parent.gpus == (GpuUse(0, 8 * GIB, 40.0),) and not parent.in_d
    assert (parent.iowait_seconds, parent.read_bytes, parent.write_bytes) == (1.5, 10 * GIB,
                                                                             3 * GIB)
    assert parent.burn_per_hour == burn(s, PRICE).processes[(7, 50.0)].burn_per_hour
    assert loader.gpus == () and loader.in_d and loader.ppid == 7
    assert (loader.iowait_seconds, loader.read_bytes, loader.write_bytes) == (None, None, None)
    assert t.holds_gpu(0) and not t.holds_gpu(1)


def test_values_that_changed_are_the_new_ones():
    first = tick(sample(0.0))
    changed = trainer(5.0, command="python eval.py", gpus=(GpuUse(0, None, 10.0),
                                                           GpuUse(3, 9 * GIB, 20.0)),
                      write_bytes=4 * GIB, state="D", owner={"pod": "trainer-1"})
    now = tick(sample(5.0, changed), first).process(0)
    assert (now.command, now.owner, now.write_bytes) == ("python eval.py",
                                                         {"pod": "trainer-1"}, 4 * GIB)
    assert now.gpus == (GpuUse(0, None, 10.0), GpuUse(3, 9 * GIB, 20.0)) and now.in_d
    assert now.read_bytes == 10 * GIB  # unchanged


def test_the_analyzer_keeps_ticks_and_concludes_as_from_the_samples_it_kept():
    analyzer = Analyzer(PRICE, CATALOG, window_s=600.0, window_step_s=5.0)
    kept: list[Sample] = []
    for ts in range(0, 900):
        writes = trainer(ts, write_bytes=3 * GIB + (ts // 120) * 2 * GIB,  # checkpoints
                         iowait_seconds=1.5 + ts * 0.1)
        child = ProcessSample(9, 60.0, 7, "ann", "loader", state="D" if ts % 50 == 0 else "S")
        s = sample(float(ts), writes, child, util=0.0 if ts > 700 else 80.0)
        if not kept or s.ts - kept[-1].ts >= 5.0:
            kept.append(s)
        analyzer.update(s)
    kept = [s for s in kept if 899 - s.ts <= 600.0]
    window, _ = analyzer.inputs()
    assert all(isinstance(t, WindowTick) for t in window)
    assert [t.ts for t in window] == [s.ts for s in kept]
    from_ticks = analysis_of_ticks(window, {}, PRICE, CATALOG, host_cpus=8)
    from_samples = build_analysis(kept, {}, PRICE, CATALOG, host_cpus=8)
    assert from_ticks == from_samples
    process = from_ticks.processes[0]
    assert process.checkpoint_times and process.d_state_fraction > 0
    assert process.trailing_idle_s > 0 and process.iowait_fraction > 0


def test_a_process_missing_from_the_burn_reads_zero_burn():
    s = sample(0.0)
    t = window_tick(s, replace(burn(s, PRICE), processes={}))
    assert t.process(0).burn_per_hour is None
    analysis = analysis_of_ticks([t], {}, PRICE, CATALOG, host_cpus=8)
    assert analysis.processes[0].burn_per_hour == 0.0
