"""The serving latency table of the HTML pages ([[cost.latency]]; built by
daemon.analysis.latency_report): the report's page and a snapshot's or profile's page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from daemon import clock
from daemon.analysis.latency_report import cost_per_1k_text, target_text
from daemon.report_html.escape import labelled
from daemon.sources.safe_text import one_line


def table(entries: Sequence[Mapping[str, Any]]) -> str:
    """The latency table: per histogram p50/p99 over the page's range, requests, the target's
    SM share and GPU utilization, cost per request ('' without a histogram)."""
    if not entries:
        return ""
    rows = []
    for entry in entries:
        sm, util = entry.get("sm_share"), entry.get("gpu_utilization")
        cells = [
            f"<td>{escape(one_line(target_text(entry.get('target'))))}</td>",
            f"<td class=n>{escape(clock.latency_text(entry.get('p50_seconds')))}</td>",
            f"<td class=n>{escape(clock.latency_text(entry.get('p99_seconds')))}</td>",
            f"<td class=n>{entry.get('requests') or 0:,.0f}</td>",
            f"<td class=n>{'-' if sm is None else f'{sm:.0f}%'}</td>",
            f"<td class=n>{'-' if util is None else f'{util:.0f}%'}</td>",
            f"<td class=n>{escape(cost_per_1k_text(entry.get('cost_per_request')))}</td>",
            f"<td>{escape(one_line(str(entry.get('error') or '')))}</td>"]
        # (on a phone a line per column, its name before it: escape.STACK_CSS)
        rows.append("<tr>" + "".join(labelled(cell, name) if name else cell
                                     for cell, name in zip(cells, HEADER, strict=True)) + "</tr>")
    return ('<h2 id="latency">Serving latency</h2><table data-table="latency" class="stack">'
            '<tr class="head">' + "".join(f"<th>{name}</th>" for name in HEADER) + "</tr>"
            + "".join(rows) + "</table>")


HEADER = ("target", "p50", "p99", "requests", "SM share", "GPU utilization", "cost per request",
          "")
