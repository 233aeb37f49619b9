"""The report's serving latency as text (daemon.analysis.latency_report builds it): per
histogram p50/p99 over the range beside its target's utilization and cost per request, then
its windows, in the report's text after the phase balance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daemon import clock
from daemon.analysis.latency_report import cost_per_1k_text, target_text
from daemon.sources.safe_text import one_line

TARGET_CHARS = 40  # of a target's name in text
WINDOWS_SHOWN = 12  # the last windows of the timeline, in text


def render_text(report: Mapping[str, Any]) -> list[str]:
    """The report's latency lines: per histogram p50/p99 over the range beside the target's
    utilization and cost per request, then the windows where p99 swung."""
    entries = (report.get("spend") or {}).get("latency") or []
    if not entries:
        return []
    out = ["", "Serving latency ([[cost.latency]]; quantiles over the range's requests)"]
    for entry in entries:
        target = one_line(target_text(entry.get("target")))[:TARGET_CHARS]
        if entry.get("error"):
            out.append(f"  {target}: {one_line(str(entry['error']))[:120]}")
            continue
        sm, util = entry.get("sm_share"), entry.get("gpu_utilization")
        out.append(f"  {target}: p50 {clock.latency_text(entry.get('p50_seconds'))}, p99 "
                   f"{clock.latency_text(entry.get('p99_seconds'))} over "
                   f"{entry.get('requests', 0):,.0f} requests; "
                   + (f"SM {sm:.0f}%" if isinstance(sm, int | float) else "SM -")
                   + (f" of GPUs at {util:.0f}%" if isinstance(util, int | float) else "")
                   + f"; {cost_per_1k_text(entry.get('cost_per_request'))}")
    windows = [(b["ts"], w) for b in (report.get("timeline") or {}).get("buckets") or []
               for w in b.get("latency") or []]
    if len(windows) > 1:
        out.append("  by window (p50 / p99, requests; the target's SM share and phases then):")
        for ts, w in windows[-WINDOWS_SHOWN:]:
            sm, phases = w.get("sm_share"), w.get("phases") or {}
            out.append(f"    {clock.local_time(ts, date=False)} "
                       f"{one_line(target_text(w['target']))[:TARGET_CHARS]}: "
                       f"{clock.latency_text(w['p50_seconds'])} / "
                       f"{clock.latency_text(w['p99_seconds'])}, {w['requests']:,.0f}"
                       + (f"; SM {sm:.0f}%" if isinstance(sm, int | float) else "")
                       + _phases_text(phases))
    return out


def _phases_text(phases: Mapping[str, int]) -> str:
    """'; compute 75%, data_wait 25%' from a window's stack samples per phase ('' without)."""
    total = sum(phases.values())
    if total <= 0:
        return ""
    return "; " + ", ".join(f"{one_line(str(phase))[:20]} {count / total:.0%}" for phase, count
                            in sorted(phases.items(), key=lambda item: -item[1])[:3])
