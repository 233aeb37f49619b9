"""Recommendation rules: each is data (name, signal, threshold, evidence, text, savings method)
plus one function that reads an `Analysis` and returns Recommendations.

An `Analysis` is a window of what happened: per-GPU and per-process aggregates built from raw
Samples (`build_analysis`), the burn, the phase balance per process (plain dicts from
daemon.analysis.phases), I/O stall evidence, checkpoint cadence, budget events and the price catalog.

Savings are upper bounds (fixing one bottleneck exposes the next); every method says so.
Thresholds are named constants below, each with where it comes from.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.cost import HOURS_PER_MONTH, Burn, HostPrice, JobLabeler, burn
from daemon.sources.sample import GPU_OK, Sample
from daemon.wire import process_key

GIB = 2**30

# -- thresholds ------------------------------------------------------------------------------
# GPU below this utilization is idle (same as daemon.analysis.idle and nvidia-smi's idle-context noise).
IDLE_UTILIZATION_PCT = 5.0
# Held idle this long at the end of the window: past any eval or checkpoint pause (our choice,
# same default as daemon.analysis.idle.IdleThresholds.gpu_held_after_s).
IDLE_HELD_MIN_S = 600.0
# Whole host idle this long: stop it (our choice; daemon.analysis.idle.IdleThresholds.host_after_s).
HOST_IDLE_MIN_S = 1800.0
# PyTorch profiler (TensorBoard plugin): DataLoader time > 5% of step time -> raise num_workers.
DATA_WAIT_SHARE = 0.05
# Same PyTorch profiler rule: with num_workers=0 the loading runs in the main process.
HOST_PREPROCESS_SHARE = 0.05
# SageMaker Debugger IOBottleneck: iowait > 50% while the GPU is low for > 50% of the time.
IO_STALL_FRACTION = 0.5
GPU_LOW_FRACTION = 0.5
# SageMaker Debugger LowGPUUtilization: p95 < 70% is "low".
GPU_LOW_UTILIZATION_PCT = 70.0
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
# AWS Compute Optimizer wants >= 30 h of GPU and GPU-memory metrics before rightsizing:
# shorter windows give the advice with confidence "low".
RIGHTSIZE_CONFIDENT_S = 30 * 3600.0
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
STEADY_INFERENCE_BUSY_FRACTION = 0.8
# Underbatched inference: the GPU looks busy (device utilization >= 70%, SageMaker's line)
# while its SMs are mostly idle (GPM SM activity < 30%: many small kernels; our choice, below
# Nsight's 50% time-utilization chunks).
UNDERBATCH_UTILIZATION_PCT = 70.0
UNDERBATCH_SM_ACTIVITY_PCT = 30.0

INFERENCE_COMMAND = re.compile(
    r"vllm|sglang|text-generation|tgi\b|tritonserver|torchserve|ray\s+serve|serve\b|"
    r"uvicorn|gunicorn|inference|server", re.IGNORECASE)
DEFAULT_LIMITS: dict[str, float] = {
    "idle_held_min_s": IDLE_HELD_MIN_S,
    "host_idle_min_s": HOST_IDLE_MIN_S,
    "shrink_min_window_s": SHRINK_MIN_WINDOW_S,
    "spot_min_runtime_s": SPOT_MIN_RUNTIME_S,
}
UPPER_BOUND = "an upper bound: fixing one bottleneck exposes the next"


# -- the analysis ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuWindow:
    index: int
    name: str
    memory_total_bytes: int
    memory_peak_bytes: int
    utilization_mean: float
    utilization_p95: float
    sm_activity_mean: float | None
    held: bool  # some process held memory on it at some point
    trailing_idle_s: float  # idle (and lost-free) at the end of the window


@dataclass(frozen=True)
class ProcessWindow:
    id: str  # 'pid:start_time'
    pid: int
    start_time: float
    user: str
    command: str
    job: str
    gpus: tuple[int, ...]
    seconds: float  # seen in the window
    runtime_s: float  # since the process started
    burn_per_hour: float  # mean over the window
    memory_peak_bytes: int  # largest memory on any one GPU
    gpu_utilization_mean: float  # of the GPUs it holds
    gpu_busy_fraction: float  # ticks with its GPUs at or above GPU_LOW_UTILIZATION_PCT
    gpu_low_fraction: float  # ticks with its GPUs below GPU_LOW_UTILIZATION_PCT
    sm_activity_mean: float | None
    trailing_idle_s: float  # its GPUs idle at the end of the window
    iowait_fraction: float  # iowait seconds growth / window, process + children
    d_state_fraction: float  # ticks with a thread of it or its children in D state
    read_bytes_per_s: float
    checkpoint_times: tuple[float, ...]
    inference: bool
    phases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    memory_by_gpu: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Analysis:
    window_s: float
    start: float
    end: float
    price: HostPrice
    catalog: Any
    gpus: tuple[GpuWindow, ...]
    processes: tuple[ProcessWindow, ...]
    burn_per_hour: float
    idle_per_hour: float
    wasted_per_hour: float
    host_trailing_idle_s: float
    host_cpus: int
    budget_events: tuple[Any, ...] = ()
    # Time thresholds a config may shorten (a simulated host is watched for minutes, not days).
    limits: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_LIMITS))

    def limit(self, name: str) -> float:
        return self.limits.get(name, DEFAULT_LIMITS[name])

    @property
    def gpus_used(self) -> int:
        return sum(1 for g in self.gpus if g.held)

    @property
    def peak_gpu_memory_gib(self) -> float:
        peaks = [g.memory_peak_bytes for g in self.gpus if g.held]
        return max(peaks, default=0) / GIB

    @property
    def working_gpus(self) -> tuple[GpuWindow, ...]:
        """GPUs held and doing work (not idle now, busy on average): what a smaller host must
        carry. A GPU held but idle is the idle-GPU rule's business, not a reason to stay big."""
        return tuple(g for g in self.gpus
                     if g.held and g.utilization_mean >= IDLE_UTILIZATION_PCT
                     and g.trailing_idle_s < self.limit("idle_held_min_s"))


def _p95(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _normalize_phases(phase_balances: Mapping[Any, Any] | None) -> dict[Any, Mapping[str, Any]]:
    """Phase balances keyed by (pid, start_time), 'pid:start_time' or pid: all accepted."""
    out: dict[Any, Mapping[str, Any]] = {}
    for key, value in (phase_balances or {}).items():
        if isinstance(key, tuple):
            out[process_key(*key)] = value
        else:
            out[key if isinstance(key, str) else int(key)] = value
    return out


def _checkpoint_bursts(times_deltas: Sequence[tuple[float, int]]) -> list[float]:
    """Times of write bursts >= CHECKPOINT_WRITE_MIN_BYTES; consecutive ticks merge."""
    bursts: list[float] = []
    in_burst = False
    for ts, delta in times_deltas:
        if delta >= CHECKPOINT_WRITE_MIN_BYTES:
            if not in_burst:
                bursts.append(ts)
            in_burst = True
        else:
            in_burst = False
    return bursts


def build_analysis(
    samples: Sequence[Sample],
    phase_balances: Mapping[Any, Any] | None,
    price: HostPrice,
    catalog: Any = None,
    *,
    burns: Sequence[Burn] | None = None,
    jobs: Mapping[str, str] | JobLabeler | None = None,
    checkpoint_times: Mapping[str, Sequence[float]] | None = None,
    budget_events: Iterable[Any] = (),
    host_cpus: int | None = None,
    limits: Mapping[str, float] | None = None,
    inference_command: re.Pattern[str] = INFERENCE_COMMAND,
) -> Analysis:
    """Aggregate a window of samples (oldest first) into an Analysis. `burns`, when given, are
    the burns of the same samples (saves recomputing them); `checkpoint_times` adds checkpoint
    times per process id to those seen as write bursts."""
    if not samples:
        raise ValueError("build_analysis needs at least one sample")
    burns = list(burns) if burns is not None else [burn(s, price) for s in samples]
    labeler = jobs if isinstance(jobs, JobLabeler) else JobLabeler(jobs)
    phases = _normalize_phases(phase_balances)
    start, end = samples[0].ts, samples[-1].ts
    window = max(end - start, 0.0)
    # Per GPU.
    util_series: dict[int, list[float]] = {}
    sm_series: dict[int, list[float]] = {}
    mem_peak: dict[int, int] = {}
    mem_total: dict[int, int] = {}
    names: dict[int, str] = {}
    held: set[int] = set()
    util_at: list[dict[int, float]] = []
    for s in samples:
        utils = {}
        for g in s.gpus:
            names[g.index] = g.name
            if g.memory_total_bytes:
                mem_total[g.index] = g.memory_total_bytes
            if g.status != GPU_OK or g.utilization is None:
                continue
            utils[g.index] = g.utilization
            util_series.setdefault(g.index, []).append(g.utilization)
            if g.sm_activity is not None:
                sm_series.setdefault(g.index, []).append(g.sm_activity)
            if g.memory_used_bytes is not None:
                mem_peak[g.index] = max(mem_peak.get(g.index, 0), g.memory_used_bytes)
        util_at.append(utils)
        for p in s.processes:
            for use in p.gpus:
                held.add(use.gpu_index)

    def trailing(idle_at: Callable[[int], bool | None]) -> float:
        """Seconds at the end of the window for which idle_at(i) held (None: stop)."""
        since = None
        for i in range(len(samples) - 1, -1, -1):
            if not idle_at(i):
                break
            since = samples[i].ts
        return 0.0 if since is None else end - since

    gpus = []
    for index in sorted(names):
        series = util_series.get(index, [])
        sm = sm_series.get(index)
        gpus.append(GpuWindow(
            index, names[index], mem_total.get(index, 0), mem_peak.get(index, 0),
            statistics.fmean(series) if series else 0.0, _p95(series),
            statistics.fmean(sm) if sm else None, index in held,
            trailing(lambda i, index=index: util_at[i].get(index, 100.0) < IDLE_UTILIZATION_PCT)))
    # Per process (GPU processes; children fold into their parent's I/O evidence).
    seen: dict[tuple[int, float], list[int]] = {}
    by_key: list[dict[tuple[int, float], Any]] = []
    children: list[dict[int, list[Any]]] = []
    for i, s in enumerate(samples):
        keys: dict[tuple[int, float], Any] = {}
        kids: dict[int, list[Any]] = {}
        for p in s.processes:
            keys[p.key] = p
            kids.setdefault(p.ppid, []).append(p)
            if p.gpus:
                seen.setdefault(p.key, []).append(i)
        by_key.append(keys)
        children.append(kids)
    processes = []
    for key, idx in seen.items():
        first_i, last_i = idx[0], idx[-1]
        pid = key[0]
        last_proc = by_key[last_i][key]
        gpu_set: set[int] = set()
        mem_by_gpu: dict[int, int] = {}
        utils, sms, burn_rates = [], [], []
        own_sm: list[float] = []
        low = busy = d_ticks = 0
        io_first: dict[tuple[int, float], float] = {}
        io_last: dict[tuple[int, float], float] = {}
        read_first: dict[tuple[int, float], int] = {}
        read_last: dict[tuple[int, float], int] = {}
        writes: list[tuple[float, int]] = []
        prev_written: dict[tuple[int, float], int] = {}
        for i in idx:
            s = samples[i]
            me = by_key[i][key]
            tree = [me, *children[i].get(pid, ())]
            mine = [u.gpu_index for u in me.gpus]
            gpu_set.update(mine)
            for u in me.gpus:
                mem_by_gpu[u.gpu_index] = max(mem_by_gpu.get(u.gpu_index, 0), u.memory_bytes or 0)
            vals = [util_at[i][g] for g in mine if g in util_at[i]]
            if vals:
                u = sum(vals) / len(vals)
                utils.append(u)
                if u < GPU_LOW_UTILIZATION_PCT:
                    low += 1
                else:
                    busy += 1
            sm_vals = [g.sm_activity for g in s.gpus if g.index in mine and g.sm_activity is not None]
            if sm_vals:
                sms.append(sum(sm_vals) / len(sm_vals))
            elif me.gpus:
                # No GPM (before Hopper): the process's own SM share stands in for activity.
                own_sm.append(sum(u.sm_share for u in me.gpus) / len(me.gpus))
            pb = burns[i].processes.get(key)
            burn_rates.append(pb.burn_per_hour if pb else 0.0)
            if any(p.state == "D" or p.threads_in_d > 0 for p in tree):
                d_ticks += 1
            written = 0
            for p in tree:
                if p.iowait_seconds is not None:
                    io_first.setdefault(p.key, p.iowait_seconds)
                    io_last[p.key] = p.iowait_seconds
                if p.read_bytes is not None:
                    read_first.setdefault(p.key, p.read_bytes)
                    read_last[p.key] = p.read_bytes
                if p.write_bytes is not None:
                    if p.key in prev_written:
                        written += max(p.write_bytes - prev_written[p.key], 0)
                    prev_written[p.key] = p.write_bytes
            writes.append((s.ts, written))
        seconds = samples[last_i].ts - samples[first_i].ts
        ticks = len(idx)
        iowait = sum(max(io_last[k] - io_first[k], 0.0) for k in io_last)
        read = sum(max(read_last[k] - read_first[k], 0) for k in read_last)
        pid_id = process_key(*key)
        # Checkpoints seen in its stacks are exact; write bursts are the fallback without them.
        observed = (checkpoint_times or {}).get(pid_id)
        cps = sorted(observed) if observed else _checkpoint_bursts(writes)
        mine_final = sorted(gpu_set)
        processes.append(ProcessWindow(
            id=pid_id, pid=pid, start_time=key[1], user=last_proc.user,
            command=last_proc.command, job=labeler.label(last_proc.command),
            gpus=tuple(mine_final), seconds=seconds, runtime_s=max(end - key[1], 0.0),
            burn_per_hour=statistics.fmean(burn_rates) if burn_rates else 0.0,
            memory_peak_bytes=max(mem_by_gpu.values(), default=0),
            gpu_utilization_mean=statistics.fmean(utils) if utils else 0.0,
            gpu_busy_fraction=busy / ticks, gpu_low_fraction=low / ticks,
            sm_activity_mean=(statistics.fmean(sms) if sms else
                              statistics.fmean(own_sm) if own_sm else None),
            trailing_idle_s=trailing(lambda i, key=key, mine=mine_final: (
                key in by_key[i]
                and all(util_at[i].get(g, 100.0) < IDLE_UTILIZATION_PCT for g in mine))),
            iowait_fraction=min(iowait / seconds, 1.0) if seconds > 0 else 0.0,
            d_state_fraction=d_ticks / ticks,
            read_bytes_per_s=read / seconds if seconds > 0 else 0.0,
            checkpoint_times=tuple(cps),
            inference=bool(inference_command.search(last_proc.command)),
            phases=phases.get(pid_id) or phases.get(pid) or {},
            memory_by_gpu=mem_by_gpu,
        ))
    processes.sort(key=lambda p: -p.burn_per_hour)
    host_trailing = trailing(lambda i: (
        not any(p.gpus for p in samples[i].processes)
        or all(u < IDLE_UTILIZATION_PCT for u in util_at[i].values())))
    return Analysis(
        window_s=window, start=start, end=end, price=price, catalog=catalog,
        gpus=tuple(gpus), processes=tuple(processes),
        burn_per_hour=statistics.fmean(b.total_per_hour for b in burns),
        idle_per_hour=statistics.fmean(b.idle_per_hour for b in burns),
        wasted_per_hour=statistics.fmean(b.wasted_per_hour for b in burns),
        host_trailing_idle_s=host_trailing,
        host_cpus=host_cpus or os.cpu_count() or 1,
        budget_events=tuple(budget_events),
        limits={**DEFAULT_LIMITS, **(limits or {})},
    )


# -- recommendations -------------------------------------------------------------------------


def recommendation_id(rule: str, target: str) -> str:
    return hashlib.sha1(f"{rule}\0{target}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Recommendation:
    id: str
    rule: str
    target: str
    summary: str
    savings_per_month: float
    method: str
    evidence: Mapping[str, Any]
    action: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "rule": self.rule, "target": self.target,
                "summary": self.summary, "savings_per_month": self.savings_per_month,
                "method": self.method, "evidence": dict(self.evidence),
                "action": dict(self.action)}


@dataclass(frozen=True)
class Rule:
    name: str
    signal: str
    threshold: str
    evidence: str
    text: str
    savings: str
    check: Callable[[Analysis, Rule], list[Recommendation]]

    def make(self, target: str, summary: str, savings_per_month: float, method: str,
             evidence: Mapping[str, Any], action: Mapping[str, Any]) -> Recommendation:
        return Recommendation(recommendation_id(self.name, target), self.name, target, summary,
                              max(savings_per_month, 0.0), method,
                              {"signal": self.signal, "threshold": self.threshold, **evidence},
                              action)


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _share_savings(proc: ProcessWindow, share: float, what: str) -> tuple[float, str]:
    monthly = proc.burn_per_hour * share * HOURS_PER_MONTH
    return monthly, (f"{_money(proc.burn_per_hour)}/h burn x {share:.0%} of the window in {what} "
                     f"x {HOURS_PER_MONTH:g} h/month = {_money(monthly)}/month; {UPPER_BOUND}")


def _phase(proc: ProcessWindow, phase: str) -> tuple[float, list[Mapping[str, Any]]]:
    entry = proc.phases.get(phase) or {}
    return float(entry.get("share", 0.0) or 0.0), list(entry.get("top_stacks", []) or [])


def _where(stacks: Sequence[Mapping[str, Any]]) -> str | None:
    for stack in stacks:
        if stack.get("file"):
            return f"{stack['file']}:{stack.get('line')}"
    return None


def _stack_evidence(stacks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"file": s.get("file"), "line": s.get("line"), "function": s.get("function"),
             "samples": s.get("samples"), "frames": list(s.get("frames", []))[:12]}
            for s in stacks[:3]]


def _process_evidence(a: Analysis, proc: ProcessWindow) -> dict[str, Any]:
    return {"process": {"id": proc.id, "pid": proc.pid, "user": proc.user,
                        "command": proc.command, "job": proc.job, "gpus": list(proc.gpus),
                        "burn_per_hour": proc.burn_per_hour},
            "window": {"start": a.start, "end": a.end, "seconds": a.window_s},
            "phases": {k: {"share": v.get("share"), "seconds": v.get("seconds")}
                       for k, v in proc.phases.items()}}


def _phase_rule(phase: str, threshold: float, patch: Callable[[ProcessWindow, Analysis, str], str],
                what: str, headline: str) -> Callable[[Analysis, Rule], list[Recommendation]]:
    def check(a: Analysis, rule: Rule) -> list[Recommendation]:
        found = []
        for proc in a.processes:
            share, stacks = _phase(proc, phase)
            if share <= threshold:
                continue
            where = _where(stacks) or "(no stack with a user frame yet)"
            savings, method = _share_savings(proc, share, what)
            found.append(rule.make(
                proc.id,
                f"{proc.job} (pid {proc.pid}) spends {share:.0%} of its time in {what}: "
                f"{headline} — {where}",
                savings, method,
                {**_process_evidence(a, proc), "share": share, "top_stacks":
                 _stack_evidence(stacks), "where": where},
                {"kind": "show_patch", "file": _where(stacks), "patch": patch(proc, a, where)}))
        return found
    return check


def _workers(proc: ProcessWindow, a: Analysis) -> int:
    gpu_procs = max(len(a.processes), 1)
    return max(2, min(16, a.host_cpus // gpu_procs))


def _dataloader_patch(proc: ProcessWindow, a: Analysis, where: str) -> str:
    n = _workers(proc, a)
    return (f"# {where}: the training loop waits here for its DataLoader.\n"
            "# Where that DataLoader is built, prefetch in workers:\n"
            "-loader = DataLoader(dataset, batch_size=batch_size, ...)\n"
            f"+loader = DataLoader(dataset, batch_size=batch_size, ...,\n"
            f"+                    num_workers={n},  # {a.host_cpus} CPUs / "
            f"{max(len(a.processes), 1)} GPU processes\n"
            "+                    pin_memory=True,\n"
            "+                    prefetch_factor=4,\n"
            "+                    persistent_workers=True)\n")


def _preprocess_patch(proc: ProcessWindow, a: Analysis, where: str) -> str:
    n = _workers(proc, a)
    return (f"# {where}: decoding/augmentation runs in the training process.\n"
            "# Move it into Dataset.__getitem__ (or a transform) and let workers run it:\n"
            f"+loader = DataLoader(dataset, ..., num_workers={n}, pin_memory=True,\n"
            "+                    prefetch_factor=4, persistent_workers=True)\n"
            "# GPU-friendly decoding (torchvision.io.decode_jpeg(device='cuda'), DALI) moves it "
            "off the CPU entirely.\n")


def _checkpoint_patch(proc: ProcessWindow, a: Analysis, where: str) -> str:
    cadence = _cadence(proc.checkpoint_times)
    every = f" (now every {cadence / 60:.0f} min)" if cadence else ""
    return (f"# {where}: training stops while the checkpoint is written{every}.\n"
            "-torch.save(state, path)\n"
            "+import torch.distributed.checkpoint as dcp\n"
            "+future = dcp.async_save(state_dict, checkpoint_id=path)  # copy to CPU, write "
            "in the background\n"
            "+# ... before the next save: future.result()\n"
            "# Or save less often: the interval only needs to bound the work lost to a crash.\n")


def _eval_patch(proc: ProcessWindow, a: Analysis, where: str) -> str:
    return (f"# {where}: evaluation takes a large part of the run.\n"
            "# Evaluate less often or on a fixed subset, e.g. HF TrainingArguments:\n"
            "+eval_steps=5 * current_eval_steps, eval_accumulation_steps=..., "
            "per_device_eval_batch_size=2 * train batch\n"
            "# Lightning: Trainer(val_check_interval=..., limit_val_batches=0.25)\n"
            "# Or run eval as a separate job on a cheaper GPU from saved checkpoints.\n")


def _sync_patch(proc: ProcessWindow, a: Analysis, where: str) -> str:
    return (f"# {where}: the loop waits for the GPU here (.item(), .cpu(), print of a tensor, "
            "torch.cuda.synchronize()).\n"
            "-total_loss += loss.item()\n"
            "+total_loss += loss.detach()          # stays on the GPU\n"
            "+if step % log_every == 0:\n"
            "+    log(total_loss.item() / log_every)  # one sync per log_every steps\n")


def _comm_patch(proc: ProcessWindow, a: Analysis, where: str) -> str:
    return (f"# {where}: collectives (all-reduce/all-gather) block compute.\n"
            "# Overlap and batch communication:\n"
            "+model = DDP(model, bucket_cap_mb=100, gradient_as_bucket_view=True)\n"
            "+with model.no_sync():  # accumulate k micro-batches, all-reduce once\n"
            "+    loss.backward()\n"
            "# Check NCCL uses NVLink/EFA: NCCL_DEBUG=INFO (look for 'via P2P/IPC' / 'NET/OFI').\n")


def _duration(seconds: float) -> str:
    """12 s, 7 min, 2.5 h: the unit that reads best."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _cadence(times: Sequence[float]) -> float | None:
    if len(times) < 2:
        return None
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return statistics.median(gaps)


def _regular(times: Sequence[float]) -> bool:
    cadence = _cadence(times)
    if cadence is None or cadence <= 0:
        return False
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # A gap of about k cadences is a checkpoint that was not observed, not an irregular one.
    return all(round(g / cadence) >= 1
               and abs(g - round(g / cadence) * cadence) <= SPOT_CADENCE_TOLERANCE * cadence
               for g in gaps)


# -- the rule functions ----------------------------------------------------------------------


def check_idle_gpu_held(a: Analysis, rule: Rule) -> list[Recommendation]:
    found = []
    for proc in a.processes:
        if proc.trailing_idle_s < a.limit("idle_held_min_s"):
            continue
        monthly = proc.burn_per_hour * HOURS_PER_MONTH
        gib = proc.memory_peak_bytes / GIB
        found.append(rule.make(
            proc.id,
            f"pid {proc.pid} ({proc.user}: {proc.job}) holds GPU {', '.join(map(str, proc.gpus))} "
            f"({gib:.1f} GiB) idle for {proc.trailing_idle_s / 60:.0f} min, burning "
            f"{_money(proc.burn_per_hour)}/h",
            monthly,
            f"{_money(proc.burn_per_hour)}/h x {HOURS_PER_MONTH:g} h/month = {_money(monthly)}"
            f"/month if it stayed idle; money comes back only when the freed GPU is used or the "
            f"instance shrinks or stops; {UPPER_BOUND}",
            {**_process_evidence(a, proc), "idle_seconds": proc.trailing_idle_s,
             "memory_peak_bytes": proc.memory_peak_bytes,
             "utilization_mean": proc.gpu_utilization_mean},
            {"kind": "sigterm", "pid": proc.pid, "start_time": proc.start_time,
             "signal": "SIGTERM", "confirm": True,
             "text": f"release the GPU: close the notebook kernel / job, or send SIGTERM to "
                     f"pid {proc.pid} after confirmation"}))
    return found


def _stop_commands(price: HostPrice) -> list[str]:
    if price.provider == "aws":
        return ['TOKEN=$(curl -sX PUT http://169.254.169.254/latest/api/token '
                '-H "X-aws-ec2-metadata-token-ttl-seconds: 60")',
                'ID=$(curl -s -H "X-aws-ec2-metadata-token: $TOKEN" '
                'http://169.254.169.254/latest/meta-data/instance-id)',
                f"aws ec2 stop-instances --region {price.region or 'us-east-1'} "
                "--instance-ids $ID"]
    if price.provider == "gcp":
        return ["gcloud compute instances stop $(hostname) --zone $(curl -s -H "
                "'Metadata-Flavor: Google' http://metadata.google.internal/computeMetadata/v1/"
                "instance/zone | cut -d/ -f4)"]
    if price.provider == "azure":
        return ["az vm deallocate --resource-group <group> --name $(hostname)"]
    return ["sudo shutdown -h now"]


def check_host_idle(a: Analysis, rule: Rule) -> list[Recommendation]:
    if a.host_trailing_idle_s < a.limit("host_idle_min_s"):
        return []
    fraction = a.host_trailing_idle_s / a.window_s if a.window_s > 0 else 1.0
    monthly = a.price.per_hour * HOURS_PER_MONTH * min(fraction, 1.0)
    return [rule.make(
        "host",
        f"the whole host has been idle for {a.host_trailing_idle_s / 60:.0f} min at "
        f"{_money(a.price.per_hour)}/h: stop it",
        monthly,
        f"{_money(a.price.per_hour)}/h x {HOURS_PER_MONTH:g} h/month x {min(fraction, 1):.0%} "
        f"idle in the window = {_money(monthly)}/month; {UPPER_BOUND}",
        {"window": {"start": a.start, "end": a.end, "seconds": a.window_s},
         "idle_seconds": a.host_trailing_idle_s, "price": a.price.as_dict(),
         "gpus": [{"index": g.index, "utilization_mean": g.utilization_mean, "held": g.held}
                  for g in a.gpus]},
        {"kind": "copy_commands", "commands": _stop_commands(a.price)})]


def check_over_provisioned(a: Analysis, rule: Rule) -> list[Recommendation]:
    p = a.price
    working = a.working_gpus
    if (a.catalog is None or not p.provider or p.per_hour <= 0
            or a.window_s < a.limit("shrink_min_window_s") or not working):
        return []
    used = len(working)
    idle_held = [g.index for g in a.gpus if g.held and g not in working]
    peak = max(g.memory_peak_bytes for g in working) / GIB
    offers = a.catalog.cheapest_fitting(peak, gpu_count=used, provider=p.provider,
                                        region=p.region, headroom=SHRINK_HEADROOM, limit=50)
    current = (p.instance_type or "").lower().removeprefix("standard_")
    cheaper = [o for o in offers
               if o.instance_type.lower().removeprefix("standard_") != current
               and o.price("on-demand").per_hour <= p.per_hour * (1 - SHRINK_MIN_SAVING)]
    if not cheaper:
        return []
    accel = a.gpus[0].name if a.gpus else ""
    this = a.catalog.by_instance(p.provider, p.instance_type or "", p.region)
    same = [o for o in cheaper if this is not None and o.accelerator == this.accelerator]
    pick = same[0] if same else cheaper[0]
    new_price = pick.price("on-demand").per_hour
    monthly = (p.per_hour - new_price) * HOURS_PER_MONTH
    confidence = "high" if a.window_s >= RIGHTSIZE_CONFIDENT_S else "low"
    different = this is not None and pick.accelerator != this.accelerator
    caveat = (f"; {pick.accelerator} is a different GPU from {this.accelerator}: check the "
              "job's speed on it" if different and this is not None else "")
    return [rule.make(
        "host",
        f"{used} of {len(a.gpus)} GPUs working, peak {peak:.1f} GiB per GPU: "
        f"{pick.instance_type} ({pick.accelerator_count} x {pick.accelerator}, "
        f"{pick.accelerator_memory_gib:g} GiB) at {_money(new_price)}/h instead of "
        f"{p.instance_type} at {_money(p.per_hour)}/h{caveat}",
        monthly,
        f"({_money(p.per_hour)} - {_money(new_price)})/h x {HOURS_PER_MONTH:g} h/month = "
        f"{_money(monthly)}/month; fits {peak:.1f} GiB x {1 + SHRINK_HEADROOM:g} headroom on "
        f"{used} GPU(s)"
        + (f" (GPUs {', '.join(map(str, idle_held))} are held but idle: release them first)"
           if idle_held else "")
        + f"; confidence {confidence} ({a.window_s / 3600:.1f} h observed, "
        f"rightsizing wants >= {RIGHTSIZE_CONFIDENT_S / 3600:g} h); {UPPER_BOUND}",
        {"window": {"start": a.start, "end": a.end, "seconds": a.window_s},
         "gpus_used": used, "gpus_held_idle": idle_held, "gpu_count": len(a.gpus),
         "accelerator": accel,
         "peak_gpu_memory_gib": peak, "headroom": SHRINK_HEADROOM, "confidence": confidence,
         "gpus": [{"index": g.index, "memory_peak_bytes": g.memory_peak_bytes,
                   "utilization_p95": g.utilization_p95, "held": g.held} for g in a.gpus],
         "alternatives": [{"instance_type": o.instance_type, "accelerator": o.accelerator,
                           "gpus": o.accelerator_count, "gib": o.accelerator_memory_gib,
                           "per_hour": o.price("on-demand").per_hour} for o in cheaper[:5]]},
        {"kind": "resize", "provider": p.provider, "region": p.region,
         "from": p.instance_type, "to": pick.instance_type, "to_price_per_hour": new_price,
         "dry_run_first": True})]


def check_storage_bound(a: Analysis, rule: Rule) -> list[Recommendation]:
    found = []
    for proc in a.processes:
        stall = max(proc.iowait_fraction, proc.d_state_fraction)
        if stall <= IO_STALL_FRACTION or proc.gpu_low_fraction <= GPU_LOW_FRACTION:
            continue
        share_dw, stacks_dw = _phase(proc, "data_wait")
        share_pp, stacks_pp = _phase(proc, "host_preprocess")
        stacks = stacks_dw + stacks_pp
        share = min(proc.gpu_low_fraction, 1.0)
        savings, method = _share_savings(proc, share, "I/O-starved low GPU use")
        where = _where(stacks) or "the input pipeline"
        found.append(rule.make(
            proc.id,
            f"{proc.job} (pid {proc.pid}) is storage-bound: I/O stalls {stall:.0%} of the "
            f"window while its GPU is below {GPU_LOW_UTILIZATION_PCT:g}% "
            f"{proc.gpu_low_fraction:.0%} of the time — stage the data on local NVMe ({where})",
            savings, method,
            {**_process_evidence(a, proc), "iowait_fraction": proc.iowait_fraction,
             "d_state_fraction": proc.d_state_fraction,
             "read_bytes_per_s": proc.read_bytes_per_s,
             "gpu_low_fraction": proc.gpu_low_fraction,
             "data_wait_share": share_dw, "host_preprocess_share": share_pp,
             "top_stacks": _stack_evidence(stacks)},
            {"kind": "copy_commands", "commands": [
                "lsblk -d -o NAME,SIZE,MODEL,MOUNTPOINT | grep -i nvme  # find the local disk",
                "sudo mkfs.xfs /dev/nvme1n1 && sudo mkdir -p /mnt/nvme && "
                "sudo mount /dev/nvme1n1 /mnt/nvme  # instance store: data is lost on stop",
                "rsync -a --info=progress2 <dataset dir> /mnt/nvme/",
                "# then point the dataset path at /mnt/nvme/...",
            ]}))
    return found


def check_spot(a: Analysis, rule: Rule) -> list[Recommendation]:
    p = a.price
    if p.lifecycle != "on-demand" or a.catalog is None or not p.provider or p.per_hour <= 0:
        return []
    offer = a.catalog.by_instance(p.provider, p.instance_type or "", p.region)
    spot = offer.price("spot") if offer is not None else None
    if spot is None:
        return []
    found = []
    for proc in a.processes:
        if proc.inference or proc.runtime_s < a.limit("spot_min_runtime_s"):
            continue
        cps = proc.checkpoint_times
        cadence = _cadence(cps)
        if (len(cps) < SPOT_MIN_CHECKPOINTS or cadence is None or cadence > SPOT_MAX_CADENCE_S
                or not _regular(cps)):
            continue
        share = len(proc.gpus) / max(p.gpu_count, 1)
        od_month = p.per_hour * share * HOURS_PER_MONTH
        spot_month = spot.per_hour * share * HOURS_PER_MONTH
        lost_h = SPOT_INTERRUPTIONS_PER_DAY * 30.4 * (cadence / 2 + SPOT_RESTART_S) / 3600
        lost = lost_h * spot.per_hour * share
        monthly = od_month - spot_month - lost
        if monthly <= 0:
            continue
        rng = (f" (range {_money(spot.low)}–{_money(spot.high)})"
               if spot.low is not None and spot.high is not None else "")
        found.append(rule.make(
            proc.id,
            f"{proc.job} has run {_duration(proc.runtime_s)} on-demand and checkpoints every "
            f"{_duration(cadence)}: run it on spot at {_money(spot.per_hour)}/h{rng} instead "
            f"of {_money(p.per_hour)}/h",
            monthly,
            f"on-demand {_money(p.per_hour)}/h - spot {_money(spot.per_hour)}/h, x {share:.0%} "
            f"of the host x {HOURS_PER_MONTH:g} h = {_money(od_month - spot_month)}/month, minus "
            f"lost work {SPOT_INTERRUPTIONS_PER_DAY:g} interruption/day x (half the checkpoint "
            f"interval {_duration(cadence / 2)} + {SPOT_RESTART_S / 60:.0f} min restart) = "
            f"{lost_h:.1f} h x {_money(spot.per_hour * share)}/h = {_money(lost)}; "
            f"{UPPER_BOUND}; spot price: {spot.source} ({spot.describe()})",
            {**_process_evidence(a, proc), "checkpoint_times": list(cps),
             "checkpoint_interval_s": cadence, "runtime_s": proc.runtime_s,
             "spot": {"per_hour": spot.per_hour, "low": spot.low, "high": spot.high,
                      "source": spot.source}},
            {"kind": "copy_commands", "commands": [
                f"# relaunch {p.instance_type} as spot, resuming from the last checkpoint:",
                f"aws ec2 run-instances --instance-type {p.instance_type} "
                "--instance-market-options 'MarketType=spot,SpotOptions={InstanceInterruptionBehavior=terminate}' ..."
                if p.provider == "aws" else f"# request a {p.provider} spot/preemptible VM of "
                f"type {p.instance_type}",
                "# on the 2-minute interruption notice, save a checkpoint (SIGTERM handler)",
            ]}))
    return found


def check_steady_inference(a: Analysis, rule: Rule) -> list[Recommendation]:
    p = a.price
    if p.lifecycle != "on-demand" or not p.provider or p.per_hour <= 0:
        return []
    found = []
    offer = (a.catalog.by_instance(p.provider, p.instance_type or "", p.region)
             if a.catalog is not None else None)
    commit = offer.price("commit-1y") if offer is not None else None
    for proc in a.processes:
        hours = proc.runtime_s / 3600
        if (not proc.inference or hours < STEADY_INFERENCE_MIN_HOURS
                or proc.gpu_busy_fraction < STEADY_INFERENCE_BUSY_FRACTION):
            continue
        share = len(proc.gpus) / max(p.gpu_count, 1)
        evidence = {**_process_evidence(a, proc), "steady_inference_hours": hours,
                    "busy_fraction": proc.gpu_busy_fraction}
        commands = [
            f"aws savingsplans describe-savings-plans-offering-rates --service-codes AmazonEC2 "
            f"--filters name=instanceType,values={p.instance_type} "
            f"name=region,values={p.region or 'us-east-1'} name=productDescription,values=Linux/UNIX"
            if p.provider == "aws" else f"# see {p.provider}'s committed-use prices for "
            f"{p.instance_type}"]
        if commit is None:
            found.append(rule.make(
                proc.id,
                f"{proc.job} has served steadily for {hours:.0f} h on on-demand "
                f"{p.instance_type}: a 1-year commitment likely pays off; the catalog has no "
                f"commitment price for it, so no figure",
                0.0,
                f"no commitment price for {p.provider}/{p.instance_type} in the catalog: savings "
                f"not estimated (a 1-year commitment pays off when the host runs more than "
                f"1 - discount of the year); {UPPER_BOUND}",
                evidence, {"kind": "copy_commands", "commands": commands}))
            continue
        monthly = (p.per_hour - commit.per_hour) * share * HOURS_PER_MONTH
        found.append(rule.make(
            proc.id,
            f"{proc.job} has served steadily for {hours:.0f} h: a 1-year commitment at "
            f"{_money(commit.per_hour)}/h instead of {_money(p.per_hour)}/h",
            monthly,
            f"({_money(p.per_hour)} - {_money(commit.per_hour)})/h x {share:.0%} of the host x "
            f"{HOURS_PER_MONTH:g} h = {_money(monthly)}/month, if it keeps running all year; "
            f"{UPPER_BOUND}",
            evidence, {"kind": "copy_commands", "commands": commands}))
    return found


def check_underbatched(a: Analysis, rule: Rule) -> list[Recommendation]:
    found = []
    for proc in a.processes:
        sm = proc.sm_activity_mean
        util = proc.gpu_utilization_mean
        if (not proc.inference or sm is None or util < UNDERBATCH_UTILIZATION_PCT
                or sm >= UNDERBATCH_SM_ACTIVITY_PCT):
            continue
        share = 1 - sm / util if util > 0 else 0.0
        savings, method = _share_savings(proc, share, "busy-looking but SM-idle time")
        found.append(rule.make(
            proc.id,
            f"{proc.job} (pid {proc.pid}) looks busy ({util:.0f}% utilization) but its SMs are "
            f"{sm:.0f}% active: many small kernels — batch requests dynamically",
            savings, method.replace("of the window in", "of GPU time in"),
            {**_process_evidence(a, proc), "utilization_mean": util, "sm_activity_mean": sm},
            {"kind": "show_patch", "file": None, "patch": (
                "# vLLM: let the scheduler batch more sequences\n"
                "+vllm serve MODEL --max-num-seqs 256 --max-num-batched-tokens 8192\n"
                "# Triton (config.pbtxt):\n"
                "+dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
                "# TorchServe: batch_size: 16, max_batch_delay: 10 (ms) in the model config\n")}))
    return found


def check_budget(a: Analysis, rule: Rule) -> list[Recommendation]:
    found = []
    for event in a.budget_events:
        d = getattr(event, "detail", {}) or {}
        target = f"{event.target}:{d.get('period')}:{d.get('period_id')}"
        found.append(rule.make(
            target, d.get("summary") or f"{event.target} exceeded its budget", 0.0,
            "no savings figure: a budget says what may be spent, not what is wasted",
            {"budget": dict(d), "event": event.as_dict() if hasattr(event, "as_dict") else {}},
            {"kind": "none"}))
    return found


RULES: tuple[Rule, ...] = (
    Rule("idle_gpu_held", "GPU(s) held by a process and below "
         f"{IDLE_UTILIZATION_PCT:g}% utilization at the end of the window",
         f">= {IDLE_HELD_MIN_S / 60:g} min", "idle time, memory held, process",
         "release the GPU (SIGTERM after confirmation)", "process burn x 730 h",
         check_idle_gpu_held),
    Rule("host_idle", "no GPU process, or every GPU idle, at the end of the window",
         f">= {HOST_IDLE_MIN_S / 60:g} min", "idle time, per-GPU utilization, price",
         "stop this instance", "host price x 730 h x idle fraction", check_host_idle),
    Rule("over_provisioned", "GPUs used and peak GPU memory vs the catalog",
         f"a fitting instance >= {SHRINK_MIN_SAVING:.0%} cheaper, window >= "
         f"{SHRINK_MIN_WINDOW_S / 60:g} min", "GPUs used, peak memory, alternatives",
         "shrink to the named instance", "(price now - new price) x 730 h",
         check_over_provisioned),
    Rule("dataloader_starvation", "data_wait share of the window",
         f"> {DATA_WAIT_SHARE:.0%} (PyTorch profiler)", "phase share, DataLoader top stacks",
         "prefetch: num_workers, pin_memory, prefetch_factor, persistent_workers",
         "process burn x share x 730 h",
         _phase_rule("data_wait", DATA_WAIT_SHARE, _dataloader_patch, "data wait",
                     "prefetch in DataLoader workers")),
    Rule("main_thread_preprocessing", "host_preprocess share of the window",
         f"> {HOST_PREPROCESS_SHARE:.0%} (PyTorch profiler)", "phase share, top stacks",
         "move preprocessing into DataLoader workers", "process burn x share x 730 h",
         _phase_rule("host_preprocess", HOST_PREPROCESS_SHARE, _preprocess_patch,
                     "main-thread preprocessing", "move it into DataLoader workers")),
    Rule("storage_bound", "iowait / D-state fraction while the GPU is low",
         f"> {IO_STALL_FRACTION:.0%} stalled and > {GPU_LOW_FRACTION:.0%} GPU-low "
         "(SageMaker IOBottleneck)", "iowait, D state, read rate, top stacks",
         "stage the data on local NVMe", "process burn x GPU-low fraction x 730 h",
         check_storage_bound),
    Rule("blocking_checkpoint", "checkpoint share of the window",
         f"> {CHECKPOINT_SHARE:.0%}", "phase share, checkpoint cadence, top stacks",
         "async checkpointing, or checkpoint less often", "process burn x share x 730 h",
         _phase_rule("checkpoint", CHECKPOINT_SHARE, _checkpoint_patch, "checkpointing",
                     "checkpoint asynchronously or less often")),
    Rule("eval_dominating", "eval share of the window", f"> {EVAL_SHARE:.0%}",
         "phase share, top stacks", "evaluate less often / on a subset",
         "process burn x share x 730 h",
         _phase_rule("eval", EVAL_SHARE, _eval_patch, "evaluation",
                     "evaluate less often or on a subset")),
    Rule("host_sync", "sync share of the window", f"> {SYNC_SHARE:.0%}",
         "phase share, the repeating user line", "remove host syncs from the loop",
         "process burn x share x 730 h",
         _phase_rule("sync", SYNC_SHARE, _sync_patch, "host-GPU syncs",
                     "keep values on the GPU, sync only when logging")),
    Rule("communication_bound", "comm share of the window", f"> {COMM_SHARE:.0%}",
         "phase share, collective top stacks", "overlap / bucket communication",
         "process burn x share x 730 h",
         _phase_rule("comm", COMM_SHARE, _comm_patch, "communication",
                     "overlap and bucket collectives")),
    Rule("spot_training", "on-demand training runtime and checkpoint cadence",
         f"runtime >= {SPOT_MIN_RUNTIME_S / 3600:g} h, >= {SPOT_MIN_CHECKPOINTS} regular "
         f"checkpoints at most {SPOT_MAX_CADENCE_S / 60:g} min apart",
         "runtime, checkpoint times, catalog spot price", "run it on spot",
         "(on-demand - spot) x GPU share x 730 h - expected lost work", check_spot),
    Rule("steady_inference_commitment", "steady inference hours on on-demand",
         f">= {STEADY_INFERENCE_MIN_HOURS:g} h, GPU busy >= "
         f"{STEADY_INFERENCE_BUSY_FRACTION:.0%} of ticks", "runtime, busy fraction, catalog",
         "buy a 1-year commitment", "(on-demand - commit-1y) x GPU share x 730 h",
         check_steady_inference),
    Rule("underbatched_inference", "device utilization vs GPM SM activity (inference)",
         f"utilization >= {UNDERBATCH_UTILIZATION_PCT:g}% and SM activity < "
         f"{UNDERBATCH_SM_ACTIVITY_PCT:g}%", "utilization, SM activity",
         "dynamic batching", "process burn x (1 - SM activity / utilization) x 730 h",
         check_underbatched),
    Rule("budget_exceeded", "spend per budget period", "spend >= limit",
         "budget, period, spend", "review the spend", "none", check_budget),
)


def evaluate(analysis: Analysis, rules: Sequence[Rule] = RULES) -> list[Recommendation]:
    """Every rule's recommendations, deduplicated by id, largest savings first."""
    found: dict[str, Recommendation] = {}
    for rule in rules:
        for rec in rule.check(analysis, rule):
            if rec.id not in found or rec.savings_per_month > found[rec.id].savings_per_month:
                found[rec.id] = rec
    return sorted(found.values(), key=lambda r: (-r.savings_per_month, r.rule, r.target))


# -- history ---------------------------------------------------------------------------------


@dataclass
class BookEntry:
    recommendation: Recommendation
    first_seen: float
    last_seen: float
    snoozed_until: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.recommendation.as_dict(), "first_seen": self.first_seen,
                "last_seen": self.last_seen, "snoozed_until": self.snoozed_until}


class RecommendationBook:
    """Recommendations over time: first and last seen, snoozes. `active()` lists those seen in
    the latest evaluation and not snoozed."""

    def __init__(self, max_entries: int = 1000) -> None:
        self.entries: dict[str, BookEntry] = {}
        self.max_entries = max_entries
        self.last_evaluated: float | None = None

    def record(self, recommendations: Iterable[Recommendation], now: float) -> None:
        for rec in recommendations:
            entry = self.entries.get(rec.id)
            if entry is None:
                self.entries[rec.id] = BookEntry(rec, now, now)
            else:
                entry.recommendation, entry.last_seen = rec, now
        self.last_evaluated = now
        if len(self.entries) > self.max_entries:
            oldest = sorted(self.entries.values(), key=lambda e: e.last_seen)
            for entry in oldest[: len(self.entries) - self.max_entries]:
                del self.entries[entry.recommendation.id]

    def snooze(self, rec_id: str, until: float) -> bool:
        entry = self.entries.get(rec_id)
        if entry is None:
            return False
        entry.snoozed_until = until
        return True

    def active(self, now: float | None = None) -> list[BookEntry]:
        now = self.last_evaluated if now is None else now
        if self.last_evaluated is None:
            return []
        live = [e for e in self.entries.values() if e.last_seen >= self.last_evaluated
                and not (e.snoozed_until is not None and now is not None
                         and e.snoozed_until > now)]
        return sorted(live, key=lambda e: -e.recommendation.savings_per_month)

    def history(self) -> list[BookEntry]:
        return sorted(self.entries.values(), key=lambda e: -e.last_seen)
