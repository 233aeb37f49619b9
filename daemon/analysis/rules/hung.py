"""A hung job: every rank of a job on this host waits in communication (a collective, a
send/recv, a barrier) with its GPU idle, and none works.

A deadlock of a torch.distributed job (ranks that post their recv before their send, ranks that
call different collectives, a peer that died or hangs) reads as the `comm` phase on every rank,
for ever: `communication_bound` called it slow communication ("overlap and bucket collectives")
and the idle rules count comm as work, so nothing said the job had stopped. The straggler rule
needs one rank that waits less than the others, which a mutual wait never gives.

Ranks of one job are grouped as the straggler rule groups them (`stragglers.job_of`: one parent,
one program). The job is hung when it has two ranks or more here and each of them:
  - has had its GPUs idle (below [idle].utilization) for `[idle].gpu_held_after` at the end of
    the window (`idle_held_min_s`, the limit idle_gpu_held reads: 10 min by default), with no
    kernels of its own meanwhile;
  - spent at least HUNG_COMM_OF_IDLE of its GPU-idle time waiting in comm, its comm samples
    taken with its GPU idle (a collective that moves data through NCCL keeps the GPU busy: a
    progressing ring all-reduce is not hung);
  - reads nothing, sits in no disk wait (what signs_of_work counts besides its phases), and
    uses (almost) no CPU over that idle span (under HUNG_CPU_MAX_CORES: ranks that move data
    through gloo on host tensors keep a CPU busy; a rank whose CPU time was not read is judged
    on the rest).
A job with one rank still working (computing, preprocessing, loading: a straggler) is not hung:
that rank's GPU-idle time is not comm, or its GPU is busy, and the straggler rule names it.

The finding says so, with each rank's pid and the line it waits at, its cost while it hangs,
and advice to look first (dump the ranks' stacks) and restart the job. Never a SIGTERM: ranks
waiting on a peer on another host (a multi-node job whose remote rank works, or loads a
checkpoint) look the same from here. For the same reason the host rule and GET /v1/idle still
count such ranks as work (comm is a phase of work); /v1/idle's reason says what they wait for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from daemon.analysis.busy import DEFAULT_GPU_HELD_AFTER_S
from daemon.analysis.host_signals import READ_MIN_PER_S
from daemon.analysis.rules.base import (
    UPPER_BOUND,
    Finding,
    Rule,
    money,
    phase_share,
    plural,
    process_evidence,
    recommendation_id,
    stack_evidence,
    where_in,
)
from daemon.analysis.rules.idle import (
    D_STATE_MAX_FRACTION,
    IOWAIT_MAX_FRACTION,
    OWN_KERNELS_MIN_PCT,
    idle_for,
)
from daemon.analysis.rules.stragglers import job_of
from daemon.analysis.rules.window import Analysis, ProcessWindow
from daemon.wire import COMM
from pricing.offer import HOURS_PER_MONTH

# Of a rank's GPU-idle time (its phases' gpu_idle_seconds), this share or more waits in comm:
# what else it did with its GPU idle (data wait, host compute, a checkpoint) is under a fifth.
HUNG_COMM_OF_IDLE = 0.8
# Its comm samples were taken with its GPU idle this share of their time or more (a collective
# that moves data on the GPU reads busy: NCCL's kernels).
HUNG_COMM_GPU_IDLE = 0.9
# Its own CPU time over its GPU-idle span, in cores: a rank blocked in a receive uses ~0.01 (its
# runtime's threads polling); one copying or reducing tensors on its CPU, a large part of one.
HUNG_CPU_MAX_CORES = 0.1


def _idle_seconds(entry: Mapping[str, Any] | None) -> float:
    return float((entry or {}).get("gpu_idle_seconds", 0.0) or 0.0)


def waits_on_peers_idle(proc: ProcessWindow, a: Analysis) -> bool:
    """Whether this rank's GPU has idled for idle_held_min_s at the window's end, its GPU-idle
    time spent waiting in comm, with nothing else of it at work (kernels, reads, disk waits,
    CPU)."""
    if not proc.gpus or not proc.phases or proc.trailing_idle_s < a.limit("idle_held_min_s"):
        return False
    sm = proc.sm_activity_idle_mean
    if sm is not None and sm >= OWN_KERNELS_MIN_PCT:
        return False
    if (proc.read_bytes_per_s >= READ_MIN_PER_S or proc.d_state_fraction > D_STATE_MAX_FRACTION
            or proc.iowait_fraction > IOWAIT_MAX_FRACTION):
        return False
    if proc.cpu_idle_cores is not None and proc.cpu_idle_cores >= HUNG_CPU_MAX_CORES:
        return False  # it moves data (or works) on its CPU
    comm = proc.phases.get(COMM)
    comm_idle = _idle_seconds(comm)
    comm_seconds = float((comm or {}).get("seconds", 0.0) or 0.0)
    all_idle = sum(_idle_seconds(entry) for entry in proc.phases.values())
    return (comm_seconds > 0 and all_idle > 0 and comm_idle >= HUNG_COMM_OF_IDLE * all_idle
            and comm_idle >= HUNG_COMM_GPU_IDLE * comm_seconds)


def hung_jobs(a: Analysis) -> dict[tuple[int, str], list[ProcessWindow]]:
    """The jobs on this host (two ranks or more) all of whose ranks wait on their peers with
    their GPUs idle (`waits_on_peers_idle`), by job (stragglers.job_of); ranks by pid."""
    jobs: dict[tuple[int, str], list[ProcessWindow]] = defaultdict(list)
    for proc in a.processes:
        job = job_of(proc)
        if job is not None and proc.gpus:
            jobs[job].append(proc)
    return {job: sorted(ranks, key=lambda p: p.pid) for job, ranks in jobs.items()
            if len(ranks) >= 2 and all(waits_on_peers_idle(p, a) for p in ranks)}


def hung_rank_ids(a: Analysis) -> set[str]:
    """The ids of the ranks of hung jobs: communication_bound gives them no overlap advice
    (they are not slow, they have stopped)."""
    return {p.id for ranks in hung_jobs(a).values() for p in ranks}


def _where(proc: ProcessWindow) -> str:
    _, stacks = phase_share(proc, COMM)
    return where_in(stacks) or "(no stack with a user frame yet)"


def _reason(proc: ProcessWindow) -> str:
    _, stacks = phase_share(proc, COMM)
    return str(next((s.get("reason") for s in stacks if s.get("reason")), "communication"))


def check_hung_jobs(a: Analysis, rule: Rule) -> list[Finding]:
    found = []
    for job, ranks in hung_jobs(a).items():
        first = ranks[0]
        waited = min(p.trailing_idle_s for p in ranks)
        per_hour = sum(p.burn_per_hour for p in ranks)
        monthly = per_hour * HOURS_PER_MONTH
        gpus = sorted({g for p in ranks for g in p.gpus})
        at = "; ".join(f"pid {p.pid} (GPU {', '.join(map(str, p.gpus))}) at {_where(p)}: "
                       f"{_reason(p)}" for p in ranks)
        pids = " ".join(str(p.pid) for p in ranks)
        summary = (
            f"{first.job}: all {plural(len(ranks), 'rank')} on this host have waited on their "
            f"peers for {idle_for(waited, a)} with their GPUs idle, and none works ({at}). "
            "A hung job (a lost or hung peer, a collective or send/recv one rank never "
            "reaches, ranks calling different collectives) or ranks waiting on a peer on "
            f"another host; it costs {money(per_hour)}/h while it hangs ("
            f"{money(per_hour * waited / 3600)} so far). Look first: dump the ranks' stacks; "
            "if no rank of the job works anywhere, restart it, with a timeout in "
            "init_process_group so that a hang ends itself")
        method = (f"{' + '.join(money(p.burn_per_hour) + '/h' for p in ranks)} x "
                  f"{HOURS_PER_MONTH:g} h/month = {money(monthly)}/month if it stayed hung; "
                  f"{UPPER_BOUND}")
        found.append(rule.make(
            first.id, summary, monthly, method,
            {**process_evidence(a, first), "waited_seconds": waited,
             "cost_per_hour": per_hour,
             "ranks": [{"pid": p.pid, "id": p.id, "gpus": list(p.gpus),
                        "idle_seconds": p.trailing_idle_s, "burn_per_hour": p.burn_per_hour,
                        "comm_share": phase_share(p, COMM)[0], "where": _where(p),
                        "cpu_cores_while_idle": p.cpu_idle_cores,
                        "top_stacks": stack_evidence(phase_share(p, COMM)[1])}
                       for p in ranks]},
            {"kind": "copy_commands",
             "text": f"look before restarting: dump every rank's stack (pids {pids}); ranks "
                     "that wait in different collectives, or a send/recv no peer matches, "
                     "are a bug; ranks that all wait on one peer, a lost or hung peer (on "
                     "this host or another: whom they are connected to shows it). If no "
                     "rank of the job works anywhere, restart the job, with "
                     "init_process_group(timeout=...) and TORCH_DISTRIBUTED_DEBUG=DETAIL so "
                     "that a hang ends itself and names the collective. Not stopped from "
                     "here: ranks waiting on a working peer on another host look the same",
             "commands": [*(f"sudo py-spy dump --pid {p.pid}" for p in ranks),
                          *(f"ss -tnp | grep 'pid={p.pid},'  # whom it is connected to"
                            for p in ranks)]},
            scope={"gpus": gpus},
            slot=f"job {job[0]} {job[1]}",
            # its ranks' communication_bound findings of earlier rounds go at once
            supersedes=tuple(recommendation_id("communication_bound", p.id) for p in ranks),
            headline=f"job hung? all {plural(len(ranks), 'rank')} (pids "
                     f"{', '.join(str(p.pid) for p in ranks)}) wait on their peers with GPUs "
                     f"idle for {idle_for(waited, a)}: look first, then restart it"))
    return found


HUNG_JOB = Rule(
    "hung_job", "every rank of a job on this host waiting in communication with its GPUs idle",
    f">= {DEFAULT_GPU_HELD_AFTER_S / 60:g} min ([idle].gpu_held_after), "
    f">= {HUNG_COMM_OF_IDLE:.0%} of each rank's GPU-idle time in comm, no kernels, reads or "
    f"disk waits, under {HUNG_CPU_MAX_CORES:g} CPU", "each rank's idle time, comm share and the stacks it waits in",
    "look first (py-spy dump the ranks), then restart the job (never SIGTERM from here)",
    f"the ranks' burn x {HOURS_PER_MONTH:g} h", check_hung_jobs, limits=("idle_held_min_s",))
