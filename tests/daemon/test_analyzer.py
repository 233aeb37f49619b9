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
