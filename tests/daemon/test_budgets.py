from datetime import datetime, timezone

import pytest
from webhook_receiver import receiving

from daemon.analysis.budgets import BudgetWatch, Webhook, parse_budgets, period_end
from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.idle import BUDGET_EXCEEDED
from daemon.analysis.ledger import CostLedger
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample

PRICE = HostPrice(36.0, 1, "on-demand", "x", "aws", "us-east-1", "test", None)
DAY = datetime(2025, 3, 10, 0, 0, tzinfo=timezone.utc).timestamp()


def tick(ledger, ts):
    s = Sample(ts, 1, gpus=(GpuSample(0, "u", "A100", "ok", 100.0),),
               processes=(ProcessSample(1, 1.0, 0, "alice", "python train.py",
                                        (GpuUse(0, 1, 100.0),)),))
    ledger.add(burn(s, PRICE))


@pytest.fixture
def receiver():
    with receiving() as found:
        yield found


def test_budget_crosses_once_and_webhook_receives(receiver):
    # $36/h = $0.01/s: the daily $1 budget is crossed after 100 s
    watch = BudgetWatch({"user": {"alice": {"daily": 1.0}}, "host": {"monthly": 100},
                         "webhook": receiver.url})
    ledger = CostLedger()
    fired = []
    for i in range(0, 200):
        tick(ledger, DAY + i)
        new = watch.update(ledger, DAY + i)
        if new:
            fired.append((i, new))
    assert [(i, [e.target for e in new]) for i, new in fired] == [(100, ["user:alice"])]
    event = fired[0][1][0]
    assert event.kind == BUDGET_EXCEEDED
    assert event.detail["spent"] == pytest.approx(1.0)
    assert event.detail["period_id"] == "2025-03-10"
    assert watch.webhook.flush(5.0)
    assert len(receiver.bodies) == 1
    assert receiver.bodies[0]["target"] == "user:alice"
    assert receiver.bodies[0]["detail"]["limit"] == 1.0
    # the next day starts a new period: the day before's crossing ends at midnight (UTC),
    # written as ended, no longer standing; the new day's may fire again
    changed = []
    for i in range(86400, 86400 + 102):
        tick(ledger, DAY + i)
        changed += watch.update(ledger, DAY + i)
    assert [(e.detail["period_id"], e.ended_at) for e in changed] == [
        ("2025-03-10", DAY + 86400), ("2025-03-11", None)]
    assert [e.detail["period_id"] for e in watch.events()] == ["2025-03-11"]
    # and the month's end ends a monthly crossing at the first of the next month
    assert period_end("monthly", "2025-12") == datetime(2026, 1, 1, tzinfo=timezone.utc
                                                        ).timestamp()
    assert period_end("daily", "2025-02-28") == datetime(2025, 3, 1, tzinfo=timezone.utc
                                                         ).timestamp()
    assert period_end("daily", "not a day") is None


def test_just_below_does_not_fire():
    watch = BudgetWatch({"job": {"train.py": {"daily": 1.0}}})
    ledger = CostLedger()
    for i in range(0, 100):  # 99 s charged: $0.99
        tick(ledger, DAY + i)
        assert watch.update(ledger, DAY + i) == []
    tick(ledger, DAY + 100)
    assert [e.target for e in watch.update(ledger, DAY + 100)] == ["job:train.py"]


def test_a_restart_counts_the_period_spent_before_it(receiver):
    """A daemon that starts again mid-day counts what the runs before it recorded (resume):
    the daily $1 budget, $0.80 of it spent before the start, is crossed 20 s in, not 100 s;
    the monthly one, crossed and posted before the start, is neither raised nor posted again
    (a budget whose limit changed since is a new one: it may fire)."""
    before = CostLedger()
    for i in range(0, 81):  # 80 s charged before the restart: $0.80
        tick(before, DAY + i)
    raised = [{"kind": BUDGET_EXCEEDED, "target": "user:alice", "started_at": DAY + 50,
               "ended_at": None, "cost_so_far": 0.5,
               "detail": {"period": "monthly", "period_id": "2025-03", "limit": 0.5}},
              {"kind": BUDGET_EXCEEDED, "target": "host", "started_at": DAY + 50,
               "ended_at": None, "cost_so_far": 0.5,
               "detail": {"period": "daily", "period_id": "2025-03-10", "limit": 0.4}},
              {"kind": BUDGET_EXCEEDED, "target": "user:alice", "started_at": DAY - 5000,
               "ended_at": None, "cost_so_far": 1.2,  # the day before's, left open
               "detail": {"period": "daily", "period_id": "2025-03-09", "limit": 1.0}}]
    watch = BudgetWatch({"user": {"alice": {"daily": 1.0, "monthly": 0.5}},
                         "host": {"daily": 0.6}, "webhook": receiver.url})
    ended = watch.resume(before, raised, DAY + 1000)
    assert [(e.detail["period_id"], e.started_at, e.ended_at) for e in ended] == [
        ("2025-03-09", DAY - 5000, DAY)]  # for the store: ended at its midnight
    assert [e.detail["period_id"] for e in watch.events()] == ["2025-03"]  # what stands
    ledger = CostLedger()  # this run's, from its start
    fired = []
    for i in range(1000, 1030):
        tick(ledger, DAY + i)
        fired += [(i - 1000, e) for e in watch.update(ledger, DAY + i)]
    # the host's $0.60 was passed before the start: at the first tick (its $0.40 crossing
    # before the start was another budget's)
    assert [(i, e.target, e.detail["period"]) for i, e in fired] == [
        (0, "host", "daily"), (20, "user:alice", "daily")]
    assert fired[1][1].detail["spent"] == pytest.approx(1.0)
    assert watch.webhook.flush(5.0)
    assert [(b["target"], b["detail"]["period"]) for b in receiver.bodies] == [
        ("host", "daily"), ("user:alice", "daily")]
    # without what was recorded, the same run would cross the daily $1 100 s in
    fresh, ledger = BudgetWatch({"user": {"alice": {"daily": 1.0}}}), CostLedger()
    for i in range(1000, 1030):
        tick(ledger, DAY + i)
        assert fresh.update(ledger, DAY + i) == []


def test_status_says_where_each_budget_stands_in_its_period():
    """/v1/now's `budgets` and /metrics's mlcost_budget_spent_dollars: each budget's limit,
    what its current period spent (the runs before the start included) and whether it was
    crossed."""
    before = CostLedger()
    for i in range(0, 31):  # $0.30 before the start
        tick(before, DAY + i)
    watch = BudgetWatch({"user": {"alice": {"daily": 1.0}}, "host": {"monthly": 100}})
    watch.resume(before, [], DAY + 100)
    ledger = CostLedger()
    for i in range(100, 181):  # $0.80 since: $1.10 of alice's $1 today
        tick(ledger, DAY + i)
        watch.update(ledger, DAY + i)
    status = {s["target"]: s for s in watch.status(ledger, DAY + 180)}
    assert status["user:alice"]["spent"] == pytest.approx(1.1)
    assert status["user:alice"]["crossed"] is True and status["user:alice"]["limit"] == 1.0
    assert status["host"]["spent"] == pytest.approx(1.1)
    assert status["host"]["crossed"] is False and status["host"]["period_id"] == "2025-03"
    # the next day: alice's day starts again, the month goes on
    status = {s["target"]: s for s in watch.status(ledger, DAY + 86400)}
    assert status["user:alice"]["spent"] == 0.0 and status["host"]["spent"] == pytest.approx(1.1)


def test_webhook_failure_is_counted_not_raised():
    hook = Webhook("http://127.0.0.1:9/nothing", timeout_s=0.5)
    hook.post({"x": 1})
    assert hook.flush(5.0)
    assert hook.failed == 1 and hook.last_error


@pytest.mark.parametrize("config, message", [
    ({"user": {"a": {"weekly": 1}}}, "unknown period"),
    ({"host": {"daily": -1}}, "must be a number"),
    ({"team": {}}, "unknown key"),
    ({"webhook": "ftp://x"}, "http"),
])
def test_bad_config(config, message):
    with pytest.raises(ValueError, match=message):
        parse_budgets(config)
