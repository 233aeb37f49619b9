"""The HTML report: one self-contained page (inline CSS and SVG, no script, no font, no network)
made from a `ReportData`.

Every text that came from the host (command lines, file names, users, rule texts) is
HTML-escaped; the page's Content-Security-Policy also forbids scripts and any fetch, so even a
missed escape could not run or load anything. Charts are SVG drawn here: each chart is
`<svg class="chart" data-chart=NAME data-series=N>` with one `<polyline class="series"
data-points=K>` per series, which the browser test counts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from daemon import __version__, clock
from daemon.analysis.energy import amount_text, grid_text
from daemon.analysis.recommendations_at import evidence_note, money_text, potential_lines
from daemon.report_html import latency
from daemon.report_html.data import Point, ReportData
from daemon.report_html.escape import STACK_CSS, breakable, labelled
from daemon.report_html.escape import escaped as _e
from daemon.sources.safe_text import one_line
from daemon.store.schema import ended_by_recording_stop
from daemon.wire import (
    CHECKPOINT,
    COMM,
    COMPUTE,
    DATA_WAIT,
    EVAL,
    HOST_PREPROCESS,
    IDLE,
    LOW_CONFIDENCE,
    LOW_CONFIDENCE_MARK,
    OUTPUT,
    SYNC,
    UNKNOWN,
    money,
)

WIDTH, HEIGHT = 880, 220
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 12, 14, 26
PALETTE = ("#2563eb", "#dc2626", "#9ca3af", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
           "#ca8a04", "#db2777", "#4b5563")
PHASE_COLORS = {COMPUTE: "#16a34a", DATA_WAIT: "#dc2626", HOST_PREPROCESS: "#ea580c",
                CHECKPOINT: "#9333ea", OUTPUT: "#a16207", EVAL: "#0891b2", SYNC: "#ca8a04",
                COMM: "#db2777", IDLE: "#9ca3af", UNKNOWN: "#4b5563"}
# The burn chart's series in the words of the text report's burn line ("burn $32.77/h (wasted
# $22.54/h, no process $8.27/h)") and README: "unused" named the GPUs no process held here and
# the whole waste on the review page (probe 157 M5). (ReportData.burn keeps its keys.)
BURN_SERIES = {"unused $/h": "no process $/h"}
BURN_DASHES = ("", "8 5", "3 4")  # burn solid; wasted and no process dashed over it
BURN_WORDS = ('<p class="muted" id="burn-words">wasted: GPU time paid and unused (each GPU\'s '
              "price × its idle or unused part); no process: the GPUs no process held</p>")
COMMAND_CHARS = 160
ENERGY_ROWS = 8  # processes and jobs named in the energy block, the most kWh first

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px 24px;color:#111;
max-width:2400px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}
.facts{color:#444}.facts b{color:#111}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,520px),1fr));
gap:0 32px;align-items:start}
.grid>section{min-width:0}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:3px 6px;border-bottom:1px solid #eee;vertical-align:top}
th{background:#f6f6f6}td.num{text-align:right;white-space:nowrap}
code{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
div.table{overflow-x:auto}td>code{display:inline-block;min-width:16em}
.grid td>code{min-width:8em}
h1,.facts,.summary{overflow-wrap:anywhere}
svg.chart{width:100%;height:auto;background:#fcfcfc;border:1px solid #eee}
svg text{font:11px system-ui,sans-serif;fill:#555}
svg.phases.fill{display:block;width:100%;height:14px}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.legend i.dashed{width:16px;height:0;border-top:3px dashed}
@media (max-width:640px){svg.chart.lines{overflow:visible}svg.chart.lines text{font-size:24px}}
.trigger{background:#fff7ed;border:1px solid #fed7aa;padding:8px;margin:8px 0}
.summary{background:#f8fafc;border:1px solid #cbd5e1;padding:8px;margin:8px 0;white-space:pre-wrap}
.muted{color:#777}
td.rec{width:34%}td.evidence{width:52%}td.savings{text-align:right;min-width:7em}
ul.evidence{margin:4px 0;padding-left:18px}ul.evidence ul{padding-left:16px}
ul.evidence li{margin:1px 0}ul.evidence .k{color:#555}
"""




def _money(value: float | None, digits: int = 2) -> str:
    """Dollars as the page writes them (daemon.wire.money): to `digits` decimals, or to two
    significant digits where those would show less (a 10-second profile's $0.0022 is not
    $0.00); a dash when unknown."""
    return money(value, digits, significant=True, none="—")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} %"


def _time(ts: float | None) -> str:
    return "—" if ts is None else clock.local_time(ts)


def _event_end(event: dict[str, Any], snapshot: dict[str, Any] | None = None) -> str:
    """An event's end: its time, 'ongoing' (open at the end of a snapshot's range, in a
    snapshot's page: the recorder may have gone on), or when its recording stopped with it
    open."""
    if event["ended_at"] is None:
        return "open at the end of this snapshot" if snapshot else "ongoing"
    if ended_by_recording_stop(event):
        return f"{_time(event['ended_at'])} (open when the recording stopped)"
    return _time(event["ended_at"])


def _nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above `value` (an axis top)."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    return next(step * magnitude for step in (1, 2, 2.5, 5, 10) if step * magnitude >= value)


def _axis_label(value: float, unit: str) -> str:
    return f"${value:g}" if unit == "$" else f"{value:g}{unit}"


def line_chart(name: str, series: dict[str, list[Point]], since: float, until: float,
               unit: str, y_max: float | None = None, dashes: tuple[str, ...] = ()) -> str:
    """An SVG line chart of `series` (name -> (ts, value) points) over [since, until];
    `dashes`: each series' stroke-dasharray in order ('' solid), so a line drawn over another
    lets it show through (the legend draws each the same way)."""
    top = y_max if y_max is not None else _nice_max(max(
        (v for points in series.values() for _, v in points), default=0.0) * 1.05)
    span = max(until - since, 1e-9)
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(ts: float) -> float:
        return PAD_LEFT + (min(max(ts, since), until) - since) / span * plot_w

    def y(value: float) -> float:
        return PAD_TOP + plot_h - min(max(value, 0.0), top) / top * plot_h

    # (class "lines": on a phone its 11-unit labels shrank to ~4 px with the viewBox; there
    # they are 24 units, ~9 px, and may reach into the page's margin: probe 157 L2)
    parts = [f'<svg class="chart lines" data-chart="{_e(name)}" data-series="{len(series)}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_e(name)}" '
             'xmlns="http://www.w3.org/2000/svg">']
    for i in range(5):  # horizontal grid with the value scale
        value = top * i / 4
        parts.append(f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}" stroke="#e5e5e5"/>'
                     f'<text x="{PAD_LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                     f'{_e(_axis_label(value, unit))}</text>')
    parts += time_axis(since, until, x, HEIGHT - 8)
    for i, (label, points) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points if v is not None)
        dash = dashes[i] if i < len(dashes) else ""
        parts.append(f'<polyline class="series" data-series="{_e(label)}" '
                     f'data-points="{len(points)}" fill="none" stroke="{color}" '
                     f'stroke-width="{2.4 if dash else 1.6}"'
                     + (f' stroke-dasharray="{dash}"' if dash else "")
                     + f' points="{coords}"><title>{_e(label)}</title></polyline>')
    parts.append("</svg>")
    legend = "".join(
        f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{_e(label)}</span>'
        if not (i < len(dashes) and dashes[i]) else
        f'<span><i class="dashed" style="border-top-color:{PALETTE[i % len(PALETTE)]}"></i>'
        f"{_e(label)}</span>" for i, label in enumerate(series))
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def time_axis(since: float, until: float, x: Callable[[float], float], y: float) -> list[str]:
    """A chart's time labels: five across [since, until], each one that reads as the one
    before left out (a run of under a second, or none at all, would write one time over
    itself five times at one place)."""
    out, said = [], None
    for i in range(5):
        ts = since + max(until - since, 0.0) * i / 4
        text = clock.local_time(ts, date=False)
        if text == said:
            continue
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(f'<text x="{x(ts):.1f}" y="{y}" text-anchor="{anchor}">{_e(text)}</text>')
        said = text
    return out


TIMELINE_WIDTH, TIMELINE_LABEL_W = 1320, 250  # full page width: a wider viewBox, same text


def timeline(windows: list[dict[str, Any]], since: float, until: float) -> str:
    """Low-utilization windows: one row per process (labelled 'pid name', the raw key in its
    tooltip), one bar per window."""
    targets = sorted({w["target"] for w in windows})
    labels = {w["target"]: w.get("label") or w["target"] for w in windows}
    row_h = 18
    height = PAD_TOP + row_h * max(len(targets), 1) + PAD_BOTTOM
    span = max(until - since, 1e-9)
    left_w = TIMELINE_LABEL_W
    plot_w = TIMELINE_WIDTH - left_w - PAD_RIGHT

    def x(ts: float) -> float:
        return left_w + (min(max(ts, since), until) - since) / span * plot_w

    parts = [f'<svg class="chart" data-chart="windows" data-series="{len(targets)}" '
             f'viewBox="0 0 {TIMELINE_WIDTH} {height}" role="img" '
             'aria-label="low-utilization windows" '
             'xmlns="http://www.w3.org/2000/svg">']
    for row, target in enumerate(targets):
        top = PAD_TOP + row * row_h
        mine = [w for w in windows if w["target"] == target]
        parts.append(f'<text x="4" y="{top + 12}">{_e(labels[target])}'
                     f'<title>{_e(target)}</title></text>'
                     f'<g class="series" data-series="{_e(target)}" data-points="{len(mine)}">')
        for w in mine:
            left = x(w["started_at"])
            right = x(w["ended_at"] if w["ended_at"] is not None else until)
            parts.append(f'<rect class="window" x="{left:.1f}" y="{top + 2}" '
                         f'width="{max(right - left, 1.5):.1f}" height="{row_h - 5}" '
                         f'fill="#f59e0b"><title>{_e(_time(w["started_at"]))} – '
                         f'{_e(_time(w["ended_at"]))}</title></rect>')
        parts.append("</g>")
    parts += time_axis(since, until, x, height - 8)
    parts.append("</svg>")
    return "".join(parts)


def phase_color(phase: str) -> str:
    """A phase's colour, in its bars and their legends alike; grey for a phase this mlcost does
    not know (a document from a newer one)."""
    return PHASE_COLORS.get(phase, PHASE_COLORS[UNKNOWN])


def phase_legend(phases: Iterable[str]) -> str:
    """Which phase each colour of the phase bars is: a swatch and the phase's name each, in
    this order; '' for none."""
    items = "".join(f'<span data-legend="{_e(phase)}"><i style="background:'
                    f'{phase_color(phase)}"></i>{_e(phase)}</span>' for phase in phases)
    return f'<div class="legend">{items}</div>' if items else ""


def phase_bar(phases: dict[str, float], fill: bool = False) -> str:
    """A process's phase balance as one stacked bar (shares of its time), 200 px wide, or as
    wide as its box with `fill` (a column of its own: compare's before and after)."""
    size = ('class="phases fill" preserveAspectRatio="none"' if fill
            else 'class="phases" width="200" height="12"')
    parts = [f'<svg {size} viewBox="0 0 200 12" xmlns="http://www.w3.org/2000/svg">']
    left = 0.0
    for phase, share in sorted(phases.items(), key=lambda kv: -kv[1]):
        width = max(share, 0.0) * 200
        parts.append(f'<rect class="phase" data-phase="{_e(phase)}" x="{left:.1f}" y="0" '
                     f'width="{width:.1f}" height="12" '
                     f'fill="{phase_color(phase)}"><title>{_e(phase)} '
                     f'{share * 100:.0f} %</title></rect>')
        left += width
    parts.append("</svg>")
    return "".join(parts)


def _low_confidence(process: dict[str, Any]) -> str:
    """Said next to a phase balance read from /proc alone (no Python stacks)."""
    if process.get("phase_confidence") != LOW_CONFIDENCE:
        return ""
    return (f' <span class="muted" data-confidence="low">{LOW_CONFIDENCE_MARK} low confidence, '
            "from /proc, no stacks</span>")


def _table(header: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(labelled(cell, header[i]) if i < len(header) else cell
                                   for i, cell in enumerate(row))
                   + "</tr>" for row in rows)
    # (in a box of its own that scrolls sideways: on a narrow screen a command keeps a readable
    # width, where it was squeezed into a column a word wide and 25 lines tall; on a phone each
    # row stacks, a line per column that its name heads: escape.STACK_CSS)
    return (f'<div class="table"><table class="stack"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _td(value: Any, num: bool = False, code: bool = False, words: bool = False) -> str:
    """A cell of `value` (escaped); `words`: a long name (an event's kind, a process's label)
    may wrap after its `_`, `.`, `/` and `:` rather than widen its column past the page."""
    text = breakable(value) if words else _e(value)
    if code:
        text = f"<code>{text}</code>"
    return f'<td class="num">{text}</td>' if num else f"<td>{text}</td>"


def _short(command: str | None) -> str:
    text = command or ""
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 1] + "…"


EVIDENCE_ITEMS = 14  # keys shown per level
EVIDENCE_LIST_ITEMS = 6  # items shown of a list
EVIDENCE_DEPTH = 3
EVIDENCE_TEXT = 240
_TIME_KEYS = ("start", "end", "since", "until", "first_seen", "last_seen", "standing_since")
# (a key ending so is a clock time where its value is one: "watched since: 1,796,635,799" was
# an epoch with thousands separators, probe 157 L4)
_TIME_SUFFIXES = ("_at", "_times", "_time", "_since", "_until")
# Numbers that name something (a process, a port, a tick, a GPU, a line): written as they are,
# never with a thousands separator (pid 12,077 is no pid a person can look up).
_IDENTIFIER_KEYS = ("pid", "ppid", "port", "tick", "index", "line", "uid", "gid", "id",
                    "gpu", "device", "minor")
_MONEY_KEYS = ("price", "cost", "cost_so_far")
# Bounds of a price, money where they stand beside its per_hour (a spot price's low and high).
_PRICE_RANGE_KEYS = ("low", "high", "min", "max")


def _identifier(key: str) -> bool:
    return key in _IDENTIFIER_KEYS or key.endswith(("_pid", "_port", "_tick", "_index"))


def _kind(mapping: dict[str, Any], key: Any) -> str:
    """The key a value is formatted by: a price's low and high (beside its per_hour) are its
    range, dollars as the price is; any other value goes by its own key."""
    if key in _PRICE_RANGE_KEYS and ("per_hour" in mapping or "price" in mapping):
        return "price"
    return str(key)


def _number(key: str, value: float) -> str:
    """A figure as a person reads it: a time as a clock time, a share as a percent, bytes in
    GiB, money in dollars, an identifier (pid, port, tick) as it is, else three significant
    digits (never 16 of them)."""
    if isinstance(value, bool):
        return str(value).lower()
    if _identifier(key) and float(value).is_integer():
        return str(int(value))
    if (key in _TIME_KEYS or key.endswith(_TIME_SUFFIXES)) and value > 1e9:
        return clock.local_time(value)
    if key.endswith(("share", "fraction")) and 0 <= value <= 1:
        return f"{value:.0%}"
    if key.endswith("_bytes"):
        return f"{value / 2**30:.1f} GiB"
    if key.endswith("_per_s"):  # a rate, not seconds ("read bytes per s: 0 s", probe 157 L4)
        if key.endswith("bytes_per_s"):
            return f"{value / 2**20:.1f} MiB/s" if value >= 2**20 else f"{_plain(value)} B/s"
        return f"{_plain(value)}/s"
    if key.endswith(("per_hour", "_per_month", "_price", "_cost")) or key in _MONEY_KEYS:
        return _money(value)
    if key.endswith(("seconds", "_s")):
        return f"{value:,.0f} s" if abs(value) >= 10 else f"{value:.2g} s"
    if isinstance(value, int) or float(value).is_integer():
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return _plain(value)


def _plain(value: float) -> str:
    """Three significant digits, never in scientific notation ("cpu idle cores: 5.62e-05" read
    as a formula, probe 157 L4): 0.0000562; 1,234 for a large value."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    text = f"{value:.3g}"
    if "e" not in text or not math.isfinite(value):
        return text
    return f"{value:.{2 - math.floor(math.log10(abs(value)))}f}"


def _value(key: str, value: Any, depth: int) -> str:
    """One evidence value as HTML: a nested list for a mapping, a short list for a list."""
    if value is None:
        return '<span class="muted">—</span>'
    if isinstance(value, bool | int | float):
        return _e(_number(key, value))
    if isinstance(value, str):
        return _e(value if len(value) <= EVIDENCE_TEXT else value[:EVIDENCE_TEXT - 1] + "…")
    if isinstance(value, dict):
        if depth >= EVIDENCE_DEPTH:
            return f'<span class="muted">{len(value)} more fields</span>'
        return _evidence(value, depth + 1)
    if isinstance(value, list | tuple):
        items = list(value)
        more = len(items) - EVIDENCE_LIST_ITEMS
        tail = f' <span class="muted">… {more} more</span>' if more > 0 else ""
        shown = items[:EVIDENCE_LIST_ITEMS]
        if not shown:
            return '<span class="muted">none</span>'
        if all(not isinstance(v, dict | list | tuple) for v in shown):
            return ", ".join(_value(key, v, depth) for v in shown) + tail
        rows = "".join(f"<li>{_inline(v, depth) if isinstance(v, dict) else _value(key, v, depth)}"
                       "</li>" for v in shown)
        return f'<ul class="evidence">{rows}</ul>{tail}'
    return _e(str(value)[:EVIDENCE_TEXT])


def _inline(item: dict[str, Any], depth: int) -> str:
    """One item of a list (a GPU, a stack, an alternative) on one line: 'key value · ...'."""
    parts = [f'<span class="k">{_e(str(k).replace("_", " "))}</span> '
             f"{_value(_kind(item, k), v, EVIDENCE_DEPTH if isinstance(v, dict) else depth)}"
             for k, v in list(item.items())[:EVIDENCE_ITEMS]]
    return " · ".join(parts)


def _evidence(evidence: dict[str, Any], depth: int = 0) -> str:
    """A recommendation's evidence as a readable nested list (numbers rounded, times as clock
    times, shares as percents), never raw JSON."""
    items = []
    entries = list(evidence.items())
    for key, value in entries[:EVIDENCE_ITEMS]:
        items.append(f'<li><span class="k">{_e(str(key).replace("_", " "))}</span>: '
                     f"{_value(_kind(evidence, key), value, depth)}</li>")
    if len(entries) > EVIDENCE_ITEMS:
        items.append(f'<li class="muted">… {len(entries) - EVIDENCE_ITEMS} more</li>')
    return f'<ul class="evidence">{"".join(items)}</ul>' if items else ""


def energy_block(data: ReportData) -> str:
    """Energy and carbon of the range (the report's document["carbon"] and each process's
    "energy"): the totals, the grid intensity and its source or why carbon is unknown, and the
    processes and jobs that used the most."""
    carbon = data.carbon or {}
    if not carbon.get("joules"):
        return ('<h2>Energy and carbon</h2><p class="muted">no GPU power was recorded in this '
                "range</p>")
    out = ['<h2>Energy and carbon</h2><p class="facts" id="energy-total">used '
           f"<b>{_e(amount_text(carbon['kwh'], carbon.get('co2e_grams')))}</b> "
           f"{_e(grid_text(carbon.get('grid') or {}))}</p>"]
    covered, span = carbon.get("covered_s") or 0.0, carbon.get("span_s") or 0.0
    idle = carbon.get("host_idle") or {}
    notes = []
    if idle.get("joules"):
        notes.append(f"GPUs no process held: {amount_text(idle['kwh'], idle.get('co2e_grams'))}")
    if span > 0 and covered < 0.9 * span:
        notes.append(f"the samples cover {covered:,.0f} s of the range's {span:,.0f} s")
    if notes:
        out.append(f'<p class="muted">{_e(" · ".join(notes))}</p>')
    procs = sorted((p for p in data.processes if p.get("energy")),
                   key=lambda p: -p["energy"]["joules"])[:ENERGY_ROWS]
    jobs = sorted((carbon.get("by_job") or {}).items(),
                  key=lambda item: -item[1]["joules"])[:ENERGY_ROWS]
    out.append('<div class="grid"><section>')
    out.append(_table(["pid", "command", "energy"], [
        [_td(p["pid"], num=True), _td(one_line(_short(p.get("command")))[:80], code=True),
         _td(amount_text(p["energy"]["kwh"], p["energy"].get("co2e_grams")), True)]
        for p in procs], "no process drew GPU power in this range"))
    out.append("</section><section>")
    out.append(_table(["job", "energy"], [
        [_td(one_line(str(name))[:60], code=True), _td(amount_text(v["kwh"], v.get("co2e_grams")), True)]
        for name, v in jobs], "no job drew GPU power in this range"))
    out.append("</section></div>")
    return "".join(out)


def savings_block(savings: dict[str, Any] | None, listed: bool) -> str:
    """The host's potential savings above the recommendations, in the text report's words
    (daemon.analysis.recommendations_at): the combined figure beside the bill and what the
    standalone figures would claim, so a reader never adds up figures that overlap (probe 157
    M1: two rows of $727 and $734 on a $734/month host). Each row's dollars say "combined" and
    "alone" as the text does."""
    if not listed:
        return ""
    lines = potential_lines(savings)
    if not lines:
        return ""
    head, *rest = lines
    return (f'<p class="facts" id="savings"><b>{_e(head)}</b>'
            + "".join(f"<br>{_e(line)}" for line in rest)
            + '<br><span class="muted">savings are upper bounds; combined: each after the ones '
            "before it</span></p>")


def trigger_reason(trigger: dict[str, Any]) -> str:
    """Why an incident snapshot was taken, for a person: the trigger's reason without the
    event's internal id the daemon logs with it ("gpu:3 is held idle
    (gpu_held_idle:gpu:3:1796635801.002)", a Unix time in it: probe 157 L6), and since when
    the event stood."""
    reason = str(trigger.get("reason") or trigger.get("kind") or "")
    event = trigger.get("event")
    if not isinstance(event, dict):
        return reason
    suffix = f" ({event.get('id')})"
    if event.get("id") and reason.endswith(suffix):
        reason = reason[:-len(suffix)]
    started = event.get("started_at")
    if isinstance(started, int | float) and not isinstance(started, bool):
        reason += f", since {_time(started)}"
    return reason


def _instance(price: dict[str, Any]) -> str:
    """'aws p5.48xlarge': the provider and instance type a recorded price was for (one line,
    cut: a store's text is anyone's)."""
    return " ".join(one_line(str(price[k]))[:40] for k in ("provider", "instance_type")
                    if price.get(k))


def render(data: ReportData) -> str:
    """The whole page."""
    host, price = data.host, data.price or {}
    recorded = host.get("instance")
    instance: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    facts = [
        f"<b>{_e(host.get('hostname') or '?')}</b>",
        _e(" ".join(one_line(str(instance.get(k)))[:40]
                    for k in ("provider", "type", "region", "lifecycle") if instance.get(k))),
        f"price <b>{_money(price.get('per_hour'))}/h</b> "
        f"({_money(price.get('per_gpu_per_hour'))} per GPU) from {_e(price.get('source'))}"
        if price else "no recorded price",
    ]
    if data.price_changes:
        facts.append("the price changed in this range, each tick charged at its own: " + ", ".join(
            f"from {_e(_time(since))} {_money(changed.get('per_hour'))}/h ({_e(_instance(changed))})"
            for since, changed in data.price_changes))
    if host.get("simulated"):
        facts.append(f"simulated scenario {_e(host['simulated'])}")
    span_s = data.until - data.since
    span = f"{span_s:.0f} s" if span_s < 120 else f"{span_s / 60:.0f} min"
    out = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',  # no favicon request
        f"<title>{_e(data.title)}</title><style>{CSS}{STACK_CSS}</style></head><body>",
        f"<h1>{_e(data.title)}</h1>",
        f'<p class="facts">{" · ".join(f for f in facts if f)}</p>',
        f'<p class="facts">{_e(_time(data.since))} – {_e(_time(data.until))} '
        f"({_e(clock.local_zone(data.until))}; {span}) · the host spent <b>{_money(data.spend)}</b>, of which wasted "
        f"<b>{_money(data.wasted)}</b></p>",
    ]
    if data.summary:
        out.append('<div class="summary">' + "<br>".join(_e(line) for line in data.summary)
                   + "</div>")
    snapshot = data.snapshot or {}
    trigger = snapshot.get("trigger") or {}
    if trigger:
        out.append(f'<div class="trigger">Taken because: <b>{_e(trigger_reason(trigger))}</b>'
                   f' at {_e(_time(trigger.get("at")))}</div>')
    # Side by side where the window is wide (a column each from 2 x 520 px), stacked where not.
    out.append('<div class="grid"><section>')
    out.append("<h2>Burn and waste</h2>")
    # (wasted and no process dashed: where all is wasted the wasted line lies on the burn
    # line, which then vanished under it, probe 157 L3)
    out.append(line_chart("burn", {BURN_SERIES.get(k, k): v for k, v in data.burn.items()},
                          data.since, data.until, "$", dashes=BURN_DASHES) + BURN_WORDS
               if data.burn else
               '<p class="muted">no recorded price: no dollars to chart</p>')
    out.append("</section><section>")
    out.append("<h2>GPU utilization</h2>")
    out.append(line_chart("gpu-utilization", {f"GPU {i}": p for i, p in
                                              data.gpu_utilization.items()},
                          data.since, data.until, "%", 100.0))
    out.append("</section><section>")
    out.append("<h2>GPU memory used</h2>")
    total_gib = max((g.get("memory_total_bytes") or 0 for g in data.gpus), default=0) / 2**30
    out.append(line_chart("gpu-memory", {f"GPU {i}": p for i, p in data.gpu_memory.items()},
                          data.since, data.until, " GiB", total_gib or None))
    out.append("</section><section><h2>GPUs</h2>")
    out.append(_table(["GPU", "name", "utilization", "memory at the end", "peak memory",
                       "power", "status"], [
        [_td(g["index"], num=True), _td(g.get("name")), _td(_pct(g.get("utilization")), True),
         _td(f"{(g.get('memory_used_bytes') or 0) / 2**30:.1f} / "
             f"{(g.get('memory_total_bytes') or 0) / 2**30:.0f} GiB", True),
         _td("—" if g.get("memory_peak_bytes") is None
             else f"{g['memory_peak_bytes'] / 2**30:.1f} GiB", True),
         _td("—" if g.get("power_watts") is None else f"{g['power_watts']:.0f} W", True),
         _td(g.get("status"))] for g in data.gpus], "no GPU samples in this range"))
    changed = sorted({g["since"] for g in data.gpus
                      if isinstance(g.get("since"), int | float) and g["since"] > data.since})
    if changed:  # (daemon.analysis.gpu_models: a resize onto other GPUs in the range)
        out.append(f'<p class="muted" data-gpus-changed="{len(changed)}">the GPUs changed in '
                   f'this range, at {_e(", ".join(_time(at) for at in changed))}: a row per GPU '
                   "and model, each over its part of the range</p>")
    out.append("</section></div>")
    out.append("<h2>Processes</h2>")
    out.append(_table(["pid", "user", "command", "GPUs", "burn", "cost", "phase balance"], [
        [_td(p["pid"], num=True), _td(p.get("user")), _td(_short(p.get("command")), code=True),
         _td(",".join(str(g) for g in p.get("gpus") or []) or "—"),
         _td(_money(p.get("burn_per_hour")) + "/h" if p.get("burn_per_hour") is not None
             else "—", True), _td(_money(p.get("cost"), 4), True),
         f"<td>{phase_bar(p.get('phases') or {})}{_low_confidence(p)}</td>"]
        for p in data.processes],
        "no process in this range"))
    out.append(phase_legend(PHASE_COLORS))
    out.append(energy_block(data))
    out.append(latency.table(data.latency))
    out.append("<h2>Low-utilization windows</h2>")
    out.append(timeline(data.windows, data.since, data.until) if data.windows else
               '<p class="muted">no low-utilization window in this range</p>')
    out.append('<div class="grid"><section>')
    out.append("<h2>Top stacks</h2>")
    out.append(_table(["where", "function", "phase", "samples", "process"], [
        [_td(f"{s.get('file')}:{s.get('line')}", code=True), _td(s.get("function"), code=True),
         _td(s.get("phase")), _td(s.get("samples"), True),
         _td(s.get("label") or f"{s.get('pid')} {_short(s.get('command'))[:60]}", code=True)]
        for s in data.stacks], "no stack was sampled in this range"))
    out.append("</section><section>")
    out.append("<h2>Events</h2>")
    out.append(_table(["event", "target", "from", "to", "cost", "snapshot"], [
        [_td(e["kind"], words=True), _td(e.get("target_label") or e["target"], words=True),
         _td(_time(e["started_at"])),
         _td(_event_end(e, data.snapshot)),
         _td(_money(e.get("cost_so_far"), 4), True),
         _td(f"snapshot: {e['snapshot']}" if e.get("snapshot") else "", code=True)]
        for e in data.events], "no event in this range"))
    out.append("</section></div>")
    out.append("<h2>Recommendations</h2>")
    out.append(savings_block(data.savings, bool(data.recommendations)))
    out.append(_table(["recommendation", "savings", "method and evidence"], [
        [f'<td class="rec"><b>{_e(r.get("rule"))}</b> on '
         f'{_e(r.get("target_label") or r.get("target"))}<br>'
         f"{_e(r.get('summary'))}</td>",
         f'<td class="savings">{_e(money_text(r) + evidence_note(r))}</td>',
         f'<td class="evidence">{_e(r.get("method"))}{_evidence(r.get("evidence") or {})}'
         "</td>"]
        for r in data.recommendations], "no recommendation in this range"))
    made = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    version = snapshot.get("version") or __version__
    out.append(f'<p class="muted">mlcost {_e(version)} · rendered {_e(made)} · replay it with '
               f"<code>mlcost-top --replay FILE.db</code></p></body></html>")
    return "\n".join(out)
