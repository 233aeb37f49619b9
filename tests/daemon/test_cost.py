import math
import random
import threading
from dataclasses import replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from daemon.analysis.busy import DEFAULT_IDLE_UTILIZATION_PCT, IdleThresholds, gpu_is_busy
from daemon.analysis.cost import (
    NO_PRICE_SOURCE,
    HostPrice,
    burn,
    gpu_wasted_per_hour,
    host_price,
)
from daemon.analysis.energy import window_meter
from daemon.analysis.ledger import CostLedger, JobLabeler, run_starts, tick_seconds
from daemon.analysis.meters import UnitCostMeter, read_counter, storage_cost
from daemon.sources.patterns import MATCHED_CHARS
from daemon.sources.sample import (
    GPU_ERROR,
    GPU_LOST,
    GPU_TIMEOUT,
    GpuSample,
    GpuUse,
    ProcessSample,
    Sample,
)
from pricing.catalog import Catalog
from pricing.detect import Instance

GIB = 2**30


def gpu(i, util, used=0, total=40 * GIB, status="ok"):
    return GpuSample(i, f"GPU-{i}", "A100-SXM4-40GB", status, util, None, used, total)


def proc(pid, uses, user="alice", command="python train.py", ppid=1):
    return ProcessSample(pid, 1000.0 + pid, ppid, user, command,
                         tuple(GpuUse(g, m, sm) for g, m, sm in uses))


def price(per_hour=32.7726, gpus=8):
    return HostPrice(per_hour, gpus, "on-demand", "p4d.24xlarge", "aws", "us-east-1", "test",
                     None)


def p4d(lifecycle=None):
    return Instance("aws", "p4d.24xlarge", "us-east-1", lifecycle, "test")


def test_p4d_price_from_catalog():
    hp = host_price(p4d(), Catalog.load())
    assert hp.per_hour == pytest.approx(32.7726)
    assert hp.gpu_count == 8
    assert hp.per_gpu == pytest.approx(4.096575)
    assert round(hp.per_gpu, 4) == 4.0966
    assert "SkyPilot" in hp.source and "date unknown" in hp.source
    assert hp.lifecycle == "on-demand"


def test_price_config_wins_and_off_cloud_says_how():
    hp = host_price(p4d(), Catalog.load(), override_price_per_hour=20.0)
    assert hp.per_hour == 20.0 and hp.gpu_count == 8 and "config" in hp.source
    off = host_price(Instance(None, None, None, None, "dmi: not a cloud"), Catalog.load(),
                     gpu_count_seen=2)
    assert off.per_hour == 0.0 and off.gpu_count == 2
    assert off.source.startswith(NO_PRICE_SOURCE)


def test_more_gpus_than_the_type_has_split_the_price_over_the_gpus_there_are():
    """A g5.xlarge (1 GPU) declared over 8 GPUs burned $8.05/h at a $1.006/h price, and with
    [instance].price_per_hour = 8 a $64/h burn for an $8/h host: the GPUs together never
    cost more than the host, and the source says why."""
    g5 = Instance("aws", "g5.xlarge", "us-east-1", None, "test")
    hp = host_price(g5, Catalog.load(), gpu_count_seen=8)
    assert hp.gpu_count == 8 and hp.per_gpu * 8 == pytest.approx(hp.per_hour)
    assert "NVML sees 8 GPUs where the catalog lists 1 for g5.xlarge" in hp.source
    set_price = host_price(g5, Catalog.load(), override_price_per_hour=8.0, gpu_count_seen=8)
    assert set_price.per_gpu == pytest.approx(1.0) and "NVML sees 8 GPUs" in set_price.source
    fewer = host_price(p4d(), Catalog.load(), gpu_count_seen=7)  # one fell off the bus: billed
    assert fewer.gpu_count == 8 and "NVML sees" not in fewer.source


def test_spot_lifecycle_uses_spot_midpoint_and_commit_falls_back():
    spot = host_price(p4d("spot"), Catalog.load())
    assert spot.per_hour == pytest.approx((5.09 + 9.61) / 2)
    assert spot.lifecycle == "spot"
    commit = host_price(p4d(), Catalog.load(), override_lifecycle="commit-1y")
    assert commit.per_hour == pytest.approx(32.7726)
    assert "no commit-1y price" in commit.source


def test_burn_sm_basis_on_busy_gpu_and_idle_gpus():
    sample = Sample(10.0, 1, gpus=(gpu(0, 90, 30 * GIB), gpu(1, 0), gpu(2, 0)),
                    processes=(proc(1, [(0, 20 * GIB, 60)]), proc(2, [(0, 10 * GIB, 20)])))
    b = burn(sample, price(12.0, 3))
    assert b.price_per_gpu == 4.0
    assert b.processes[(1, 1001.0)].burn_per_hour == pytest.approx(3.0)  # 60 / (60 + 20)
    assert b.processes[(2, 1002.0)].burn_per_hour == pytest.approx(1.0)
    assert b.processes[(1, 1001.0)].shares[0].basis == "sm"
    assert b.idle_per_hour == pytest.approx(8.0)  # GPUs 1 and 2 held by nobody
    assert b.total_per_hour == pytest.approx(12.0)
    # wasted: GPU 0 at 90% -> 0.4; idle GPUs whole
    assert b.wasted_per_hour == pytest.approx(0.4 + 8.0)
    assert b.as_dict()["price"]["source"] == "test"


def test_memory_basis_on_idle_gpu():
    util = DEFAULT_IDLE_UTILIZATION_PCT - 0.1
    sample = Sample(10.0, 1, gpus=(gpu(0, util, 12 * GIB),),
                    processes=(proc(1, [(0, 9 * GIB, 50)]), proc(2, [(0, 3 * GIB, 0)])))
    b = burn(sample, price(4.0, 1))
    s1 = b.processes[(1, 1001.0)].shares[0]
    assert s1.basis == "memory" and s1.share == pytest.approx(0.75)
    assert b.processes[(2, 1002.0)].burn_per_hour == pytest.approx(1.0)
    assert b.wasted_per_hour == pytest.approx(4.0)  # below the busy threshold: whole
    # just at the threshold the GPU is busy: SM basis
    busy = burn(Sample(10.0, 1, gpus=(gpu(0, DEFAULT_IDLE_UTILIZATION_PCT, 12 * GIB),),
                       processes=sample.processes), price(4.0, 1))
    assert busy.processes[(1, 1001.0)].shares[0].basis == "sm"
    assert busy.processes[(1, 1001.0)].burn_per_hour == pytest.approx(4.0)


def test_busy_gpu_without_sm_samples_falls_back_to_memory_then_equal():
    sample = Sample(1.0, 1, gpus=(gpu(0, 80), gpu(1, 80)),
                    processes=(proc(1, [(0, GIB, 0), (1, None, 0)]), proc(2, [(0, 3 * GIB, 0),
                                                                        (1, None, 0)])))
    b = burn(sample, price(2.0, 2))
    assert b.processes[(1, 1001.0)].shares[0].basis == "memory"
    assert b.processes[(1, 1001.0)].shares[1].basis == "equal"
    assert b.processes[(1, 1001.0)].burn_per_hour == pytest.approx(0.25 + 0.5)


def test_lost_gpu_is_wasted_whole():
    sample = Sample(1.0, 1, gpus=(GpuSample(0, "u", "n", GPU_LOST), gpu(1, 100)))
    b = burn(sample, price(2.0, 2))
    assert b.wasted_per_hour == pytest.approx(1.0)
    assert b.idle_per_hour == pytest.approx(2.0)


def timed_out(i, total=40 * GIB):
    """A GPU whose reading is overdue, as NvmlSource lists it (its dynamic fields unknown)."""
    return GpuSample(i, f"GPU-{i}", "A100-SXM4-40GB", GPU_TIMEOUT, memory_total_bytes=total,
                     error="nvmlDeviceGetUtilizationRates has not answered for 3.0 s")


def test_a_gpu_not_read_is_charged_to_the_holders_of_its_last_reading_as_unread():
    """Probe 142 L9: a timed-out GPU was `basis: unheld` and its holder (30 GiB on it) $0. Its
    holders as NVML last read them (NvmlSource keeps them in the sample, no SM share) pay its
    price by the memory they held; the GPU is still wasted whole, and one held by no one then
    is idle burn; either way its basis says it was not read."""
    sample = Sample(1.0, 1, gpus=(gpu(0, 90), timed_out(1), timed_out(2),
                                  GpuSample(3, "GPU-3", "n", GPU_LOST)),
                    processes=(proc(1, [(0, GIB, 90), (1, 30 * GIB, 0)]),
                               proc(2, [(1, 10 * GIB, 0)])))
    b = burn(sample, price(4.0, 4))
    by_index = {g.index: g for g in b.gpus}
    assert [by_index[i].basis for i in range(4)] == ["sm", "unread", "unread", "unread"]
    assert by_index[1].allocated_per_hour == pytest.approx(1.0)
    assert by_index[1].idle_per_hour == 0.0 and by_index[1].wasted_per_hour == 1.0
    one, two = b.processes[(1, 1001.0)], b.processes[(2, 1002.0)]
    assert [(s.gpu_index, s.basis) for s in one.shares] == [(0, "sm"), (1, "unread")]
    assert one.burn_per_hour == pytest.approx(1.0 + 0.75) and two.burn_per_hour == 0.25
    assert b.idle_per_hour == pytest.approx(2.0)  # GPUs 2 and 3: no holder known
    assert b.total_per_hour == pytest.approx(4.0) and b.wasted_per_hour == pytest.approx(3.1)


def test_a_failing_gpu_whose_memory_was_read_keeps_the_memory_basis():
    """A GPU with a field that failed (status error) but whose memory and processes were read
    this tick is split by that reading, as before: not "unread"."""
    failing = replace(gpu(0, None, 8 * GIB), status=GPU_ERROR, error="power: unknown error")
    b = burn(Sample(1.0, 1, gpus=(failing,), processes=(proc(1, [(0, 8 * GIB, 0)]),)),
             price(2.0, 1))
    assert b.gpus[0].basis == "memory" and b.processes[(1, 1001.0)].burn_per_hour == 2.0


def test_the_burns_parts_add_up_to_the_host_price_with_fewer_as_many_or_more_gpus_seen():
    """Probe 142 M2: the faults scenario's p4d (8 GPUs in the catalog, 4 seen) was priced
    $7.35/h and burned $3.675/h: half the host charged nowhere, with no word. GPUs the price
    counts and NVML does not list are idle burn, wasted whole, and said; the parts (processes,
    idle, the GPUs' prices and the unseen ones) add up to the host price in every case."""
    catalog = Catalog.load()
    for seen in (4, 8, 10):
        hp = host_price(p4d("spot"), catalog, override_price_per_hour=7.35,
                        gpu_count_seen=seen)
        sample = Sample(1.0, 1, gpus=tuple(gpu(i, 60 if i % 2 else 0) for i in range(seen)),
                        processes=(proc(1, [(i, GIB, 60) for i in range(0, seen, 2)]),
                                   proc(2, [(1, GIB, 60)])))
        b = burn(sample, hp)
        unseen = max(8 - seen, 0)
        assert b.unseen_gpus == unseen, seen
        assert b.total_per_hour == pytest.approx(7.35), seen
        assert math.fsum([b.process_per_hour, b.idle_per_hour]) == pytest.approx(7.35)
        assert math.fsum([*(g.price_per_hour for g in b.gpus),
                          b.unseen_per_hour]) == pytest.approx(7.35), seen
        gpu_waste = math.fsum(g.wasted_per_hour for g in b.gpus)
        assert b.wasted_per_hour == pytest.approx(gpu_waste + b.unseen_per_hour)
        doc = b.as_dict()
        assert doc["unseen_gpus"] == unseen
        assert doc["unseen_per_hour"] == pytest.approx(7.35 / 8 * unseen)
        if unseen:
            assert doc["warning"].startswith("4 GPUs of p4d.24xlarge's 8 not seen by NVML: "
                                             "$3.67/h charged as idle and wasted")
        else:
            assert doc["warning"] == ""
    # an hour of the 4-GPU host in the ledger: the host's price, not half of it
    hp = host_price(p4d("spot"), catalog, override_price_per_hour=7.35, gpu_count_seen=4)
    ledger = CostLedger()
    for i in range(3601):
        ledger.add(burn(Sample(float(i), i, gpus=tuple(gpu(g, 100) for g in range(4)),
                               processes=(proc(1, [(g, GIB, 100) for g in range(4)]),)), hp))
    assert ledger.total == pytest.approx(7.35)
    assert ledger.by_process[(1, 1001.0)] == pytest.approx(7.35 / 2)
    assert ledger.idle == ledger.wasted == pytest.approx(7.35 / 2)


NVML_MISSING = ("NVML unavailable: NVML Shared Library Not Found (NVML error 12); "
                "retrying in 1 s")


def test_a_host_whose_gpus_cannot_be_read_is_charged_its_price_as_lost_gpus():
    """NVML not started (probe 121 F10): the host is billed all the same. It was charged $0:
    burn, ledger, spend today and the budgets dropped a billed host."""
    running = proc(7, [])  # its GPU use unknown while NVML is down: attributed nothing
    unread = burn(Sample(1.0, 1, processes=(running,), nvml_status=NVML_MISSING), price(2.0, 2))
    lost = burn(Sample(1.0, 1, gpus=(GpuSample(0, "u0", "n", GPU_LOST),
                                     GpuSample(1, "u1", "n", GPU_LOST))), price(2.0, 2))
    assert unread.unread_gpus == 2 and unread.gpus == () and unread.processes == {}
    assert unread.price_per_gpu == pytest.approx(1.0)
    for b in (unread, lost):  # the same dollars as two lost GPUs: idle, wasted whole
        assert (b.total_per_hour, b.idle_per_hour, b.wasted_per_hour) == pytest.approx(
            (2.0, 2.0, 2.0))
    assert unread.as_dict()["unread_gpus"] == 2 and lost.unread_gpus == 0


def test_nvml_down_then_back_is_charged_once_with_no_gap():
    ledger = CostLedger()
    hp = price(3.6, 1)
    day = datetime(2025, 1, 31, 23, 59, 30, tzinfo=timezone.utc).timestamp()
    procs = (proc(1, [(0, GIB, 100)], user="bob"),)
    for i in range(60):  # NVML missing for the first minute, across midnight
        ledger.add(burn(Sample(day + i, i, processes=(proc(1, [], user="bob"),),
                               nvml_status=NVML_MISSING), hp))
    for i in range(60, 120):  # then it reads the GPU
        ledger.add(burn(Sample(day + i, i, gpus=(gpu(0, 100),), processes=procs), hp))
    assert ledger.total == pytest.approx(3.6 * 119 / 3600)  # every second, once
    assert ledger.idle == pytest.approx(3.6 * 59 / 3600)  # no process held it meanwhile
    assert ledger.wasted == pytest.approx(3.6 * 59 / 3600)
    assert ledger.by_user["bob"] == pytest.approx(3.6 * 60 / 3600)
    assert sum(ledger.by_day.values()) == pytest.approx(ledger.total)
    assert ledger.by_day["2025-01-31"] == pytest.approx(3.6 * 30 / 3600)
    assert ledger.unread_seconds == pytest.approx(59) and ledger.unaccounted_seconds == 0
    hour_spend = ledger.take_unrecorded()[0]  # what the store is handed: the same dollars
    assert math.fsum(h[1] for h in hour_spend.values()) == pytest.approx(ledger.total)
    assert ledger.as_dict()["unread_seconds"] == pytest.approx(59)


def test_a_host_priced_before_nvml_counted_its_gpus_is_charged_before_and_after():
    """A whole-host price from the config, made while NVML had not started, names no GPU: it is
    charged as 1 GPU while none is read, and split over the GPUs read once NVML starts (until
    the daemon prices the host again for them), not $0."""
    uncounted = HostPrice(3.0, 0, "on-demand", None, None, None, "config", None)
    down = burn(Sample(1.0, 1, nvml_status=NVML_MISSING), uncounted)
    assert (down.total_per_hour, down.wasted_per_hour, down.unread_gpus) == (3.0, 3.0, 1)
    back = burn(Sample(2.0, 2, gpus=(gpu(0, 0), gpu(1, 100))), uncounted)
    assert back.total_per_hour == pytest.approx(3.0) and back.unread_gpus == 0
    assert [g.price_per_hour for g in back.gpus] == pytest.approx([1.5, 1.5])


def test_no_price_or_no_gpu_to_bill_charges_nothing_while_nvml_is_down():
    none = HostPrice(0.0, 0, "on-demand", "x", "aws", None, NO_PRICE_SOURCE, None)
    for hp in (none, HostPrice(0.0, 8, "on-demand", "x", "aws", None, NO_PRICE_SOURCE, None)):
        b = burn(Sample(1.0, 1, nvml_status=NVML_MISSING), hp)
        assert (b.total_per_hour, b.wasted_per_hour, b.unread_gpus) == (0.0, 0.0, 0)
    # NVML started and counted no GPU, and the price names none: nothing to bill to GPUs
    cpu_host = HostPrice(1.0, 0, "on-demand", None, None, None, "config", None)
    assert burn(Sample(1.0, 1), cpu_host).total_per_hour == 0.0


def test_burn_sums_random():
    rng = random.Random(1234)
    for _ in range(300):
        n = rng.randint(1, 8)
        gpus = tuple(gpu(i, rng.choice([0, 1, 4.9, 5, 50, 100, rng.uniform(0, 100)]),
                         rng.randint(0, 40) * GIB) for i in range(n))
        procs = []
        for pid in range(rng.randint(0, 20)):
            uses = [(g, rng.choice([None, 0, rng.randint(1, 40) * GIB]),
                     rng.choice([0, rng.uniform(0, 100)]))
                    for g in rng.sample(range(n), rng.randint(0, n))]
            procs.append(proc(pid + 1, uses))
        hp = price(rng.uniform(0.5, 100), n)
        b = burn(Sample(1.0, 1, gpus=gpus, processes=tuple(procs)), hp)
        assert b.total_per_hour == math.fsum(p.burn_per_hour for p in b.processes.values()) \
            + b.idle_per_hour
        assert b.total_per_hour == pytest.approx(hp.per_hour, rel=1e-9)
        assert b.price_per_gpu == pytest.approx(hp.per_hour / n)
        assert 0 <= b.wasted_per_hour <= hp.per_hour * (1 + 1e-9)
        for p in b.processes.values():
            for s in p.shares:
                assert 0 <= s.share <= 1 + 1e-12



def test_gpu_is_busy_says_none_when_utilization_is_unknown():
    assert gpu_is_busy(None, 5.0) is None
    assert gpu_is_busy(4.9, 5.0) is False
    assert gpu_is_busy(5.0, 5.0) is True
    assert IdleThresholds(idle_utilization_pct=50.0).gpu_is_busy(40.0) is False


def test_gpu_wasted_per_hour_counts_idle_and_lost_gpus_whole():
    assert gpu_wasted_per_hour(4.0, 90.0) == pytest.approx(0.4)
    assert gpu_wasted_per_hour(4.0, 100.0) == 0.0
    assert gpu_wasted_per_hour(4.0, 3.0) == 4.0  # idle: whole
    assert gpu_wasted_per_hour(4.0, 30.0, idle_utilization_pct=40.0) == 4.0
    assert gpu_wasted_per_hour(4.0, None) == 0.0  # unknown: no waste we cannot show
    assert gpu_wasted_per_hour(4.0, 90.0, ok=False) == 4.0  # lost: does no work
    assert gpu_wasted_per_hour(4.0, None, ok=False) == 4.0


def test_burn_wasted_is_the_sum_of_gpu_wasted_per_hour_and_each_gpu_carries_its_verdict():
    rng = random.Random(99)
    for idle_pct in (1.0, 5.0, 30.0):
        t = IdleThresholds(idle_utilization_pct=idle_pct)
        for _ in range(100):
            n = rng.randint(1, 8)
            gpus = tuple(GpuSample(i, f"u{i}", "n", GPU_LOST) if rng.random() < 0.1
                         else gpu(i, rng.choice([None, 0, 4.9, 5, 29, 30, rng.uniform(0, 100)]))
                         for i in range(n))
            hp = price(rng.uniform(0.5, 100), n)
            b = burn(Sample(1.0, 1, gpus=gpus), hp, t)
            assert b.wasted_per_hour == math.fsum(
                gpu_wasted_per_hour(hp.per_gpu, g.utilization, g.status == "ok", idle_pct)
                for g in gpus)
            for g, gb in zip(gpus, b.gpus, strict=True):
                expected = gpu_is_busy(g.utilization, idle_pct) if g.status == "ok" else None
                assert gb.busy is expected
                assert gb.as_dict()["busy"] is expected
            assert b.as_dict()["busy_threshold_pct"] == idle_pct


def test_the_idle_threshold_decides_how_burn_splits_a_gpu():
    sample = Sample(1.0, 1, gpus=(gpu(0, 20.0, 12 * GIB),),
                    processes=(proc(1, [(0, 9 * GIB, 50)]), proc(2, [(0, 3 * GIB, 0)])))
    at_default = burn(sample, price(4.0, 1))
    raised = burn(sample, price(4.0, 1), IdleThresholds(idle_utilization_pct=25.0))
    assert at_default.gpus[0].busy is True and raised.gpus[0].busy is False
    assert at_default.processes[(1, 1001.0)].shares[0].basis == "sm"
    assert raised.processes[(1, 1001.0)].shares[0].basis == "memory"
    assert at_default.wasted_per_hour == pytest.approx(4.0 * 0.8)
    assert raised.wasted_per_hour == pytest.approx(4.0)


def test_ledger_integrates_per_process_user_job_day():
    ledger = CostLedger(jobs={"llama-ft": r"finetune\.py"})
    hp = price(3.6, 1)
    day = datetime(2025, 1, 31, 23, 59, 0, tzinfo=timezone.utc).timestamp()
    procs = (proc(1, [(0, GIB, 100)], user="bob", command="python finetune.py --lr 1"),)
    for i in range(121):  # 120 s, crossing midnight at 60 s
        ledger.add(burn(Sample(day + i, i, gpus=(gpu(0, 100),), processes=procs), hp))
    assert ledger.total == pytest.approx(3.6 * 120 / 3600)
    assert ledger.by_user["bob"] == pytest.approx(0.12)
    assert ledger.by_job["llama-ft"] == pytest.approx(0.12)
    assert ledger.by_day["2025-01-31"] == pytest.approx(0.06)
    assert ledger.by_day["2025-02-01"] == pytest.approx(0.06)
    assert ledger.by_month["2025-02"] == pytest.approx(0.06)
    # a long gap is not charged
    ledger.add(burn(Sample(day + 121 + 3600, 200, gpus=(gpu(0, 100),), processes=procs), hp))
    assert ledger.unaccounted_seconds == pytest.approx(3600 + 1 - 60)


def test_a_replayed_ledger_charges_nothing_between_two_runs():
    """Recorded ticks of two runs 2 s apart (a restart): the second run's ledger charged
    nothing for its first tick, so a report or a replay that reads both must not either,
    and a window's energy counts the same seconds."""
    hp = price(3.6, 1)
    day = datetime(2025, 1, 31, 12, 0, 0, tzinfo=timezone.utc).timestamp()
    times = [day + i for i in range(10)] + [day + 11 + i for i in range(10)]  # restart at +10.5
    samples = [Sample(ts, i, gpus=(gpu(0, 100),), processes=(proc(1, [(0, GIB, 100)]),))
               for i, ts in enumerate(times)]
    replayed = CostLedger(run_starts=[day + 10.5])
    plain = CostLedger()
    for sample in samples:
        replayed.add(burn(sample, hp))
        plain.add(burn(sample, hp))
    assert replayed.seconds == pytest.approx(18)  # 9 + 9: each run's first tick charged 0
    assert plain.seconds == pytest.approx(20)  # the 2 s across the restart charged
    assert replayed.total == pytest.approx(3.6 * 18 / 3600)
    _, covered = window_meter(samples, JobLabeler().label, 60.0, [day + 10.5])
    assert covered == pytest.approx(18)
    assert tick_seconds(day + 9, day + 11, 60.0, [day + 10.5]) == 0.0
    assert tick_seconds(day + 9, day + 11, 60.0) == 2.0
    assert tick_seconds(day, day + 600, 60.0) == 60.0  # a long gap: at most the recording gap
    assert run_starts({("start", "daemon"): [(day + 5, day + 5, {}), (day, day, {})],
                       ("price", "host"): [(day + 1, 1.0, {})]}) == (day, day + 5)


def test_job_labels():
    labeler = JobLabeler({"serve": r"vllm"})
    assert labeler.label("python -m vllm.entrypoints.openai.api_server") == "serve"
    assert labeler.label("/usr/bin/python3 /home/a/train.py --x 1") == "train.py"
    assert labeler.label("python -m torch.distributed.run x.py") == "torch.distributed.run"
    assert labeler.label("./bin/server --port 1") == "server"
    with pytest.raises(ValueError, match="not a regular expression"):
        JobLabeler({"bad": "("})


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(\w+\s?)*$", r"(a|aa)+$", r"(a{1,3})+$",
                                     r"(?:x(a?)b)+"])
def test_a_job_pattern_that_can_backtrack_exponentially_is_refused(pattern):
    """Run on command lines any user writes, in the daemon's tick: a pattern that takes time
    exponential in the line would let one process hang it."""
    with pytest.raises(ValueError, match="exponential in the line's length"):
        JobLabeler({"evil": pattern})


@pytest.mark.parametrize("pattern", [r"vllm", r"train.*\.py", r"^ml/", r"--model[= ](bert|gpt)",
                                     r"[a-z]+_llm", r"(ab{2})+", r"x{2,5}y"])
def test_ordinary_job_patterns_are_kept(pattern):
    assert JobLabeler({"job": pattern}).patterns[0][0] == "job"


def test_a_job_pattern_runs_on_a_bounded_prefix_of_the_command_line():
    labeler = JobLabeler({"late": r"--tag late"})
    assert labeler.label("python train.py " + "x" * 100 + " --tag late") == "late"
    assert labeler.label("python train.py " + "x" * MATCHED_CHARS + " --tag late") == "train.py"


def test_a_command_line_is_split_into_words_on_a_bounded_prefix(monkeypatch):
    """A snapshot handed around may hold a command line of megabytes (the daemon records at
    most ~20 000 characters; another writer, or an edited file, need not): shlex builds each
    word a character at a time, and a report over a 1 MB one took 64 s (probe 126 F3)."""
    from daemon.analysis import ledger

    split: list[int] = []
    real = ledger.shlex.split
    monkeypatch.setattr(ledger.shlex, "split", lambda text: split.append(len(text)) or real(text))
    huge = "python /srv/jobs/train.py --note '" + "B" * 1_000_000 + "'"
    assert JobLabeler().label(huge) == "train.py"
    assert split and max(split) <= MATCHED_CHARS


def test_storage_cost(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"\0" * 1000)
    (tmp_path / "y.bin").write_bytes(b"\0" * 24)
    [item] = storage_cost([str(tmp_path)], price_per_gb_month=0.1)
    assert item.bytes == 1024 and item.files == 2 and item.complete
    assert item.per_month == pytest.approx(1024 / GIB * 0.1)
    ticks = iter(range(100))
    [partial] = storage_cost({str(tmp_path): 0.1}, time_budget_s=0.5,
                             clock=lambda: next(ticks))
    assert not partial.complete
    [missing] = storage_cost([str(tmp_path / "nope")])
    assert missing.error and not missing.complete


class _Counter(BaseHTTPRequestHandler):
    value = 0.0

    def do_GET(self):  # noqa: N802
        body = ("# HELP tokens_generated_total Tokens.\n# TYPE tokens_generated_total counter\n"
                f'tokens_generated_total{{model="a"}} {type(self).value}\n'
                'tokens_generated_total{model="b"} 5\n').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def counter_server():
    server = HTTPServer(("127.0.0.1", 0), _Counter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


def test_unit_cost_from_local_prometheus(counter_server):
    server, url = counter_server
    assert read_counter(url, "tokens_generated", {"model": "a"}) == 0.0
    assert read_counter(url, "tokens_generated_total") == 5.0
    with pytest.raises(ValueError, match="no counter"):
        read_counter(url, "requests_total")
    ledger = CostLedger(jobs={"chat": "vllm"})
    ledger.add_meter(UnitCostMeter("chat", url, "tokens_generated_total", labels={"model": "a"}))
    hp = price(3.6, 1)
    procs = (proc(7, [(0, GIB, 90)], command="vllm serve m"),)
    _Counter.value = 1000.0
    ledger.add(burn(Sample(0.0, 1, gpus=(gpu(0, 90),), processes=procs), hp))
    ledger.poll_unit_costs()
    for t in range(1, 101):
        ledger.add(burn(Sample(float(t), t, gpus=(gpu(0, 90),), processes=procs), hp))
    _Counter.value = 501_000.0
    [meter] = ledger.poll_unit_costs()
    # $0.10 spent over 500k tokens -> $0.20 per 1M tokens
    assert meter.unit_cost == pytest.approx(0.1 / 500_000 * 1e6)
    assert "per" in meter.as_dict() and meter.error is None
    bad = UnitCostMeter("chat", "http://127.0.0.1:9/metrics", "x")
    ledger.add_meter(bad)
    ledger.poll_unit_costs(timeout_s=0.5)
    assert bad.error


def test_a_stall_longer_than_a_minute_is_charged_its_first_minute_as_readme_says():
    """Probe 153 L4: README said a recording gap over a minute is charged nothing, while the
    ledger charges the first minute of a stall inside a run (at the burn of the tick after it)
    and counts the rest in unaccounted_seconds; the time between two runs is not charged nor
    counted. README now says what the ledger does."""
    from tests.livedaemon import ROOT

    hp = price(5.672, 1)
    procs = (proc(1, [(0, GIB, 100)]),)
    ledger = CostLedger()
    t0 = 1_796_627_000.0
    for ts in (t0, t0 + 1, t0 + 1 + 105.7, t0 + 2 + 105.7):
        ledger.add(burn(Sample(ts, 1, gpus=(gpu(0, 100),), processes=procs), hp))
    assert ledger.seconds == pytest.approx(1 + 60 + 1)
    assert ledger.unaccounted_seconds == pytest.approx(45.7)
    assert ledger.total == pytest.approx(5.672 * 62 / 3600)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "stalled for over a minute), which nothing is charged for" not in readme
    assert ("longer than a minute, its first minute is charged at the burn of the tick after it "
            "and the rest is `unaccounted_seconds`") in readme


def test_a_stall_across_hours_hands_each_hour_its_unaccounted_seconds():
    """Probe 153: a report read from the hour spend rows (beyond 6 h) said 0 unaccounted
    seconds for a store whose ledger left a stall's time unaccounted: the rows kept only what was
    charged. The ledger now hands each hour the part of the stall no tick charged that fell in
    it (its last item), the charged minute where it was charged."""
    hp = price(5.672, 1)
    procs = (proc(1, [(0, GIB, 100)]),)
    ledger = CostLedger()
    hour = 1_796_626_800.0  # (an hour's start)
    stall_ends = hour + 2 * 3600 + 600.0  # from :50 in the hour before to :10 two hours on
    for ts in (hour - 600.0, stall_ends, stall_ends + 1):
        ledger.add(burn(Sample(ts, 1, gpus=(gpu(0, 100),), processes=procs), hp))
    rows = ledger.take_unrecorded()[0]
    assert ledger.unaccounted_seconds == pytest.approx(2 * 3600 + 1200 - 60.0)
    assert {h: row[5] for h, row in rows.items()} == pytest.approx({
        int(hour - 3600): 600.0, int(hour): 3600.0, int(hour + 3600): 3600.0,
        int(hour + 7200): 540.0})
    assert {h: row[0] for h, row in rows.items()} == pytest.approx({
        int(hour - 3600): 0.0, int(hour): 0.0, int(hour + 3600): 0.0, int(hour + 7200): 61.0})
