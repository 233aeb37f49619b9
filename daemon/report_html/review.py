"""The review a team signs off as one self-contained HTML page (`mlcostd report --html FILE`):
spend per day (an SVG bar chart) and per month with the trend on the period before, spend by
kind, job and user, unit costs, storage, waste, energy, and the recommendations acted on,
snoozed or ignored. Made from the report document (daemon.commands.report.build), so the page,
the text and `--json` say the same.

Inline CSS and SVG only; the Content-Security-Policy forbids scripts and any fetch; every text
that came from the host is HTML-escaped.
"""

from __future__ import annotations

from typing import Any

from daemon import __version__, clock
from daemon.analysis.energy import amount_text
from daemon.analysis.recommendations_at import evidence_note, money_text, potential_lines
from daemon.report_html import latency
from daemon.report_html.escape import STACK_CSS, breakable
from daemon.report_html.escape import escaped as _e
from daemon.wire import money

# (every table stays inside the screen: a name, a path or a sentence wraps anywhere, a figure
# only at its spaces, so at 390 px no dollar is cut at the edge and the page never scrolls
# sideways: probe 157 M3 read "$0." and a one-word-wide energy column)
CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1300px;color:#111;
padding:0 16px}h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
h1,p{overflow-wrap:anywhere}
table{border-collapse:collapse;margin:6px 0;max-width:100%}td,th{padding:3px 10px;text-align:left;
border-bottom:1px solid #eee;vertical-align:top;overflow-wrap:anywhere}
th{overflow-wrap:normal}td.n{text-align:right;font-variant-numeric:tabular-nums;
overflow-wrap:normal}span.pct{white-space:nowrap}td.w{overflow-wrap:normal}
.up{color:#b91c1c}.down{color:#15803d}.muted{color:#6b7280}svg{display:block}
@media (max-width:640px){body{margin:12px auto;padding:0 8px}td,th{padding:3px 5px}
svg.few{overflow:visible;margin-top:12px}svg.few text{font-size:26px}
table.recs tr{display:grid;grid-template-columns:auto 1fr;column-gap:8px;
border-bottom:1px solid #eee;padding:3px 0}table.recs tr:first-child{display:none}
table.recs td{border:0;padding:1px 5px}table.recs td.n{text-align:left}
table.recs td:nth-child(n+3){grid-column:1/-1}}"""




def _trend(pct: float | None) -> str:
    if pct is None:
        return '<span class="muted">-</span>'
    css = "up" if pct > 0 else "down" if pct < 0 else "muted"
    return f'<span class="{css} pct">{pct:+.1f}%</span>'


def _bars(by_day: dict[str, float]) -> str:
    """Spend per UTC day as SVG bars, one per day, the tallest the most spent; each bar at
    most a fourteenth of the width (one day is a bar, not a block) and, up to 31 days, its
    date under it and its dollars over it."""
    if not by_day:
        return ""
    width, height, pad = 1200, 160, 20
    top = max(by_day.values()) or 1.0
    step = (width - 2 * pad) / max(len(by_day), 14)
    bars = []
    for i, (day, value) in enumerate(by_day.items()):
        h = (height - 2 * pad) * value / top
        bars.append(f'<rect x="{pad + i * step:.1f}" y="{height - pad - h:.1f}" '
                    f'width="{max(step - 2, 1):.1f}" height="{h:.1f}" fill="#2563eb">'
                    f"<title>{_e(day)} {_e(money(value))}</title></rect>")
        if len(by_day) <= 31:  # its date under it and its dollars over it (a bar alone
            # said only which day spent more: the page had no axis)
            middle = pad + i * step + step / 2
            bars.append(f'<text x="{middle:.1f}" y="{height - 4}" '
                        f'font-size="11" text-anchor="middle" fill="#555">{_e(day[5:])}'
                        "</text>")
            bars.append(f'<text class="value" x="{middle:.1f}" y="{height - pad - h - 4:.1f}" '
                        f'font-size="11" text-anchor="middle" fill="#111">'
                        f"{_e(money(value, whole_from=100))}</text>")
    # (up to 14 bars, class "few": on a phone their date and dollars are 26 units, ~8 px, not
    # 11, ~3.5 px; more bars have no room for them: probe 157 L2)
    few = " few" if len(by_day) <= 14 else ""
    return (f'<svg class="chart{few}" data-chart="spend_by_day" data-bars="{len(by_day)}" '
            f'viewBox="0 0 {width} {height}" width="100%">{"".join(bars)}</svg>')


def _unit_row(unit: dict[str, Any]) -> str:
    cost, before = unit.get("unit_cost"), unit.get("previous_unit_cost")
    return (f"<tr><td>{breakable(unit['target'])}</td>"
            f"<td class=n>{_e('-' if cost is None else f'${cost:,.4f}')}</td>"
            f"<td class=w>{_e(format(unit['per'], 'g'))} {_e(unit['unit'])}</td>"
            f"<td class=n>{_e('-' if before is None else f'${before:,.4f}')}</td>"
            f"<td>{_trend(unit.get('trend_pct'))}</td></tr>")


def _carbon_rows(carbon: dict[str, Any]) -> str:
    """Energy used and its carbon (daemon.commands.report_energy), overall and by job."""
    if not carbon.get("joules"):
        return ""
    grid = carbon.get("grid") or {}

    def amount(figure: dict[str, Any]) -> str:  # (as the text says it: 0.71 g read "0.001 kg")
        return amount_text(figure["kwh"], figure.get("co2e_grams"))

    how = (f"{grid['g_per_kwh']:g} g CO2e/kWh: " if grid.get("g_per_kwh") is not None
           else "") + str(grid.get("source") or "")
    # (the grid's source under the figure, the whole row wide: beside it, it took the width the
    # job names and figures need on a phone)
    rows = [f"<tr><th>energy used</th><td class=n>{_e(amount(carbon))}</td><td></td></tr>",
            f'<tr><td colspan=3 class="muted">{_e(how)}</td></tr>']
    rows += [f"<tr><th>job {breakable(name)}</th><td class=n>{_e(amount(figure))}</td>"
             "<td></td></tr>"
             for name, figure in sorted((carbon.get("by_job") or {}).items(),
                                        key=lambda item: -item[1]["joules"])]
    return "".join(rows)


def render(document: dict[str, Any]) -> str:
    """The page of a report document's review (its `review` key)."""
    review = document.get("review") or {}
    host = document.get("host") or {}
    title = f"mlcost review: {host.get('hostname', '?')}"
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
           "style-src 'unsafe-inline'; img-src data:\">",
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           '<link rel="icon" href="data:,">',
           f"<title>{_e(title)}</title><style>{CSS}{STACK_CSS}</style></head><body>",
           f"<h1>{_e(title)}</h1>"]
    if review.get("since") is not None:
        span = clock.duration(review["until"] - review["since"])
        out.append(f"<p>{_e(clock.local_time(review['since'], seconds=False))} to "
                   f"{_e(clock.local_time(review['until'], seconds=False))} "
                   f"({_e(clock.local_zone(review['until']))}; {_e(span)}), against the "
                   f"{_e(span)} before.</p>")
    spend = review.get("spend")
    if not spend or spend.get("total") is None:  # (no recorded spend: its keys are null)
        out.append("<p>No recorded spend in this range: the store was written by an mlcostd "
                   "that did not record its hour spend, or nothing was recorded then.</p>")
    else:
        out.append("<h2>Spend</h2><table>"
                   f"<tr><th>this period</th><td class=n>{_e(money(spend['total']))}</td></tr>"
                   f"<tr><th>per day</th><td class=n>{_e(money(spend['per_day']))}"
                   + (f" <span class=muted>{_e(spend['per_day_basis'])}</span>"
                      if spend.get("per_day_basis") else "") + "</td></tr>"
                   f"<tr><th>the period before</th><td class=n>"
                   f"{_e(money(spend.get('previous_total')))}</td></tr>"
                   f"<tr><th>trend</th><td class=n>{_trend(spend.get('trend_pct'))}"
                   + (f" <span class=muted>({_e(untrended)})</span>"
                      if (untrended := (review.get("previous") or {}).get("trend")) else "")
                   + "</td></tr>"
                   "</table>")
        # (money is booked to UTC days and months, as the text's "by day (UTC)" and the
        # clouds' bills: a reader in New York put every evening on the wrong date, probe 157 M4)
        if spend.get("by_day"):
            out.append('<p class="muted" id="by-day">spend by day (UTC)</p>')
        out.append(_bars(spend.get("by_day") or {}))
        out.append("<table><tr><th>month (UTC)</th><th>spend</th></tr>" + "".join(
            f"<tr><td>{_e(m)}</td><td class=n>{_e(money(v))}</td></tr>"
            for m, v in (spend.get("by_month") or {}).items()) + "</table>")
        waste = review.get("waste") or {}
        storage = review.get("storage") or {}
        energy = review.get("energy") or {}
        share = waste.get("wasted_share")
        # (in the text's words: "waste: $3.79 of GPU time paid and unused (69% of spend), $1.39
        # with no process"; "paid GPU time unused" beside the snapshot chart's "unused" named
        # two figures, and the share was left out: probe 157 M5, L7)
        out.append("<h2>Waste, storage, energy</h2><table>"
                   f"<tr><th>waste: GPU time paid and unused</th><td class=n>"
                   f"{_e(money(waste.get('wasted')))}"
                   + ("" if not isinstance(share, int | float) else
                      f" <span class=muted>({share:.0%} of spend)</span>")
                   + f"</td><td>{_trend(waste.get('trend_pct'))}</td></tr>"
                   f"<tr><th>spent with no process (GPUs no process held)</th><td class=n>"
                   f"{_e(money(waste.get('idle')))}</td><td></td></tr>"
                   f"<tr><th>storage</th><td class=n>{_e(money(storage.get('cost')))}</td>"
                   "<td></td></tr>"
                   # (its dollars where [instance].electricity_per_kwh prices it; "energy -"
                   # beside "energy used" read as if none was used)
                   + ("" if energy.get("cost") is None else
                      f"<tr><th>energy</th><td class=n>{_e(money(energy.get('cost')))}</td>"
                      "<td></td></tr>") + _carbon_rows(review.get("carbon") or {}) + "</table>")
        for key, rows in (review.get("by") or {}).items():
            out.append(f"<h2>By {_e(key)}</h2><table><tr><th>{_e(key)}</th><th>spend</th>"
                       "<th>before</th><th>trend</th></tr>" + "".join(
                           f"<tr><td>{breakable(r['name'])}</td><td class=n>"
                           f"{_e(money(r['cost']))}"
                           f"</td><td class=n>{_e(money(r.get('previous')))}</td><td>"
                           f"{_trend(r.get('trend_pct'))}</td></tr>" for r in rows)
                       + "</table>")
        units = review.get("unit_costs") or []
        if units:
            out.append("<h2>Unit costs</h2><table><tr><th>of</th><th>cost</th><th>per</th>"
                       "<th>before</th><th>trend</th></tr>"
                       + "".join(_unit_row(u) for u in units) + "</table>")
    out.append(latency.table((document.get("spend") or {}).get("latency") or []))
    outcomes = review.get("recommendations") or {}
    rows = []
    for state in ("acted", "snoozed", "ignored", "new"):
        for rec in outcomes.get(state) or []:
            detail = (rec.get("outcome") if state == "acted" else
                      clock.local_time(rec["snoozed_until"]) if state == "snoozed" else "")
            rows.append((state, rec, detail))
    # the detail column (an action's outcome, a snooze's end) only where a row has one: a
    # review of new recommendations alone had it empty all the way down (probe 149 L5)
    details = any(detail for _, _, detail in rows)
    # Each one's dollars as the report's Recommendations section says them (combined after the
    # ones before it, and alone) and, above them, the potential figure beside the host's bill:
    # two standalone rows of $727 and $734 on a $734/month host read as $1,461 (probe 157 M1).
    listed = {str(r.get("id")): r for r in document.get("recommendations") or []}
    out.append("<h2>Recommendations</h2>")
    potential = potential_lines(document.get("savings")) if rows else []
    if potential:
        out.append(f'<p id="savings"><b>{_e(potential[0])}</b>'
                   + "".join(f"<br>{_e(line)}" for line in potential[1:])
                   + '<br><span class="muted">savings are upper bounds; combined: each after '
                   "the ones before it</span></p>")
    # (on a phone each row is its state and dollars on a line, its text the screen wide under
    # them: in columns the text was cut at the right edge, probe 157 M3)
    out.append('<table class="recs"><tr><th>state</th><th>savings</th>'
               "<th>recommendation</th>" + ("<th>detail</th>" if details else "") + "</tr>")
    for state, rec, detail in rows:
        shown = listed.get(str(rec.get("id")), rec)
        out.append(f"<tr><td>{_e(state)}</td><td class=n>"
                   f"{_e(money_text(shown) + evidence_note(shown))}"
                   f"</td><td>{_e(rec.get('summary') or rec.get('id'))}</td>"
                   + (f"<td>{_e(detail)}</td>" if details else "") + "</tr>")
    out.append("</table>")
    out.append(f'<p class="muted">mlcost {_e(__version__)}</p></body></html>')
    return "\n".join(out) + "\n"
