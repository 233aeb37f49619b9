"""Hysteresis in the recommendation book: a recommendation stays until its condition has been
false for the hold, says so while it holds, and leaves a "resolved" notice when it goes."""

from dataclasses import replace

import pytest

from daemon.analysis.analyzer import Analyzer
from daemon.analysis.book import HOLDING, RESOLVED, RecommendationBook
from daemon.wire import Event, Recommendation
from tests.daemon.test_rules import P4D, by_rule, recs, window


def shrink():
    [found] = by_rule(recs(window()), "over_provisioned")
    return found


def test_a_recommendation_that_flickers_stays_shown_through_the_hold():
    rec = shrink()
    book = RecommendationBook(hold_s=300.0)
    book.record([rec], 0.0)
    book.record([], 30.0)  # the spot_training flicker of the demo: found, missed, found
    [entry] = book.active()
    doc = entry.as_dict(book.hold_s)
    assert doc["status"] == HOLDING and doc["condition_false_since"] == 30.0
    assert doc["resolves_at"] == 330.0
    assert Recommendation.from_dict(doc).status == HOLDING
    assert book.record([rec], 60.0) == []
    [entry] = book.active()
    assert entry.as_dict()["status"] == "active" and entry.as_dict()["resolves_at"] is None
    assert entry.standing_since == 0.0  # a lapse inside the hold does not restart its evidence


def test_a_recommendation_goes_after_the_hold_with_one_resolved_notice():
    rec = shrink()
    book = RecommendationBook(hold_s=300.0)
    book.record([rec], 0.0)
    assert book.record([], 30.0) == []
    assert book.record([], 300.0) == [] and len(book.active()) == 1  # 270 s false: held
    [notice] = book.record([], 330.0)  # 300 s false: resolved
    assert book.active() == []
    event = Event.from_dict(notice)
    assert event.kind == RESOLVED and event.ended_at == 330.0 and event.started_at == 0.0
    assert "over_provisioned no longer applies" in event.detail
    assert "5 min" in event.detail and rec.summary in event.detail
    assert book.record([], 360.0) == []  # said once
    book.record([rec], 400.0)  # back after more than the hold: its evidence starts again
    [entry] = book.active()
    assert entry.standing_since == 400.0 and entry.first_seen == 0.0


def test_the_analyzer_shows_held_recommendations_and_the_resolved_notice_in_its_events():
    rec = shrink()
    analyzer = Analyzer(P4D, recommendation_hold_s=60.0)
    for sample in window(n=3):
        analyzer.update(sample)
    ts = analyzer.window[-1].ts
    analyzer.book.record([rec], ts)
    analyzer.book.record([], ts + 30)
    [held] = analyzer.snapshot()["recommendations"]
    assert held["status"] == HOLDING and held["hold_seconds"] == 60.0
    analyzer.book.record([], ts + 90)
    snap = analyzer.snapshot()
    assert snap["recommendations"] == []
    assert [e["kind"] for e in snap["events"]] == [RESOLVED]


def test_advice_about_a_process_that_exited_goes_at_once_and_says_why():
    rec = shrink()
    book = RecommendationBook(hold_s=300.0)
    book.record([rec], 0.0)
    [notice] = book.record([], 30.0, exited=lambda target: target == rec.target)
    assert book.active() == [] and "its process exited" in notice["detail"]
    assert book.record([], 60.0, exited=lambda target: True) == []  # said once


def test_the_analyzer_resolves_advice_about_a_process_gone_from_the_latest_sample():
    analyzer = Analyzer(P4D, recommendation_hold_s=600.0)
    samples = window(n=3)
    for sample in samples:
        analyzer.update(sample)
    ts = samples[-1].ts
    proc = samples[0].processes[0]
    about_it = [r for r in recs(window(n=3, utils=[0.0] * 8, holders={0: 0.0}),
                                limits={"idle_held_min_s": 10.0})
                if r.rule == "idle_gpu_held"]
    assert about_it and about_it[0].target == f"{proc.pid}:{proc.start_time:.3f}"
    budget_like = replace(shrink(), id="b", target="user:bob:day:2026-12-02")
    analyzer.book.record([*about_it, budget_like], ts)
    analyzer.update(replace(samples[-1], ts=ts + 5, processes=()))  # it exited
    analyzer.record([])
    snap = analyzer.snapshot()
    # the budget target looks like 'a:b' but is no process: held, not resolved
    assert [r["target"] for r in snap["recommendations"]] == ["user:bob:day:2026-12-02"]
    assert [e["rule"] for e in snap["events"] if e["kind"] == RESOLVED] == ["idle_gpu_held"]


def test_the_resolved_notices_are_handed_to_the_store_once():
    rec = shrink()
    analyzer = Analyzer(P4D, recommendation_hold_s=0.0)
    for sample in window(n=3):
        analyzer.update(sample)
    analyzer.record([rec])
    analyzer.record([])
    [notice] = analyzer.take_resolved()
    assert notice["kind"] == RESOLVED and analyzer.take_resolved() == []


def test_a_newer_finding_in_the_same_slot_supersedes_a_held_one_at_once():
    """One finding of a rule per slot (a job has one straggler): when the rule names another
    target there, the one it named before goes at once with a notice that says why, instead of
    standing beside the new one through the hold; other slots and slotless findings hold."""
    first = replace(shrink(), id="a", target="1000:1.000", slot="job 500 train.py")
    second = replace(first, id="b", target="1002:1.000")
    elsewhere = replace(first, id="c", target="2000:1.000", slot="job 600 train.py")
    slotless = replace(first, id="d", target="3000:1.000", slot=None)
    book = RecommendationBook(hold_s=300.0)
    book.record([first, elsewhere, slotless], 0.0)
    [notice] = book.record([second], 30.0)
    assert sorted(e.recommendation.id for e in book.active()) == ["b", "c", "d"]
    event = Event.from_dict(notice)
    assert event.kind == RESOLVED and notice["recommendation_id"] == "a"
    assert "superseded by a newer over_provisioned finding, about 1002:1.000" in event.detail
    assert book.record([second], 60.0) == []  # said once
    [notice] = book.record([first], 90.0)  # the first target back: the second goes
    assert notice["recommendation_id"] == "b"
    assert [e.recommendation.id for e in book.active() if e.recommendation.slot
            == "job 500 train.py"] == ["a"]


@pytest.mark.parametrize("t0", [0.0, 1796577349.0032196])  # (and at a float epoch)
def test_a_sigterm_is_not_held_past_its_condition(t0):
    """Probe 143 F8: idle_gpu_held's SIGTERM stayed listed "holding" for the hold (5 min), its
    evidence frozen at its last idle window, while the process worked five times. A kill goes
    at the first evaluation that does not find it, with a notice; other advice still holds,
    and the same finding with a look first in its place is found, not held."""
    kill = replace(shrink(), id="k", rule="idle_gpu_held", target="42:1.000",
                   action={"kind": "sigterm", "pid": 42, "start_time": 1.0, "signal": "SIGTERM"})
    look = replace(kill, action={"kind": "copy_commands", "text": "look", "commands": []})
    other = shrink()
    book = RecommendationBook(hold_s=300.0)
    book.record([kill, other], t0)
    [notice] = book.record([], t0 + 30.0)
    assert [e.recommendation.id for e in book.active()] == [other.id]  # held, the kill not
    assert notice["recommendation_id"] == "k" and notice["kind"] == RESOLVED
    assert "a SIGTERM is never held past its condition" in notice["detail"]
    assert book.record([], t0 + 60.0) == []  # said once
    book.record([kill, other], t0 + 90.0)  # idle again: it stands anew
    [entry] = [e for e in book.active() if e.recommendation.id == "k"]
    assert entry.standing_since == t0 + 90.0 and entry.as_dict()["status"] == "active"
    book.record([look, other], t0 + 120.0)  # now looked at first: the same id, found
    book.record([other], t0 + 150.0)
    [entry] = [e for e in book.active() if e.recommendation.id == "k"]
    assert entry.as_dict()["status"] == HOLDING and entry.recommendation.action["kind"] == \
        "copy_commands"
