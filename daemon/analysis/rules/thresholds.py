"""The thresholds of the recommendation rules, each named once with where it comes from.

Time thresholds that a config may shorten (a simulated host is watched for minutes, not days)
are in DEFAULT_LIMITS; the busy/idle line is not here: it is [idle].utilization, carried by the
Analysis (see daemon.analysis.busy).
"""

from __future__ import annotations

import re

from daemon.analysis.busy import (
    DEFAULT_GPU_HELD_AFTER_S,
    DEFAULT_HOST_IDLE_AFTER_S,
    DEFAULT_LONGEST_PERIOD_S,
)

# PyTorch profiler (TensorBoard plugin): DataLoader time > 5% of step time -> raise num_workers.
DATA_WAIT_SHARE = 0.05
# A phase rule wants at least this many stack samples in its phase (our choice): one sample is
# an anecdote. A fixed loop profiled for 30 s is read ~16 times; one stray sample of data wait
# there is 6% of it, over the 5% line, and turned a fix's "gone" into "changed".
MIN_PHASE_SAMPLES = 2
# The prefetch patch offers worker processes, not threads, where the thread feeding a starved
# loop held the GIL in more than this share of its data wait's samples (our choice: most of
# them; py-spy reads the GIL's holder without stopping the process, and misses it now and then).
GIL_BOUND_SHARE = 0.5
# It offers more (or faster) worker processes, not a thread pool, where worker processes fed the
# loop (a multiprocessing Pool, a queue its children fill) in more than this share of its data
# wait's samples (our choice: most of them, as above).
FED_BY_WORKERS_SHARE = 0.5
# It says the loop's input is computed, not read (prepare the next batch during the GPU step,
# make the work cheaper or move it to the GPU; no read-ahead, no smaller pool), where the
# threads feeding it ran on a CPU in more than this share of its data wait's samples (our
# choice: most of them, as above) and the process read less than INPUT_READ_MIN_BYTES_PER_S
# from storage over the window (our choice: 1 MB/s, a trickle next to any loader that reads its
# batches from disk; probe 147's pool-augmenting trainer read 0).
COMPUTED_INPUT_SHARE = 0.5
INPUT_READ_MIN_BYTES_PER_S = 1e6
# A process that holds several GPUs is lopsided where one of them, held by it alone, is below
# this utilization (our choice: a quarter) while another of its GPUs is at or above
# WELL_USED_UTILIZATION_PCT over the window: a pipeline split with too little on one stage, a
# model copy nobody calls, a stray context (probe 147: 93% and 6%).
LOPSIDED_LOW_PCT = 25.0
# Same PyTorch profiler rule: with num_workers=0 the loading runs in the main process.
HOST_PREPROCESS_SHARE = 0.05
# SageMaker Debugger IOBottleneck: iowait > 50% while the GPU is low for > 50% of the time.
IO_STALL_FRACTION = 0.5
GPU_LOW_FRACTION = 0.5
# SageMaker Debugger LowGPUUtilization: p95 < 70% is "low". At or above it a GPU is well used;
# below it, it is low (input-bound evidence for the storage rule). Not the busy/idle line, which
# is [idle].utilization (daemon.analysis.busy).
WELL_USED_UTILIZATION_PCT = 70.0
# Checkpoint and host-sync stalls: the PyTorch profiler's 5% rule, applied to these phases
# (our choice by analogy; Nsight Systems flags GPU gaps >= 500 ms).
CHECKPOINT_SHARE = 0.05
SYNC_SHARE = 0.05
# Eval and communication take a real part of a healthy run; flag them when they dominate
# (our choice: a fifth of the window).
EVAL_SHARE = 0.20
COMM_SHARE = 0.20
# Rightsizing: a cheaper instance must save at least this fraction of the host price.
SHRINK_MIN_SAVING = 0.20
SHRINK_HEADROOM = 0.10  # memory headroom on top of the peak (pricing.Catalog default)
SHRINK_MIN_WINDOW_S = 600.0  # below this no shrink advice at all
# Observed evidence before advice on what to buy is confident; before it, it is "preliminary"
# (confidence low). AWS Compute Optimizer wants >= 30 h of GPU and GPU-memory metrics before
# rightsizing; spot needs a day of the job's checkpoint rhythm (our choice, the issue's "about a
# day"); AWS Cost Explorer's shortest Savings Plans look-back is 7 days.
RIGHTSIZE_CONFIDENT_S = 30 * 3600.0
SPOT_CONFIDENT_S = 24 * 3600.0
COMMITMENT_CONFIDENT_S = 7 * 86400.0
# Spot: a long on-demand training job that checkpoints regularly (our choice: 2 h, a cadence
# of at most 1 h, at least 2 checkpoints seen, intervals within +-50% of their median).
SPOT_MIN_RUNTIME_S = 2 * 3600.0
SPOT_MAX_CADENCE_S = 3600.0
SPOT_MIN_CHECKPOINTS = 2
SPOT_CADENCE_TOLERANCE = 0.5
# Assumed interruptions for lost-work estimates (pessimistic for GPU capacity; AWS Spot
# Instance Advisor buckets go up to ">20% per month" for whole instances).
SPOT_INTERRUPTIONS_PER_DAY = 1.0
SPOT_RESTART_S = 600.0  # re-provision, reload, warm up after an interruption
# A write burst of at least this in one process tree between two samples is a checkpoint.
CHECKPOINT_WRITE_MIN_BYTES = 64 * 2**20
# Steady inference: running this long with the GPU busy most of the time (our choice: a day
# proves 24/7 serving better than any shorter window; break-even of a 1-year commitment is
# being on more than (1 - discount) of the year).
STEADY_INFERENCE_MIN_HOURS = 24.0
STEADY_INFERENCE_WELL_USED_FRACTION = 0.8
# Underbatched inference: the GPU looks well used (device utilization >= WELL_USED_UTILIZATION_PCT)
# while its SMs are mostly idle (GPM SM activity < 30%: many small kernels; our choice, below
# Nsight's 50% time-utilization chunks).
UNDERBATCH_SM_ACTIVITY_PCT = 30.0

INFERENCE_COMMAND = re.compile(
    r"vllm|sglang|text-generation|tgi\b|tritonserver|torchserve|ray\s+serve|serve\b|"
    r"uvicorn|gunicorn|inference|server", re.IGNORECASE)
DEFAULT_LIMITS: dict[str, float] = {
    # held idle this long at the end of the window; whole host idle this long: stop it
    "idle_held_min_s": DEFAULT_GPU_HELD_AFTER_S,
    "host_idle_min_s": DEFAULT_HOST_IDLE_AFTER_S,
    # a process that ran before, watched idle this long: no longer a periodic job between runs
    "longest_period_s": DEFAULT_LONGEST_PERIOD_S,
    "shrink_min_window_s": SHRINK_MIN_WINDOW_S,
    "spot_min_runtime_s": SPOT_MIN_RUNTIME_S,
    "rightsize_evidence_s": RIGHTSIZE_CONFIDENT_S,
    "spot_evidence_s": SPOT_CONFIDENT_S,
    "commitment_evidence_s": COMMITMENT_CONFIDENT_S,
}
