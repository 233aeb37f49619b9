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
from daemon.config import Config, format_duration
from daemon.sources.safe_text import one_line
from daemon.sources.sample import Sample
from pricing.grid import GridIntensity

TOP = 8  # jobs, namespaces and processes named in the text
WRAP_WIDTH = 118  # as daemon.commands.report's lists
GAP_NOTED_S = 300.0  # the text says how much of the window the samples covered past this gap


def report_grid(host: dict[str, Any], config: Config) -> GridIntensity:
    """The grid intensity for the report: [energy] of the config given, else the one the
    daemon recorded, else the recorded price's region's."""
    return recorded_grid(host, config.energy.grid_intensity_g_per_kwh, config.energy.region)


def section(document: dict[str, Any], samples: Sequence[Sample], start: float, end: float,
            max_gap_s: float, jobs: dict[str, str] | None, config: Config) -> None:
    """Sets document["carbon"] and each process's "energy" (None where it drew nothing), from
    the window's ticks as the report's cost pass read them."""
    grid = report_grid(document.get("host") or {}, config)
    meter, covered = window_meter(samples, JobLabeler(jobs).label, max_gap_s)
    by_process = meter.processes()
    for proc in document.get("processes") or []:
        found = by_process.get((proc["pid"], proc["start_time"]))
        proc["energy"] = None if found is None else {
            k: v for k, v in found.as_dict(grid).items() if k != "watts"}
    document["carbon"] = window_summary(meter, grid, covered, end - start)


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
        out.append(f"  (over {format_duration(round(covered))} of the window's "
                   f"{format_duration(round(span))}: the raw samples reach no further)")
    idle = carbon.get("host_idle") or {}
    if idle.get("joules"):
        out.append(f"  GPUs no process held: {amount_text(idle['kwh'], idle.get('co2e_grams'))}")
    for key in ("by_job", "by_namespace"):
        rows = sorted((carbon.get(key) or {}).items(), key=lambda item: -item[1]["joules"])
        if rows:
            out += _wrapped(f"  {key.replace('_', ' ')}: " + ", ".join(
                f"{one_line(str(name))[:40]} {amount_text(v['kwh'], v.get('co2e_grams'))}"
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
    keep = ("joules", "kwh", "co2e_grams", "grid", "host_idle", "covered_s", "span_s")
    out = {k: carbon.get(k) for k in keep}
    for key in ("by_job", "by_namespace"):
        joules = {k: v["joules"] for k, v in (carbon.get(key) or {}).items()}
        out[key] = {k: carbon[key][k] for k in bounded(joules, TOP) if k in carbon[key]}
    out["method"] = METHOD
    return out


def review_line(review: dict[str, Any]) -> list[str]:
    carbon = review.get("carbon") or {}
    if not carbon.get("joules"):
        return []
    jobs = sorted((carbon.get("by_job") or {}).items(), key=lambda item: -item[1]["joules"])
    line = (f"  energy used: {amount_text(carbon['kwh'], carbon.get('co2e_grams'))} "
            + grid_text(carbon.get("grid") or {}))
    if jobs:
        line += "; by job: " + ", ".join(
            f"{one_line(str(name))[:30]} {amount_text(v['kwh'], v.get('co2e_grams'))}"
            for name, v in jobs[:3])
    return [line]
