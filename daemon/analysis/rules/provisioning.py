"""Provisioning rules: an over-provisioned host (shrink to a catalog instance that fits),
long checkpointed training on on-demand (spot), steady inference (a commitment) and
underbatched inference (dynamic batching), and a process whose GPUs are used lopsidedly (one
busy, another barely: rebalance the split or run on fewer GPUs)."""

from __future__ import annotations

import math

from daemon.analysis.cost import gpu_wasted_per_hour
from daemon.analysis.kinds import BATCH_INFERENCE, NOTEBOOK
from daemon.analysis.rules.base import (
    UPPER_BOUND,
    Finding,
    Rule,
    money,
    plural,
    process_evidence,
    regular_cadence,
    share_savings,
)
from daemon.analysis.rules.idle import is_server, signs_of_work
from daemon.analysis.rules.thresholds import (
    LOPSIDED_LOW_PCT,
    RIGHTSIZE_CONFIDENT_S,
    SHRINK_HEADROOM,
    SHRINK_MIN_SAVING,
    SHRINK_MIN_WINDOW_S,
    SPOT_INTERRUPTIONS_PER_DAY,
    SPOT_MAX_CADENCE_S,
    SPOT_MIN_CHECKPOINTS,
    SPOT_MIN_RUNTIME_S,
    SPOT_RESTART_S,
    STEADY_INFERENCE_MIN_HOURS,
    STEADY_INFERENCE_WELL_USED_FRACTION,
    UNDERBATCH_SM_ACTIVITY_PCT,
    WELL_USED_UTILIZATION_PCT,
)
from daemon.analysis.rules.window import GIB, Analysis, GpuWindow, ProcessWindow
from daemon.clock import duration
from pricing.offer import HOURS_PER_MONTH


def needed_gpus(a: Analysis) -> tuple[GpuWindow, ...]:
    """The GPUs a smaller host must carry: those at work, and the GPUs held by a server, or by
    a process that shows a sign of work (rules/idle.py) with none of its GPUs at work (its
    work is on them, however idle they read: a server answering a request every 20 s, a job
    fed by a slow producer). Told to "release them first", their owners would stop a process
    that works. A job at work on one GPU that holds stray contexts on others still has those
    listed as held but idle."""
    working = a.working_gpus
    busy = {g.index for g in working}
    keep = {index for proc in a.processes
            if is_server(proc) or (not busy.intersection(proc.gpus) and signs_of_work(proc))
            for index in proc.gpus}
    return tuple(g for g in a.gpus if g in working or (g.held and g.index in keep))


def check_over_provisioned(a: Analysis, rule: Rule) -> list[Finding]:
    p = a.price
    working = needed_gpus(a)
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
    needed = a.limit("rightsize_evidence_s")
    different = this is not None and pick.accelerator != this.accelerator
    caveat = (f"; {pick.accelerator} is a different GPU from {this.accelerator}: check the "
              "job's speed on it" if different and this is not None else "")
    return [rule.make(
        "host",
        f"{used} of {len(a.gpus)} GPUs working, peak {peak:.1f} GiB per GPU: "
        f"{pick.instance_type} ({pick.accelerator_count} x {pick.accelerator}, "
        f"{pick.accelerator_memory_gib:g} GiB) at {money(new_price)}/h instead of "
        f"{p.instance_type} at {money(p.per_hour)}/h{caveat}",
        monthly,
        f"({money(p.per_hour)} - {money(new_price)})/h x {HOURS_PER_MONTH:g} h/month = "
        f"{money(monthly)}/month; fits {peak:.1f} GiB x {1 + SHRINK_HEADROOM:g} headroom on "
        f"{plural(used, 'GPU')}"
        + (f" ({'GPUs' if len(idle_held) > 1 else 'GPU'} {', '.join(map(str, idle_held))} "
           f"{'are' if len(idle_held) > 1 else 'is'} held but idle: release "
           f"{'them' if len(idle_held) > 1 else 'it'} first)" if idle_held else "")
        + f"; preliminary until {duration(needed)} observed (AWS Compute Optimizer wants "
        f">= {RIGHTSIZE_CONFIDENT_S / 3600:g} h before rightsizing); {UPPER_BOUND}",
        {"window": {"start": a.start, "end": a.end, "seconds": a.window_s},
         "gpus_used": used, "gpus_held_idle": idle_held, "gpu_count": len(a.gpus),
         "accelerator": accel,
         "peak_gpu_memory_gib": peak, "headroom": SHRINK_HEADROOM,
         "gpus": [{"index": g.index, "memory_peak_bytes": g.memory_peak_bytes,
                   "utilization_p95": g.utilization_p95, "held": g.held} for g in a.gpus],
         "alternatives": [{"instance_type": o.instance_type, "accelerator": o.accelerator,
                           "gpus": o.accelerator_count, "gib": o.accelerator_memory_gib,
                           "per_hour": o.price("on-demand").per_hour} for o in cheaper[:5]]},
        {"kind": "resize", "provider": p.provider, "region": p.region,
         "from": p.instance_type, "to": pick.instance_type, "to_price_per_hour": new_price,
         "dry_run_first": True},
        scope={"frees": [g.index for g in a.gpus if g not in working],
               "gpus": [g.index for g in working]},
        evidence_needed_s=needed,
        headline=f"shrink to {pick.instance_type} at {money(new_price)}/h: {used} of "
                 f"{len(a.gpus)} GPUs working")]


def _spot_relaunch(a: Analysis, proc: ProcessWindow, whole_host: bool) -> list[str]:
    """The relaunch commands for the job's own GPUs: this instance type when it uses the whole
    host, else a catalog instance of the same GPU with as many GPUs as the job has."""
    p = a.price
    gpus = len(proc.gpus)
    instance = p.instance_type
    note = None
    if not whole_host:
        this = a.catalog.by_instance(p.provider, p.instance_type or "", p.region)
        fits = [o for o in a.catalog.cheapest_fitting(
                    proc.memory_peak_bytes / GIB, gpu_count=gpus, provider=p.provider,
                    region=p.region, spot=True, headroom=SHRINK_HEADROOM, limit=50)
                if this is not None and o.accelerator == this.accelerator
                and o.price("spot") is not None]
        exact = [o for o in fits if o.accelerator_count == gpus]
        pick = (exact or fits or [None])[0]
        if pick is not None and pick.accelerator_count < p.gpu_count:
            instance = pick.instance_type
        else:
            note = (f"# the catalog has no smaller spot instance of this GPU: run it on a spot "
                    f"{p.instance_type} shared with other jobs, or on a {gpus}-GPU spot instance "
                    "of another GPU (mlcostd prices)")
    head = (f"# relaunch the job ({gpus} GPU{'s' if gpus != 1 else ''}) as spot, resuming from "
            f"the last checkpoint:")
    commands = [head] + ([note] if note else [])
    commands.append(
        f"aws ec2 run-instances --instance-type {instance} "
        "--instance-market-options 'MarketType=spot,SpotOptions={InstanceInterruptionBehavior="
        "terminate}' ..." if p.provider == "aws"
        else f"# request a {p.provider} spot/preemptible VM of type {instance}")
    commands.append("# on the 2-minute interruption notice, save a checkpoint (SIGTERM handler)")
    return commands


def spot_fits(proc: ProcessWindow) -> bool:
    """Spot is advice for training: never for inference (proc.inference) or a notebook, whose
    interruptions a person or a client would feel."""
    return not proc.inference and proc.kind.kind != NOTEBOOK


def check_spot(a: Analysis, rule: Rule) -> list[Finding]:
    p = a.price
    if p.lifecycle != "on-demand" or a.catalog is None or not p.provider or p.per_hour <= 0:
        return []
    offer = a.catalog.by_instance(p.provider, p.instance_type or "", p.region)
    spot = offer.price("spot") if offer is not None else None
    if spot is None:
        return []
    found = []
    host_gpus = max(p.gpu_count, len(a.gpus), 1)
    for proc in a.processes:
        if not spot_fits(proc) or proc.runtime_s < a.limit("spot_min_runtime_s"):
            continue
        cps = proc.checkpoint_times
        cadence = proc.checkpoint_interval_s
        if (len(cps) < SPOT_MIN_CHECKPOINTS or cadence is None or cadence > SPOT_MAX_CADENCE_S
                or not regular_cadence(cps)):
            continue
        # Its own GPUs, unless it uses the whole host.
        whole_host = len(proc.gpus) >= host_gpus
        share = 1.0 if whole_host else len(proc.gpus) / host_gpus
        od_month = p.per_hour * share * HOURS_PER_MONTH
        spot_month = spot.per_hour * share * HOURS_PER_MONTH
        lost_h = SPOT_INTERRUPTIONS_PER_DAY * 30.4 * (cadence / 2 + SPOT_RESTART_S) / 3600
        lost = lost_h * spot.per_hour * share
        monthly = od_month - spot_month - lost
        if monthly <= 0:
            continue
        rng = (f" (range {money(spot.low * share)}–{money(spot.high * share)})"
               if spot.low is not None and spot.high is not None else "")
        what = ("the whole host" if whole_host else
                f"its {len(proc.gpus)} of {host_gpus} GPUs")
        found.append(rule.make(
            proc.id,
            f"{proc.job} has run {duration(proc.runtime_s)} on-demand and checkpoints every "
            f"{duration(cadence)}: run {what} on spot at {money(spot.per_hour * share)}/h"
            f"{rng} instead of {money(p.per_hour * share)}/h",
            monthly,
            f"on-demand {money(p.per_hour)}/h - spot {money(spot.per_hour)}/h, x {share:.0%} "
            f"of the host ({what}) x {HOURS_PER_MONTH:g} h = {money(od_month - spot_month)}"
            f"/month, minus lost work {SPOT_INTERRUPTIONS_PER_DAY:g} interruption/day x (half "
            f"the checkpoint interval {duration(cadence / 2)} + {SPOT_RESTART_S / 60:.0f} min "
            f"restart) = {lost_h:.1f} h x {money(spot.per_hour * share)}/h = {money(lost)}; "
            f"preliminary until {duration(a.limit('spot_evidence_s'))} observed; "
            f"{UPPER_BOUND}; spot price: {spot.source} ({spot.describe()})",
            {**process_evidence(a, proc), "checkpoint_times": list(cps),
             "checkpoint_interval_s": cadence, "runtime_s": proc.runtime_s,
             "gpu_share": share, "whole_host": whole_host,
             "spot": {"per_hour": spot.per_hour, "low": spot.low, "high": spot.high,
                      "source": spot.source, "for_its_gpus_per_hour": spot.per_hour * share}},
            {"kind": "copy_commands", "commands": _spot_relaunch(a, proc, whole_host)},
            scope={"whole_host": True} if whole_host else {"gpus": list(proc.gpus)},
            evidence_needed_s=a.limit("spot_evidence_s"),
            headline=f"run on spot at {money(spot.per_hour * share)}/h instead of "
                     f"{money(p.per_hour * share)}/h (pid {proc.pid} checkpoints every "
                     f"{duration(cadence)})"))
    return found


def check_steady_inference(a: Analysis, rule: Rule) -> list[Finding]:
    p = a.price
    if p.lifecycle != "on-demand" or not p.provider or p.per_hour <= 0:
        return []
    found = []
    offer = (a.catalog.by_instance(p.provider, p.instance_type or "", p.region)
             if a.catalog is not None else None)
    best = offer.best_commitment() if offer is not None else None
    terms = offer.commitments() if offer is not None else {}
    needed = a.limit("commitment_evidence_s")
    host_gpus = max(p.gpu_count, len(a.gpus), 1)
    for proc in a.processes:
        hours = proc.runtime_s / 3600
        if (not proc.inference or hours < STEADY_INFERENCE_MIN_HOURS
                or proc.gpu_well_used_fraction < STEADY_INFERENCE_WELL_USED_FRACTION):
            continue
        share = min(len(proc.gpus) / host_gpus, 1.0)
        evidence = {**process_evidence(a, proc), "steady_inference_hours": hours,
                    "well_used_fraction": proc.gpu_well_used_fraction, "gpu_share": share,
                    "commitments": {f"{years}y": {"per_hour": price.per_hour,
                                                  "source": price.source}
                                    for years, price in terms.items()}}
        commands = [
            f"aws savingsplans describe-savings-plans-offering-rates --service-codes AmazonEC2 "
            f"--filters name=instanceType,values={p.instance_type} "
            f"name=region,values={p.region or 'us-east-1'} name=productDescription,values=Linux/UNIX"
            if p.provider == "aws" else f"# see {p.provider}'s committed-use prices for "
            f"{p.instance_type}"]
        scope = {"gpus": list(proc.gpus)}
        if best is None:
            found.append(rule.make(
                proc.id,
                f"{proc.job} has served steadily for {hours:.0f} h on on-demand "
                f"{p.instance_type}: a 1-year commitment likely pays off; the catalog has no "
                f"commitment price for it, so no figure",
                0.0,
                f"no commitment price for {p.provider}/{p.instance_type} in the catalog: savings "
                f"not estimated (a 1-year commitment pays off when the host runs more than "
                f"1 - discount of the year); {UPPER_BOUND}",
                evidence, {"kind": "copy_commands", "commands": commands},
                scope=scope, evidence_needed_s=needed,
                headline=f"a 1-year commitment likely pays off (pid {proc.pid} serves "
                         "steadily)"))
            continue
        years, commit = best
        monthly = (p.per_hour - commit.per_hour) * share * HOURS_PER_MONTH
        discount = 1 - commit.per_hour / p.per_hour
        others = ", ".join(f"{y}-year {money(pr.per_hour)}/h" for y, pr in sorted(terms.items())
                           if y != years)
        found.append(rule.make(
            proc.id,
            f"{proc.job} has served steadily for {hours:.0f} h: a {years}-year commitment at "
            f"{money(commit.per_hour)}/h ({discount:.0%} off) instead of {money(p.per_hour)}/h"
            + (f" (also listed: {others})" if others else ""),
            monthly,
            f"({money(p.per_hour)} - {money(commit.per_hour)})/h x {share:.0%} of the host x "
            f"{HOURS_PER_MONTH:g} h = {money(monthly)}/month, if it keeps running all "
            f"{years} year{'s' if years != 1 else ''} (pays off above {1 - discount:.0%} of the "
            f"term in use); commitment price: {commit.source}; preliminary until "
            f"{duration(needed)} observed; {UPPER_BOUND}",
            {**evidence, "commitment": {"years": years, "per_hour": commit.per_hour,
                                        "source": commit.source}},
            {"kind": "copy_commands", "commands": commands},
            scope=scope, evidence_needed_s=needed,
            headline=f"a {years}-year commitment at {money(commit.per_hour)}/h "
                     f"({discount:.0%} off; pid {proc.pid} serves steadily)"))
    return found


def _batching_action(proc: ProcessWindow) -> dict[str, object]:
    """Dynamic batching for a server (its runtime's settings); a larger batch for a batch job
    (its own loop). The action's text says which, so no server reads "your training script"."""
    if proc.kind.kind == BATCH_INFERENCE:
        return {"kind": "show_patch", "file": None,
                "text": "a patch for your inference script: larger batches per kernel; review "
                        "it, apply it, restart the job",
                "patch": ("# batch inference: give each forward pass more inputs\n"
                          "-loader = DataLoader(dataset, batch_size=batch_size, ...)\n"
                          "+loader = DataLoader(dataset, batch_size=4 * batch_size, ...)  "
                          "# as far as GPU memory allows\n"
                          "# generate(): pass a list of prompts (padding_side='left'), not one\n")}
    return {"kind": "show_patch", "file": None,
            "text": "settings for the server's runtime (vLLM, Triton, TorchServe): review them, "
                    "apply them to its launch command or model config, restart the server",
            "patch": ("# vLLM: let the scheduler batch more sequences\n"
                      "+vllm serve MODEL --max-num-seqs 256 --max-num-batched-tokens 8192\n"
                      "# Triton (config.pbtxt):\n"
                      "+dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
                      "# TorchServe: batch_size: 16, max_batch_delay: 10 (ms) in the model "
                      "config\n")}


def check_underbatched(a: Analysis, rule: Rule) -> list[Finding]:
    found = []
    for proc in a.processes:
        sm = proc.sm_activity_mean
        util = proc.gpu_utilization_mean
        if (not proc.inference or sm is None or util < WELL_USED_UTILIZATION_PCT
                or sm >= UNDERBATCH_SM_ACTIVITY_PCT
                # a serving pattern, not one tick of it: watched as long as shrink advice is
                or proc.seconds < a.limit("shrink_min_window_s")):
            continue
        share = 1 - sm / util if util > 0 else 0.0
        savings, method = share_savings(proc, share, "busy-looking but SM-idle time")
        signal = proc.sm_signal or "GPM SM activity"
        seen = (f"its SMs are {sm:.0f}% active (GPM SM activity)" if signal == "GPM SM activity"
                else f"its SM share is {sm:.0f}% (NVML process utilization; no GPM here)")
        found.append(rule.make(
            proc.id,
            f"{proc.job} (pid {proc.pid}) looks busy ({util:.0f}% utilization over its last "
            f"{duration(proc.seconds)}) but {seen}: many small kernels — "
            + ("give each forward pass a larger batch" if proc.kind.kind == BATCH_INFERENCE
               else "batch requests dynamically"),
            savings, method.replace("of the window in", "of GPU time in")
            + f"; signal: {signal}",
            {**process_evidence(a, proc), "utilization_mean": util, "sm_activity_mean": sm,
             "sm_signal": signal},
            _batching_action(proc),
            scope={"gpus": list(proc.gpus)},
            headline=("give each forward pass a larger batch" if proc.kind.kind == BATCH_INFERENCE
                      else "batch requests dynamically")
            + f" (pid {proc.pid}: many small kernels)"))
    return found


def _lopsided(a: Analysis, proc: ProcessWindow) -> tuple[GpuWindow, list[GpuWindow]] | None:
    """(its busiest GPU, its GPUs barely used) where the process holds several GPUs, the
    busiest at or above WELL_USED_UTILIZATION_PCT over the window and not idle at its end, and
    others below LOPSIDED_LOW_PCT that no other process holds (a shared GPU's utilization is
    not its own); None otherwise."""
    if len(proc.gpus) < 2 or proc.seconds < a.limit("idle_held_min_s"):
        return None
    by_index = {g.index: g for g in a.gpus}
    own = [by_index[i] for i in proc.gpus if i in by_index
           and not math.isnan(by_index[i].utilization_mean)]
    if len(own) < 2:
        return None
    busiest = max(own, key=lambda g: g.utilization_mean)
    if (busiest.utilization_mean < WELL_USED_UTILIZATION_PCT
            or busiest.trailing_idle_s >= a.limit("idle_held_min_s")):
        return None
    shared = {i for other in a.processes if other.id != proc.id for i in other.gpus}
    low = [g for g in own if g is not busiest and g.index not in shared
           and g.utilization_mean < LOPSIDED_LOW_PCT]
    return (busiest, low) if low else None


def check_lopsided_gpus(a: Analysis, rule: Rule) -> list[Finding]:
    found = []
    per_gpu = a.price.per_gpu if a.price.gpu_count > 0 else a.price.per_hour / max(
        len(a.gpus), 1)
    for proc in a.processes:
        lopsided = _lopsided(a, proc)
        if lopsided is None:
            continue
        busiest, low = lopsided
        wasted = [gpu_wasted_per_hour(per_gpu, g.utilization_mean, True, a.idle_utilization_pct)
                  for g in low]
        per_hour = math.fsum(wasted)
        savings = per_hour * HOURS_PER_MONTH
        lows = " and ".join(f"GPU {g.index}" for g in low)
        said = ", ".join(f"GPU {g.index} is {g.utilization_mean:.0f}% utilized" for g in low)
        held = ", ".join(f"{proc.memory_by_gpu.get(g.index, 0) / GIB:.1f} GiB on GPU {g.index}"
                         for g in low)
        text = (f"{said} while GPU {busiest.index} is {busiest.utilization_mean:.0f}%: "
                f"rebalance the split (move layers or work from GPU {busiest.index}'s part to "
                f"{lows}'s: a pipeline's split point, a device_map), or run it on fewer GPUs "
                f"(it holds {held}) and free {lows}. Nothing to stop: pid {proc.pid} works.")
        found.append(rule.make(
            proc.id,
            f"{proc.job} (pid {proc.pid}) uses its GPUs lopsidedly over its last "
            f"{duration(proc.seconds)}: {said} while GPU {busiest.index} is "
            f"{busiest.utilization_mean:.0f}% — rebalance the split or run on fewer GPUs",
            savings,
            " + ".join(f"GPU {g.index}: {money(per_gpu)}/h x (1 - {g.utilization_mean:.0f}%)"
                       for g in low)
            + f" = {money(per_hour)}/h wasted x {HOURS_PER_MONTH:g} h/month = "
            f"{money(savings)}/month; {UPPER_BOUND}",
            {**process_evidence(a, proc),
             "gpus": {str(g.index): {"utilization_mean": g.utilization_mean,
                                     "sm_activity_mean": g.sm_activity_mean,
                                     "memory_bytes": proc.memory_by_gpu.get(g.index, 0)}
                      for g in (busiest, *low)},
             "busiest_gpu": busiest.index, "underused_gpus": [g.index for g in low],
             "wasted_per_hour": per_hour},
            {"kind": "advice", "text": text},
            scope={"gpus": [g.index for g in low]},
            headline=f"rebalance the split or run on fewer GPUs (pid {proc.pid}: "
                     f"{said.replace(' utilized', '')}, GPU {busiest.index} "
                     f"{busiest.utilization_mean:.0f}%)"))
    return found


OVER_PROVISIONED = Rule(
    "over_provisioned", "GPUs used and peak GPU memory vs the catalog",
    f"a fitting instance >= {SHRINK_MIN_SAVING:.0%} cheaper, window >= "
    f"{SHRINK_MIN_WINDOW_S / 60:g} min", "GPUs used, peak memory, alternatives",
    "shrink to the named instance", f"(price now - new price) x {HOURS_PER_MONTH:g} h",
    check_over_provisioned, limits=("shrink_min_window_s", "rightsize_evidence_s"))
SPOT_TRAINING = Rule(
    "spot_training", "on-demand training runtime and checkpoint cadence",
    f"runtime >= {SPOT_MIN_RUNTIME_S / 3600:g} h, >= {SPOT_MIN_CHECKPOINTS} regular "
    f"checkpoints at most {SPOT_MAX_CADENCE_S / 60:g} min apart",
    "runtime, checkpoint times, catalog spot price", "run it on spot",
    f"(on-demand - spot) x its GPUs' share x {HOURS_PER_MONTH:g} h - expected lost work",
    check_spot,
    limits=("spot_min_runtime_s", "spot_evidence_s"))
STEADY_INFERENCE_COMMITMENT = Rule(
    "steady_inference_commitment", "steady inference hours on on-demand",
    f">= {STEADY_INFERENCE_MIN_HOURS:g} h, GPU busy >= "
    f"{STEADY_INFERENCE_WELL_USED_FRACTION:.0%} of ticks", "runtime, busy fraction, catalog",
    "buy the cheapest commitment listed (1 or 3 years)",
    f"(on-demand - best commitment) x GPU share x {HOURS_PER_MONTH:g} h", check_steady_inference,
    limits=("commitment_evidence_s",))
UNDERBATCHED_INFERENCE = Rule(
    "underbatched_inference",
    "device utilization vs GPM SM activity, else the process's SM share (inference)",
    f"utilization >= {WELL_USED_UTILIZATION_PCT:g}% and SM activity < "
    f"{UNDERBATCH_SM_ACTIVITY_PCT:g}% over >= {SHRINK_MIN_WINDOW_S / 60:g} min",
    "utilization, SM activity",
    "dynamic batching", f"process burn x (1 - SM activity / utilization) x {HOURS_PER_MONTH:g} h",
    check_underbatched, limits=("shrink_min_window_s",))
LOPSIDED_GPUS = Rule(
    "lopsided_gpus", "utilization of each GPU a process holds",
    f"one >= {WELL_USED_UTILIZATION_PCT:g}%, another held by it alone < {LOPSIDED_LOW_PCT:g}%",
    "each GPU's utilization, SM activity and the memory it holds there",
    "rebalance the split across its GPUs, or run on fewer GPUs",
    f"the underused GPUs' wasted burn (price x (1 - utilization)) x {HOURS_PER_MONTH:g} h",
    check_lopsided_gpus, limits=("idle_held_min_s",))
