"""The report's energy and carbon (daemon.analysis.energy over the window's recorded samples):
kWh and grams CO2e per process, job and namespace, the host's idle line, the grid intensity
used and its source; in the text, the JSON and the review (text and HTML).

The samples are the ones the report's cost reads (every tick of a short window, an even spread
of a long one, each charged for its share); where the raw samples reach back less far than the
window (older than [store].raw_retention), the figures cover what they reach, and say so.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from daemon.analysis.energy import (
    METHOD,
    amount_text,
    bounded,
    grid_text,
    recorded_grid,
    window_meter,
    window_summary,
)
from daemon.analysis.ledger import JobLabeler
from daemon.config import Config
from daemon.sources.safe_text import one_line
from daemon.sources.sample import Sample
from daemon.wire import crop
from pricing.grid import GridIntensity

TOP = 8  # jobs, namespaces and processes named in the text
WRAP_WIDTH = 118  # as daemon.commands.report's lists
GAP_NOTED_S = 300.0  # the text says how much of the window the samples covered past this gap


def report_grid(host: dict[str, Any], config: Config) -> GridIntensity:
    """The grid intensity for the report: [energy] of the config given, else the one the
    daemon recorded, else the recorded price's region's."""
    return recorded_grid(host, config.energy.grid_intensity_g_per_kwh, config.energy.region)


def section(document: dict[str, Any], samples: Sequence[Sample], start: float, end: float,
            max_gap_s: float, jobs: dict[str, str] | None, config: Config,
            rollup_interval: float | None = None, run_starts: Sequence[float] = (),
            gap_ends: frozenset[int] = frozenset(), before: float | None = None) -> None:
    """Sets document["carbon"] and each process's "energy" (None where it drew nothing), from
    the window's ticks as the report's cost pass read them (`gap_ends`, `before`: as it
    charged them, energy.window_meter). `rollup_interval`: the window's GPU
    figures came from the rollups (a range past raw retention), so carbon["whole_window"] also
    gives all GPUs' energy over the whole window from their mean power there."""
    grid = report_grid(document.get("host") or {}, config)
    meter, covered = window_meter(samples, JobLabeler(jobs).label, max_gap_s, run_starts,
                                  gap_ends, before)
    by_process = meter.processes()
    for proc in document.get("processes") or []:
        found = by_process.get((proc["pid"], proc["start_time"]))
        proc["energy"] = None if found is None else {
            k: v for k, v in found.as_dict(grid).items() if k != "watts"}
    document["carbon"] = window_summary(meter, grid, covered, end - start)
    if rollup_interval is not None:
        document["carbon"]["whole_window"] = whole_window(document.get("gpus") or [],
                                                          rollup_interval, end - start, grid)


def whole_window(gpus: Sequence[dict[str, Any]], interval: float, span_s: float,
                 grid: GridIntensity) -> dict[str, Any] | None:
    """All GPUs' energy over a window from the rollups: each GPU's mean power times the time
    it was recorded (its samples x the tick interval, at most the window). The split by process
    needs raw ticks; this total does not. None when no GPU's power was recorded."""
    joules, covered = 0.0, 0.0
    for gpu in gpus:
        power = gpu.get("power_watts")
        if isinstance(power, int | float) and power >= 0:
            seconds = min(span_s, float(gpu.get("samples") or 0) * interval)
            joules += power * seconds
            covered = max(covered, seconds)
    if not covered:
        return None
    return {"joules": joules, "kwh": joules / 3.6e6, "co2e_grams": grid.grams(joules),
            "covered_s": covered, "source": "rollups: each GPU's mean power"}


def _about(seconds: float) -> str:
    """A span as a person reads it: '45 s', '30 min', '2.0 h', '30.0 d'."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _wrapped(line: str) -> list[str]:
    """A long list wraps inside the report's 120 columns (as its other lists do)."""
    return textwrap.wrap(line, WRAP_WIDTH, initial_indent="", subsequent_indent="    ")


def text_lines(document: dict[str, Any]) -> list[str]:
    """The report's energy and carbon lines (empty when no GPU power was recorded)."""
    carbon = document.get("carbon")
    if not carbon or not carbon.get("joules"):
        return []
    out = _wrapped(f"energy used: {amount_text(carbon['kwh'], carbon.get('co2e_grams'))} "
                   + grid_text(carbon.get("grid") or {}))
    covered, span = carbon.get("covered_s") or 0.0, carbon.get("span_s") or 0.0
    if span - covered > max(0.1 * span, GAP_NOTED_S):
        out.append(f"  (over {_about(covered)} of the window's {_about(span)}: the raw samples "
                   "reach no further)")
        whole = carbon.get("whole_window")
        if whole and whole.get("covered_s", 0.0) > covered:
            out.append(f"  all GPUs over {_about(whole['covered_s'])} from the "
                       f"rollups' mean power: {amount_text(whole['kwh'], whole.get('co2e_grams'))}"
                       " (no split by process)")
    idle = carbon.get("host_idle") or {}
    if idle.get("joules"):
        out.append(f"  GPUs no process held: {amount_text(idle['kwh'], idle.get('co2e_grams'))}")
    for key in ("by_job", "by_namespace"):
        rows = sorted((carbon.get(key) or {}).items(), key=lambda item: -item[1]["joules"])
        if rows:
            out += _wrapped(f"  {key.replace('_', ' ')}: " + ", ".join(
                f"{crop(one_line(str(name)), 60)} {amount_text(v['kwh'], v.get('co2e_grams'))}"
                for name, v in rows[:TOP]))
    procs = sorted((p for p in document.get("processes") or [] if p.get("energy")),
                   key=lambda p: -p["energy"]["joules"])
    if procs:
        out += _wrapped("  by process: " + ", ".join(
            f"{p['pid']} {amount_text(p['energy']['kwh'], p['energy'].get('co2e_grams'))}"
            for p in procs[:TOP]))
    return out


def review_entry(carbon: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the review keeps of it: totals, the grid, the largest jobs and namespaces."""
    if not carbon:
        return None
    keep = ("joules", "kwh", "co2e_grams", "grid", "host_idle", "covered_s", "span_s",
            "whole_window")
    out = {k: carbon.get(k) for k in keep}
    for key in ("by_job", "by_namespace"):
        joules = {k: v["joules"] for k, v in (carbon.get(key) or {}).items()}
        out[key] = {k: carbon[key][k] for k in bounded(joules, TOP) if k in carbon[key]}
    out["method"] = METHOD
    return out


def review_line(review: dict[str, Any], width: int | None = None) -> list[str]:
    """The review's energy line; job names cut for a terminal (`width`), whole for a file."""
    carbon = review.get("carbon") or {}
    if not carbon.get("joules"):
        return []
    jobs = sorted((carbon.get("by_job") or {}).items(), key=lambda item: -item[1]["joules"])
    line = (f"  energy used: {amount_text(carbon['kwh'], carbon.get('co2e_grams'))} "
            + grid_text(carbon.get("grid") or {}))
    if jobs:
        line += "; by job: " + ", ".join(
            f"{crop(one_line(str(name)), 40) if width else one_line(str(name))} {amount_text(v['kwh'], v.get('co2e_grams'))}"
            for name, v in jobs[:3])
    whole = carbon.get("whole_window") or {}
    if whole.get("covered_s", 0.0) > (carbon.get("covered_s") or 0.0) and whole.get("kwh"):
        return [line, f"    (by process over {_about(carbon.get('covered_s') or 0.0)} of raw "
                      f"samples; all GPUs over {_about(whole['covered_s'])} from the rollups: "
                      f"{amount_text(whole['kwh'], whole.get('co2e_grams'))})"]
    return [line]
