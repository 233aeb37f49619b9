"""Savings on screen: the combined figure first, the standalone one beside it, the confidence of
preliminary advice and shortened thresholds next to the figure (recommendations panel, action
screen), and the header's one potential-savings figure."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from daemon.wire import ActionResult, Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.panels.recommendations import RecommendationTable
from mlcost_tui.screens.action import ActionScreen
from tests.tui.fixtures import TS, StubClient, now_document

SHRINK = {
    "id": "rec-shrink", "rule": "over_provisioned", "target": "host",
    "summary": "4 of 8 GPUs working: g6e.12xlarge at $10.49/h instead of p4d.24xlarge",
    "savings_per_month": 16265.0, "method": "($32.77 - $10.49)/h x 730 h/month",
    "evidence": {}, "action": {"kind": "resize", "from": "p4d.24xlarge", "to": "g6e.12xlarge"},
    "combined_savings_per_month": 14367.0, "savings_order": 2,
    "savings_scope": {"frees": [3, 5, 6, 7], "gpus": [0, 1, 2, 4]},
    "evidence_seconds": 720.0, "evidence_needed_seconds": 30 * 3600.0, "preliminary": True,
    "confidence": "low", "thresholds_shortened": True,
    "shortened_thresholds": {"shrink_min_window_s": {"value": 60.0, "default": 600.0}},
}


def document() -> dict:
    doc = now_document()
    doc["recommendations"].append(dict(SHRINK))
    doc["savings"] = dict(doc["savings"], potential_per_month=2795.9 + 14367.0)
    return doc


def cell(table: RecommendationTable, key: str, column: str) -> str:
    return str(table.get_cell_at((table.get_row_index(key), table.get_column_index(column))))


@pytest.mark.asyncio
async def test_panel_and_header_show_combined_savings_and_confidence():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        now = Now.from_dict(document())
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        recs = app.query_one(RecommendationTable)
        assert list(recs.recommendations) == ["rec-shrink", "rec-idle", "rec-loader"]
        assert cell(recs, "rec-shrink", "savings") == "$14,367 #2"
        assert cell(recs, "rec-shrink", "alone") == "$16,265"
        # cut where its column ends, with `…` (it read 'preliminary 12 min/3', a figure)
        assert cell(recs, "rec-shrink", "evidence") == "preliminary 12 min/…"
        assert recs.evidence_width == len("preliminary 12 min/…")
        assert cell(recs, "rec-idle", "evidence") == "shortened"
        assert cell(recs, "rec-loader", "evidence") == ""
        assert "together $17,163/month of the $23,922/month bill" in str(recs.border_title)
        header = str(app.query_one(HeaderPanel).render())
        assert "potential savings $17,163/month (some preliminary)" in header


@pytest.mark.asyncio
@pytest.mark.parametrize("every, said", [(15.0, "every 15 s"), (None, "every ~30 s")])
async def test_no_recommendation_yet_says_how_often_the_rules_look(every, said):
    """The simulated host's rules run every 15 s; the title said '~30 s' whatever the daemon
    ran them at. A daemon that does not say (older) reads as the default. (At 200 columns: at
    120 the header says `(none yet)`, the idle alert beside it whole, probe 154 L3.)"""
    doc = now_document()
    doc["recommendations"] = []
    if every is not None:
        doc["host"]["evaluate_every_s"] = every
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 40)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", Now.from_dict(doc),
                                                       None, 0.01, TS),)))
        await pilot.pause()
        title = str(app.query_one(RecommendationTable).border_title)
        assert title == f"Recommendations (none yet: the rules look {said})"
        # and the header does not call it a known $0.00 (probe 125 F13)
        header = str(app.query_one(HeaderPanel).render())
        assert f"potential savings ? (none yet: the rules look {said})" in header, header
        assert "$0.00/month" not in header


@pytest.mark.asyncio
async def test_at_80_columns_the_header_says_the_savings_are_not_known_yet():
    """`saves $0.00/month` before the rules had run, while the panel said `none yet`."""
    from tests.tui.test_sizes import screen_text

    doc = now_document()
    doc["recommendations"] = []
    doc["savings"] = dict(doc["savings"], potential_per_month=0.0)
    doc["events"] = []  # no idle alert: the savings fit the line (they come last, cut first)
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", Now.from_dict(doc),
                                                       None, 0.01, TS),)))
        await pilot.pause()
        lines = screen_text(app)
        assert any(line.rstrip().endswith("saves ? (none yet)") for line in lines[:2]), lines[:3]
        assert not any("$0.00/month" in line for line in lines), lines[:3]


@pytest.mark.asyncio
async def test_action_screen_shows_the_confidence_next_to_the_figure():
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(160, 48)) as pilot:
        rec = Now.from_dict(document()).recommendations[-1]
        result = ActionResult("rec-shrink", "resize", True, False, "would resize",
                              steps=("aws ec2 modify-instance-attribute ...",))
        app.push_screen(ActionScreen(rec, result))
        await pilot.pause()
        body = str(app.screen.query_one("#action-body", Static).render())
        assert "$14,367/month combined (#2 in the order; $16,265/month on its own)" in body
        assert ("preliminary, confidence low: 12 min observed of the 30 h this advice needs"
                in body)
        assert ("thresholds shortened for this host: shrink_min_window_s 1 min (default 10 min)"
                in body)


def test_a_process_screen_prices_its_advice_as_the_recommendation_screen_does():
    """A process's details listed its advice at the combined figure with no word saying so,
    beside a recommendation screen that says "combined (#n in the order; $Y on its own)": the
    same advice read as two prices."""
    from mlcost_tui.screens.details import DetailsScreen

    doc = document()
    loader = next(r for r in doc["recommendations"] if r["id"] == "rec-loader")
    loader.update(combined_savings_per_month=612.5, savings_order=3)
    now = Now.from_dict(doc)
    rec = next(r for r in now.recommendations if r.id == "rec-loader")
    process = next(p for p in now.processes if p.key == rec.target)
    shown = DetailsScreen(process, related=(rec,))._process_text(process).plain
    own = DetailsScreen(recommendation=rec)._recommendation_text(rec).plain
    line = "$612.50/month combined (#3 in the order; $897.90/month on its own)"
    assert line in shown and line in own
    assert rec.summary in shown


@pytest.mark.asyncio
@pytest.mark.parametrize("size, shows", [((80, 24), "headline"), ((200, 50), "summary")])
async def test_a_narrow_row_shows_the_advice_in_its_headline(size, shows):
    """At 80 columns the row showed "daemon.sim.workloads.data_starved (pid…": the subject of
    the summary, not its advice; where the summary does not fit, the headline is shown."""
    doc = now_document()
    loader = next(r for r in doc["recommendations"] if r["id"] == "rec-loader")
    loader["summary"] = ("daemon.sim.workloads.data_starved (pid 1001) spends 76% of its last "
                         "45 s in data wait: prefetch in DataLoader workers — /srv/train.py:42")
    loader["headline"] = "prefetch in DataLoader workers (pid 1001: 76% in data wait)"
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived(
            (HostSnapshot("unix:/t.sock", Now.from_dict(doc), None, 0.01, TS),)))
        await pilot.pause()
        recs = app.query_one(RecommendationTable)
        shown = cell(recs, "rec-loader", "summary").replace("\n", " ")
        if shows == "headline":
            assert shown.startswith("prefetch in DataLoader workers (pid 1001"), shown
        else:
            assert shown == loader["summary"], shown


@pytest.mark.asyncio
async def test_a_rows_figure_names_its_place_in_the_order_it_was_counted_in():
    """The demo's panel (probe 154 L5): the shrink first, $10,283, its details "#3 in the
    order", and the two $2,990 idle_gpu_held rows below it #1 and #2; the column was said to be
    each row's share "after the ones before it", which read as the rows above it. The rows stay
    biggest first (`a` acts on the top one); each figure says which place it was counted at."""
    doc = now_document()
    idle, loader = doc["recommendations"]
    second = dict(idle, id="rec-idle-2", target="1002:1700000002.000",
                  action=dict(idle["action"], pid=1002, start_time=TS + 2))
    idle.update(combined_savings_per_month=2990.0, savings_order=1)
    second.update(combined_savings_per_month=2990.0, savings_order=2)
    loader.update(savings_per_month=16264.0, combined_savings_per_month=10283.0, savings_order=3)
    doc["recommendations"].append(second)
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", Now.from_dict(doc),
                                                       None, 0.01, TS),)))
        await pilot.pause()
        recs = app.query_one(RecommendationTable)
        assert list(recs.recommendations) == ["rec-loader", "rec-idle", "rec-idle-2"]
        assert [cell(recs, key, "savings") for key in recs.recommendations] == [
            "$10,283 #3", "$2,990 #1", "$2,990 #2"]
        # an older daemon's recommendation, without a combined figure: no place to name
        del doc["recommendations"][0]["combined_savings_per_month"]
        del doc["recommendations"][0]["savings_order"]
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", Now.from_dict(doc),
                                                       None, 0.01, TS + 1),)))
        await pilot.pause()
        assert cell(recs, "rec-idle", "savings") == "$1,898"
