"""On the real demo host (`mlcostd run --simulate demo`, its shortened thresholds): the
recommendations' combined savings, shown as one "potential savings" figure, never exceed the
host's monthly bill, and the shrink advice is preliminary with its confidence."""

from __future__ import annotations

import pytest
from simhost import poll

from daemon.commands import report
from daemon.store.reader import StoreReader
from daemon.wire import Now
from mlcost_tui.panels.recommendations import evidence_text, savings_text

DEMO_RECS_TIMEOUT_S = 240.0
WANTED = {"over_provisioned", "underbatched_inference"}  # and at least 4 in all
MIN_RECS = 4


def test_demo_savings_add_up_to_no_more_than_the_bill(mlcostd):
    daemon = mlcostd("demo")
    seen: list[dict] = []

    def ready():
        doc = daemon.now()
        seen.append(doc)
        rules = {r["rule"] for r in doc.get("recommendations") or []}
        return doc if WANTED <= rules and len(rules) >= MIN_RECS else None

    doc = poll(ready, DEMO_RECS_TIMEOUT_S, "the demo's shrink and batching advice among 4 or more",
               every=2.0, explain=lambda: f"last rules: "
               f"{[r['rule'] for r in (seen[-1].get('recommendations') or [])] if seen else []}"
               f"\n{daemon.log_tail()}")
    recs = doc["recommendations"]
    bill = doc["price"]["per_hour"] * 730
    savings = doc["savings"]
    assert savings["bill_per_month"] == bill
    combined = [r["combined_savings_per_month"] for r in recs]
    assert savings["potential_per_month"] == pytest.approx(sum(combined))
    assert sum(combined) <= bill and savings["potential_per_month"] <= bill
    assert all(0 <= c <= r["savings_per_month"] + 1e-6
               for c, r in zip(combined, recs, strict=True))
    assert savings["thresholds_shortened"] is True
    # Every document on the way there stayed within the bill too.
    for earlier in seen:
        if earlier.get("savings"):
            assert earlier["savings"]["potential_per_month"] <= bill
    [shrink] = [r for r in recs if r["rule"] == "over_provisioned"]
    assert shrink["preliminary"] is True and shrink["confidence"] == "low"
    assert shrink["evidence_needed_seconds"] == 30 * 3600
    assert shrink["thresholds_shortened"] is True
    assert "shrink_min_window_s" in shrink["shortened_thresholds"]
    # What the screen shows next to the figure (recommendations panel, action screen).
    now = Now.from_dict(doc)
    assert now.potential_savings_per_month == savings["potential_per_month"]
    [rec] = [r for r in now.recommendations if r.rule == "over_provisioned"]
    assert evidence_text(rec).plain.startswith("preliminary ")
    assert "shortened" in evidence_text(rec).plain
    assert "confidence low" in savings_text(rec).plain
    # The report combines what it lists the same way: one potential figure within the bill.
    reader = StoreReader(str(daemon.db))
    try:
        review = report.build(reader, 600.0)
    finally:
        reader.close()
    assert review["savings"]["bill_per_month"] == bill
    assert 0 < review["savings"]["potential_per_month"] <= bill
    assert sum(r["combined_savings_per_month"] for r in review["recommendations"]) <= bill
    text = report.render_text(review, width=200)
    assert f"potential savings ${review['savings']['potential_per_month']:,.0f}/month" in text
    assert "preliminary:" in text and "thresholds shortened" in text
