"""The workload counters (`mlcost_workload_dollars_total`, `_wasted_dollars_total`) hold what
the workloads' processes were charged, whatever the scrape times (probe 149 H2: they took a
process's cost at each scrape, so what it spent after the last scrape before it exited, or all
of it when it lived between two scrapes, was lost). A real Daemon (store, analyzer, tick path)
with scripted samples (tests/daemon/scripted.py), rendered by the /metrics collector."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.api.metrics import OTHER, WORKLOAD_LABELS, Metrics, WorkloadTotals
from daemon.runtime.daemon import Daemon
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from tests.daemon.scripted import PRICE, scripted_daemon

GPU_PER_S = PRICE.per_hour / PRICE.gpu_count / 3600.0  # one GPU's dollars a second


def job(pid: int, gpu: int, user: str = "alice", command: str = "python train.py",
        owner: dict[str, str] | None = None) -> ProcessSample:
    return ProcessSample(pid, 1000.0 + pid, 1, user, command, gpus=(GpuUse(gpu, 2 << 30, 50.0),),
                         cpu_seconds=1.0, rss_bytes=1 << 28, read_bytes=0, write_bytes=0,
                         iowait_seconds=0.0, owner=owner or {})


def daemon_of(tmp_path: Path, ticks: Callable[[int], tuple[ProcessSample, ...]],
              utilization: tuple[float, float] = (80.0, 80.0)) -> Daemon:
    """A Daemon whose tick i (1 s apart) reads two GPUs at `utilization` and `ticks(i)`."""
    daemon = scripted_daemon(tmp_path)
    t0 = time.time() - 600

    def script() -> Iterator[Sample]:
        for i in itertools.count(1):
            gpus = tuple(GpuSample(n, f"GPU-{n}", "A10G", utilization=u,
                                   memory_used_bytes=4 << 30, memory_total_bytes=24 << 30)
                         for n, u in enumerate(utilization))
            yield Sample(ts=t0 + i, tick=i, gpus=gpus, processes=ticks(i))

    samples = script()
    daemon.collect = lambda: next(samples)  # type: ignore[method-assign]
    return daemon


def series(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name == name}


def by_user(text: str, name: str = "mlcost_workload_dollars_total") -> dict[str, float]:
    users: dict[str, float] = {}
    for labels, value in series(text, name).items():
        user = dict(labels).get("user", "")
        users[user] = users.get(user, 0.0) + value
    return users


def one(text: str, name: str) -> float:
    [value] = series(text, name).values()
    return value


def test_a_process_that_lived_between_two_scrapes_is_counted_at_the_next(tmp_path):
    # alice's job holds GPU 0 throughout; bob's holds GPU 1 on ticks 4-6 only
    daemon = daemon_of(tmp_path, lambda i: (job(1, 0),) + (
        (job(2, 1, user="bob", command="python short.py"),) if 4 <= i <= 6 else ()))
    metrics = Metrics(daemon)
    try:
        for _ in range(3):
            daemon.tick_now()
        assert "bob" not in by_user(metrics.render().decode())
        for _ in range(5):  # bob's job starts and exits between this scrape and the next
            daemon.tick_now()
        text = metrics.render().decode()
        # charged ticks 4, 5 and 6: a second each of a whole GPU
        assert by_user(text)["bob"] == pytest.approx(3 * GPU_PER_S)
        assert by_user(text)["alice"] == pytest.approx(7 * GPU_PER_S)  # ticks 2-8
    finally:
        daemon.store.close()


def test_what_a_process_spent_after_the_last_scrape_before_it_exited_is_counted(tmp_path):
    daemon = daemon_of(tmp_path, lambda i: (job(1, 0),) if i <= 10 else ())
    metrics = Metrics(daemon)
    try:
        for _ in range(5):
            daemon.tick_now()
        assert by_user(metrics.render().decode())["alice"] == pytest.approx(4 * GPU_PER_S)
        for _ in range(7):  # it runs to tick 10 and exits: unscraped
            daemon.tick_now()
        text = metrics.render().decode()
        assert by_user(text)["alice"] == pytest.approx(9 * GPU_PER_S)  # ticks 2-10
        # at 80 % utilization a GPU wastes a fifth of its price: so does the job's share of it
        assert by_user(text, "mlcost_workload_wasted_dollars_total")["alice"] == \
            pytest.approx(0.2 * 9 * GPU_PER_S)
        for _ in range(3):  # nothing more charged: the series stays
            daemon.tick_now()
        assert by_user(metrics.render().decode())["alice"] == pytest.approx(9 * GPU_PER_S)
    finally:
        daemon.store.close()


def churn(i: int) -> tuple[ProcessSample, ...]:
    """A new 3-tick job every 2 ticks, on GPU 0 and GPU 1 in turn, each from its own user,
    every fourth in a pod of its own; and an idle notebook holding GPU 0 throughout (so GPU 0
    is shared, and GPU 1 unheld one tick in four)."""
    procs = [job(1, 0, user="nb", command="jupyter-lab")]
    for n in range(max(1, (i - 2) // 2), i // 2 + 1):
        if n * 2 <= i < n * 2 + 3:
            owner = {"pod": f"p{n}", "namespace": "ml", "container": "main"} if n % 4 == 0 \
                else None
            procs.append(job(100 + n, n % 2, user=f"u{n}", command=f"python step{n}.py",
                             owner=owner))
    return tuple(procs)


def test_the_workload_counters_sum_to_the_hosts_held_dollars_over_a_churned_run(tmp_path):
    daemon = daemon_of(tmp_path, churn, utilization=(50.0, 30.0))
    metrics = Metrics(daemon, label_values=6)  # most users fold into `other`
    try:
        for tick in range(1, 121):
            daemon.tick_now()
            if tick % 7 == 0:  # scrapes far apart against the jobs' lives
                metrics.render()
        text = metrics.render().decode()
        held = one(text, "mlcost_host_burn_dollars_total") - \
            one(text, "mlcost_idle_dollars_total")
        assert 0 < held < one(text, "mlcost_host_burn_dollars_total")  # GPU 1 was unheld a while
        dollars = series(text, "mlcost_workload_dollars_total")
        assert sum(dollars.values()) == pytest.approx(held, rel=1e-9)
        assert OTHER in by_user(text)
        wasted = series(text, "mlcost_workload_wasted_dollars_total")
        # the waste of the GPUs the workloads held: all of GPU 0's (held throughout), part of
        # GPU 1's
        gpu_wasted = {dict(labels)["gpu"]: value for labels, value in
                      series(text, "mlcost_gpu_wasted_dollars_total").items()}
        assert gpu_wasted["0"] < sum(wasted.values()) < gpu_wasted["0"] + gpu_wasted["1"]
        with daemon.analyzer.ledger.lock:
            by_job = dict(daemon.analyzer.ledger.by_job)
        assert sum(dollars.values()) == pytest.approx(sum(by_job.values()), rel=1e-9)
    finally:
        daemon.store.close()


def test_a_workload_that_gets_its_own_label_leaves_other_what_it_was_charged_before():
    def totals_of(totals: WorkloadTotals) -> dict[str, float]:
        return {w[WORKLOAD_LABELS.index("user")]: t.dollars for w, t in totals.totals().items()}

    totals = WorkloadTotals(limit=1)
    alice, bob = ("python a.py", "", "", "", "", "alice"), ("python b.py", "", "", "", "", "bob")
    totals.update([], None, 0.0, spend={alice: (1.0, 0.0), bob: (2.0, 0.0)})
    assert totals_of(totals) == {"alice": 1.0, OTHER: 2.0}  # one slot: alice's
    totals.update([], None, 1800.0, spend={alice: (1.0, 0.0), bob: (3.0, 0.0)})
    assert totals_of(totals) == {"alice": 1.0, OTHER: 3.0}
    # alice unseen for an hour: her series goes and her slot is freed, after this scrape
    totals.update([], None, 3700.0, spend={alice: (1.0, 0.0), bob: (4.0, 0.0)})
    assert totals_of(totals) == {OTHER: 4.0}
    totals.update([], None, 3800.0, spend={alice: (1.0, 0.0), bob: (6.0, 0.0)})
    # bob has the slot now: `other` keeps his dollars so far, his own series what came after
    assert totals_of(totals) == {OTHER: 4.0, "bob": 2.0}
