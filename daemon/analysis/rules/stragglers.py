"""Waiting on peers: ranks of one job that wait at a barrier or collective (the `comm` phase)
while one rank is still busy with something else. The cause is that rank, the straggler, not
the collective and not a host sync: this rule names it (pid, GPU, phase, line) with the advice
that fits what it was doing (rebalance the shards, fix its input, write from one rank).

Ranks of one job are GPU processes with the same parent (torchrun, slurmstepd, a
multiprocessing parent) running the same program; their rank arguments (`--rank 1`,
`--local_rank=0`) are not part of the program, nor the pipe a spawned child reads its task from
(`spawn_main(tracker_fd=4, pipe_handle=8)`: torch.multiprocessing.spawn's ranks). A job has one straggler at a time: its finding's
slot is the job, so when another rank becomes the slowest the book replaces the held finding
about the first at once; and a rank with no phase balance yet (no stack sample taken: a loaded
host, a rank started late) holds the verdict back, as it may be the straggler.
"""

from __future__ import annotations

import re
from collections import defaultdict

from daemon.analysis.rules.base import (
    UPPER_BOUND,
    Finding,
    Rule,
    money,
    patch_text,
    phase_share,
    plural,
    process_evidence,
    stack_evidence,
    where_in,
)
from daemon.analysis.rules.window import Analysis, ProcessWindow
from daemon.wire import (
    CHECKPOINT,
    COMM,
    COMPUTE,
    DATA_WAIT,
    EVAL,
    HOST_PREPROCESS,
    IDLE,
    OUTPUT,
    SYNC,
    UNKNOWN,
)
from pricing.offer import HOURS_PER_MONTH

# A rank waits on its peers when a fifth of its window is comm (as COMM_SHARE, our choice).
WAITING_SHARE = 0.20
# The straggler waits at most half as much as the ranks that wait for it.
STRAGGLER_WAIT_RATIO = 0.5
_RANK_ARGUMENT = re.compile(r"\s--?[\w-]*rank[\w-]*(=|\s+)\d+", re.IGNORECASE)
# A child that multiprocessing's spawn start method starts (torch.multiprocessing.spawn's ranks
# too) runs `python -c "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=4,
# pipe_handle=8)" --multiprocessing-fork`: the descriptor it reads its task from differs per
# child, and is no more part of the program than a rank argument.
_SPAWN_HANDLE = re.compile(r"\b(tracker_fd|pipe_handle|parent_pid)=\d+")
WAIT_PHASES = (COMM,)
NOT_THE_CAUSE = (COMPUTE, COMM, IDLE, UNKNOWN)

ADVICE = {
    HOST_PREPROCESS: "its preprocessing is slower than the others': give every rank an equal "
                       "shard (DistributedSampler splits evenly) and move the preprocessing into "
                       "DataLoader workers",
    DATA_WAIT: "its input arrives slower than the others': check its shard's storage or "
                 "network, prefetch in DataLoader workers, give every rank an equal shard",
    OUTPUT: "it writes logs or outputs the others don't: write from one rank, buffered and "
              "in a background thread",
    CHECKPOINT: "it writes the checkpoint while the others wait: checkpoint asynchronously "
                  "(torch.distributed.checkpoint.async_save) or shard the save across ranks",
    EVAL: "it evaluates while the others wait: evaluate on every rank's share, or in a "
            "separate job",
    SYNC: "it syncs with its GPU where the others don't: remove the host sync from its path",
}
SLOWER_GPU = ("its GPU work takes longer than the others': an unequal batch or shard, or a "
              "slower or throttled GPU (check clocks and temperature)")


def job_of(proc: ProcessWindow) -> tuple[int, str] | None:
    """The job a process is a rank of: its parent and its program without rank arguments (nor
    the descriptors a spawned child is handed)."""
    if proc.ppid <= 1:
        return None
    program = _RANK_ARGUMENT.sub("", " " + proc.command).strip()
    return proc.ppid, _SPAWN_HANDLE.sub(r"\1=", program)


def _cause(proc: ProcessWindow) -> tuple[str, float]:
    """What the straggler does instead of waiting: its largest phase that is work off the GPU."""
    work = {name: float(entry.get("share", 0.0) or 0.0) for name, entry in proc.phases.items()
            if name not in NOT_THE_CAUSE}
    if not work:
        return COMPUTE, float((proc.phases.get(COMPUTE) or {}).get("share", 0.0) or 0.0)
    name = max(work, key=lambda p: work[p])
    return name, work[name]


def check_stragglers(a: Analysis, rule: Rule) -> list[Finding]:
    jobs: dict[tuple[int, str], list[ProcessWindow]] = defaultdict(list)
    for proc in a.processes:
        job = job_of(proc)
        if job is not None and proc.gpus:
            jobs[job].append(proc)
    found = []
    for job, ranks in jobs.items():
        if len(ranks) < 2:
            continue
        if not all(p.phases for p in ranks):
            continue  # a rank with no stack samples yet can be neither named nor ruled out
        waiting = {p.id: sum(phase_share(p, phase)[0] for phase in WAIT_PHASES) for p in ranks}
        waiters = [p for p in ranks if waiting[p.id] >= WAITING_SHARE]
        if not waiters:
            continue
        slowest = min(ranks, key=lambda p: waiting[p.id])
        mean_wait = sum(waiting[p.id] for p in waiters) / len(waiters)
        if slowest in waiters or waiting[slowest.id] > STRAGGLER_WAIT_RATIO * mean_wait:
            continue
        found.append(_finding(a, rule, job, slowest, waiters, waiting))
    return found


def _finding(a: Analysis, rule: Rule, job: tuple[int, str], slowest: ProcessWindow,
             waiters: list[ProcessWindow], waiting: dict[str, float]) -> Finding:
    cause, share = _cause(slowest)
    _, stacks = phase_share(slowest, cause)
    where = where_in(stacks) or "(no stack with a user frame yet)"
    advice = ADVICE.get(cause, SLOWER_GPU)
    lost = sum(p.burn_per_hour * waiting[p.id] for p in waiters)
    monthly = lost * HOURS_PER_MONTH
    method = (" + ".join(f"{money(p.burn_per_hour)}/h x {waiting[p.id]:.0%}" for p in waiters)
              + f" waiting x {HOURS_PER_MONTH:g} h/month = {money(monthly)}/month; "
              f"{UPPER_BOUND}")
    gpus = ", ".join(str(g) for g in slowest.gpus)
    peers = ", ".join(f"pid {p.pid}" for p in waiters)
    summary = (f"{slowest.job}: {plural(len(waiters), 'rank')} ({peers}) wait for their peers "
               f"{sum(waiting[p.id] for p in waiters) / len(waiters):.0%} of the time; the "
               f"straggler is pid {slowest.pid} (GPU {gpus}), {share:.0%} in {cause} at "
               f"{where} — {advice}")
    return rule.make(
        slowest.id, summary, monthly, method,
        {**process_evidence(a, slowest), "straggler": {
            "pid": slowest.pid, "gpus": list(slowest.gpus), "phase": cause, "share": share,
            "where": where, "top_stacks": stack_evidence(stacks)},
         "waiting_ranks": [{"pid": p.pid, "gpus": list(p.gpus), "waiting_share": waiting[p.id]}
                           for p in waiters]},
        {"kind": "show_patch", "file": where_in(stacks),
         "text": patch_text(slowest, where_in(stacks)),
         "patch": f"# {where}: the other ranks wait here for this one.\n# {advice}.\n"},
        scope={"gpus": sorted({g for p in waiters for g in p.gpus})},
        slot=f"job {job[0]} {job[1]}",  # one straggler a job: a newer one supersedes this
        headline=f"straggler pid {slowest.pid}, {share:.0%} in {cause}: {advice}")


STRAGGLER = Rule(
    "straggler", "comm share of a job's ranks against its slowest rank's",
    f">= {WAITING_SHARE:.0%} waiting on peers while one rank waits under "
    f"{STRAGGLER_WAIT_RATIO:.0%} of that", "phases of each rank, the straggler's top stacks",
    "rebalance the shards, fix the slow rank's input or writes",
    f"waiting ranks' burn x waiting share x {HOURS_PER_MONTH:g} h", check_stragglers)
