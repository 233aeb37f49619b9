"""The details screen's kind section: a process's workload kind (daemon.analysis.kinds) with how
sure, where it came from (observed, a config override, or the kind history a replay reads) and
its evidence; and, for an inference process, its inference audit (daemon.analysis.inference_audit:
runtime stack, quantization, batching, and each piece of advice with its saving and how sure).

One function, called once by the details screen, so the section stays apart from the rest of
that screen. Every string in it came through daemon.wire (sanitized there)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

from daemon.wire import Process
from mlcost_tui import format as fmt
from mlcost_tui.thresholds import MUTED

# kind_source on the wire -> what it means to the reader
SOURCES = {"observed": "observed (classified from what the process shows)",
           "config": "config override ([kinds.jobs] sets it for this job)"}
MAX_EVIDENCE = 8  # lines of kind evidence and of each audit list shown
MAX_ADVICE = 4


def kind_section(p: Process, *, recorded: bool = False) -> Text:
    """The kind and, for an inference process, its audit. `recorded`: the process comes from
    a recording (replay), whose kind is the kind history's at the tick shown."""
    text = Text()
    if not p.kind:
        return text
    text.append("Kind ", style="bold")
    sure = f" ({p.kind_confidence:.0%} sure)" if p.kind_confidence is not None else ""
    text.append(f"{p.kind}{sure}")
    if p.serves:
        text.append("  serves: never offered SIGTERM", style=MUTED)
    text.append("\n")
    source = SOURCES.get(p.kind_source or "", p.kind_source or "not said")
    if recorded:
        source = f"history (the kind recorded at this tick), {source}"
    text.append("  source ", style=MUTED)
    text.append(source + "\n")
    for why in p.kind_evidence[:MAX_EVIDENCE]:
        text.append(f"  {why}\n", style=MUTED)
    if len(p.kind_evidence) > MAX_EVIDENCE:
        text.append(f"  … {len(p.kind_evidence) - MAX_EVIDENCE} more\n", style=MUTED)
    if p.inference:
        text.append_text(audit_lines(p.inference))
    return text


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _pct(value: Any) -> str:
    return f"{value:.1f}%" if isinstance(value, int | float) else "-"


def audit_lines(audit: Mapping[str, Any]) -> Text:
    """The inference audit: runtime, quantization, batching, advice."""
    text = Text()
    text.append("Inference audit\n", style="bold")
    runtime = audit.get("runtime") if isinstance(audit.get("runtime"), str) else "unknown"
    text.append("  runtime       ", style=MUTED)
    text.append(f"{runtime}\n")
    for why in _strings(audit.get("runtime_evidence"))[:MAX_EVIDENCE]:
        text.append(f"                {why}\n", style=MUTED)
    quantization = _strings(audit.get("quantization"))
    text.append("  quantization  ", style=MUTED)
    text.append((", ".join(quantization) or "none seen") + "\n")
    for why in _strings(audit.get("quantization_evidence"))[:MAX_EVIDENCE]:
        text.append(f"                {why}\n", style=MUTED)
    found = audit.get("batching")
    batching: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    readings, working = batching.get("sm_readings"), batching.get("sm_readings_at_work")
    text.append("  batching      ", style=MUTED)
    text.append(f"SM share at load {_pct(batching.get('sm_share_at_load'))} "
                f"(mean {_pct(batching.get('sm_share_mean'))}"
                + (f", at work in {working} of {readings} readings"
                   if isinstance(readings, int) and isinstance(working, int)
                   and working < readings else
                   f", {readings} readings" if isinstance(readings, int) else "") + ")\n")
    per_kernel = batching.get("requests_per_kernel")
    text.append("                requests per kernel: ", style=MUTED)
    text.append(f"{per_kernel:g}\n" if isinstance(per_kernel, int | float) else
                f"{batching.get('requests_per_kernel_note') or 'not measured'}\n",
                style="" if isinstance(per_kernel, int | float) else MUTED)
    advice = [a for a in audit.get("advice") or [] if isinstance(a, Mapping)]
    if not advice:
        text.append("  advice        none: nothing seen that a change would save\n",
                    style=MUTED)
    for item in advice[:MAX_ADVICE]:
        monthly = item.get("saving_per_month")
        text.append("  ")
        # 0 is what an advice whose saving is not estimated yet carries: not "$0.00"
        text.append(f"{fmt.money(monthly)}/month" if isinstance(monthly, int | float)
                    and monthly > 0 else "saving not estimated", style="bold green")
        text.append(f"  {item.get('name') or '?'}: {item.get('text') or ''}\n")
        for why in _strings(item.get("evidence"))[:MAX_EVIDENCE]:
            text.append(f"      {why}\n", style=MUTED)
        if item.get("saving_method"):
            text.append(f"      saving: {item['saving_method']}\n", style=MUTED)
        if item.get("uncertainty"):
            text.append(f"      how sure: {item['uncertainty']}\n", style=MUTED)
    return text
