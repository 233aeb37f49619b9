"""The recommendations of a range as they stood at its end, with their combined savings: one
reading for every output of a range (`mlcostd report` text and `--json`, the review page of
`report --html`, a snapshot's page and `snapshot --render`), so none shows the evaluation made
after the range or a savings figure another does not.

`at_end(reader, since, end, price, gpus)` is `with_savings(with_resolutions(reader,
as_of(reader, since, end), end), price, gpus)`: each one's text and figures as the store kept
them at or before `end`, those the live view let go by `end` marked resolved, and the combined
savings next to the host's bill. `money_text`, `evidence_note` and `potential_lines` say them in the
text report's words.
"""

from __future__ import annotations

from typing import Any

from daemon import clock
from daemon.analysis.book import KILL_ACTIONS, RESOLVED
from daemon.analysis.rules.combine import savings_document
from daemon.store import queries
from daemon.store.reader import StoreReader


def as_of(reader: StoreReader, since: float, end: float) -> list[dict[str, Any]]:
    """The recommendations seen in [since, end] as they stood at `end`: each one's text (its
    figures, savings, evidence) from the latest one the store kept at or before `end`
    (recommendation_texts: a new one whenever the text changes, and every 5 minutes while only
    its figures move, as mlcost-top's replay of `end` shows it), not the one its row holds now
    (probe 151 F7: `report --until T` of the live store showed the evaluation made after T,
    unlike a snapshot of the same range; probe 157 H1: a snapshot's page showed the row as it
    stood when the snapshot was taken, "idle for at least 12 min" on a 4-min range); one first
    seen after `end` is left out. Where the store kept no text at or before `end` (a store from
    before the texts were kept), the row's latest, as before."""
    found = [rec for rec in queries.recommendations(reader, since)
             if not (isinstance(rec.get("first_seen"), int | float) and rec["first_seen"] > end)]
    texts = queries.recommendation_texts(reader, since, end)
    out = []
    for rec in found:
        text = texts.get(str(rec.get("id")))
        if text is not None and text[0] <= end:
            written, body = text
            rec = dict(body, first_seen=rec["first_seen"], last_seen=rec["last_seen"],
                       snoozed_until=rec["snoozed_until"])
            if isinstance(body.get("evidence_seconds"), int | float):
                # it stood since its text was written: evidence grows one for one (as replay)
                rec["evidence_seconds"] = body["evidence_seconds"] + max(
                    min(end, rec["last_seen"]) - written, 0.0)
        out.append(rec)
    # largest savings first, as queries.recommendations orders them (by the figures at `end`)
    return sorted(out, key=lambda r: -(r.get("savings_per_month") or 0.0)
                  if isinstance(r.get("savings_per_month"), int | float) else 0.0)


def with_resolutions(reader: StoreReader, recommendations: list[dict[str, Any]],
                     end: float) -> list[dict[str, Any]]:
    """`recommendations` as the range's end found them: one the live view let go by then (its
    resolved notice at or after its last sighting: daemon.analysis.book) has status "resolved"
    and `resolved_at`, where its stored document said the status of its last sighting. A
    resolved SIGTERM's action is withdrawn (kind "advice"): the live view drops a kill as soon
    as its condition goes false (the process worked or served since), and a report read later
    must not offer it either (probe 143 F8)."""
    if not recommendations:
        return recommendations
    since = min(float(r.get("last_seen") or end) for r in recommendations)
    went: dict[str, float] = {}
    for event in queries.events(reader, since, end):
        ended = event.get("ended_at")
        if event.get("kind") == RESOLVED and isinstance(ended, int | float) and ended <= end:
            went[str(event.get("target"))] = max(ended, went.get(str(event.get("target")), ended))
    for rec in recommendations:
        at = went.get(f"{rec.get('rule')} {rec.get('target')}")
        last = rec.get("last_seen")
        if at is None or not isinstance(last, int | float) or at < last:
            continue
        rec.update(status="resolved", resolved_at=at, condition_false_since=None,
                   resolves_at=None)
        action = rec.get("action")
        if isinstance(action, dict) and action.get("kind") in KILL_ACTIONS:
            rec["action"] = {"kind": "advice", "text": (
                f"no SIGTERM: withdrawn at {clock.local_time(at, date=False)}, when the process "
                "no longer idled as it did (it worked or served since)")}
    return recommendations


def with_savings(recommendations: list[dict[str, Any]], price: dict[str, Any] | None,
                 gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """{"recommendations": each with its combined share, "savings": the one potential figure,
    never more than the host's monthly bill}: the listed ones combined in the stated order, as
    the daemon and mlcost-top combine them (daemon.analysis.rules.combine). One resolved by the
    range's end (`with_resolutions`) is listed with its own figure but not combined: there is
    nothing left to save by it (`savings["resolved"]` counts them)."""
    per_hour = (price or {}).get("per_hour")
    still = [r for r in recommendations if r.get("status") != "resolved"]
    recs, savings = savings_document(
        still, per_hour if isinstance(per_hour, int | float) else None,
        [int(g["index"]) for g in gpus if isinstance(g.get("index"), int)])
    recs.sort(key=lambda r: -(r.get("combined_savings_per_month") or 0.0))
    resolved = [dict(r, combined_savings_per_month=None, savings_order=None)
                for r in recommendations if r.get("status") == "resolved"]
    savings["resolved"] = len(resolved)
    return {"recommendations": recs + resolved, "savings": savings}


def at_end(reader: StoreReader, since: float, end: float, price: dict[str, Any] | None,
           gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The recommendations seen in [since, end] as they stood at `end`, resolved ones marked,
    with their combined savings and the host's `savings` (see the module)."""
    return with_savings(with_resolutions(reader, as_of(reader, since, end), end), price, gpus)


def money_text(rec: dict[str, Any]) -> str:
    """A recommendation's dollars as the report's Recommendations section says them: '$7/month
    combined, $734 alone' (its share after those before it, and on its own), '$734/month' (not
    combined), '$727/month while it lasted, not counted' (resolved), 'no $ figure'."""
    alone = rec.get("savings_per_month")
    combined = rec.get("combined_savings_per_month")
    if not alone or not isinstance(alone, int | float):
        return "no $ figure"
    if rec.get("status") == "resolved":
        return f"${alone:,.0f}/month while it lasted, not counted"
    if not isinstance(combined, int | float):
        return f"${alone:,.0f}/month"
    return f"${combined:,.0f}/month combined, ${alone:,.0f} alone"


def evidence_note(rec: dict[str, Any]) -> str:
    """'; preliminary: 0.2 h of 30 h observed; thresholds shortened; resolved 14:45:20' or '',
    as the report says it after a recommendation's dollars."""
    note = ""
    if rec.get("preliminary"):
        seen = float(rec.get("evidence_seconds") or 0.0) / 3600
        needed = float(rec.get("evidence_needed_seconds") or 0.0) / 3600
        note += f"; preliminary: {seen:.1f} h of {needed:g} h observed"
    if rec.get("thresholds_shortened"):
        note += "; thresholds shortened"
    if rec.get("status") == "resolved" and isinstance(rec.get("resolved_at"), int | float):
        note += f"; resolved {clock.local_time(rec['resolved_at'], date=False)}"
    return note


def potential_lines(savings: dict[str, Any] | None) -> list[str]:
    """The host's potential savings as the report's Recommendations section heads them: 'potential
    savings $734/month combined (the host's bill: $734/month; on their own they would claim
    $1,461)', the order they are combined in, and how many resolved ones are not counted."""
    out = []
    if savings and savings.get("bill_per_month"):
        out.append(f"potential savings ${savings['potential_per_month']:,.0f}/month combined "
                   f"(the host's bill: ${savings['bill_per_month']:,.0f}/month; on their own "
                   f"they would claim ${savings['standalone_sum_per_month']:,.0f})")
        out.append(f"order: {savings['order']}")
    if savings and savings.get("resolved"):
        out.append(f"not counted: {savings['resolved']} resolved by the range's end")
    return out
