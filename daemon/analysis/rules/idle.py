"""Idle rules: a GPU held by a process but idle, and a whole host idle (stop it)."""

from __future__ import annotations

from daemon.analysis.cost import HOURS_PER_MONTH, HostPrice
from daemon.analysis.rules.base import UPPER_BOUND, Finding, Rule, money, process_evidence
from daemon.analysis.rules.thresholds import HOST_IDLE_MIN_S, IDLE_HELD_MIN_S
from daemon.analysis.rules.window import GIB, Analysis


def check_idle_gpu_held(a: Analysis, rule: Rule) -> list[Finding]:
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
            f"{money(proc.burn_per_hour)}/h",
            monthly,
            f"{money(proc.burn_per_hour)}/h x {HOURS_PER_MONTH:g} h/month = {money(monthly)}"
            f"/month if it stayed idle; money comes back only when the freed GPU is used or the "
            f"instance shrinks or stops; {UPPER_BOUND}",
            {**process_evidence(a, proc), "idle_seconds": proc.trailing_idle_s,
             "memory_peak_bytes": proc.memory_peak_bytes,
             "utilization_mean": proc.gpu_utilization_mean,
             "idle_utilization_pct": a.idle_utilization_pct},
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
        {"kind": "copy_commands", "commands": _stop_commands(a.price)})]


IDLE_GPU_HELD = Rule(
    "idle_gpu_held", "GPU(s) held by a process and idle (below [idle].utilization, "
    "default 5%) at the end of the window",
    f">= {IDLE_HELD_MIN_S / 60:g} min", "idle time, memory held, process",
    "release the GPU (SIGTERM after confirmation)", "process burn x 730 h",
    check_idle_gpu_held)
HOST_IDLE = Rule(
    "host_idle", "no GPU process, or every GPU idle, at the end of the window",
    f">= {HOST_IDLE_MIN_S / 60:g} min", "idle time, per-GPU utilization, price",
    "stop this instance", "host price x 730 h x idle fraction", check_host_idle)
