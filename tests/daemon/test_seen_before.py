"""What mlcostd saw of a process before the rules' window: a run of its kernels older than the
window, a run recorded in the store before a restart, and the part of its life before mlcostd
first read it. A periodic job asleep between its runs reads, in the window alone, as a process
that never worked; idle_gpu_held offered it the SIGTERM and host_idle the host's stop.

Real Analyzer rounds (its memory of earlier rounds) and a real SQLite store (the restart)."""

from __future__ import annotations

import dataclasses

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.cost import host_price
from daemon.analysis.idle import IdleThresholds
from daemon.config.loading import from_dict
from daemon.runtime import resume
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from pricing.catalog import Catalog
from pricing.detect import Instance

CATALOG = Catalog.load()
PRICE = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", "on-demand", "t"), CATALOG)
GIB = 1 << 30
T0 = 1_800_000_000.0
SLEEP = "sleeping or waiting: `time.sleep(3600)` with the GPU idle"


def tick(ts: float, i: int, pstart: float, sm: float) -> Sample:
    """One tick of an 8-GPU host whose GPU 0 is held by pid 42 (`sm`: its SM share)."""
    util = 90.0 if sm > 0 else 0.0
    gpus = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok", util if g == 0 else 0.0, None,
                           10 * GIB if g == 0 else 0, 40 * GIB) for g in range(8))
    proc = ProcessSample(42, pstart, 1, "ann", "python score.py", (GpuUse(0, 10 * GIB, sm),))
    return Sample(ts, i, gpus=gpus, processes=(proc,))


def key(pstart: float) -> str:
    return f"42:{pstart:.3f}"


def sleeping(pstart: float) -> dict:
    """Its stacks: a plain sleep, all of the window."""
    stacks = [{"frames": ["score.py:30 main"], "file": "/srv/score.py", "line": 30,
               "function": "main", "samples": 40, "reason": SLEEP}]
    return {key(pstart): {"idle": {"seconds": 600.0, "share": 1.0, "gpu_idle_seconds": 600.0,
                                   "top_stacks": stacks}}}


def analyzer(longest_s: float = 86400.0) -> Analyzer:
    return Analyzer(PRICE, CATALOG, IdleThresholds(gpu_held_after_s=60.0, host_after_s=60.0),
                    limits={"longest_period_s": longest_s}, recommendation_hold_s=0.0)


def advice(found: list, rule: str) -> list:
    return [f for f in found if f.rule == rule]


def run(a: Analyzer, pstart: float, start: float, n: int, busy: set[int] = frozenset(),
        every: int = 3) -> list:
    """n ticks 10 s apart from `start` (its kernels at 80% at the ticks in `busy`), a round of
    the rules every `every` ticks; the last round's findings."""
    found: list = []
    for i in range(n):
        a.update(tick(start + 10 * i, i, pstart, 80.0 if i in busy else 0.0))
        if i % every == every - 1 or i == n - 1:
            found = a.evaluate(sleeping(pstart))
    return found


def test_a_run_older_than_the_window_still_reads_as_one_run_seen():
    """An hourly job (8 s x 2 of kernels, then time.sleep(3600)) watched from its start: once its
    run left the rules' 30-minute window, nothing in the window showed it ran, and
    idle_gpu_held offered the SIGTERM 30 minutes into its sleep, host_idle the stop. The
    analyzer keeps what earlier rounds saw: the look first, one run seen, and the host kept."""
    a = analyzer()
    pstart = T0 - 1.0  # started with mlcostd: all of it seen
    found = run(a, pstart, T0, 6 * 45, busy={1, 2}, every=6)  # 45 minutes
    [held] = advice(found, "idle_gpu_held")
    assert held.action["kind"] == "copy_commands", held.action
    assert "ran 16 s of kernels (its run last seen at" in held.action["text"], held.action
    assert "one run seen" in held.action["text"]
    assert held.evidence["no_sign_of_work"]["kernel_s_before_idle"] == 0  # not in the window
    assert advice(found, "host_idle") == []
    assert any("one run seen" in why for why in a.working()[key(pstart)])


def test_a_process_running_before_mlcostd_started_is_looked_at_first_until_watched_long():
    """A process that held its GPU when mlcostd started (started an hour before it) and sleeps:
    nothing says it never works (a periodic job between its runs reads the same), yet it was
    offered the SIGTERM after [idle].gpu_held_after and its host the stop. Now the look first
    ("seen only since mlcostd started at ..."), the host kept and GET /v1/idle's reasons name
    it, until mlcostd has watched it idle for [idle].longest_period: a job hung before mlcostd
    started then gets the SIGTERM and its host the stop. One that started with mlcostd
    (seen from its start) keeps the SIGTERM."""
    pstart = T0 - 3600.0
    a = analyzer(longest_s=300.0)
    a.run_started_at = T0 - 0.5
    found = run(a, pstart, T0, 20)  # 190 s watched
    [held] = advice(found, "idle_gpu_held")
    assert held.action["kind"] == "copy_commands", held.action
    assert "was seen only since mlcostd started at 08:00 UTC; it ran 60 min before that " \
           "unseen" in held.action["text"], held.action
    assert "once it has watched it idle for 5 min ([idle].longest_period)" in \
        held.action["text"], held.action
    evidence = held.evidence["no_sign_of_work"]
    assert evidence["unseen_s"] >= 3599 and evidence["idle_watched_s"] == 190.0, evidence
    assert advice(found, "host_idle") == []
    assert any("held its GPU before mlcostd started" in why for why in a.working()[key(pstart)])
    found = run(a, pstart, T0 + 200, 20)  # 390 s watched idle: past the longest period
    [held] = advice(found, "idle_gpu_held")
    assert held.action["kind"] == "sigterm", held.action
    assert len(advice(found, "host_idle")) == 1
    assert key(pstart) not in a.working()

    seen = analyzer(longest_s=300.0)
    seen.run_started_at = T0
    found = run(seen, T0 + 0.5, T0 + 1, 20)
    [held] = advice(found, "idle_gpu_held")
    assert held.action["kind"] == "sigterm", held.action


def test_a_restart_takes_over_what_the_store_saw_of_the_same_process(tmp_path):
    """The periodic job ran 16 s of kernels under the run before, then slept; mlcostd restarted
    during its sleep. The new run's window shows no run, and it was offered the SIGTERM (its
    host the stop). resume.seen_before takes over the store's record of the same pid and
    start time: one run seen, watched since the first run's reading of it. A process with
    the same pid and another start time (the pid reused) takes over nothing."""
    from daemon.analysis.rules.window import ProcessHistory

    path = str(tmp_path / "mlcost.db")
    pstart = T0 - 0.5  # started with the run before: seen from its start
    store = Store(path)
    resume.record_start(store, T0 - 1.0)
    for i in range(30):  # the run before: 2 ticks of kernels, then asleep
        store.write(tick(T0 + 10 * i, i, pstart, 80.0 if i in (3, 4) else 0.0))
    config = from_dict({"daemon": {"interval": 10.0}})
    restart = T0 + 600.0
    resume.record_start(store, restart)
    a = analyzer()
    assert resume.seen_before(a, store, config, restart) == 1
    store.close()
    assert a.run_started_at == restart
    history = a.history()[key(pstart)]
    # mlcostd was away 5 minutes (its last tick at T0 + 290): a run then would be unseen, so
    # its idle is counted from the restart, not from its run at T0 + 40
    assert history == ProcessHistory(T0, 0.0, 16.0, T0 + 40.0, restart), history
    found = run(a, pstart, restart + 5, 20)
    [held] = advice(found, "idle_gpu_held")
    assert held.action["kind"] == "copy_commands", held.action
    assert "ran 16 s of kernels (its run last seen at" in held.action["text"], held.action
    evidence = held.evidence["no_sign_of_work"]
    assert evidence["watched_since"] == T0 and evidence["unseen_s"] == 0, evidence
    assert evidence["idle_watched_s"] == 195.0, evidence  # since the restart
    assert advice(found, "host_idle") == []

    other = analyzer()
    store = Store(path)
    try:
        resume.seen_before(other, store, config, restart)
    finally:
        store.close()
    found = run(other, pstart + 1.0, restart + 5, 20)  # pid 42 again, started later
    assert key(pstart + 1.0) not in other.history() or \
        other.history()[key(pstart + 1.0)].kernel_s == 0.0
    [held] = advice(found, "idle_gpu_held")
    assert held.action["kind"] == "sigterm" or "seen only since" in held.action["text"]


def test_history_is_kept_only_for_the_processes_of_the_latest_window():
    """The analyzer's memory holds the window's processes only: one gone from the window is
    forgotten (bounded by the processes of 30 minutes)."""
    from daemon.analysis.rules.window import ProcessHistory

    a = analyzer()
    a.seen_before({"7:1.000": ProcessHistory(1.0, 0.0, 5.0, 2.0)})
    run(a, T0 - 1.0, T0, 3)
    assert set(a.history()) == {key(T0 - 1.0)}
    assert dataclasses.asdict(a.history()[key(T0 - 1.0)])["kernel_s"] == 0.0
