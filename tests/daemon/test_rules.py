import pytest

from daemon.analysis.book import RecommendationBook
from daemon.analysis.cost import HostPrice, host_price
from daemon.analysis.idle import BUDGET_EXCEEDED, Event
from daemon.analysis.rules import build_analysis, evaluate
from daemon.analysis.rules import thresholds as rule_thresholds
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from pricing.catalog import Catalog
from pricing.detect import Instance

GIB = 2**30
CATALOG = Catalog.load()
P4D = host_price(Instance("aws", "p4d.24xlarge", "us-east-1", "on-demand", "t"), CATALOG)


def window(n=61, step=10.0, utils=None, holders=None, mem=10 * GIB, start=100_000.0,
           command="python train.py", pstart=None, sm_activity=None, proc_kw=None,
           extra=()):
    """n samples `step` apart on an 8-GPU host; holders: gpu -> sm share."""
    utils = utils if utils is not None else [90.0] + [0.0] * 7
    holders = holders if holders is not None else {0: 90.0}
    out = []
    for i in range(n):
        ts = start + i * step
        u = utils(i) if callable(utils) else utils
        kw = proc_kw(i) if proc_kw else {}
        gpus = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok", u[g], sm_activity,
                               mem if g in holders else 0, 40 * GIB) for g in range(8))
        procs = ()
        if holders:
            procs = (ProcessSample(42, pstart if pstart is not None else start - 60, 1, "ann",
                                   command, tuple(GpuUse(g, mem, s) for g, s in holders.items()),
                                   **kw),) + tuple(extra)
        out.append(Sample(ts, i, gpus=gpus, processes=procs))
    return out


def recs(samples, phases=None, price=P4D, **kw):
    return evaluate(build_analysis(samples, phases, price, CATALOG, host_cpus=32, **kw))


def by_rule(found, name):
    return [r for r in found if r.rule == name]


def pid_id(samples):
    return f"42:{samples[0].processes[0].start_time:.3f}"


def test_shrink_names_a_cheaper_fitting_instance():
    s = window()
    [rec] = by_rule(recs(s), "over_provisioned")
    assert rec.action["kind"] == "resize" and rec.action["from"] == "p4d.24xlarge"
    offer = CATALOG.by_instance("aws", rec.action["to"], "us-east-1")
    assert offer.accelerator_count >= 1 and offer.accelerator_memory_gib >= 11
    assert rec.action["to"] == "g4dn.xlarge"  # cheapest 1-GPU fit for 10 GiB x 1.1
    assert rec.savings_per_month == pytest.approx((32.7726 - 0.526) * 730)
    assert "upper bound" in rec.method and "confidence low" in rec.method
    assert "g4dn.xlarge" in rec.summary and "$0.53/h" in rec.summary


def test_shrink_not_when_all_gpus_used_and_memory_needs_them():
    # 8 GPUs at 38 GiB: only g6e.48xlarge (8 x 45 GiB, $30.13) fits, 8% cheaper < 20%
    s = window(utils=[90.0] * 8, holders={g: 90.0 for g in range(8)}, mem=38 * GIB)
    assert by_rule(recs(s), "over_provisioned") == []


def test_shrink_needs_a_long_enough_window():
    assert by_rule(recs(window(n=60)), "over_provisioned") == []  # 590 s
    assert by_rule(recs(window(n=61)), "over_provisioned")  # 600 s


def test_idle_gpu_held_at_threshold():
    quiet = [0.0] * 8
    fires = window(n=61, utils=quiet, holders={0: 0.0})  # 600 s held idle
    [rec] = by_rule(recs(fires), "idle_gpu_held")
    assert rec.action["kind"] == "sigterm" and rec.action["pid"] == 42
    assert rec.savings_per_month == pytest.approx(P4D.per_gpu * 730)
    below = window(n=60, utils=quiet, holders={0: 0.0})  # 590 s
    assert by_rule(recs(below), "idle_gpu_held") == []
    # busy at the last tick: not idle at the end of the window
    ends_busy = window(n=61, utils=lambda i: [0.0] * 8 if i < 60 else [50.0] + [0.0] * 7,
                       holders={0: 0.0})
    assert by_rule(recs(ends_busy), "idle_gpu_held") == []


def test_host_idle_at_threshold():
    [rec] = by_rule(recs(window(n=181, utils=[0.0] * 8, holders={})), "host_idle")
    assert rec.action["kind"] == "copy_commands"
    assert any("stop-instances" in c for c in rec.action["commands"])
    assert rec.savings_per_month == pytest.approx(32.7726 * 730)
    assert by_rule(recs(window(n=180, utils=[0.0] * 8, holders={})), "host_idle") == []


def phases_for(samples, **shares):
    stacks = [{"frames": ["train.py:88 main"], "file": "/srv/train.py", "line": 88,
               "function": "main", "samples": 7}]
    return {pid_id(samples): {k: {"seconds": v * 600, "share": v, "gpu_idle_seconds": 0,
                                  "top_stacks": stacks} for k, v in shares.items()}}


@pytest.mark.parametrize("phase, rule, threshold", [
    ("data_wait", "dataloader_starvation", rule_thresholds.DATA_WAIT_SHARE),
    ("host_preprocess", "main_thread_preprocessing", rule_thresholds.HOST_PREPROCESS_SHARE),
    ("checkpoint", "blocking_checkpoint", rule_thresholds.CHECKPOINT_SHARE),
    ("eval", "eval_dominating", rule_thresholds.EVAL_SHARE),
    ("sync", "host_sync", rule_thresholds.SYNC_SHARE),
    ("comm", "communication_bound", rule_thresholds.COMM_SHARE),
])
def test_phase_rules_at_threshold(phase, rule, threshold):
    s = window()
    above = by_rule(recs(s, phases_for(s, **{phase: threshold + 0.001})), rule)
    assert len(above) == 1
    rec = above[0]
    assert rec.action["kind"] == "show_patch" and "/srv/train.py:88" in rec.action["patch"]
    assert rec.evidence["top_stacks"][0]["line"] == 88
    assert "upper bound" in rec.method
    assert by_rule(recs(s, phases_for(s, **{phase: threshold - 0.001})), rule) == []


def test_dataloader_patch_names_the_knobs():
    s = window()
    [rec] = by_rule(recs(s, phases_for(s, data_wait=0.4)), "dataloader_starvation")
    patch = rec.action["patch"]
    for knob in ("num_workers=", "pin_memory=True", "prefetch_factor=", "persistent_workers=True"):
        assert knob in patch
    burn_per_hour = rec.evidence["process"]["burn_per_hour"]
    assert rec.savings_per_month == pytest.approx(burn_per_hour * 0.4 * 730)


def test_storage_bound_at_threshold():
    def io(fraction):
        # iowait grows `fraction` s per s; GPU low all the time
        return window(utils=[30.0] + [0.0] * 7,
                      proc_kw=lambda i: {"iowait_seconds": i * 10.0 * fraction})
    [rec] = by_rule(recs(io(0.51)), "storage_bound")
    assert rec.evidence["iowait_fraction"] == pytest.approx(0.51)
    assert any("nvme" in c.lower() for c in rec.action["commands"])
    assert by_rule(recs(io(0.49)), "storage_bound") == []
    # stalled but the GPU is busy: not storage-bound
    busy = window(utils=[95.0] + [0.0] * 7, proc_kw=lambda i: {"iowait_seconds": i * 9.0})
    assert by_rule(recs(busy), "storage_bound") == []


def test_d_state_counts_as_io_stall_including_workers():
    def workers(i, stalled):
        return (ProcessSample(43, 1.0, 42, "ann", "python train.py",
                              threads_in_d=1 if i < stalled else 0),)
    s = window(n=100, utils=[30.0] + [0.0] * 7)
    s = [Sample(x.ts, x.tick, x.gpus, x.processes + workers(i, 51)) for i, x in enumerate(s)]
    assert by_rule(recs(s), "storage_bound")
    s2 = [Sample(x.ts, x.tick, x.gpus, x.processes[:1] + workers(i, 50)) for i, x in enumerate(s)]
    assert by_rule(recs(s2), "storage_bound") == []


def spot_window(cadence_s, runtime_s, writes=3, command="python train.py"):
    n = 200
    step = 60.0
    start = 1_000_000.0
    burst_ticks = {int(k * cadence_s / step) + 5 for k in range(writes)}

    def kw(i):
        written = sum(1 for b in burst_ticks if b <= i) * 2 * GIB
        return {"write_bytes": written}
    return window(n=n, step=step, start=start, pstart=start + (n - 1) * step - runtime_s,
                  proc_kw=kw, command=command)


def test_spot_at_thresholds():
    [rec] = by_rule(recs(spot_window(3600, 3 * 3600)), "spot_training")
    assert rec.evidence["checkpoint_interval_s"] == pytest.approx(3600)
    spot = CATALOG.by_instance("aws", "p4d.24xlarge", "us-east-1").price("spot")
    assert rec.evidence["spot"]["per_hour"] == pytest.approx(spot.per_hour)
    assert "lost work" in rec.method and "upper bound" in rec.method
    gross = (32.7726 - spot.per_hour) / 8 * 730
    assert 0 < rec.savings_per_month < gross
    # too short a run, too rare checkpoints, inference, spot already: no advice
    assert by_rule(recs(spot_window(3600, 2 * 3600 - 60)), "spot_training") == []
    assert by_rule(recs(spot_window(3660, 3 * 3600)), "spot_training") == []
    assert by_rule(recs(spot_window(3600, 3 * 3600, writes=1)), "spot_training") == []
    assert by_rule(recs(spot_window(3600, 3 * 3600, command="vllm serve m")),
                   "spot_training") == []
    spot_price = HostPrice(spot.per_hour, 8, "spot", "p4d.24xlarge", "aws", "us-east-1", "c",
                           None)
    assert by_rule(recs(spot_window(3600, 3 * 3600), price=spot_price), "spot_training") == []


def test_steady_inference_says_catalog_has_no_commitment_price():
    hours = rule_thresholds.STEADY_INFERENCE_MIN_HOURS * 3600
    s = window(command="vllm serve llama", pstart=100_000.0 + 600 - hours)
    [rec] = by_rule(recs(s), "steady_inference_commitment")
    assert "no commitment price" in rec.summary and rec.savings_per_month == 0
    assert any("savingsplans" in c for c in rec.action["commands"])
    s = window(command="vllm serve llama", pstart=100_000.0 + 600 - hours + 60)
    assert by_rule(recs(s), "steady_inference_commitment") == []


def test_steady_inference_with_a_commitment_price():
    from dataclasses import replace

    from pricing.catalog import Catalog as Cat
    from pricing.catalog import Price
    offers = [replace(o, commit_1y=Price(20.0, "commit-1y", "test", None, False))
              if o.instance_type == "p4d.24xlarge" else o for o in CATALOG]
    s = window(command="vllm serve llama", pstart=0.0)
    found = evaluate(build_analysis(s, None, P4D, Cat(offers)))
    [rec] = by_rule(found, "steady_inference_commitment")
    assert rec.savings_per_month == pytest.approx((32.7726 - 20.0) / 8 * 730)


def test_underbatched_at_thresholds():
    def s(util, sm):
        return window(utils=[util] + [0.0] * 7, sm_activity=sm, command="vllm serve m")
    [rec] = by_rule(recs(s(70.0, 29.9)), "underbatched_inference")
    assert "max-num-seqs" in rec.action["patch"]
    assert by_rule(recs(s(69.9, 10.0)), "underbatched_inference") == []
    assert by_rule(recs(s(90.0, 30.0)), "underbatched_inference") == []
    assert by_rule(recs(s(90.0, None)), "underbatched_inference") == []  # no GPM: can't tell
    no_inference = window(utils=[90.0] + [0.0] * 7, sm_activity=10.0)
    assert by_rule(recs(no_inference), "underbatched_inference") == []


def test_budget_rule_and_dedup():
    event = Event(BUDGET_EXCEEDED, "user:ann", 1.0, None, 12.0,
                  {"period": "daily", "period_id": "2025-01-01", "summary": "over"})
    found = recs(window(), budget_events=[event, event])
    assert len(by_rule(found, "budget_exceeded")) == 1
    assert len({r.id for r in found}) == len(found)


def test_nothing_fires_on_a_healthy_full_host():
    s = window(utils=[95.0] * 8, holders={g: 95.0 for g in range(8)}, mem=38 * GIB)
    assert recs(s, phases_for(s, compute=0.97)) == []


def test_book_history():
    s = window()
    found = recs(s)
    book = RecommendationBook()
    book.record(found, 10.0)
    book.record(found, 20.0)
    [entry] = book.active()
    assert entry.first_seen == 10.0 and entry.last_seen == 20.0
    book.record([], 30.0)  # no longer seen: not active, still in history
    assert book.active() == [] and len(book.history()) == 1
    # ids are stable
    assert recs(s)[0].id == found[0].id
