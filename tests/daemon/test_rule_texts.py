"""A recommendation's headline, figures, evidence and action agree with each other, with the
other recommendations on the same screen and with the panels (/v1/now's phases): the demo
showed "(now every 0 min)" beside "checkpoints every 7 s", a server offered "a patch for your
training script", and "spends 80%" beside a phase balance of 83%."""

import re

from daemon.analysis.kinds import BATCH_INFERENCE, ONLINE_INFERENCE, TRAINING, Kind
from daemon.api.actions import apply
from daemon.clock import duration
from tests.daemon.test_rules import by_rule, phases_for, pid_id, recs, window


def kinds(samples, kind):
    return {pid_id(samples): Kind(kind, 0.8, ("test",))}


def checkpointing_every_7s():
    """(blocking_checkpoint, spot_training) of a training job that checkpoints every 7 s, 45%
    of a 600 s window (the process started 660 s before its end)."""
    s = window(n=61, step=10.0)
    every_7s = [s[0].ts + 7.0 * k for k in range(80)]
    found = recs(s, phases_for(s, checkpoint=0.45, compute=0.55),
                 checkpoint_times={pid_id(s): every_7s}, kinds=kinds(s, TRAINING),
                 limits={"spot_min_runtime_s": 60.0})
    [blocking] = by_rule(found, "blocking_checkpoint")
    [spot] = by_rule(found, "spot_training")
    return blocking, spot


def test_checkpoint_cadence_is_one_figure_in_one_format_in_both_rules():
    blocking, spot = checkpointing_every_7s()
    assert "checkpoints every 7 s" in spot.summary
    assert "(now every 7 s)" in blocking.action["patch"]
    assert "0 min" not in blocking.action["patch"]
    assert blocking.evidence["phases"]["checkpoint"]["share"] == 0.45
    assert spot.evidence["checkpoint_interval_s"] == 7.0


def test_duration_never_rounds_a_short_interval_to_nothing():
    assert duration(0.4) == "0.4 s" and duration(7) == "7 s" and duration(420) == "7 min"
    assert duration(9000) == "2.5 h"
    assert duration(86400) == "24.0 h" and duration(30 * 86400) == "30 days"  # (the review's)


def test_a_servers_dry_run_speaks_of_the_server_and_a_batch_jobs_of_its_script():
    served = window(utils=[90.0] + [0.0] * 7, sm_activity=10.0, command="python app.py")
    [rec] = by_rule(recs(served, kinds=kinds(served, ONLINE_INFERENCE)),
                    "underbatched_inference")
    assert "(90% utilization over its last 10 min)" in rec.summary  # its window, not now's
    assert rec.summary.endswith("batch requests dynamically")
    result = apply(rec.as_dict())
    assert "training" not in result.message and "server" in result.message
    assert "max-num-seqs" in result.patch
    [batch] = by_rule(recs(served, kinds=kinds(served, BATCH_INFERENCE)),
                      "underbatched_inference")
    assert batch.summary.endswith("give each forward pass a larger batch")
    result = apply(batch.as_dict())
    assert "inference script" in result.message and "batch_size" in result.patch
    assert "dynamic_batching" not in result.patch


def test_a_phase_patch_names_the_workload_by_its_kind():
    s = window()
    [server] = by_rule(recs(s, phases_for(s, host_preprocess=0.4), kinds=kinds(s, ONLINE_INFERENCE)),
                       "main_thread_preprocessing")
    message = apply(server.as_dict()).message
    assert "training" not in message and "restart the server" in message
    assert "training" not in server.action["patch"]
    [trainer] = by_rule(recs(s, phases_for(s, data_wait=0.4), kinds=kinds(s, TRAINING)),
                        "dataloader_starvation")
    assert "training loop waits" in trainer.action["patch"]


def test_an_old_document_without_a_text_assumes_no_kind():
    result = apply({"id": "x", "action": {"kind": "show_patch", "file": None, "patch": "+x"}})
    assert "training" not in result.message


def test_a_phase_headline_quotes_the_phase_balance_and_its_window():
    s = window()
    phases = phases_for(s, data_wait=0.834, compute=0.166)  # 600 s of the process's time
    [rec] = by_rule(recs(s, phases), "dataloader_starvation")
    shown = f"{phases[pid_id(s)]['data_wait']['share']:.0%}"  # the details screen's format
    assert re.search(rf"spends {shown} of its last 10 min in data wait", rec.summary)
    assert rec.evidence["phase_window_s"] == 600.0


def test_a_data_wait_outside_a_dataloader_is_told_to_read_ahead_not_to_tune_a_dataloader():
    """A loop that reads its own files, or waits on a reader thread of its own (its top stack
    the reader's line), has no DataLoader whose workers to raise: 'waits here for its
    DataLoader' was wrong there."""
    s = window()
    phases = phases_for(s, data_wait=0.834, compute=0.166)
    for stack in phases[pid_id(s)]["data_wait"]["top_stacks"]:
        stack["frames"] = ["/srv/train.py:23 read_batches", "/usr/lib/python3.11/threading.py"
                           ":975 Thread.run"]
    [own] = by_rule(recs(s, phases), "dataloader_starvation")
    assert own.headline.startswith("prefetch its input in parallel (pid ")
    assert "in data wait: prefetch its input in parallel — /srv/train.py:88" in own.summary
    patch = own.action["patch"]
    assert "waits here for input it reads itself" in patch and "ThreadPoolExecutor" in patch
    assert "waits here for its DataLoader" not in patch
    [loader] = by_rule(recs(s, phases_for(s, data_wait=0.834, compute=0.166)),
                       "dataloader_starvation")  # its stack in a DataLoader: tune that
    assert loader.headline.startswith("prefetch in DataLoader workers")
    assert "waits here for its DataLoader" in loader.action["patch"]


def test_idle_advice_counts_its_gpus_and_its_minutes_as_the_panels_do():
    s = window(utils=[0.0] * 8, holders={0: 0.0, 1: 0.0})
    [rec] = by_rule(recs(s, limits={"idle_held_min_s": 60.0}), "idle_gpu_held")
    # idle through all 10 min the rules read: maybe for hours (its idle event says since when)
    assert "holds GPUs 0, 1 (10.0 GiB) idle for at least 10 min (the whole window" in rec.summary
    later = window(utils=lambda i: [50.0 if i < 56 else 0.0] * 8, holders={3: 0.0})
    [rec] = by_rule(recs(later, limits={"idle_held_min_s": 30.0}), "idle_gpu_held")
    assert "holds GPU 3 (10.0 GiB) idle for 40 s," in rec.summary  # not "0 min", no "at least"


def test_each_rule_says_its_advice_in_a_headline_that_agrees_with_its_summary():
    """At 80 columns a recommendation's row shows 40 characters of its summary: its subject
    ("daemon.sim.workloads.data_starved (pid…"), never what to do. Each finding carries a
    headline — who, the figure, the advice — with the summary's own figures."""
    s = window()
    phases = phases_for(s, data_wait=0.834, compute=0.166)
    [loader] = by_rule(recs(s, phases), "dataloader_starvation")
    pid = pid_id(s).split(":")[0]
    # the advice first: where a row cuts it, what to do stays
    assert loader.headline == f"prefetch in DataLoader workers (pid {pid}: 83% in data wait)"
    assert "spends 83%" in loader.summary and len(loader.headline) < len(loader.summary)

    idle = window(utils=[0.0] * 8, holders={0: 0.0, 1: 0.0})
    [held] = by_rule(recs(idle, limits={"idle_held_min_s": 60.0}), "idle_gpu_held")
    assert held.headline.startswith(f"pid {pid_id(idle).split(':')[0]} holds GPUs 0, 1 idle "
                                    "for at least 10 min")
    assert held.headline.endswith("/h") and held.headline.split(" at ")[-1] in held.summary

    blocking, spot = checkpointing_every_7s()
    assert blocking.headline.startswith("checkpoint asynchronously or less often (pid ")
    assert blocking.headline.endswith(": 45% in checkpointing)")
    assert spot.headline.startswith("run on spot at $") and "checkpoints every 7 s" in spot.headline
    for finding in (loader, held, blocking, spot):
        wire = finding.as_wire()  # the headline reaches the wire, one line
        assert wire.headline == finding.headline and "\n" not in wire.headline
