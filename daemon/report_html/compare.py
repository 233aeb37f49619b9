"""The HTML page of `mlcostd compare --html`: one self-contained page (the snapshot report's
CSS and phase bars; no script, no network) made from the compare document."""

from __future__ import annotations

from typing import Any

from daemon import __version__, clock
from daemon.analysis.compare import (
    INCONCLUSIVE,
    NOT_COUNTED_NOTE,
    change_text,
    figure_text,
    hardware_text,
    shown_verdict,
    verdict_counts,
)
from daemon.report_html.escape import escaped as _e
from daemon.report_html.render import CSS, phase_bar, phase_legend

VERDICT_COLOURS = {"better": "#16a34a", "worse": "#dc2626", "within noise": "#6b7280",
                   "mixed": "#ca8a04", "no figure": "#6b7280", "inconclusive": "#6b7280"}
TITLE = "<title>mlcost compare</title>"  # how `compare --html` tells its own page from others




def _side(name: str, side: dict[str, Any]) -> str:
    span = ""
    if isinstance(side.get("since"), int | float) and isinstance(side.get("until"), int | float):
        span = (f" — {_e(clock.local_time(side['since']))} to "
                f"{_e(clock.local_time(side['until']))}")
        if isinstance(side.get("recorded_from"), int | float):
            span += (f", recorded from {_e(clock.local_time(side['recorded_from']))}")
        if isinstance(side.get("recorded_until"), int | float):
            span += (f", recorded to {_e(clock.local_time(side['recorded_until']))} (the "
                     "recording stopped)")
    extra = f", {side['steps']} steps" if side.get("steps") else ""
    job = f", job <code>{_e(side['job'])}</code>" if side.get("job") else ""
    hardware = hardware_text(side)
    job += f", <span data-hardware>{_e(hardware)}</span>" if hardware else ""
    warned = "".join(f"<li data-warning=\"{_e(w.get('code'))}\">not representative: "
                     f"{_e(w.get('message') or w.get('code'))}</li>"
                     for w in side.get("warnings") or [] if isinstance(w, dict))
    return (f"<li><b>{name}</b>: <code>{_e(side.get('label'))}</code>{span}{extra}{job}"
            + (f"<ul class=warnings>{warned}</ul>" if warned else "") + "</li>")


def render(result: dict[str, Any]) -> str:
    """The page; every text that came from an input is escaped."""
    verdict = str(result.get("verdict"))
    rows = []
    for fig in result["figures"]:
        unit = fig["unit"]
        change = fig.get("change")
        shown = change_text(change, unit)
        noise = change_text(fig.get("noise"), unit, signed=False)
        noise = noise if noise == "-" else "± " + noise
        colour = (VERDICT_COLOURS.get(fig["verdict"], "#111")
                  if fig.get("in_overall", True) is not False else "#777")
        rows.append(f"<tr data-figure=\"{_e(fig['name'])}\"><td>{_e(fig['label'])}</td>"
                    f"<td class=num>{figure_text(fig['a'], unit)}</td>"
                    f"<td class=num>{figure_text(fig['b'], unit)}</td><td class=num>{shown}</td>"
                    f"<td class=num>{noise}</td><td style=\"color:{colour}\">"
                    f"{_e(shown_verdict(fig))}</td></tr>")
    note = (f"<p class=muted>{_e(NOT_COUNTED_NOTE)}</p>"
            if any(f.get("in_overall", True) is False for f in result["figures"]) else "")
    if result.get("price_note"):
        note += f"<p class=muted>price: {_e(result['price_note'])}</p>"
    for said in result.get("notes") or []:
        note += f"<p data-note>Note: {_e(said)}</p>"
    for why in sorted({str(f["why"]) for f in result["figures"]
                       if f.get("verdict") == INCONCLUSIVE and f.get("why")}):
        note += f"<p class=muted>{INCONCLUSIVE}: {_e(why)}</p>"
    phases = {side: {f["name"][6:]: f[side] or 0.0 for f in result["figures"]
                     if f["name"].startswith("phase.")} for side in ("a", "b")}
    drawn = [p for p in phases["a"] if phases["a"][p] > 0 or phases["b"][p] > 0]  # figures' order
    recs = "".join(
        f"<tr><td>{_e(r['status'])}</td><td><code>{_e(r['rule'])}</code></td>"
        f"<td class=num>{figure_text(r.get('savings_per_month_a'), '$')}</td>"
        f"<td class=num>{figure_text(r.get('savings_per_month_b'), '$')}</td>"
        f"<td>{_e(r.get('summary'))}</td></tr>" for r in result["recommendations"]) or (
        "<tr><td colspan=5 class=muted>none on either side</td></tr>")
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        f"style-src 'unsafe-inline'\">{TITLE}"
        f"<style>{CSS}</style></head><body>"
        f"<h1>mlcost compare: <span style=\"color:{VERDICT_COLOURS.get(verdict, '#111')}\">"
        f"{_e(verdict)}</span> <span class=muted>({_e(verdict_counts(result['figures']))})"
        f"</span></h1><ul class=facts>{_side('A (before)', result['a'])}"
        f"{_side('B (after)', result['b'])}</ul>"
        "<h2>Figures</h2><table><tr><th>figure</th><th>before</th><th>after</th>"
        f"<th>change</th><th>noise</th><th>verdict</th></tr>{''.join(rows)}</table>{note}"
        # each bar as wide as its half of the page (a fixed layout: a bar sized to its cell
        # gives a cell sized to its content nothing to go by)
        "<h2>Phase balance</h2><table style=\"table-layout:fixed\"><tr><th>before</th>"
        f"<th>after</th></tr><tr><td>{phase_bar(phases['a'], fill=True)}</td>"
        f"<td>{phase_bar(phases['b'], fill=True)}</td></tr></table>"
        f"{phase_legend(drawn)}"
        "<h2>Recommendations</h2><table><tr><th>status</th><th>rule</th><th>before $/month"
        f"</th><th>after $/month</th><th>summary</th></tr>{recs}</table>"
        f"<p class=muted>{_e(result.get('method'))}. mlcost {_e(__version__)}.</p>"
        "</body></html>\n")
