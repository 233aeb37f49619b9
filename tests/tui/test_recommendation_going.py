"""mlcost-top says when a recommendation is going and when it went (the daemon's hysteresis,
daemon.analysis.book): a held row reads '(going at HH:MM)', and each recommendation_resolved
event is announced once, never the ones already there when mlcost-top connected."""

from types import SimpleNamespace

from daemon.analysis.book import RecommendationBook
from daemon.wire import Event, Recommendation
from mlcost_tui import format as fmt
from mlcost_tui.incidents import ResolvedNotices
from mlcost_tui.panels.recommendations import action_label, going
from tests.daemon.test_rules import by_rule, recs, window


def host(*events):
    return SimpleNamespace(now=SimpleNamespace(events=list(events)))


def test_a_held_recommendation_says_when_it_goes_and_an_active_one_says_nothing():
    [rec] = by_rule(recs(window()), "over_provisioned")
    book = RecommendationBook(hold_s=300.0)
    book.record([rec], 1000.0)
    [entry] = book.active()
    assert going(Recommendation.from_dict(entry.as_dict(book.hold_s))) == ""
    book.record([], 1030.0)
    [entry] = book.active()
    held = Recommendation.from_dict(entry.as_dict(book.hold_s))
    assert going(held) == f"(going at {fmt.clock_time(1330.0)}) "


def test_a_stop_or_resize_that_is_going_is_not_offered():
    """The daemon refuses an action whose recommendation is in its hold (probe 125 F0: `a` on
    a '(going at ...)' row sent SIGTERM to a process back at work); the row says so first."""
    [rec] = by_rule(recs(window()), "over_provisioned")
    book = RecommendationBook(hold_s=300.0)
    book.record([rec], 1000.0)
    standing = Recommendation.from_dict(book.active()[0].as_dict(book.hold_s))
    book.record([], 1030.0)
    held = Recommendation.from_dict(book.active()[0].as_dict(book.hold_s))
    assert standing.action_kind == held.action_kind == "resize"
    assert action_label(standing, on_ec2=True) == "a: resize"
    assert action_label(held, on_ec2=True) == action_label(held, on_ec2=False) == "not now: going"


def test_each_resolved_notice_is_announced_once_and_history_is_not_news():
    [rec] = by_rule(recs(window()), "over_provisioned")
    book = RecommendationBook(hold_s=60.0)
    book.record([rec], 0.0)
    book.record([], 30.0)
    [old] = book.record([], 90.0)  # false for the 60 s hold: gone
    book.record([rec], 100.0)
    book.record([], 130.0)
    [new] = book.record([], 190.0)
    notices = ResolvedNotices()
    idle = Event.from_dict({"id": "idle:1", "kind": "gpu_idle", "target": "GPU 0",
                            "detail": "idle"})
    assert notices.news([host(Event.from_dict(old), idle)]) == []  # there before we connected
    [said] = notices.news([host(Event.from_dict(old), Event.from_dict(new), idle)])
    assert "over_provisioned no longer applies" in said
    assert notices.news([host(Event.from_dict(old), Event.from_dict(new))]) == []
