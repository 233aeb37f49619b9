"""The serving latency of a report's range ([[cost.latency]]): p50/p99 of each recorded
histogram over the range, beside its target's utilization and cost per request, and per window
of the report's timeline, so "p99 swings while p50 is fine" shows beside the phase balance of
the same windows.

The quantiles come from the bucket deltas between the histogram readings the daemon recorded
(meter_readings, kind "latency": daemon.analysis.latency.reading) each round. One function adds
them to a report document (daemon.commands.report.build) or to a page's data
(daemon.report_html.data), so the text, the JSON, the HTML pages and the profile say the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from daemon.analysis.latency import LATENCY_READING, Reading, recorded_latency, recorded_windows
from daemon.analysis.ledger import JobLabeler, is_owner_job, owner_jobs
from daemon.analysis.recorded_spend import EVERY_PROCESS, CostBetween
from daemon.wire import cost_per_1k_text, process_key

# The target `mlcostd profile --latency` gives its histogram: every process its store recorded
# (the profiled command's tree), whatever their job labels.
PROFILED_COMMAND = EVERY_PROCESS
Readings = Mapping[tuple[str, str], Sequence[Reading]]  # as daemon.store.queries.meter_readings


def section(document: dict[str, Any], readings: Readings, start: float, end: float,
            jobs: Mapping[str, str] | None, cost_between: CostBetween) -> None:
    """Add the latency of [start, end] to the report `document`: `spend.latency` (a list like
    /v1/now's `cost.latency`, over the range, with the target's `cost`, `cost_per_request`,
    `sm_share` and `gpu_utilization`) and each timeline bucket's `latency` (a list of
    {target, metric, p50_seconds, p99_seconds, requests, and the target's sm_share and stack
    samples per phase in that window}) where requests were counted. The cost per request is
    the target's dollars between the readings its requests were counted between
    (`cost_between`: recorded_spend.recorded_cost_between), over those requests, as /v1/now
    divides them: the same over any range that holds the same readings."""
    found = {name: rows for (kind, name), rows in readings.items()
             if kind == LATENCY_READING and rows}
    spend = document.setdefault("spend", {})
    spend["latency"] = []
    if not found:
        return
    processes = document.get("processes") or []
    labeler = JobLabeler(jobs)
    gpus = {g.get("index"): g for g in document.get("gpus") or []}
    timeline = document.get("timeline") or {}
    span = max(end - start, 1e-9)
    size = float(timeline.get("bucket_s") or 0)
    buckets = {int(round((b["ts"] - start) / size)): b
               for b in timeline.get("buckets") or []} if size > 0 else {}
    for _, rows in sorted(found.items()):
        entry = recorded_latency(rows, start, end)
        mine = [p for p in processes if _is_target(p, entry["target"], labeler)]
        cost = _target_cost(spend, mine, entry["target"])
        entry.pop("span_s")
        counted = entry.pop("counted")
        requests = entry["requests"]
        counted_cost = (cost_between(entry["target"], *counted)
                        if counted is not None and requests > 0 else None)
        held = sorted({g for p in mine for g in p.get("gpus") or []})
        utils = [gpus[g]["utilization"] for g in held
                 if isinstance((gpus.get(g) or {}).get("utilization"), int | float)]
        entry.update(
            cost=cost,
            cost_per_request=(counted_cost / requests if counted_cost is not None
                              else None),
            sm_share=sum(float(p.get("sm_share") or 0.0) for p in mine if p.get("gpus"))
            if held else None,
            gpu_utilization=sum(utils) / len(utils) if utils else None,
            processes=[process_key(p["pid"], p["start_time"]) for p in mine])
        spend["latency"].append(entry)
        for index, figures in recorded_windows(rows, start, end, size or span).items():
            bucket = buckets.get(index)
            if bucket is not None:
                bucket.setdefault("latency", []).append(
                    {"target": entry["target"], "metric": entry["metric"], **figures,
                     **_beside(bucket, entry["processes"])})


def _beside(bucket: Mapping[str, Any], keys: list[str]) -> dict[str, Any]:
    """What the target's processes did in a timeline window: their SM share (summed) and
    their stack samples per phase (summed), where the window has them (raw timelines)."""
    shares: list[float] = []
    phases: dict[str, int] = {}
    for key in keys:
        proc = (bucket.get("processes") or {}).get(key)
        if not isinstance(proc, Mapping):
            continue
        if isinstance(proc.get("sm_share"), int | float):
            shares.append(float(proc["sm_share"]))
        for phase, count in (proc.get("phases") or {}).items():
            phases[phase] = phases.get(phase, 0) + int(count)
    return {"sm_share": sum(shares) if shares else None, "phases": phases}


def _is_target(proc: Mapping[str, Any], target: str, labeler: JobLabeler) -> bool:
    """Whether a report's process is (part of) the target: its process id, its job label as
    the daemon gave it ([cost].jobs, else its workload or script), or one of its owner jobs."""
    if target == PROFILED_COMMAND or process_key(proc["pid"], proc["start_time"]) == target:
        return True
    found = proc.get("owner")
    owner: dict[str, str] = found if isinstance(found, dict) else {}
    if is_owner_job(target):
        return target in owner_jobs(owner)
    return labeler.label(str(proc.get("command") or ""), owner) == target


def _target_cost(spend: Mapping[str, Any], mine: list[dict[str, Any]],
                 target: str) -> float | None:
    """The target's dollars in the range: its job's or owner job's spend, else its
    processes' cost; None when nothing of it was priced."""
    for key in ("by_job", "by_owner"):
        value = (spend.get(key) or {}).get(target)
        if isinstance(value, int | float):
            return float(value)
    costs = [p["cost"] for p in mine if isinstance(p.get("cost"), int | float)]
    return float(sum(costs)) if costs else None



def target_text(target: object) -> str:
    """A histogram's target for a person: the profiled command says so, a job or process id
    as it is."""
    return "the command" if target == PROFILED_COMMAND else str(target)


__all__ = ["PROFILED_COMMAND", "cost_per_1k_text", "section", "target_text"]
