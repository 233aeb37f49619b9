import pytest

from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.idle import (
    GPU_HELD_IDLE,
    GPU_UNHELD_IDLE,
    HOST_IDLE,
    IdleDetector,
    IdleThresholds,
)
from daemon.sources.sample import GPU_LOST, GPU_TIMEOUT, GpuSample, GpuUse, ProcessSample, Sample
from daemon.wire import process_key

GIB = 2**30
PRICE = HostPrice(8.0, 2, "on-demand", "x", "aws", "us-east-1", "test", None)
T = IdleThresholds(gpu_held_after_s=600, gpu_unheld_after_s=300, host_after_s=1800,
                   close_after_s=30)


def sample(ts, utils, holders=()):
    gpus = tuple(GpuSample(i, f"u{i}", "A100", "ok", u, None, 0, 40 * GIB)
                 for i, u in enumerate(utils))
    procs = tuple(ProcessSample(100 + g, 5.0, 1, "ann", "jupyter kernel",
                                (GpuUse(g, 4 * GIB, 0.0),)) for g in holders)
    return Sample(float(ts), int(ts), gpus=gpus, processes=procs)


def run(detector, start, end, utils, holders=(), step=10):
    changed = []
    for ts in range(start, end + 1, step):
        s = sample(ts, utils, holders)
        changed += detector.update(s, burn(s, PRICE))
    return changed


def kinds(events):
    return [(e.kind, e.target, e.ended_at is None) for e in events]


def test_held_idle_opens_after_n_minutes_and_closes_with_hysteresis():
    d = IdleDetector(T)
    # GPU 0 held and idle, GPU 1 busy: no host idle
    assert run(d, 0, 590, [0, 90], holders=[0, 1]) == []
    opened = run(d, 600, 600, [0, 90], holders=[0, 1])
    assert kinds(opened) == [(GPU_HELD_IDLE, "gpu:0", True)]
    ev = opened[0]
    assert ev.started_at == 0.0
    assert ev.cost_so_far == pytest.approx(4.0 * 600 / 3600)
    assert ev.detail["holders"][0]["pid"] == 100
    # a blip of activity shorter than close_after_s does not close it
    assert run(d, 610, 630, [50, 90], holders=[0, 1]) == []
    assert run(d, 640, 700, [0, 90], holders=[0, 1]) == []
    assert d.active()[0].cost_so_far > ev.cost_so_far
    # sustained activity closes it, ended at the start of the activity
    closed = run(d, 710, 740, [60, 90], holders=[0, 1])
    assert kinds(closed) == [(GPU_HELD_IDLE, "gpu:0", False)]
    assert closed[0].ended_at == 710.0
    assert d.active() == []
    assert d.events()[0].ended_at == 710.0


def test_short_idle_never_opens():
    d = IdleDetector(T)
    for start in range(0, 3000, 600):
        assert run(d, start, start + 590, [0, 90], holders=[0, 1]) == []
        # one busy tick before the threshold resets the period
        assert run(d, start + 595, start + 595, [90, 90], holders=[0, 1], step=1) == []


def test_unheld_idle_gpu_and_whole_host():
    d = IdleDetector(T)
    changed = run(d, 0, 1800, [0, 0])
    assert kinds(changed) == [(GPU_UNHELD_IDLE, "gpu:0", True), (GPU_UNHELD_IDLE, "gpu:1", True),
                              (HOST_IDLE, "host", True)]
    host = d.active()[-1]
    assert host.cost_so_far == pytest.approx(8.0 * 1800 / 3600)
    assert host.detail["why"] == "no process holds a GPU and every GPU is idle"
    # 1790 s is not enough for the host event
    d2 = IdleDetector(T)
    assert HOST_IDLE not in [e.kind for e in run(d2, 0, 1790, [0, 0])]


def test_a_gpu_at_work_whose_process_nvml_does_not_list_keeps_the_host_from_idling():
    """NVML lists no process (a container without hostPID, a vGPU) while GPU 0 runs at 100%:
    the host was declared idle (an event, a snapshot, advice to stop it) as if nobody used
    it. A GPU at work is work."""
    d = IdleDetector(T)
    changed = run(d, 0, 3600, [100, 0])
    assert HOST_IDLE not in [e.kind for e in changed]
    assert kinds(changed) == [(GPU_UNHELD_IDLE, "gpu:1", True)]  # the other GPU, unused
    # once it stops working, the host idles from then
    changed = run(d, 3610, 3610 + 1800, [0, 0])
    (host,) = [e for e in changed if e.kind == HOST_IDLE]
    assert host.started_at == 3610.0
    # an open host event closes when a GPU works again, listed process or not
    closed = run(d, 5500, 5600, [100, 0])
    assert (HOST_IDLE, "host", False) in kinds(closed)


def test_a_process_the_rules_find_at_work_keeps_the_host_and_ends_its_idle_event():
    """The host_idle event follows the host_idle rule's own fact (rules/idle.py's at_work, the
    processes the latest round found working or serving): while one of them is on the host it
    is not idle, however idle its GPUs read (probe 121 F12: a server waiting for requests got a
    host_idle event, and its snapshot, where the rule and /v1/idle called the host active)."""
    serving = {process_key(100, 5.0)}  # the holder of GPU 0
    d = IdleDetector(T)
    changed = []
    for ts in range(0, 3600, 10):
        s = sample(ts, [0, 0], holders=[0])
        changed += d.update(s, burn(s, PRICE), serving)
    assert HOST_IDLE not in [e.kind for e in changed]
    assert (GPU_HELD_IDLE, "gpu:0", True) in kinds(changed)  # its GPU's own event stays
    # the rules no longer find it at work: the host idles from then
    changed = []
    for ts in range(3600, 3600 + 1810, 10):
        s = sample(ts, [0, 0], holders=[0])
        changed += d.update(s, burn(s, PRICE), set())
    (host,) = [e for e in changed if e.kind == HOST_IDLE]
    assert host.started_at == 3600.0
    # found at work again (its GPUs still idle): the open event ends after close_after_s
    closed = []
    for ts in range(5500, 5600, 10):
        s = sample(ts, [0, 0], holders=[0])
        closed += d.update(s, burn(s, PRICE), serving)
    assert [(e.kind, e.ended_at) for e in closed] == [(HOST_IDLE, 5500.0)]


@pytest.mark.parametrize("status", [GPU_LOST, GPU_TIMEOUT])
def test_gpus_with_no_reading_never_make_an_idle_host(status):
    """Every GPU fell off the bus (or timed out: a clock step, a hung driver) while a job
    trained on one: the host read idle from that tick on, an event and a snapshot said so and
    host_idle told to stop it, where /v1/idle said it cannot tell (probe 115). One GPU lost
    beside an idle one read the same."""
    def unread(ts, lost):  # (NVML lists no process on a GPU it cannot read)
        s = sample(ts, [0, 0], holders=[0] if 0 not in lost else [])
        gpus = tuple(GpuSample(g.index, g.uuid, g.name, status, error="gone")
                     if g.index in lost else g for g in s.gpus)
        return Sample(s.ts, s.tick, gpus=gpus, processes=s.processes)

    for lost in ({0, 1}, {0}):
        d = IdleDetector(T)
        changed = []
        for ts in range(0, 3601, 10):
            s = unread(ts, lost)
            changed += d.update(s, burn(s, PRICE))
        assert HOST_IDLE not in [e.kind for e in changed], (lost, kinds(changed))
    # NVML missing (no GPU at all in the sample) is no idle host either
    d = IdleDetector(T)
    changed = []
    for ts in range(0, 3601, 10):
        s = Sample(float(ts), ts, gpus=(), processes=())
        changed += d.update(s, None)
    assert changed == []


def test_holder_change_switches_kind():
    d = IdleDetector(T)
    run(d, 0, 600, [0, 90], holders=[0, 1])
    changed = run(d, 610, 610, [0, 90], holders=[1])
    assert kinds(changed) == [(GPU_HELD_IDLE, "gpu:0", False), (GPU_UNHELD_IDLE, "gpu:0", True)]


def test_an_open_event_says_which_tick_its_cost_reaches():
    """Probe 151 F9: the cost written at a rule evaluation is as of the tick before it; its
    detail's `cost_at` names that tick, so a report or a snapshot's page can cost the event
    to its own end (daemon.analysis.idle.costed_to)."""
    from daemon.analysis.idle import costed_to

    d = IdleDetector(T)
    run(d, 0, 700, [0, 90], holders=[0])
    (event,) = d.active()
    assert event.detail["cost_at"] == 700.0
    assert event.cost_so_far == pytest.approx(4.0 * 700 / 3600)
    (later,) = costed_to([event.as_dict()], 760.0)
    assert later["cost_so_far"] == pytest.approx(4.0 * 760 / 3600)
    assert later["detail"]["cost_at"] == 760.0
    (earlier,) = costed_to([event.as_dict()], 650.0)
    assert earlier["cost_so_far"] == pytest.approx(4.0 * 650 / 3600)
    ended = dict(event.as_dict(), ended_at=720.0)  # ended inside the range: as it was
    assert costed_to([ended], 760.0)[0]["cost_so_far"] == event.cost_so_far

