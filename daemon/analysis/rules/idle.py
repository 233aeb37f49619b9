"""Idle rules: a GPU held by a process but idle, and a whole host idle (stop it).

Idle means idle: the idle-GPU rule fires only for a process that shows no sign of work over
the whole window (`signs_of_work` is empty): no kernels of its own, no reads or D state, and no
data wait, host compute, checkpoint, eval, sync or comm in its phase balance (whose stack
classification saw its CPU and I/O). A starved job at 4% utilization is working: it gets the
pipeline advice, never this one. Its SIGTERM action also needs the stacks to show the process
waiting on input or sleeping (an idle phase); where no stack was sampled (py-spy missing or not
permitted) the advice stays, with the command to look first instead of the SIGTERM.

Never a SIGTERM for a server: a process whose kind (daemon.analysis.kinds) is online inference,
or that listens and has served (accepted connections, serving frames in any thread), is left
to `idle_server`, which advises scaling to zero, consolidating or sharing the GPU. So the
SIGTERM stays for notebooks and stopped jobs.
"""

from __future__ import annotations

from daemon.analysis.cost import HOURS_PER_MONTH, HostPrice
from daemon.analysis.kinds import ONLINE_INFERENCE
from daemon.analysis.phases import IDLE, READ_MIN_PER_S
from daemon.analysis.rules.base import UPPER_BOUND, Finding, Rule, money, process_evidence
from daemon.analysis.rules.thresholds import HOST_IDLE_MIN_S, IDLE_HELD_MIN_S
from daemon.analysis.rules.window import GIB, Analysis, ProcessWindow

# A process's own kernels: its SM share (or the GPM SM activity of its GPUs) averaged over the
# window. A context that is merely open reads 0; any kernels at all read above 1%.
OWN_KERNELS_MIN_PCT = 1.0
# A phase of work (data wait, host compute, checkpoint...) in at least this share of the window
# is a sign of work; 2% is one stack sample in fifty, above the noise of a stray dump.
WORK_PHASE_MIN_SHARE = 0.02
WORK_PHASES = ("data_wait", "host_preprocess", "checkpoint", "output", "eval", "sync", "comm")
D_STATE_MAX_FRACTION = 0.05  # ticks with a thread in D state: more is blocking on I/O
IOWAIT_MAX_FRACTION = 0.01


def signs_of_work(proc: ProcessWindow) -> list[str]:
    """What says the process is working during the window; empty: it is idle."""
    signs = []
    # Kernels count while it sits idle; a warm-up pass before that is no sign of work now.
    sm = proc.sm_activity_idle_mean
    if sm is not None and sm >= OWN_KERNELS_MIN_PCT:
        signs.append(f"its kernels keep {sm:.1f}% of the SMs busy while its GPU idles")
    if proc.read_bytes_per_s >= READ_MIN_PER_S:
        signs.append(f"it reads {proc.read_bytes_per_s / 1e6:.1f} MB/s")
    if proc.d_state_fraction > D_STATE_MAX_FRACTION:
        signs.append(f"it is blocked on I/O (D state) in {proc.d_state_fraction:.0%} of ticks")
    if proc.iowait_fraction > IOWAIT_MAX_FRACTION:
        signs.append(f"its I/O wait is {proc.iowait_fraction:.0%} of the window")
    for phase in WORK_PHASES:
        share = float((proc.phases.get(phase) or {}).get("share", 0.0) or 0.0)
        if share >= WORK_PHASE_MIN_SHARE:
            signs.append(f"its stacks show {phase} for {share:.0%} of the window")
    return signs


def is_server(proc: ProcessWindow) -> bool:
    """A server is never offered SIGTERM: it serves (listens and has served) or is online
    inference by its evidence."""
    return proc.kind.serves or proc.kind.kind == ONLINE_INFERENCE


def _sigterm(proc: ProcessWindow) -> dict[str, object]:
    return {"kind": "sigterm", "pid": proc.pid, "start_time": proc.start_time,
            "signal": "SIGTERM", "confirm": True,
            "text": f"release the GPU: close the notebook kernel / job, or send SIGTERM to "
                    f"pid {proc.pid} after confirmation"}


def _look_first(proc: ProcessWindow) -> dict[str, object]:
    """No stack says it waits: show what it runs before anyone stops it."""
    return {"kind": "copy_commands",
            "text": f"no stack sample confirms pid {proc.pid} is waiting: look at what it runs, "
                    "then close it or stop it",
            "commands": [f"sudo py-spy dump --pid {proc.pid}", f"kill -TERM {proc.pid}"]}


def check_idle_gpu_held(a: Analysis, rule: Rule) -> list[Finding]:
    found = []
    for proc in a.processes:
        if proc.trailing_idle_s < a.limit("idle_held_min_s"):
            continue
        if signs_of_work(proc):
            continue  # working, however slowly: the phase rules give the advice, not SIGTERM
        if is_server(proc):
            continue  # a server waits for requests: idle_server's advice, never SIGTERM
        waiting = proc.phases.get(IDLE) or {}  # its stacks waiting on input or sleeping
        idle_share = float(waiting.get("share", 0.0) or 0.0)
        idle_stacks = list(waiting.get("top_stacks") or [])
        monthly = proc.burn_per_hour * HOURS_PER_MONTH
        gib = proc.memory_peak_bytes / GIB
        found.append(rule.make(
            proc.id,
            f"pid {proc.pid} ({proc.user}: {proc.job}) holds GPU {', '.join(map(str, proc.gpus))} "
            f"({gib:.1f} GiB) idle for {proc.trailing_idle_s / 60:.0f} min, burning "
            f"{money(proc.burn_per_hour)}/h"
            + ("" if waiting else " (no stack sampled to confirm it is waiting)"),
            monthly,
            f"{money(proc.burn_per_hour)}/h x {HOURS_PER_MONTH:g} h/month = {money(monthly)}"
            f"/month if it stayed idle; money comes back only when the freed GPU is used or the "
            f"instance shrinks or stops; {UPPER_BOUND}",
            {**process_evidence(a, proc), "idle_seconds": proc.trailing_idle_s,
             "memory_peak_bytes": proc.memory_peak_bytes,
             "utilization_mean": proc.gpu_utilization_mean,
             "idle_utilization_pct": a.idle_utilization_pct,
             "no_sign_of_work": {
                 "sm_activity_idle_mean": proc.sm_activity_idle_mean,
                 "read_bytes_per_s": proc.read_bytes_per_s,
                 "d_state_fraction": proc.d_state_fraction,
                 "iowait_fraction": proc.iowait_fraction,
                 "idle_share": idle_share,
                 "waiting_in": [{"file": st.get("file"), "line": st.get("line"),
                                 "function": st.get("function"), "reason": st.get("reason")}
                                for st in idle_stacks[:3]]}},
            _sigterm(proc) if waiting else _look_first(proc),
            scope={"frees": list(proc.gpus)}))
    return found


def check_idle_server(a: Analysis, rule: Rule) -> list[Finding]:
    """A server whose GPUs idle at the end of the window: scale to zero, consolidate, share."""
    found = []
    for proc in a.processes:
        if not is_server(proc) or proc.trailing_idle_s < a.limit("idle_held_min_s"):
            continue
        ports = ", ".join(str(p) for p in proc.kind.listening_ports[:4]) or "no port seen"
        monthly = proc.burn_per_hour * HOURS_PER_MONTH
        gib = proc.memory_peak_bytes / GIB
        sm = proc.sm_activity_idle_mean
        found.append(rule.make(
            proc.id,
            f"pid {proc.pid} ({proc.user}: {proc.job}) serves (TCP {ports}) and its GPU "
            f"{', '.join(map(str, proc.gpus))} ({gib:.1f} GiB held) has been idle for "
            f"{proc.trailing_idle_s / 60:.0f} min at {money(proc.burn_per_hour)}/h: scale it to "
            "zero between requests, consolidate it with other models on one GPU, or share the "
            "GPU (MPS, MIG, time-slicing)",
            monthly,
            f"{money(proc.burn_per_hour)}/h x {HOURS_PER_MONTH:g} h/month = {money(monthly)}"
            f"/month if it stayed this idle and the GPU went to other work; the request rate is "
            f"not measured here (configure a Prometheus counter for the cost per request); "
            f"{UPPER_BOUND}",
            {**process_evidence(a, proc), "idle_seconds": proc.trailing_idle_s,
             "memory_peak_bytes": proc.memory_peak_bytes,
             "utilization_mean": proc.gpu_utilization_mean,
             "sm_activity_idle_mean": sm,
             "kind": proc.kind.as_dict(),
             "signs_of_work": signs_of_work(proc)},
            {"kind": "advice",
             "text": "a server is never stopped from here: scale it to zero behind its load "
                     "balancer or autoscaler, move it onto a GPU it shares with other models, "
                     "or give it a MIG slice"},
            scope={"frees": list(proc.gpus)}))
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


def check_host_idle(a: Analysis, rule: Rule) -> list[Finding]:
    if a.host_trailing_idle_s < a.limit("host_idle_min_s"):
        return []
    fraction = a.host_trailing_idle_s / a.window_s if a.window_s > 0 else 1.0
    monthly = a.price.per_hour * HOURS_PER_MONTH * min(fraction, 1.0)
    return [rule.make(
        "host",
        f"the whole host has been idle for {a.host_trailing_idle_s / 60:.0f} min at "
        f"{money(a.price.per_hour)}/h: stop it",
        monthly,
        f"{money(a.price.per_hour)}/h x {HOURS_PER_MONTH:g} h/month x {min(fraction, 1):.0%} "
        f"idle in the window = {money(monthly)}/month; {UPPER_BOUND}",
        {"window": {"start": a.start, "end": a.end, "seconds": a.window_s},
         "idle_seconds": a.host_trailing_idle_s, "price": a.price.as_dict(),
         "idle_utilization_pct": a.idle_utilization_pct,
         "gpus": [{"index": g.index, "utilization_mean": g.utilization_mean, "held": g.held}
                  for g in a.gpus]},
        {"kind": "copy_commands", "commands": _stop_commands(a.price)},
        scope={"whole_host": True})]


IDLE_GPU_HELD = Rule(
    "idle_gpu_held", "GPU(s) held by a process and idle (below [idle].utilization, "
    "default 5%) at the end of the window, the process showing no sign of work in it (no "
    "kernels, reads or D state; stacks waiting on input or sleeping)",
    f">= {IDLE_HELD_MIN_S / 60:g} min", "idle time, memory held, process",
    "release the GPU (SIGTERM after confirmation)", "process burn x 730 h",
    check_idle_gpu_held, limits=("idle_held_min_s",))
IDLE_SERVER = Rule(
    "idle_server", "GPU(s) held by a server (it listens and has served, or is online inference "
    "by its kind) and idle (below [idle].utilization) at the end of the window",
    f">= {IDLE_HELD_MIN_S / 60:g} min", "idle time, memory held, listening ports, kind evidence",
    "scale to zero / consolidate / share the GPU (never SIGTERM)", "process burn x 730 h",
    check_idle_server, limits=("idle_held_min_s",))
HOST_IDLE = Rule(
    "host_idle", "no GPU process, or every GPU idle, at the end of the window",
    f">= {HOST_IDLE_MIN_S / 60:g} min", "idle time, per-GPU utilization, price",
    "stop this instance", "host price x 730 h x idle fraction", check_host_idle,
    limits=("host_idle_min_s",))
