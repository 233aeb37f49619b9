"""The review page of `mlcostd report --html` as a manager reads it (probe 157): the
recommendations' combined savings beside the host's bill, as the text says them; every figure
on the screen at a phone's width; its days and months said to be UTC; the waste in the text's
words. The store is test_report_review's: 60 days of recorded hour spend and four
recommendations (acted on, snoozed, ignored, new)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.store import facts
from daemon.store.writer import Store
from tests.daemon.test_report_review import build_store, report
from tests.livedaemon import ROOT


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("review_page") / "mlcost.db"
    build_store(db)
    return db



def test_the_review_page_says_the_combined_savings_beside_the_bill_as_the_text_does(tmp_path):
    """Probe 157 M1: the review page listed each recommendation's standalone savings ($727 and
    $734 on a $734/month host: $1,461 to a reader adding them up), with no combined figure and
    no bill, where the text said "potential savings $734/month combined (the host's bill:
    $734/month; on their own they would claim $1,461)" and "[$7/month combined, $734 alone]".
    The page says the text's line and each row's dollars in the text's words, from the same
    document."""
    db = tmp_path / "mlcost.db"
    end = build_store(db)
    store = Store(str(db))
    bill = 4.0 * 730
    facts.write_recommendations(store, [
        {"id": "r-host", "rule": "host_idle", "target": "host", "summary": "stop the host",
         "savings_per_month": bill * 0.99, "gpus": [0, 1]},
        {"id": "r-gpu", "rule": "idle_gpu_held", "target": "100:1780000000.000",
         "summary": "pid 100 holds GPU 0 idle", "savings_per_month": bill / 2, "gpus": [0]}],
        end - 60)
    store.close()
    text = report(db).stdout.split("\nRecommendations (savings are upper bounds")[1]
    potential = next(x.strip() for x in text.splitlines() if "potential savings" in x)
    assert "(the host's bill: $2,920/month; on their own they would claim $" in potential
    said = dict((summary, money) for money, summary in re.findall(r"^  \[([^\]]*)\] (.*)$", text,
                                                                    re.M))
    assert " combined, $" in said["pid 100 holds GPU 0 idle"], said
    page = tmp_path / "review.html"
    assert report(db, "--html", str(page)).returncode == 0
    html = page.read_text()
    assert potential.replace("'", "&#x27;") in html
    rows = dict((summary, money) for money, summary in re.findall(
        r"<td class=n>([^<]*)</td><td>([^<]*)</td>", html))
    for summary in ("stop the host", "pid 100 holds GPU 0 idle", "recommendation acted"):
        assert rows[summary] == said[summary], (summary, rows, said)


# Every table cell that reaches past the screen's right edge or is cut inside its box, and
# whether the page itself scrolls sideways.
PHONE_SCRIPT = """(() => {
  const inner = window.innerWidth;
  const cut = [...document.querySelectorAll('td, th')].filter(c => {
    const r = c.getBoundingClientRect();
    return r.right > inner + 0.5 || c.scrollWidth > c.clientWidth + 1;
  }).map(c => c.textContent);
  return {page: document.documentElement.scrollWidth, inner, cut,
          figures: [...document.querySelectorAll('td.n')].map(c => c.textContent)};
})()"""


def test_on_a_phone_every_figure_of_the_review_page_is_on_the_screen(store, tmp_path):
    """Probe 157 M3: at 390 px the review page ran off the screen: the waste dollars read
    "$0." (cut), the energy row was a column one word wide, the job rows' energy and the
    recommendations' text were cut at the right edge, and the page scrolled sideways. Names,
    paths and sentences wrap, figures do not, the recommendations stack (state and dollars, the
    text under them): no cell reaches past the screen and the page does not scroll sideways."""
    from daemon.report_html.review import render
    from tests import chromium

    document = json.loads(report(store, "--json").stdout)
    review = document["review"]
    long_job = "daemon.sim.workloads.checkpoint_heavy_with_a_rather_long_module_name"
    review["by"]["job"].append({"name": long_job, "cost": 1234.56, "previous": 987.65,
                                "trend_pct": 25.0})
    figure = {"joules": 3.6e6, "kwh": 1.0, "co2e_grams": 379.07}
    review["carbon"] = dict(figure, grid={
        "g_per_kwh": 379.07, "source": "grid table, annual average: EPA eGRID2020, NERC region "
        "SERC (2020 data, aws/us-east-1 as of 2023-09-12)"}, by_job={long_job: figure})
    review["recommendations"]["new"].append({
        "id": "r-long", "summary": "daemon.sim.workloads.data_starved (pid 18084) spends 87% of "
        "its last 10 min in data wait: prefetch its input in parallel — /work/probe157/wt/"
        "daemon/sim/workloads/data_starved.py:96", "savings_per_month": 2614.0})
    review["unit_costs"] = [{"target": long_job, "unit": "requests", "per": 1000,
                             "unit_cost": 0.0123, "previous_unit_cost": 0.01, "trend_pct": 23.0}]
    document["spend"]["latency"] = [{
        "target": "llm-serve-with-a-long-deployment-name", "p50_seconds": 0.0526,
        "p99_seconds": 2.2, "requests": 123456, "sm_share": 11.0, "gpu_utilization": 87.0,
        "cost_per_request": 0.000123, "error": None}]
    page = tmp_path / "review.html"
    page.write_text(render(document))
    found = chromium.load(page.as_uri(), PHONE_SCRIPT, size=(390, 844),
                          screenshot=tmp_path / "review-390.png").value
    assert found["page"] <= found["inner"], found
    assert found["cut"] == [], found
    assert "$1,234.56" in found["figures"] and "123,456" in found["figures"], found
    assert any("kWh" in f for f in found["figures"]), found


def test_the_review_page_says_its_days_are_utc_and_names_the_waste_as_the_text_does(store,
                                                                                     tmp_path):
    """Probe 157 M4: the page's by-day bars and month table did not say they are UTC days (the
    text says "by day (UTC)"), and a reader in New York, the header in EST, put every evening's
    spend on the wrong date. M5, L7: its "paid GPU time unused" was the text's "waste: ... of GPU
    time paid and unused", beside the snapshot chart's "unused" (the GPUs no process held), and
    it left out the share of spend. The page says both in the text's words."""
    page = tmp_path / "review.html"
    done = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(store),
                           "--since", "30d", "--html", str(page)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, TZ="America/New_York"))
    assert done.returncode == 0, done.stderr
    text, html = done.stdout, page.read_text()
    assert "by day (UTC):" in text and "(EST, UTC-05:00; 30 days)" in html
    assert "spend by day (UTC)" in html and "<th>month (UTC)</th>" in html
    waste = re.search(r"waste: \$([\d,.]+) of GPU time paid and unused \((\d+%) of spend\), "
                      r"\$([\d,.]+) with no process", text)
    assert waste, text
    assert (f"<th>waste: GPU time paid and unused</th><td class=n>${waste[1]} "
            f"<span class=muted>({waste[2]} of spend)</span>") in html
    assert f"<th>spent with no process (GPUs no process held)</th><td class=n>${waste[3]}" in html
    assert html.count("unused") == html.count("paid and unused") == 1
