import json

import pytest

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.cost import host_price
from daemon.analysis.idle import IdleThresholds
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from pricing.catalog import Catalog
from pricing.detect import Instance

GIB = 2**30


def sample(ts, util0=0.0):
    gpus = tuple(GpuSample(g, f"u{g}", "A100", "ok", util0 if g == 0 else 0.0, None,
                           8 * GIB if g == 0 else 0, 40 * GIB) for g in range(8))
    procs = (ProcessSample(7, 50.0, 1, "ann", "python nb.py", (GpuUse(0, 8 * GIB, 0.0),)),)
    return Sample(float(ts), ts, gpus=gpus, processes=procs)


def test_analyzer_end_to_end():
    catalog = Catalog.load()
    price = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", None, "t"), catalog)
    a = Analyzer(price, catalog, IdleThresholds(gpu_held_after_s=600),
                 budgets={"host": {"daily": 5.0}}, window_step_s=5.0)
    opened = []
    for ts in range(0, 1201):
        opened += a.update(sample(ts))
    kinds = [e.kind for e in opened]
    assert "gpu_held_idle" in kinds and "gpu_unheld_idle" in kinds
    assert "budget_exceeded" in kinds  # $32.77/h crosses $5 after ~9 min
    assert len(a.window) == 241  # one sample per 5 s over 1200 s
    found = a.evaluate({})
    rules = {r.rule for r in found}
    assert {"idle_gpu_held", "budget_exceeded"} <= rules
    # Its only GPU is held but idle: release it (idle_gpu_held), no smaller host to advise.
    assert "over_provisioned" not in rules
    snap = a.snapshot()
    json.dumps(snap)
    assert snap["burn"]["total_per_hour"] == pytest.approx(32.7726)
    assert snap["burn"]["price"]["gpu_count"] == 8
    proc = snap["processes"]["7:50.000"]
    assert proc["burn_per_hour"] == pytest.approx(32.7726 / 8)
    assert proc["cost"] == pytest.approx(32.7726 / 8 * 1200 / 3600)
    assert proc["shares"][0]["basis"] == "memory"
    assert snap["recommendations"] and snap["events"]
    assert snap["cost"]["total"] == pytest.approx(32.7726 * 1200 / 3600)


def test_snapshot_before_any_sample():
    catalog = Catalog.load()
    price = host_price(Instance(None, None, None, None, "t"), catalog)
    snap = Analyzer(price, catalog).snapshot()
    assert snap["burn"]["price_source"].startswith("no price")
    assert snap["recommendations"] == []


def held_at(ts, util):
    """GPU 0 at `util`, held by one process whose own SM share reads 0 (no kernels of its own:
    the device-level utilization alone decides busy or idle); the other seven GPUs idle."""
    gpus = tuple(GpuSample(g, f"u{g}", "A100", "ok", util if g == 0 else 0.0, None,
                           8 * GIB if g == 0 else 0, 40 * GIB) for g in range(8))
    procs = (ProcessSample(7, 50.0, 1, "ann", "python train.py", (GpuUse(0, 8 * GIB, 0.0),)),)
    return Sample(float(ts), ts, gpus=gpus, processes=procs)


@pytest.mark.parametrize("idle_pct, busy", [(5.0, True), (10.0, False)])
def test_the_idle_threshold_decides_burn_rules_and_idle_events_alike(idle_pct, busy):
    catalog = Catalog.load()
    price = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", None, "t"), catalog)
    a = Analyzer(price, catalog, IdleThresholds(idle_utilization_pct=idle_pct,
                                                gpu_held_after_s=600))
    events = []
    for ts in range(0, 701):
        events += a.update(held_at(ts, 8.0))  # 8%: busy at a 5% line, idle at a 10% line
    # the burn's verdict for GPU 0 (and so how its price is split and what it wastes)
    gpu0 = a.latest.gpus[0]
    assert gpu0.busy is busy
    assert a.snapshot()["burn"]["gpus"][0]["busy"] is busy
    assert gpu0.wasted_per_hour == pytest.approx(price.per_gpu * (0.92 if busy else 1.0))
    # the idle events
    held_idle = [e for e in events if e.kind == "gpu_held_idle" and e.target == "gpu:0"]
    assert bool(held_idle) is not busy
    # the rules
    rules = {r.rule for r in a.evaluate({})}
    assert ("idle_gpu_held" in rules) is not busy


def test_poller_and_snapshot_threads_never_see_the_ledger_mid_update(tmp_path):
    """The loop's update() mutates the ledger and the idle detector while poll_slow (unit costs,
    storage), snapshot() and inputs() run in threads (asyncio.to_thread in the daemon). Without
    the locks this fails within a second with 'dictionary changed size during iteration'."""
    import sys
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from daemon.analysis.meters import UnitCostMeter

    class Counter(BaseHTTPRequestHandler):
        count = 0

        def do_GET(self):  # noqa: N802
            Counter.count += 1000
            body = f"# TYPE tokens counter\ntokens_total {Counter.count}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    (tmp_path / "ckpt.bin").write_bytes(b"x" * 4096)
    price = host_price(Instance(None, None, None, None, "t"), None, 32.0, gpu_count_seen=8)
    # A process-id target makes the poller look through every process's cost.
    a = Analyzer(price, None, storage_paths=[str(tmp_path)],
                 unit_costs=[UnitCostMeter("99999:1.000", url, "tokens")])

    def churning(tick):
        """100 GPU processes per tick, a fifth of them new each tick (the ledger grows, then
        forgets the exited ones)."""
        gpus = tuple(GpuSample(g, f"u{g}", "A100", "ok", float(tick % 3) * 40, None,
                               GIB, 40 * GIB) for g in range(8))
        procs = tuple(ProcessSample(1000 + tick * 20 + j, 1.0e9 + tick * 20 + j, 1, f"u{j % 7}",
                                    f"python job{j % 5}.py", (GpuUse(j % 8, GIB, 10.0),))
                      for j in range(100))
        return Sample(1.7e9 + tick, tick, gpus=gpus, processes=procs)

    errors: list[BaseException] = []
    stop = threading.Event()

    def loop(fn):
        try:
            while not stop.is_set():
                fn()
        except BaseException as exc:  # noqa: BLE001 - the assertion below reports it
            errors.append(exc)
            stop.set()

    ticks = iter(range(10**9))
    workers = [threading.Thread(target=loop, args=(fn,)) for fn in (
        lambda: a.update(churning(next(ticks))), a.poll_slow, a.snapshot, a.inputs, lambda: a.ledger.cost_of("99999:1.000"))]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: the race shows within the bound
    try:
        for w in workers:
            w.start()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not stop.is_set():
            stop.wait(0.05)
        stop.set()
        for w in workers:
            w.join(10)
    finally:
        sys.setswitchinterval(old)
        server.shutdown()
    assert errors == [], errors
    assert a.ledger.total > 0 and a.ledger.meters[0].error is None


def bursting(ts):
    """GPU 0 held by a job whose kernels run one second in five, never on a second the window
    keeps (it keeps ts 0, 5, 10 ...): 90% then, its own SM share 85%; idle the rest."""
    busy = ts % 5 == 2
    gpus = tuple(GpuSample(g, f"u{g}", "A100", "ok", (90.0 if busy else 0.0) if g == 0 else 0.0,
                           None, 8 * GIB if g == 0 else 0, 40 * GIB) for g in range(8))
    procs = (ProcessSample(7, 50.0, 1, "ann", "python tail_train.py",
                           (GpuUse(0, 8 * GIB, 85.0 if busy else 0.0),)),)
    return Sample(float(ts), ts, gpus=gpus, processes=procs)


def test_kernels_between_window_ticks_count_so_a_working_job_is_not_idle():
    """The rules keep one tick per 5 s; they kept the tick itself, so a job whose kernels ran
    between two kept ticks read as idle for minutes and was offered SIGTERM (idle_gpu_held)
    while the idle events, per tick, saw it working. The kept tick holds the step's means."""
    catalog = Catalog.load()
    price = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", None, "t"), catalog)
    a = Analyzer(price, catalog, IdleThresholds(gpu_held_after_s=60), window_step_s=5.0)
    for ts in range(0, 601):
        a.update(bursting(ts))
    rules = {r.rule for r in a.evaluate({})}
    assert "idle_gpu_held" not in rules, rules
    late = list(a.window)[-10:]
    # the moment's reading stays (shares of time count moments); the step's peak tells busy
    assert all(t.gpus[0].utilization == 0.0 and t.peak_util[0] == 90.0 for t in late[1:])
    assert all(t.use_sm[0] == pytest.approx(17.0) for t in late[1:])  # 85% x 1/5
    assert all(t.use_memory[0] == 8 * GIB for t in late)


def test_the_periodic_jobs_of_the_latest_round_are_kept_for_the_idle_answer():
    """Analyzer.periodic: the processes the latest round of the rules called periodic jobs
    between runs (rules/idle.py's is_periodic, by which host_idle holds back), with their runs:
    GET /v1/idle counts them at work from it. A round that no longer sees them drops them."""
    catalog = Catalog.load()
    price = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", None, "t"), catalog)
    a = Analyzer(price, catalog, IdleThresholds(gpu_held_after_s=60, host_after_s=60),
                 window_step_s=5.0, window_s=600.0)
    assert a.periodic() == {}

    def scorer(ts, busy):
        gpus = tuple(GpuSample(g, f"u{g}", "A100", "ok", 90.0 if busy and g == 0 else 0.0,
                               None, 8 * GIB if g == 0 else 0, 40 * GIB) for g in range(8))
        procs = (ProcessSample(9, 50.0, 1, "ann", "python nightly_scorer.py",
                               (GpuUse(0, 8 * GIB, 80.0 if busy else 0.0),)),)
        return Sample(float(ts), ts, gpus=gpus, processes=procs)

    for ts in range(0, 440):  # 10 s of kernels every 2 minutes; idle 70 s, past host_after
        a.update(scorer(ts, ts % 120 < 10))
    found = a.evaluate({})
    assert a.periodic() == {"9:50.000": 4}
    assert not [r for r in found if r.rule == "host_idle"], [r.rule for r in found]
    for ts in range(440, 1100):  # idle for longer than the window: its runs left it
        a.update(scorer(ts, False))
    # its stacks wait on an Event, no sleep (without stacks, or in a sleep after a run seen,
    # idle_gpu_held looks first and the host is kept)
    waits = [{"file": "/srv/nightly_scorer.py", "line": 30, "function": "main", "samples": 40,
              "reason": "sleeping or waiting: `ready.wait()` with the GPU idle"}]
    found = a.evaluate({"9:50.000": {"idle": {"share": 1.0, "seconds": 600.0,
                                              "top_stacks": waits}}})
    assert a.periodic() == {}
    assert [r for r in found if r.rule == "host_idle"], [r.rule for r in found]
