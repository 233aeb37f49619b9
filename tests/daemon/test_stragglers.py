"""Waiting on peers (rules/stragglers.py) and writing output (rules/output.py): the straggler is
named with its pid, GPU, phase and line, and advice that fits it, not host-sync advice; writing
output gets its own advice and no checkpoint cadence for the spot advice."""

from __future__ import annotations

from test_rules import CATALOG, GIB, P4D, by_rule, pid_id, spot_window, window

from daemon.analysis.book import RecommendationBook
from daemon.analysis.kinds import TRAINING, Kind
from daemon.analysis.rules import build_analysis, evaluate
from daemon.analysis.rules.stragglers import job_of
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

START = 100_000.0


def ranks_window(commands, ppid=500, n=61, step=10.0):
    """One process per GPU, all children of `ppid`, each running commands[i]."""
    out = []
    for i in range(n):
        ts = START + i * step
        gpus = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok", 40.0, None,
                               10 * GIB if g < len(commands) else 0, 40 * GIB) for g in range(8))
        procs = tuple(ProcessSample(1000 + r, START - 60, ppid, "ann", command,
                                    (GpuUse(r, 10 * GIB, 40.0),))
                      for r, command in enumerate(commands))
        out.append(Sample(ts, i, gpus=gpus, processes=procs))
    return out


def rank_phases(shares_by_rank):
    stacks = [{"frames": ["train.py:31 run_rank"], "file": "/srv/train.py", "line": 31,
               "function": "run_rank", "samples": 7}]
    return {f"{1000 + r}:{START - 60:.3f}": {
        k: {"seconds": v * 600, "share": v, "gpu_idle_seconds": 0, "top_stacks": stacks}
        for k, v in shares.items()} for r, shares in enumerate(shares_by_rank)}


def test_ranks_waiting_on_a_slow_rank_name_the_straggler_and_its_input():
    samples = ranks_window(["python train.py"] * 3)
    phases = rank_phases([{"comm": 0.6, "compute": 0.3, "host_preprocess": 0.1},
                          {"comm": 0.55, "compute": 0.3, "host_preprocess": 0.15},
                          {"host_preprocess": 0.65, "compute": 0.3, "comm": 0.05}])
    found = evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32))
    [rec] = by_rule(found, "straggler")
    assert rec.evidence["straggler"]["pid"] == 1002
    assert rec.evidence["straggler"]["gpus"] == [2]
    assert rec.evidence["straggler"]["phase"] == "host_preprocess"
    assert "pid 1002 (GPU 2)" in rec.summary and "/srv/train.py:31" in rec.summary
    assert "equal shard" in rec.summary and ".item()" not in rec.summary
    assert sorted(w["pid"] for w in rec.evidence["waiting_ranks"]) == [1000, 1001]
    assert rec.savings_per_month > 0 and rec.scope["gpus"] == [0, 1]
    # its dry run names the file to patch and the restart, like every patch (rules.base)
    assert rec.action["text"].startswith("a patch for /srv/train.py:31: review it")


def test_a_rank_without_stack_samples_is_not_named_the_straggler():
    """Under load a rank may have no stack sample yet (the sampler shares its dumps among all
    processes): with no phase balance it waits 0% by the numbers, but it may be the straggler
    as well as a waiter, so the job gets no verdict until every rank has one."""
    samples = ranks_window(["python train.py"] * 3)
    phases = rank_phases([{}, {"comm": 0.55, "compute": 0.3, "host_preprocess": 0.15},
                          {"host_preprocess": 0.65, "compute": 0.3, "comm": 0.05}])
    assert by_rule(evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32)),
                   "straggler") == []
    phases = rank_phases([{"comm": 0.6, "compute": 0.4}, {"comm": 0.55, "compute": 0.45}, {}])
    assert by_rule(evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32)),
                   "straggler") == []


def test_a_job_shows_one_straggler_when_another_rank_becomes_the_slowest():
    """The book holds a finding through a lapse; a straggler finding is of its job (its slot),
    so when another rank is the slowest now the finding about the first goes at once, with a
    notice, and the job never shows two stragglers."""
    samples = ranks_window(["python train.py"] * 3)
    book = RecommendationBook(hold_s=300.0)
    before = rank_phases([{"comm": 0.6, "compute": 0.4}, {"host_preprocess": 0.7, "compute": 0.3},
                          {"comm": 0.55, "compute": 0.45}])
    after = rank_phases([{"comm": 0.6, "compute": 0.4}, {"comm": 0.55, "compute": 0.45},
                         {"host_preprocess": 0.7, "compute": 0.3}])
    [first] = by_rule(evaluate(build_analysis(samples, before, P4D, CATALOG, host_cpus=32)),
                      "straggler")
    [second] = by_rule(evaluate(build_analysis(samples, after, P4D, CATALOG, host_cpus=32)),
                       "straggler")
    assert first.evidence["straggler"]["pid"] == 1001
    assert second.evidence["straggler"]["pid"] == 1002
    book.record([first], START)
    [notice] = book.record([second], START + 30)
    assert [e.recommendation.evidence["straggler"]["pid"] for e in book.active()] == [1002]
    assert notice["recommendation_id"] == first.id and "superseded" in notice["detail"]


def test_ranks_in_step_or_unrelated_processes_have_no_straggler():
    even = rank_phases([{"comm": 0.3, "compute": 0.7}] * 3)
    assert by_rule(evaluate(build_analysis(ranks_window(["python train.py"] * 3), even, P4D,
                                           CATALOG, host_cpus=32)), "straggler") == []
    uneven = rank_phases([{"comm": 0.6, "compute": 0.4}, {"host_preprocess": 0.7}])
    # Different programs under one parent (a scheduler's children) are not ranks of one job.
    apart = ranks_window(["python a.py", "python b.py"])
    assert by_rule(evaluate(build_analysis(apart, uneven, P4D, CATALOG, host_cpus=32)),
                   "straggler") == []
    # Without a parent (re-parented to init) nothing groups them.
    orphans = ranks_window(["python train.py"] * 2, ppid=1)
    assert by_rule(evaluate(build_analysis(orphans, uneven, P4D, CATALOG, host_cpus=32)),
                   "straggler") == []


def test_rank_arguments_are_not_part_of_the_job():
    samples = ranks_window(["python two_ranks.py --rank 0", "python two_ranks.py --rank=1"])
    analysis = build_analysis(samples, None, P4D, CATALOG, host_cpus=32)
    jobs = {job_of(p) for p in analysis.processes}
    assert jobs == {(500, "python two_ranks.py")}


def test_spawned_ranks_are_one_job_and_the_straggler_among_them_is_named():
    """multiprocessing's spawn start method (torch.multiprocessing.spawn's ranks) hands each
    child its own pipe: the command lines differ only there, as Python writes them."""
    spawned = [f"/usr/bin/python3 -B -c from multiprocessing.spawn import spawn_main; "
               f"spawn_main(tracker_fd=4, pipe_handle={fd}) --multiprocessing-fork"
               for fd in (6, 8, 11)]
    samples = ranks_window(spawned)
    analysis = build_analysis(samples, None, P4D, CATALOG, host_cpus=32)
    assert len({job_of(p) for p in analysis.processes}) == 1
    phases = rank_phases([{"comm": 0.6, "compute": 0.4}, {"comm": 0.55, "compute": 0.45},
                          {"host_preprocess": 0.65, "compute": 0.3, "comm": 0.05}])
    [rec] = by_rule(evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32)),
                    "straggler")
    assert rec.evidence["straggler"]["pid"] == 1002
    # a child of another parent, or another program, is still another job
    other = ranks_window(spawned[:1] + ["python train.py"], ppid=501)
    assert len({job_of(p) for p in build_analysis(other, None, P4D, CATALOG,
                                                  host_cpus=32).processes}) == 2


def test_writing_output_gets_buffering_advice_and_no_checkpoint_cadence():
    samples = spot_window(1800, 3 * 3600)  # write bursts every 30 min: a cadence before
    key = pid_id(samples)
    stacks = [{"frames": ["events.py:21 append_events"], "file": "/srv/events.py", "line": 21,
               "function": "append_events", "samples": 9}]
    phases = {key: {"output": {"seconds": 300, "share": 0.4, "gpu_idle_seconds": 300,
                               "top_stacks": stacks},
                    "compute": {"seconds": 450, "share": 0.6, "gpu_idle_seconds": 0,
                                "top_stacks": []}}}
    kinds = {key: Kind(TRAINING, 0.6)}
    found = evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32, kinds=kinds))
    [rec] = by_rule(found, "writing_output")
    assert "/srv/events.py:21" in rec.summary and "write asynchronously" in rec.summary
    assert "queue" in rec.action["patch"]
    assert by_rule(found, "blocking_checkpoint") == []
    assert by_rule(found, "main_thread_preprocessing") == []
    assert by_rule(found, "spot_training") == []  # the writes are logs, not checkpoints
    # The same writes with no stacks saying what they are: still read as checkpoints.
    assert by_rule(evaluate(build_analysis(samples, None, P4D, CATALOG, host_cpus=32,
                                           kinds=kinds)), "spot_training")


def test_a_single_process_is_no_job_of_ranks():
    samples = window()
    assert by_rule(evaluate(build_analysis(samples, None, P4D, CATALOG, host_cpus=32)),
                   "straggler") == []
