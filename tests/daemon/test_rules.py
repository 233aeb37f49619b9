import dataclasses

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
    assert "upper bound" in rec.method and "preliminary until 30.0 h observed" in rec.method
    doc = rec.as_dict()  # 10 min of a 30 h need: preliminary, confidence low, on the wire
    assert doc["preliminary"] is True and doc["confidence"] == "low"
    assert doc["evidence_seconds"] == 600 and doc["evidence_needed_seconds"] == 30 * 3600
    assert "g4dn.xlarge" in rec.summary and "$0.53/h" in rec.summary


def test_shrink_not_when_all_gpus_used_and_memory_needs_them():
    # 8 GPUs at 38 GiB: only g6e.48xlarge (8 x 48 GiB, $30.13) fits, 8% cheaper < 20%
    s = window(utils=[90.0] * 8, holders={g: 90.0 for g in range(8)}, mem=38 * GIB)
    assert by_rule(recs(s), "over_provisioned") == []


def test_shrink_needs_a_long_enough_window():
    assert by_rule(recs(window(n=60)), "over_provisioned") == []  # 590 s
    assert by_rule(recs(window(n=61)), "over_provisioned")  # 600 s


def test_idle_gpu_held_at_threshold():
    quiet = [0.0] * 8
    fires = window(n=61, utils=quiet, holders={0: 0.0})  # 600 s held idle
    # Its stacks show it waiting (idle phase): the SIGTERM needs that (rules/idle.py).
    [rec] = by_rule(recs(fires, phases_for(fires, idle=0.95)), "idle_gpu_held")
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


def test_host_idle_never_for_a_gpu_at_work_that_nvml_lists_no_process_on():
    """GPU 0 at 100% with no process listed (a container without hostPID, a vGPU): the rule
    offered 'stop-instances' for a host at work. Idle once every GPU is."""
    assert by_rule(recs(window(n=181, utils=[100.0] + [0.0] * 7, holders={})),
                   "host_idle") == []
    stopped = window(n=361, utils=lambda i: [100.0 if i < 180 else 0.0] + [0.0] * 7,
                     holders={})
    [rec] = by_rule(recs(stopped), "host_idle")
    assert rec.evidence["idle_seconds"] == 1800.0


def test_host_idle_never_while_a_gpu_has_no_reading():
    """Every GPU fell off the bus while a job trained (NVML then lists no process on them):
    'the whole host has been idle ... stop it', with stop-instances commands, because mlcostd
    could not see the GPUs; one GPU lost beside seven idle ones read the same (probe 115)."""
    def lost_from(lost, since):
        def at(i, samples):
            s = samples[i]
            if i < since:
                return s
            gpus = tuple(GpuSample(g.index, g.uuid, g.name, "lost", error="GPU is lost")
                         if g.index in lost else g for g in s.gpus)
            return Sample(s.ts, s.tick, gpus=gpus, processes=())
        return at

    for lost in (set(range(8)), {0}):
        trained = window(n=361, utils=[100.0] + [0.0] * 7, holders={0: 90.0})
        samples = [lost_from(lost, 20)(i, trained) for i in range(len(trained))]
        assert by_rule(recs(samples), "host_idle") == [], lost


def test_shrink_keeps_a_gpu_at_work_that_nvml_lists_no_process_on():
    """GPU 2 at 100% run by processes that live less than a tick (NVML lists none at a
    tick): counted as not working, the resize to a 1-GPU instance dropped its work."""
    s = window(utils=[90.0, 0.0, 100.0] + [0.0] * 5)
    [rec] = by_rule(recs(s), "over_provisioned")
    assert rec.evidence["gpus_used"] == 2 and "2 of 8 GPUs working" in rec.summary, rec.summary
    assert sorted(rec.scope["gpus"]) == [0, 2], rec.scope


def test_a_threshold_the_config_shortened_is_the_one_the_finding_states():
    """[idle] host_after = "1m": the finding fired after a minute but said '>= 30 min'."""
    samples = window(n=13, utils=[0.0] * 8, holders={})
    [rec] = by_rule(recs(samples, limits={"host_idle_min_s": 60.0}), "host_idle")
    assert rec.evidence["threshold"] == (
        ">= 30 min by default; here host_idle_min_s = 60 s (the config's)")
    [default] = by_rule(recs(window(n=181, utils=[0.0] * 8, holders={})), "host_idle")
    assert default.evidence["threshold"] == ">= 30 min"


LOADER_FRAMES = ["/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:631 "
                 "_BaseDataLoaderIter.__next__"]  # a data wait in a DataLoader's iterator


def phases_for(samples, **shares):
    def stacks(phase):
        frames = (LOADER_FRAMES if phase == "data_wait" else []) + ["/srv/train.py:88 main"]
        return [{"frames": frames, "file": "/srv/train.py", "line": 88, "function": "main",
                 "samples": 7}]
    return {pid_id(samples): {k: {"seconds": v * 600, "share": v, "gpu_idle_seconds": 0,
                                  "top_stacks": stacks(k)} for k, v in shares.items()}}


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


def test_a_rank_waiting_for_its_own_peer_is_told_to_find_the_slow_peer_not_to_bucket_ddp():
    """A rank of a hand-written all-reduce waits on a socket for a sibling rank (comm, the
    reason phases._waits_for_peer writes): DDP's buckets and NCCL's transport are not its
    knobs; its wait is its slowest peer's work (probe 143 F2's rank got the DDP patch). A
    library collective keeps the DDP patch."""
    s = window()
    peer = phases_for(s, comm=0.4)
    peer[pid_id(s)]["comm"]["top_stacks"][0]["reason"] = (
        "waiting for a peer of its own job on a socket (recv): its TCP connections all go to "
        "its own job's GPU processes")
    [rec] = by_rule(recs(s, peer), "communication_bound")
    assert "DDP(" not in rec.action["patch"] and "straggler" in rec.action["patch"], rec.action
    assert "/srv/train.py:88" in rec.action["patch"]
    assert rec.headline.startswith("find the slow peer"), rec.headline
    [library] = by_rule(recs(s, phases_for(s, comm=0.4)), "communication_bound")
    assert "DDP(model, bucket_cap_mb" in library.action["patch"], library.action
    assert library.headline.startswith("overlap and bucket collectives"), library.headline


def _host_preprocess_in(s, frames, samples=7):
    """A host_preprocess balance whose top stack has `frames` (leaf first), sampled `samples`
    times, plus the input-side stack of phases_for's loop (7 samples)."""
    found = phases_for(s, host_preprocess=0.4)
    found[pid_id(s)]["host_preprocess"]["top_stacks"].insert(0, {
        "frames": frames, "file": "/srv/train.py", "line": 17, "function": "dispatch",
        "samples": samples, "reason": "main thread on-CPU 100% with no I/O while the GPU idles"})
    return found


@pytest.mark.parametrize("frames", [
    # user code's own modules: a method's qualified name, called from a forward
    ["/srv/train.py:17 dispatch", "/srv/train.py:40 Linear.__call__",
     "/srv/train.py:60 Net.forward", "/srv/train.py:88 main"],
    # PyTorch's: the module call machinery above a layer's Python
    ["/srv/train.py:17 dispatch",
     "/usr/lib/python3/site-packages/torch/nn/modules/module.py:1747 Module._call_impl",
     "/srv/train.py:88 main"],
    # py-spy without qualified names
    ["/srv/model.py:31 forward", "/srv/train.py:88 main"],
    # the backward pass: a function of the user's, and autograd's (probe 145's launch-bound
    # loop spent 7 of its 12 samples in its backward)
    ["/srv/train.py:17 dispatch", "/srv/train.py:73 backward", "/srv/train.py:88 main"],
    ["/usr/lib/python3/site-packages/torch/autograd/__init__.py:347 backward",
     "/usr/lib/python3/site-packages/torch/_tensor.py:581 Tensor.backward",
     "/srv/train.py:88 main"],
])
def test_host_compute_inside_a_models_forward_is_told_fewer_larger_kernels_not_dataloader(
        frames):
    """A launch-bound model: its main thread's CPU goes to Python dispatching many small
    kernels inside the forward (probe 145 M1 got "move it into DataLoader workers"). No worker
    can take that over; CUDA graphs, torch.compile or a larger batch do. It counts where most
    of the phase's samples are in a forward."""
    s = window()
    [rec] = by_rule(recs(s, _host_preprocess_in(s, frames, samples=20)),
                    "main_thread_preprocessing")
    assert rec.headline.startswith("fewer, larger kernels: CUDA graphs or torch.compile"), \
        rec.headline
    patch = rec.action["patch"]
    assert "torch.compile(model" in patch and "torch.cuda.graph" in patch, patch
    assert "larger batch" in patch and "DataLoader(" not in patch, patch
    # A minority of the samples in a forward: the input work still leads.
    [minority] = by_rule(recs(s, _host_preprocess_in(s, frames, samples=6)),
                         "main_thread_preprocessing")
    assert minority.headline.startswith("move it into DataLoader workers"), minority.headline


def test_host_compute_outside_a_forward_keeps_the_dataloader_patch_and_says_where_output_work_goes():
    """Host compute outside any forward (a decode, or metrics on the model's outputs: probe 145
    M2's argsort AUC after `loss.item()`) keeps the DataLoader-workers advice; the patch says
    that work on the model's outputs belongs every N steps, on the GPU or on a thread, which no
    worker can do. A function named like a forward's but not one (`forward_fill`) is not."""
    s = window()
    frames = ["/srv/train.py:11 auc", "/srv/train.py:48 forward_fill", "/srv/train.py:88 main"]
    [rec] = by_rule(recs(s, _host_preprocess_in(s, frames, samples=20)),
                    "main_thread_preprocessing")
    assert rec.headline.startswith("move it into DataLoader workers"), rec.headline
    patch = rec.action["patch"]
    assert "num_workers=" in patch, patch
    assert "model's outputs" in patch and "every N steps, on the GPU, or on a thread" in patch, \
        patch

@pytest.mark.parametrize("frames", [
    # probe 147's offload_train.py: Adam in numpy on the loop's thread, in a function `adam`
    ["/work/probe147/progs/offload_train.py:20 adam",
     "/work/probe147/progs/offload_train.py:35 main",
     "/work/probe147/progs/offload_train.py:43 <module>"],
    # PyTorch's optimizer on CPU tensors (optimizer.step() in the loop)
    ["/venv/lib/python3.11/site-packages/torch/optim/adam.py:412 _single_tensor_adam",
     "/venv/lib/python3.11/site-packages/torch/optim/adam.py:223 Adam.step",
     "/srv/train.py:88 main"],
    # DeepSpeed's CPU Adam, py-spy without the class
    ["/venv/lib/python3.11/site-packages/deepspeed/ops/adam/cpu_adam.py:142 step",
     "/srv/train.py:88 main"],
    # an optimizer class of the user's own
    ["/srv/offload.py:30 HostOptimizer.step", "/srv/train.py:88 main"],
])
def test_host_compute_in_an_optimizer_step_is_told_to_overlap_it_not_dataloader(frames):
    """Probe 147 M3a: a ZeRO-offload-like job's Adam in numpy on its main thread got "move it
    into DataLoader workers". An optimizer step is the step itself: overlap it with the next
    forward (a delayed parameter update, DeepSpeed's CPU Adam) or keep the optimizer on the
    GPU. It counts where most of the phase's samples are in an optimizer step."""
    s = window()
    [rec] = by_rule(recs(s, _host_preprocess_in(s, frames, samples=20)),
                    "main_thread_preprocessing")
    assert rec.headline.startswith("the optimizer step runs on the CPU: overlap it with the "
                                   "next forward, or keep the optimizer on the GPU"), rec.headline
    patch = rec.action["patch"]
    assert "delayed parameter update" in patch and "DeepSpeedCPUAdam" in patch, patch
    assert "fused=True" in patch and "if its state fits" in patch, patch
    assert "DataLoader(" not in patch and "num_workers" not in patch, patch
    [minority] = by_rule(recs(s, _host_preprocess_in(s, frames, samples=6)),
                         "main_thread_preprocessing")
    assert minority.headline.startswith("move it into DataLoader workers"), minority.headline


def test_a_data_wait_caught_in_an_optimizer_step_gets_no_prefetch_patch():
    """Live rerun of probe 147's offload job with the fix: 2 samples read data_wait "blocked
    on I/O (a thread in D state) while the GPU idles" with its main thread in `adam` (a loaded
    host, no reads), and dataloader_starvation said "prefetch its input in parallel" at
    offload_train.py:20. A wait caught inside an optimizer step is no input to prefetch."""
    s = window()
    found = phases_for(s, data_wait=0.2)
    found[pid_id(s)]["data_wait"]["top_stacks"] = [{
        "frames": ["/work/probe147/progs/offload_train.py:20 adam",
                   "/work/probe147/progs/offload_train.py:35 main",
                   "/work/probe147/progs/offload_train.py:43 <module>"],
        "file": "/work/probe147/progs/offload_train.py", "line": 20, "function": "adam",
        "samples": 2, "reason": "blocked on I/O (a thread in D state) while the GPU idles"}]
    assert by_rule(recs(s, found), "dataloader_starvation") == []
    # the same wait at a line of the loop's own: its input, as before
    found[pid_id(s)]["data_wait"]["top_stacks"][0]["frames"][0] = (
        "/work/probe147/progs/offload_train.py:20 load_shard")
    assert len(by_rule(recs(s, found), "dataloader_starvation")) == 1


@pytest.mark.parametrize("frames", [
    ["/srv/train.py:11 step", "/srv/train.py:88 main"],          # a loop's own `step`
    ["/srv/train.py:11 train_step", "/srv/train.py:88 main"],
    ["/srv/env.py:11 Env.step", "/srv/train.py:88 main"],        # an RL environment's step
    ["/srv/sched.py:11 _LRScheduler.step", "/srv/train.py:88 main"],
    ["/srv/train.py:11 decode", "/srv/train.py:88 train_with_optimizer"],
])
def test_a_step_that_is_no_optimizers_keeps_the_dataloader_patch(frames):
    """The optimizer test is bounded: a `step` of the loop, an environment or a scheduler, and a
    function only called from one named after an optimizer, are no optimizer step."""
    s = window()
    [rec] = by_rule(recs(s, _host_preprocess_in(s, frames, samples=20)),
                    "main_thread_preprocessing")
    assert rec.headline.startswith("move it into DataLoader workers"), (frames, rec.headline)


def test_a_phase_rule_wants_more_than_one_stack_sample():
    """One stray sample of data wait over the 5% line (a fixed loop read ~16 times) is an
    anecdote, not a starved loader; two samples are a finding."""
    s = window()
    one = phases_for(s, data_wait=0.06)
    one[pid_id(s)]["data_wait"]["top_stacks"][0]["samples"] = 1
    assert by_rule(recs(s, one), "dataloader_starvation") == []
    two = phases_for(s, data_wait=0.06)
    two[pid_id(s)]["data_wait"]["top_stacks"][0]["samples"] = rule_thresholds.MIN_PHASE_SAMPLES
    assert len(by_rule(recs(s, two), "dataloader_starvation")) == 1


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


def test_underbatched_wants_the_process_watched_as_long_as_shrink_advice():
    """One tick of a busy-looking server is not a serving pattern: a daemon started seconds
    before its first rules round said 'looks busy (83% utilization over its last 0.0 s)' and
    claimed $2,630/month. Under [cost].shrink_min_window (10 min) it says nothing; a config
    that shortens it gets the finding, marked so."""
    def served(n):  # a process seen for the whole window, from its first sample
        return window(n=n, utils=[90.0] + [0.0] * 7, sm_activity=10.0,
                      command="vllm serve m", pstart=100_000.0)
    assert by_rule(recs(served(1)), "underbatched_inference") == []
    assert by_rule(recs(served(50)), "underbatched_inference") == []  # 8 min
    [rec] = by_rule(recs(served(62)), "underbatched_inference")  # 10 min and more
    assert not rec.shortened
    [short] = by_rule(recs(served(7), limits={"shrink_min_window_s": 60.0}),
                      "underbatched_inference")
    assert "over its last 60 s" in short.summary and short.shortened


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
    book = RecommendationBook(hold_s=0)  # no hysteresis (test_book.py has it)
    book.record(found, 10.0)
    book.record(found, 20.0)
    [entry] = book.active()
    assert entry.first_seen == 10.0 and entry.last_seen == 20.0
    book.record([], 30.0)  # no longer seen: not active, still in history
    assert book.active() == [] and len(book.history()) == 1
    # ids are stable
    assert recs(s)[0].id == found[0].id


# -- savings that add up (combine.py) --------------------------------------------------------

def commit_catalog(one_year=20.0, three_year=None):
    """The bundled catalog with commitment prices for p4d.24xlarge (the bundled rows list none
    yet; sources that do fill the same columns)."""
    from dataclasses import replace

    from pricing.catalog import Price
    return Catalog([replace(o, commit_1y=Price(one_year, "commit-1y", "test", None, False),
                            commit_3y=None if three_year is None else
                            Price(three_year, "commit-3y", "test", None, False))
                    if o.instance_type == "p4d.24xlarge" else o for o in CATALOG])


def random_host(rng):
    """A random 8-GPU host: 1-6 GPU processes (training, inference, notebooks), random
    utilization, SM activity, memory, long runtimes and checkpoint write bursts."""
    n, step, start = rng.randint(2, 90), rng.choice([5.0, 10.0, 60.0]), 1_000_000.0
    procs = []
    for k in range(rng.randint(1, 6)):
        gpus = tuple(sorted(rng.sample(range(8), rng.choice([1, 1, 2, 8]))))
        cadence_ticks = rng.randint(3, 20)
        procs.append({"pid": 100 + k, "gpus": gpus, "mem": rng.randint(1, 39) * GIB,
                      "start": start - rng.uniform(0, 3 * 86400),
                      "command": rng.choice(["python train.py", "vllm serve m",
                                             "jupyter kernel", "python eval.py"]),
                      "cadence": cadence_ticks, "sm": rng.uniform(0, 100)})
    utils = {g: rng.choice([0.0, 2.0, 30.0, 80.0, 99.0]) for g in range(8)}
    sm = rng.choice([None, rng.uniform(0, 100)])
    samples = []
    for i in range(n):
        gs = tuple(GpuSample(g, f"u{g}", "A100-SXM4-40GB", "ok",
                             max(0.0, min(100.0, utils[g] + rng.uniform(-2, 2))), sm,
                             sum(p["mem"] for p in procs if g in p["gpus"]), 40 * GIB)
                   for g in range(8))
        ps = tuple(ProcessSample(p["pid"], p["start"], 1, "ann", p["command"],
                                 tuple(GpuUse(g, p["mem"], p["sm"]) for g in p["gpus"]),
                                 write_bytes=(i // p["cadence"]) * 2 * GIB) for p in procs)
        samples.append(Sample(start + i * step, i, gpus=gs, processes=ps))
    phases = {f"{p['pid']}:{p['start']:.3f}": {
        ph: {"seconds": 1.0, "share": rng.uniform(0, 0.6), "gpu_idle_seconds": 0,
             "top_stacks": []} for ph in rng.sample(
            ["data_wait", "host_preprocess", "checkpoint", "eval", "sync", "comm"], 3)}
        for p in procs}
    return samples, phases


def test_combined_savings_never_exceed_the_bill_over_random_hosts():
    import random

    from daemon.analysis.rules.combine import savings_document
    rng = random.Random(9)
    catalog = commit_catalog(20.0, 14.0)
    bill = P4D.per_hour * 730
    overclaimed = 0
    for _ in range(150):
        samples, phases = random_host(rng)
        found = evaluate(build_analysis(samples, phases, P4D, catalog, host_cpus=32,
                                        limits={"idle_held_min_s": 60.0,
                                                "host_idle_min_s": 60.0,
                                                "shrink_min_window_s": 10.0,
                                                "spot_min_runtime_s": 60.0}))
        combined = [r.combined_savings_per_month for r in found]
        assert all(c is not None and c >= 0 for c in combined)
        assert sum(combined) <= bill + 1e-6
        for r in found:  # a share after others is never more than the figure on its own
            assert r.combined_savings_per_month <= r.savings_per_month + 1e-6
        overclaimed += sum(r.savings_per_month for r in found) > bill
        # Any subset shown (after snoozes) recombines within the bill too.
        shown = [r.as_dict() for r in found if rng.random() < 0.7]
        recs_shown, totals = savings_document(shown, P4D.per_hour, list(range(8)))
        assert totals["potential_per_month"] <= bill + 1e-6
        assert totals["potential_per_month"] == pytest.approx(
            sum(r["combined_savings_per_month"] for r in recs_shown))
    assert overclaimed > 10  # the standalone figures did claim more than the bill


def test_release_then_shrink_counts_the_idle_gpu_once():
    # GPU 0 works; a notebook holds GPU 3 idle. Releasing GPU 3 and shrinking both count
    # GPU 3's cost on their own; combined, the shrink gets only what the release left.
    notebook = ProcessSample(77, 50_000.0, 1, "bob", "jupyter kernel", (GpuUse(3, GIB, 0.0),))
    s = window(extra=(notebook,))
    found = recs(s)
    [release] = by_rule(found, "idle_gpu_held")
    [shrink] = by_rule(found, "over_provisioned")
    assert release.savings_order < shrink.savings_order
    assert release.combined_savings_per_month == pytest.approx(release.savings_per_month)
    assert release.savings_per_month == pytest.approx(P4D.per_gpu * 730)
    assert shrink.combined_savings_per_month == pytest.approx(
        shrink.savings_per_month - release.savings_per_month)
    assert shrink.scope == {"frees": [1, 2, 3, 4, 5, 6, 7], "gpus": [0]}
    assert sum(r.combined_savings_per_month for r in found) <= P4D.per_hour * 730


def test_spot_after_shrink_counts_only_what_the_smaller_host_costs():
    s = spot_window(3600, 3 * 3600)
    found = recs(s)
    [shrink] = by_rule(found, "over_provisioned")
    [spot] = by_rule(found, "spot_training")
    assert shrink.savings_order < spot.savings_order
    gpu_month = P4D.per_gpu * 730
    # The shrink took all of GPUs 1-7 and part of GPU 0; spot saves its fraction of what is left.
    left_on_gpu0 = P4D.per_hour * 730 - shrink.combined_savings_per_month
    assert spot.combined_savings_per_month == pytest.approx(
        spot.savings_per_month / gpu_month * left_on_gpu0)


def test_spot_concerns_the_jobs_own_gpus():
    [rec] = by_rule(recs(spot_window(3600, 3 * 3600)), "spot_training")
    spot = CATALOG.by_instance("aws", "p4d.24xlarge", "us-east-1").price("spot")
    assert rec.scope == {"gpus": [0]} and rec.evidence["gpu_share"] == pytest.approx(1 / 8)
    assert "its 1 of 8 GPUs" in rec.summary
    assert f"${spot.per_hour / 8:,.2f}/h" in rec.summary and "$4.10/h" in rec.summary
    commands = "\n".join(rec.action["commands"])
    assert "relaunch the job (1 GPU)" in commands
    # AWS lists no smaller A100 instance: the command says so rather than a whole p4d for one GPU.
    assert "no smaller spot instance" in commands


def test_spot_for_a_job_on_the_whole_host_relaunches_the_host():
    s = spot_window(3600, 3 * 3600)
    everything = {g: 90.0 for g in range(8)}
    whole = [Sample(x.ts, x.tick, x.gpus, (ProcessSample(
        42, x.processes[0].start_time, 1, "ann", "python train.py",
        tuple(GpuUse(g, 10 * GIB, 90.0) for g in everything),
        write_bytes=x.processes[0].write_bytes),)) for x in s]
    [rec] = by_rule(recs(whole), "spot_training")
    assert rec.scope == {"whole_host": True} and "the whole host" in rec.summary
    assert any("--instance-type p4d.24xlarge" in c for c in rec.action["commands"])


def test_commitment_uses_the_catalogs_best_commitment_price():
    s = window(command="vllm serve llama", pstart=0.0)
    found = evaluate(build_analysis(s, None, P4D, commit_catalog(20.0, 14.0)))
    [rec] = by_rule(found, "steady_inference_commitment")
    assert rec.savings_per_month == pytest.approx((32.7726 - 14.0) / 8 * 730)
    assert "3-year commitment at $14.00/h" in rec.summary and "1-year $20.00/h" in rec.summary
    assert rec.evidence["commitment"] == {"years": 3, "per_hour": 14.0, "source": "test"}
    assert rec.as_dict()["preliminary"] is True  # 10 min of the week it needs
    only_1y = evaluate(build_analysis(s, None, P4D, commit_catalog(20.0)))
    [rec1] = by_rule(only_1y, "steady_inference_commitment")
    assert "1-year commitment at $20.00/h" in rec1.summary


def test_underbatching_says_which_signal_it_used():
    gpm = window(utils=[90.0] + [0.0] * 7, sm_activity=10.0, command="vllm serve m")
    [rec] = by_rule(recs(gpm), "underbatched_inference")
    assert rec.evidence["sm_signal"] == "GPM SM activity" and "(GPM SM activity)" in rec.summary
    # No GPM on the GPU: the process's own SM share (what the process table shows) stands in.
    share = window(utils=[90.0] + [0.0] * 7, holders={0: 12.0}, sm_activity=None,
                   command="vllm serve m")
    [rec] = by_rule(recs(share), "underbatched_inference")
    assert rec.evidence["sm_signal"] == "process SM share"
    assert "SM share is 12%" in rec.summary and "signal: process SM share" in rec.method


def test_one_checkpoint_interval_for_every_rule():
    s = spot_window(1800, 3 * 3600, writes=4)
    [spot] = by_rule(recs(s), "spot_training")
    [ckpt] = by_rule(recs(s, phases_for(s, checkpoint=0.3)), "blocking_checkpoint")
    assert spot.evidence["checkpoint_interval_s"] == pytest.approx(1800)
    assert "(now every 30 min)" in ckpt.action["patch"]


def test_shortened_thresholds_are_on_the_finding():
    quiet = window(n=61, utils=[0.0] * 8, holders={0: 0.0})
    [rec] = by_rule(recs(quiet, limits={"idle_held_min_s": 60.0}), "idle_gpu_held")
    doc = rec.as_dict()
    assert doc["thresholds_shortened"] is True
    assert doc["shortened_thresholds"] == {"idle_held_min_s": {"value": 60.0, "default": 600.0}}
    [rec] = by_rule(recs(quiet), "idle_gpu_held")
    assert rec.as_dict()["thresholds_shortened"] is False
    # The evidence times are limits too: shortening them is said, and ends "preliminary".
    [shrink] = by_rule(recs(window(), limits={"rightsize_evidence_s": 300.0}), "over_provisioned")
    doc = shrink.as_dict()
    assert doc["preliminary"] is False and doc["confidence"] == "high"
    assert "rightsize_evidence_s" in doc["shortened_thresholds"]


def test_standing_in_the_book_counts_as_evidence_and_a_lapse_restarts_it():
    [shrink] = by_rule(recs(window()), "over_provisioned")
    book = RecommendationBook()
    book.record([shrink], 0.0)
    book.record([shrink], 30 * 3600.0 - 600)
    [entry] = book.active()
    assert entry.as_dict()["preliminary"] is False  # 600 s window + 29.8 h standing
    assert entry.as_dict()["evidence_seconds"] == pytest.approx(30 * 3600)
    book.record([], 30 * 3600.0)  # not seen in one evaluation: it lapsed
    book.record([shrink], 31 * 3600.0)
    [entry] = book.active()
    assert entry.first_seen == 0.0 and entry.standing_since == 31 * 3600.0
    assert entry.as_dict()["preliminary"] is True


def test_a_window_that_grows_with_the_daemon_is_not_counted_twice_with_the_standing():
    """In the daemon's first 30 minutes the rules' window runs from its start: found at 60 s
    over a 60 s window and again at 283 s over a 283 s window, the finding rests on 283 s,
    not 283 + 223 (mlcost-top showed "15 min/30 h" observed 8 minutes in)."""
    from dataclasses import replace

    [shrink] = by_rule(recs(window()), "over_provisioned")
    book = RecommendationBook()
    book.record([replace(shrink, evidence_window_s=60.0)], 1000.0)
    book.record([replace(shrink, evidence_window_s=283.0)], 1223.0)
    [entry] = book.active()
    assert entry.as_dict()["evidence_seconds"] == pytest.approx(283.0)
    # once the window is full (30 min), what it stood beyond it adds to it
    book.record([replace(shrink, evidence_window_s=1800.0)], 1000.0 + 3600.0)
    [entry] = book.active()
    assert entry.as_dict()["evidence_seconds"] == pytest.approx(60.0 + 3600.0)


def test_spot_batching_and_commitments_go_by_the_workload_kind():
    """Spot is for training, batching and commitments for inference: a process's kind decides
    (a notebook that checkpoints gets no spot advice, a trainer whose command says 'serve'
    no batching advice, a server with a plain command line gets it), and the command line
    only stands in where nothing pointed to a kind."""
    from daemon.analysis.kinds import NOTEBOOK, ONLINE_INFERENCE, TRAINING, Kind

    def kinds(samples, kind):
        return {pid_id(samples): Kind(kind, 0.8, ("test",))}

    training = spot_window(3600, 3 * 3600)
    assert by_rule(recs(training, kinds=kinds(training, TRAINING)), "spot_training")
    assert by_rule(recs(training, kinds=kinds(training, NOTEBOOK)), "spot_training") == []
    assert by_rule(recs(training, kinds=kinds(training, ONLINE_INFERENCE)),
                   "spot_training") == []

    served = window(utils=[90.0] + [0.0] * 7, sm_activity=10.0, command="vllm serve m")
    assert by_rule(recs(served), "underbatched_inference")  # no kind yet: the command says
    assert by_rule(recs(served, kinds=kinds(served, TRAINING)), "underbatched_inference") == []
    plain = window(utils=[90.0] + [0.0] * 7, sm_activity=10.0, command="python app.py")
    assert by_rule(recs(plain), "underbatched_inference") == []
    assert by_rule(recs(plain, kinds=kinds(plain, ONLINE_INFERENCE)), "underbatched_inference")

    hours = rule_thresholds.STEADY_INFERENCE_MIN_HOURS * 3600
    steady = window(command="vllm serve llama", pstart=100_000.0 + 600 - hours)
    assert by_rule(recs(steady), "steady_inference_commitment")
    assert by_rule(recs(steady, kinds=kinds(steady, NOTEBOOK)),
                   "steady_inference_commitment") == []


def idle_held_phases(samples, reason, **shares):
    stacks = [{"frames": ["job.py:8 <module>"], "file": "/srv/job.py", "line": 8,
               "function": "<module>", "samples": 20, "reason": reason}]
    return {pid_id(samples): {k: {"seconds": v * 600, "share": v, "gpu_idle_seconds": 0,
                                  "top_stacks": stacks if k == "idle" else []}
                              for k, v in shares.items()}}


def test_a_job_blocked_on_a_lock_is_never_offered_sigterm():
    """A job in fcntl.flock, the lock held by another process: idle_gpu_held sent SIGTERM."""
    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python lock_job.py")
    phases = idle_held_phases(s, "waiting on a lock: `fcntl.flock(lk, fcntl.LOCK_EX)` with the "
                                 "GPU idle", idle=1.0)
    [rec] = by_rule(recs(s, phases), "idle_gpu_held")
    assert rec.action["kind"] == "copy_commands", rec.action
    assert "waits on a lock (/srv/job.py:8)" in rec.action["text"]
    assert any("/proc/locks" in c for c in rec.action["commands"])
    assert rec.action["commands"][0].startswith("lslocks")  # a file lock: another process's


def test_a_job_waiting_on_a_thread_lock_is_shown_its_threads_first_not_file_locks():
    """`with stats_lock:` (a threading.Lock, acquired in C): lslocks lists file locks only, so
    the look first led with a command that cannot show the holder (probe 143 F5's helper)."""
    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python lock_job.py")
    phases = idle_held_phases(s, "waiting on a lock: `with stats_lock:` with the GPU idle",
                              idle=1.0)
    [rec] = by_rule(recs(s, phases), "idle_gpu_held")
    assert rec.action["kind"] == "copy_commands", rec.action
    assert rec.action["commands"][0].startswith("sudo py-spy dump --pid "), rec.action
    assert "a thread lock" in rec.action["text"], rec.action["text"]
    assert any("file lock" in c for c in rec.action["commands"] if c.startswith("lslocks"))


def test_an_asyncio_loop_that_a_timer_wakes_is_looked_at_first_a_notebook_is_not():
    """An asyncio inbox poller between `await asyncio.sleep(1)`s, its loop's select alone in
    its stacks, was offered SIGTERM; its reason now says a timer wakes the loop (TIMER_WAIT):
    look at what it awaits first. A notebook whose loop has a timer keeps its SIGTERM, and so
    does a loop waiting in select with no timer (a stalled `await event.wait()`)."""
    from daemon.analysis.kinds import NOTEBOOK, TRAINING, Kind
    from daemon.analysis.stack_rules import TIMER_WAIT

    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python transcribe.py")
    timer = idle_held_phases(s, f"{TIMER_WAIT} (selectors.py:468 EpollSelector.select ...)",
                             idle=1.0)
    [rec] = by_rule(recs(s, timer, kinds={pid_id(s): Kind(TRAINING, 0.6, ("test",))}),
                    "idle_gpu_held")
    assert rec.action["kind"] == "copy_commands", rec.action
    assert "asyncio event loop (/srv/job.py:8)" in rec.action["text"], rec.action
    assert any("py-spy dump" in c for c in rec.action["commands"])
    [notebook] = by_rule(recs(s, timer, kinds={pid_id(s): Kind(NOTEBOOK, 0.9, ("test",))}),
                         "idle_gpu_held")
    assert notebook.action["kind"] == "sigterm", notebook.action
    stalled = idle_held_phases(s, "waiting in select (selectors.py:468 EpollSelector.select)",
                               idle=1.0)
    [rec] = by_rule(recs(s, stalled, kinds={pid_id(s): Kind(TRAINING, 0.6, ("test",))}),
                    "idle_gpu_held")
    assert rec.action["kind"] == "sigterm", rec.action


def test_a_job_that_computed_in_the_window_gets_no_sigterm_a_notebook_does():
    """A batch job that computes 30 s then sleeps 90 s was offered SIGTERM between batches (its
    balance: compute 34%); a notebook whose cell ran, then idled, still is."""
    from daemon.analysis.kinds import NOTEBOOK, TRAINING, Kind

    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python nightly_batch.py")
    phases = idle_held_phases(s, "sleeping or waiting: `time.sleep(90)` with the GPU idle",
                              idle=0.66, compute=0.34)
    [batch] = by_rule(recs(s, phases, kinds={pid_id(s): Kind(TRAINING, 0.8, ("test",))}),
                      "idle_gpu_held")
    assert batch.action["kind"] == "copy_commands", batch.action
    assert "computed 34% of the window" in batch.action["text"]
    [notebook] = by_rule(recs(s, phases, kinds={pid_id(s): Kind(NOTEBOOK, 0.9, ("test",))}),
                         "idle_gpu_held")
    assert notebook.action["kind"] == "sigterm"


def test_a_stopped_job_that_computed_in_the_window_still_gets_the_sigterm():
    """A loop stopped with Ctrl-Z or SIGSTOP (state T) after computing: not between batches,
    whatever share of the window it computed before the stop. Under CI's load its compute
    share came to >= 10% and it was told "a job between batches?" instead of its SIGTERM (with
    SIGCONT); when the stop came decided which."""
    from daemon.analysis.kinds import TRAINING, Kind
    from daemon.analysis.stack_rules import STOPPED

    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python train.py")
    phases = idle_held_phases(s, f"{STOPPED}: nothing of it runs until it is continued",
                              idle=0.66, compute=0.34)
    [rec] = by_rule(recs(s, phases, kinds={pid_id(s): Kind(TRAINING, 0.8, ("test",))}),
                    "idle_gpu_held")
    assert rec.action["kind"] == "sigterm", rec.action


def periodic_job(busy_at, sm_share=80.0):
    """A cron-like scorer on GPU 0: its kernels run (SM share `sm_share`, of a 10 s tick: 80%
    is 8 s of kernels, 5% a 0.5 s warm-up pass) at the ticks `busy_at`."""
    samples = window(n=61, utils=lambda i: [90.0 if i in busy_at else 0.0] + [0.0] * 7,
                     holders={0: 0.0}, command="python cron_score.py")
    return [dataclasses.replace(smp, processes=tuple(
        dataclasses.replace(p, gpus=tuple(dataclasses.replace(
            u, sm_share=sm_share if smp.tick in busy_at else 0.0) for u in p.gpus))
        for p in smp.processes)) for smp in samples]


def test_a_periodic_job_gets_no_sigterm_one_warm_up_pass_does():
    """A cron-like scorer works 10 s every few minutes (computes ~3% of the window, under the
    between-batches share) and was offered SIGTERM after each run; its kernels ran in separate
    runs in the window. In its first interval (one run of 8 s seen, then `time.sleep`) it was
    offered SIGTERM too (probe 132 M1): now the look first, saying one run was seen. One
    warm-up pass (0.5 s of kernels) that then sleeps is still offered it."""
    from daemon.analysis.kinds import Kind


    for busy_at, sm, action, said in (
            ({5, 20, 35}, 80.0, "copy_commands", "worked in 3 separate runs in the window"),
            ({2}, 80.0, "copy_commands", "ran 8 s of kernels, then sleeps (/srv/job.py:8): one "
             "run seen: a periodic job between its runs looks the same"),
            ({2}, 5.0, "sigterm", "")):
        s = periodic_job(busy_at, sm)
        phases = idle_held_phases(s, "sleeping or waiting: `time.sleep(110)` with the GPU idle",
                                  idle=0.97, compute=0.03)
        [held] = by_rule(recs(s, phases, kinds={pid_id(s): Kind("batch_inference", 0.6,
                                                                ("test",))},
                              limits={"idle_held_min_s": 60.0}), "idle_gpu_held")
        assert held.action["kind"] == action, (busy_at, held.action)
        assert said in held.action.get("text", ""), held.action


def test_a_periodic_job_between_runs_keeps_the_host_from_its_stop_its_first_interval_does_not():
    """Probe 109's nightly scorer (5 s of kernels, then time.sleep(300), its model kept loaded):
    once its kernels ran in separate runs of the window, idle_gpu_held said "a periodic job ...
    release the GPU between runs; stop it only if it is done", and host_idle said "stop the
    host" (the EC2 stop commands) through every interval: at_work counted no periodic job. The
    one fact (is_periodic) holds both back now. One run (the first interval, which reads as a
    job that finished as much as a periodic job between its runs) gets idle_gpu_held's look
    first (one run seen) and keeps the host from its stop too: it said "stop the host" beside
    the look first. A notebook whose cells ran at three moments leaves the host idle and gets
    its SIGTERM."""
    from daemon.analysis.kinds import NOTEBOOK, Kind
    from daemon.analysis.rules.idle import at_work, is_periodic


    limits = {"idle_held_min_s": 60.0, "host_idle_min_s": 60.0}
    for busy_at, kind, periodic, kept in (({5, 20, 35}, "batch_inference", True, True),
                                          ({2}, "batch_inference", False, True),
                                          ({5, 20, 35}, NOTEBOOK, False, False)):
        s = periodic_job(busy_at)
        phases = idle_held_phases(s, "sleeping or waiting: `time.sleep(110)` with the GPU idle",
                                  idle=0.97, compute=0.03)
        kinds = {pid_id(s): Kind(kind, 0.6, ("test",))}
        analysis = build_analysis(s, phases, P4D, CATALOG, host_cpus=32, kinds=kinds,
                                  limits=limits)
        [proc] = analysis.processes
        assert is_periodic(proc) is periodic, (busy_at, kind, proc.work_runs)
        assert [p.id for p in at_work(analysis)] == ([pid_id(s)] if kept else [])
        found = evaluate(analysis)
        [held] = by_rule(found, "idle_gpu_held")
        hosts = by_rule(found, "host_idle")
        if periodic:
            assert "Release the GPU between runs" in held.action["text"], held.action
        elif kept:
            assert "one run seen" in held.action["text"], held.action
        else:
            assert held.action["kind"] == "sigterm", (busy_at, kind, held.action)
        if kept:
            assert hosts == [], [h.summary for h in hosts]
        else:
            [host] = hosts
            assert host.action["kind"] == "copy_commands", host.action


def test_shrink_counts_the_gpu_a_quiet_server_holds_and_never_asks_to_release_it():
    """An HTTP server answering a request every 20 s holds GPU 1, idle on average: the shrink
    counted only GPU 0 and said "GPU 1 is held but idle: release it first", a server that
    serves. A GPU held by a server (or by a process that shows a sign of work) is needed."""
    from daemon.analysis.kinds import ONLINE_INFERENCE, Kind

    server = ProcessSample(77, 100_000.0 - 60, 1, "svc", "python serve.py",
                           (GpuUse(1, 6 * GIB, 0.0),))
    s = window(utils=[90.0] + [0.0] * 7, holders={0: 90.0}, extra=(server,))
    plain = {r.rule: r for r in recs(s)}["over_provisioned"]
    assert plain.evidence["gpus_used"] == 1 and plain.evidence["gpus_held_idle"] == [1]
    served = recs(s, kinds={f"77:{server.start_time:.3f}": Kind(ONLINE_INFERENCE, 0.9,
                                                                 ("test",), serves=True)})
    [rec] = by_rule(served, "over_provisioned")
    assert rec.evidence["gpus_used"] == 2 and rec.evidence["gpus_held_idle"] == []
    assert "release" not in rec.method
    offer = CATALOG.by_instance("aws", rec.action["to"], "us-east-1")
    assert offer.accelerator_count >= 2


def test_a_job_at_work_on_one_gpu_still_has_its_stray_contexts_listed_to_release():
    """A sign of work is a process's, not each GPU's: a job busy on GPU 0 with 10% data wait
    that holds contexts on GPUs 1-7 kept all eight as needed, and the "uses 1 of 8 GPUs"
    shrink was gone."""
    s = window(utils=[90.0] + [0.0] * 7, holders={0: 90.0, **{g: 0.0 for g in range(1, 8)}})
    [rec] = by_rule(recs(s, phases_for(s, data_wait=0.10, compute=0.90)), "over_provisioned")
    assert rec.evidence["gpus_used"] == 1
    assert rec.evidence["gpus_held_idle"] == [1, 2, 3, 4, 5, 6, 7]


def test_a_process_that_barely_uses_one_of_its_two_gpus_is_told_to_rebalance_or_use_fewer():
    """Probe 147 M2: one process, two pipeline stages, GPU 2 at 93% and GPU 3 at 6% (6 GiB
    held) for the whole window, and no advice: GPU 3 is above the idle line, and no rule looked
    at one GPU of a process. The burn showed GPU 3 wasting price x 94%. Now lopsided_gpus names
    it: rebalance the split or run on fewer GPUs, saving the underused GPU's wasted burn, and
    offers no kill (the process works)."""
    utils = [0.0, 0.0, 93.0, 6.0, 0.0, 0.0, 0.0, 0.0]
    s = window(utils=utils, holders={2: 84.0, 3: 2.0}, mem=6 * GIB)
    [rec] = by_rule(recs(s), "lopsided_gpus")
    assert rec.action["kind"] == "advice", rec.action
    text = rec.action["text"]
    assert text.startswith("GPU 3 is 6% utilized while GPU 2 is 93%: rebalance the split"), text
    assert "run it on fewer GPUs" in text and "free GPU 3" in text, text
    assert "Nothing to stop: pid 42 works" in text, text
    assert "SIGTERM" not in text and "kill" not in text.lower(), text
    per_gpu = P4D.per_hour / P4D.gpu_count
    assert rec.savings_per_month == pytest.approx(per_gpu * 0.94 * 730), rec.method
    assert rec.scope == {"gpus": [3]}, rec.scope
    assert rec.evidence["underused_gpus"] == [3] and rec.evidence["busiest_gpu"] == 2
    assert rec.headline.startswith("rebalance the split or run on fewer GPUs (pid 42: GPU 3 "
                                   "is 6%, GPU 2 93%)"), rec.headline
    assert by_rule(recs(s), "idle_gpu_held") == []  # nothing idle to stop


@pytest.mark.parametrize("what, utils, holders, extra", [
    ("both stages busy", [0.0, 0.0, 93.0, 60.0] + [0.0] * 4, {2: 84.0, 3: 50.0}, ()),
    ("both barely used", [0.0, 0.0, 40.0, 6.0] + [0.0] * 4, {2: 30.0, 3: 2.0}, ()),
    ("one GPU", [93.0] + [0.0] * 7, {0: 84.0}, ()),
    # its quiet GPU is shared with another process: that GPU's utilization is not its own
    ("the quiet GPU shared", [0.0, 0.0, 93.0, 6.0] + [0.0] * 4, {2: 84.0, 3: 2.0},
     (ProcessSample(77, 99_000.0, 1, "bob", "python serve.py", (GpuUse(3, GIB, 1.0),)),)),
])
def test_a_process_that_uses_its_gpus_evenly_or_shares_the_quiet_one_is_not_lopsided(
        what, utils, holders, extra):
    s = window(utils=utils, holders=holders, mem=6 * GIB, extra=extra)
    assert by_rule(recs(s), "lopsided_gpus") == [], what
