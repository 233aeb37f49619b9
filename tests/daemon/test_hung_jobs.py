"""A hung job (rules/hung.py): every rank of a job on this host waits in communication with its
GPU idle for [idle].gpu_held_after. It gets `hung_job` (the ranks' pids and lines, the cost while
it hangs, look first and restart, never a SIGTERM) and no overlap advice; a job whose ranks move
data (GPU busy between waits), a job with a straggler still working, a single process and a
wait shorter than the threshold do not."""

from __future__ import annotations

import pytest
from test_rules import CATALOG, GIB, P4D, by_rule

from daemon.analysis.book import RecommendationBook
from daemon.analysis.idleness import process_evidence as idle_evidence
from daemon.analysis.rules import build_analysis, evaluate
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

START = 100_000.0
WINDOW_S = 900.0  # past idle_held_min_s (10 min by default)


def job_window(ranks=2, util=0.0, sm=0.0, n=91, step=10.0, ppid=500, cores=0.005):
    """`ranks` processes of one job (one parent, one program), one GPU each, at `util`% with
    their own SM share `sm` and `cores` CPUs busy, for (n - 1) x step seconds."""
    out = []
    for i in range(n):
        gpus = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok", util if g < ranks else 0.0,
                               None, 10 * GIB if g < ranks else 0, 40 * GIB) for g in range(8))
        procs = tuple(ProcessSample(1000 + r, START - 60, ppid, "ann",
                                    f"python train.py --local_rank={r}",
                                    (GpuUse(r, 10 * GIB, sm),), cpu_seconds=i * step * cores)
                      for r in range(ranks))
        out.append(Sample(START + i * step, i, gpus=gpus, processes=procs))
    return out


def stacks(reason, line=38, function="worker"):
    return [{"frames": [f"train.py:{line} {function}"], "file": "/srv/train.py", "line": line,
             "function": function, "samples": 40, "reason": reason}]


RECV = "torch.distributed recv"


def balance(idle_of_phase, seconds=WINDOW_S):
    """A phase balance: {phase: (share, share of its time with the GPU idle, reason)}."""
    return {phase: {"seconds": share * seconds, "share": share,
                    "gpu_idle_seconds": share * seconds * idle, "top_stacks": stacks(reason)}
            for phase, (share, idle, reason) in idle_of_phase.items()}


def phases(*per_rank):
    return {f"{1000 + r}:{START - 60:.3f}": b for r, b in enumerate(per_rank)}


HUNG = balance({"comm": (0.98, 1.0, RECV), "compute": (0.02, 0.0, "GPU busy")})


def found(samples, balances):
    return evaluate(build_analysis(samples, balances, P4D, CATALOG, host_cpus=32))


def test_ranks_that_all_wait_in_comm_with_idle_gpus_are_a_hung_job():
    recs = found(job_window(), phases(HUNG, HUNG))
    [hung] = by_rule(recs, "hung_job")
    assert [r["pid"] for r in hung.evidence["ranks"]] == [1000, 1001]
    assert [r["where"] for r in hung.evidence["ranks"]] == ["/srv/train.py:38"] * 2
    for pid, gpu in ((1000, 0), (1001, 1)):
        assert f"pid {pid} (GPU {gpu}) at /srv/train.py:38: {RECV}" in hung.summary
    assert "all 2 ranks on this host have waited on their peers" in hung.summary
    assert "while it hangs" in hung.summary and "restart" in hung.summary
    assert hung.savings_per_month > 0 and hung.scope == {"gpus": [0, 1]}
    # look first, restart: no signal of its own (a multi-node wait reads the same)
    assert hung.action["kind"] == "copy_commands"
    assert hung.action["commands"][:2] == ["sudo py-spy dump --pid 1000",
                                          "sudo py-spy dump --pid 1001"]
    assert not [c for c in hung.action["commands"] if "kill" in c]
    assert "restart the job" in hung.action["text"] and "another host" in hung.action["text"]
    # a hung job is not slow at communicating, and its ranks are not offered a stop
    assert by_rule(recs, "communication_bound") == []
    assert not {r.rule for r in recs} & {"idle_gpu_held", "host_idle", "straggler"}
    assert not [r for r in recs if (r.action or {}).get("kind") == "sigterm"]


def test_a_ring_all_reduce_that_progresses_is_not_hung():
    """Its collectives keep the GPUs busy (NCCL kernels between and during the waits): slow
    communication, the overlap advice, no hung_job."""
    moving = balance({"comm": (0.6, 0.1, "torch.distributed all_reduce"),
                      "compute": (0.4, 0.0, "GPU busy")})
    recs = found(job_window(util=60.0, sm=40.0), phases(moving, moving))
    assert by_rule(recs, "hung_job") == []
    assert len(by_rule(recs, "communication_bound")) == 2
    # nor when the GPUs read idle but its comm samples were taken with the GPU at work
    busy_comm = balance({"comm": (0.98, 0.2, "torch.distributed all_reduce"),
                         "compute": (0.02, 0.0, "GPU busy")})
    assert by_rule(found(job_window(), phases(busy_comm, busy_comm)), "hung_job") == []
    # nor ranks that reduce host tensors through gloo: GPUs idle, samples in comm, CPUs busy
    assert by_rule(found(job_window(cores=0.6), phases(HUNG, HUNG)), "hung_job") == []
    # (the same job at 0.005 cores, a rank blocked in its receive, is hung)
    [hung] = by_rule(found(job_window(), phases(HUNG, HUNG)), "hung_job")
    assert [r["cpu_cores_while_idle"] for r in hung.evidence["ranks"]] == [
        pytest.approx(0.005)] * 2


def test_a_job_with_a_rank_still_working_has_a_straggler_not_a_hung_job():
    """Two ranks wait on the third, which tokenizes on its CPU with its GPU idle: the
    straggler rule names it; the job is not hung."""
    working = balance({"host_preprocess": (0.9, 1.0, "Python on the CPU"),
                       "comm": (0.05, 1.0, RECV), "compute": (0.05, 0.0, "GPU busy")})
    recs = found(job_window(ranks=3), phases(HUNG, HUNG, working))
    assert by_rule(recs, "hung_job") == []
    [straggler] = by_rule(recs, "straggler")
    assert straggler.evidence["straggler"]["pid"] == 1002
    # and one rank whose kernels still run on an otherwise idle GPU works too
    recs = found(job_window(ranks=2, sm=5.0), phases(HUNG, HUNG))
    assert by_rule(recs, "hung_job") == []


def test_not_before_gpu_held_after_nor_for_a_single_process():
    # 5 minutes of waiting: under [idle].gpu_held_after (10 min by default)
    assert by_rule(found(job_window(n=31), phases(HUNG, HUNG)), "hung_job") == []
    # one rank on this host: its peers, if any, are elsewhere; nothing here says the job hangs
    assert by_rule(found(job_window(ranks=1), phases(HUNG)), "hung_job") == []


def test_idle_answer_counts_a_waiting_rank_as_work_and_says_what_it_waits_for():
    """GET /v1/idle: a rank waiting in comm with its GPU idle and no CPU is active (a peer on
    another host may work), its reason says it waits on its peers."""
    rank = {"pid": 1000, "phase": "comm", "sm_share": 0.0, "cpu_percent": 0.5}
    [(text, _)] = idle_evidence(rank)
    assert text.startswith("phase: comm, waiting on its peers with its GPU idle"), text
    assert "another host" in text and "hung_job" in text
    # a rank in comm that also computes on its CPU just says its phase
    texts = [t for t, _ in idle_evidence({**rank, "cpu_percent": 80.0})]
    assert "phase: comm" in texts and not [t for t in texts if "peers" in t], texts


def test_a_hung_job_resolves_its_ranks_held_communication_bound_at_once():
    """A job that hung a round ago read communication-bound until then: the book drops that
    held advice at once (it is not slow, it stopped), with a notice naming the hung_job."""
    book = RecommendationBook(hold_s=300.0)
    # before the hang: both ranks slow at communicating, their GPUs busy between waits
    moving = balance({"comm": (0.6, 0.1, "torch.distributed all_reduce"),
                      "compute": (0.4, 0.0, "GPU busy")})
    book.record(found(job_window(util=60.0, sm=40.0), phases(moving, moving)), now=1000.0)
    assert [e.recommendation.rule for e in book.active()].count("communication_bound") == 2
    notices = book.record(found(job_window(), phases(HUNG, HUNG)), now=1030.0)
    shown = [e.recommendation.rule for e in book.active()]
    assert "hung_job" in shown and "communication_bound" not in shown, shown
    said = [n["detail"] for n in notices if n["rule"] == "communication_bound"]
    assert len(said) == 2 and all("superseded by a newer hung_job finding" in d for d in said)
