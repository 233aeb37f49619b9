"""Owners as job keys: the ledger charges each process to its owner jobs (namespace:ml,
slurm_job:42, ...), a budget or a unit cost names one, and an owned process's job label is its
workload unless a configured [cost.jobs] pattern claims it."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest

from daemon.analysis.budgets import BudgetWatch
from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.ledger import CostLedger, JobLabeler, owner_jobs
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

PRICE = HostPrice(36.0, 2, "on-demand", "x", "aws", "us-east-1", "test", None)  # $18/GPU-h
DAY = datetime(2025, 3, 10, 0, 0, tzinfo=timezone.utc).timestamp()
POD = {"pod_uid": "8e3b1a2c-4f5d-4e6a-9b7c-1d2e3f4a5b6c", "namespace": "ml",
       "pod": "trainer-0", "container": "trainer"}
SLURM = {"slurm_job": "42", "slurm_step": "0", "slurm_account": "physics",
         "slurm_partition": "gpu"}


def tick(ledger: CostLedger, ts: float) -> None:
    """Two GPUs at full use: one by a pod's trainer, one by a Slurm step ($18/h each)."""
    s = Sample(ts, 1, gpus=(GpuSample(0, "u0", "A100", "ok", 100.0),
                            GpuSample(1, "u1", "A100", "ok", 100.0)),
               processes=(
                   ProcessSample(1, 1.0, 0, "alice", "python train.py", (GpuUse(0, 1, 100.0),),
                                 owner=POD),
                   ProcessSample(2, 2.0, 0, "bob", "python train.py", (GpuUse(1, 1, 100.0),),
                                 owner=SLURM)))
    ledger.add(burn(s, PRICE))


def test_owner_jobs_name_the_namespace_the_pod_and_the_slurm_job_account_partition():
    assert owner_jobs(POD) == ["namespace:ml", "pod:ml/trainer-0"]
    assert owner_jobs(SLURM) == ["slurm_job:42", "slurm_account:physics",
                                 "slurm_partition:gpu"]
    assert owner_jobs({"systemd_unit": "vllm.service"}) == ["systemd_unit:vllm.service"]
    # a pod known only by its UID has no name a person would budget by
    assert owner_jobs({"pod_uid": POD["pod_uid"]}) == []


def test_the_ledger_charges_each_owner_job_and_labels_jobs_by_workload():
    ledger = CostLedger()
    for i in range(101):  # 100 s charged at $36/h
        tick(ledger, DAY + i)
    assert math.isclose(ledger.total, 1.0)
    assert ledger.by_job == pytest.approx({"ml/trainer-0": 0.5, "slurm 42": 0.5})
    assert ledger.by_owner == pytest.approx({
        "namespace:ml": 0.5, "pod:ml/trainer-0": 0.5, "slurm_job:42": 0.5,
        "slurm_account:physics": 0.5, "slurm_partition:gpu": 0.5})
    assert ledger.cost_of("namespace:ml") == pytest.approx(0.5)
    assert ledger.cost_of("slurm_account:physics") == pytest.approx(0.5)
    assert ledger.cost_of("namespace:nobody") == 0.0
    assert ledger.as_dict()["by_owner"]["slurm_job:42"] == pytest.approx(0.5)


def test_a_budget_on_a_namespace_or_a_slurm_account_fires_once():
    watch = BudgetWatch({"job": {"namespace:ml": {"daily": 0.25},
                                 "slurm_account:physics": {"monthly": 0.4},
                                 "slurm_account:chemistry": {"daily": 0.01}}})
    ledger = CostLedger()
    fired = []
    for i in range(101):
        tick(ledger, DAY + i)
        fired += [(i, e.target) for e in watch.update(ledger, DAY + i)]
    # $18/h each = $0.005/s: $0.25 after 50 s, $0.40 after 80 s; chemistry spent nothing
    assert fired == [(50, "job:namespace:ml"), (80, "job:slurm_account:physics")]


def test_a_configured_pattern_claims_an_owned_process_by_command_or_by_workload():
    labeler = JobLabeler({"llm": r"train_llm\.py", "team-ml": r"^ml/"})
    assert labeler.label("python train_llm.py", POD) == "llm"
    assert labeler.label("python other.py", POD) == "team-ml"
    assert labeler.label("python other.py", SLURM) == "slurm 42"
    assert labeler.label("python other.py", {}) == "other.py"
    # a generic unit names no job: the command does
    assert labeler.label("python other.py", {"systemd_unit": "session-3.scope"}) == "other.py"
