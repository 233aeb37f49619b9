"""The header's stale-price badge: shown when the daemon says its price may be stale (the
price's `warning` in /v1/now), with the command that refreshes it; absent otherwise. And the
connection's state beside it."""

from __future__ import annotations

import dataclasses

import pytest

from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.header import (
    HeaderPanel,
    budget_style,
    connection_text,
    price_warning,
    stale_price_badge,
    target_label,
)
from mlcost_tui.thresholds import SLOW_RESPONSE_S, WARN
from tests.tui.fixtures import TS, StubClient, now_document, snapshot

WARNING = ("aws/us-east-1/p4d.24xlarge on-demand price $32.7726/h may be wrong: it predates a "
           "known price cut; run `mlcostd prices --refresh aws --region us-east-1 --instance "
           "p4d.24xlarge`")


@dataclasses.dataclass(frozen=True)
class WarnedPrice:
    """A wire Price as it reads once the daemon sends price.warning."""

    per_hour: float | None = 32.7726
    source: str = "catalog: SkyPilot (bundled, catalog date unknown, predates a price cut)"
    lifecycle: str = "on-demand"
    instance_type: str = "p4d.24xlarge"
    warning: str = WARNING


def test_the_badge_carries_the_refresh_command():
    badge = stale_price_badge(WARNING)
    assert badge.plain == (" ⚠ stale price · mlcostd prices --refresh aws --region us-east-1 "
                           "--instance p4d.24xlarge")
    assert stale_price_badge("no date").plain == " ⚠ stale price · see mlcostd check"


def test_no_warning_from_a_daemon_that_sends_none():
    plain = Now.from_dict(now_document()).price
    assert price_warning(plain) == "" and price_warning(None) == ""
    assert price_warning(WarnedPrice()) == WARNING


@pytest.mark.asyncio
@pytest.mark.parametrize("warned", [True, False])
async def test_the_header_shows_the_badge_only_for_a_stale_price(warned):
    now = Now.from_dict(now_document())
    if warned:
        now = dataclasses.replace(now, price=WarnedPrice())  # type: ignore[arg-type]
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 48)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        text = str(app.query_one(HeaderPanel).render())
        assert ("⚠ stale price · mlcostd prices --refresh aws" in text) is warned
        assert "price $" in text


@pytest.mark.asyncio
@pytest.mark.parametrize("spent, crossed, shown", [
    (None, False, None), (612.0, False, "of $800.00 (76%)"), (900.0, True, "of $800.00 (112%)")])
async def test_today_says_how_much_of_the_hosts_daily_budget_it_is(spent, crossed, shown):
    """`today` beside [cost.budgets.host] daily, where one is set (a user or monthly budget is
    not today's); nothing where none is."""
    doc = now_document()
    doc["spend_today"] = spent if spent is not None else 12.0
    if spent is not None:
        doc["budgets"] = [
            {"scope": "user", "name": "ana", "target": "user:ana", "period": "daily",
             "period_id": "2026-12-04", "limit": 10.0, "spent": 9.0, "crossed": False},
            {"scope": "host", "name": "host", "target": "host", "period": "daily",
             "period_id": "2026-12-04", "limit": 800.0, "spent": spent, "crossed": crossed}]
    text = await header_text(doc)
    if shown is None:
        assert "today $12.00  " in text and "today $12.00 of" not in text
    else:
        assert f"today {'$' + format(spent, ',.2f')} {shown}" in text


async def header_text(doc: dict) -> str:
    """The header mlcost-top (200 columns) shows for one /v1/now document."""
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 48)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", Now.from_dict(doc),
                                                       None, 0.01, TS),)))
        await pilot.pause()
        return str(app.query_one(HeaderPanel).render())


@pytest.mark.asyncio
async def test_the_month_beside_today_where_a_host_monthly_budget_is_set():
    """[cost.budgets.host] monthly: the month's spend against it after today's (a user's
    monthly budget is not the host's); colour as the daily one's."""
    doc = now_document()
    doc["spend_today"] = 40.0
    doc["budgets"] = [
        {"scope": "user", "name": "ana", "target": "user:ana", "period": "monthly",
         "period_id": "2026-12", "limit": 100.0, "spent": 1.0, "crossed": False},
        {"scope": "host", "name": "host", "target": "host", "period": "monthly",
         "period_id": "2026-12", "limit": 20000.0, "spent": 17000.0, "crossed": False}]
    text = await header_text(doc)
    assert "today $40.00  month $17,000 of $20,000 (85%)" in text
    assert "of $100.00" not in text
    month = Now.from_dict(doc).host_budget("monthly")
    assert month is not None and budget_style(month) == WARN  # 85 %: past the 80 % warning


@pytest.mark.parametrize(("target", "label"), [
    ("gpu:5", "GPU 5 idle"), ("host", "the whole host"),
    ("process:1234:1700000000.000", "process 1234"), ("process:1234", "process 1234"),
    ("1234:1700000000.125", "process 1234"),
    # not process keys: shown as they are, never half-parsed into a PID
    ("1234:soon", "1234:soon"), ("process:", "process:"), ("http://a:80", "http://a:80")])
def test_an_alert_s_target_in_words(target, label):
    assert target_label(target) == label


def test_the_connection_reads_live_slow_or_gone_by_the_last_answer():
    # The live-daemon tests accept live or slow (how fast a daemon answers on a loaded machine
    # is not theirs to say); which one a given answer time shows is decided here.
    answered = snapshot()
    quick = dataclasses.replace(answered, latency_s=SLOW_RESPONSE_S / 2)
    slow = dataclasses.replace(answered, latency_s=SLOW_RESPONSE_S + 0.5)
    gone = dataclasses.replace(answered, now=None, error="connection refused")
    assert connection_text(None, False, None).plain == "● connecting…"
    assert connection_text(quick, False, None).plain == "● live"
    took = f"{SLOW_RESPONSE_S + 0.5:.1f}s"
    assert connection_text(slow, False, None).plain == f"● slow daemon ({took})"
    assert connection_text(gone, False, 4.0).plain == "✕ no daemon · retrying in 4s"
    hung = dataclasses.replace(gone, error="did not answer within 5 s", stalled=True)
    assert connection_text(hung, False, 4.0).plain == "● daemon not answering · retrying in 4s"
    assert connection_text(quick, True, None).plain == "● live  ⏸ PAUSED (p to resume)"


@pytest.mark.asyncio
async def test_at_80_columns_the_price_its_warning_and_the_idle_alerts_fit_before_the_edge():
    """At 80x24 the header's first line ended at '... us-east-1 on-demand  price …' and its
    second at '... potential savings $4,014/month  …': the price, the stale-price warning and
    the idle alerts were past the edge. Narrow, each line puts what matters first, shorter."""
    now = dataclasses.replace(Now.from_dict(now_document()), price=WarnedPrice())  # type: ignore[arg-type]
    assert now.idle_alerts  # the fixture's GPU 2 idle
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        header = app.query_one(HeaderPanel)
        lines = [line[:header.content_region.width] for line in str(header.render()).split("\n")]
        assert "price $32.77/h ⚠ stale price" in lines[0], lines
        assert "idle alerts 1 (GPU 2 idle" in lines[1], lines


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 48)])
async def test_the_status_line_says_when_the_store_cannot_record(size):
    """A full disk or a damaged file (/v1/now store.problem): the ticks wait in the daemon's
    memory; mlcost-top said '● live' and nothing else. Now the status line says so, on the
    line every width shows, and says nothing when all is well."""
    problem = ("cannot write the store /var/lib/mlcost/mlcost.db: the disk is full (0 bytes "
               "free); 12 ticks wait in memory")
    for said in (problem, None):
        doc = now_document()
        doc["store"] = {"path": "/var/lib/mlcost/mlcost.db", "problem": said}
        app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
        async with app.run_test(size=size) as pilot:
            app.post_message(SnapshotArrived((HostSnapshot(
                "unix:/test.sock", Now.from_dict(doc), None, 0.01, TS),)))
            await pilot.pause()
            lines = str(app.query_one(HeaderPanel).render()).splitlines()
            assert ("⚠ store: cannot write the store" in lines[2]) is (said is not None), lines
            assert "● live" in lines[2]


def at_tick(tick: int) -> HostSnapshot:
    doc = now_document()
    doc["tick"], doc["ts"] = tick, TS + tick
    return HostSnapshot("unix:/test.sock", Now.from_dict(doc), None, 0.01, TS + tick)


@pytest.mark.asyncio
async def test_under_a_dialog_the_header_goes_on_ticking_and_follows_a_resize():
    """Behind the snooze question (a dialog: the main screen shows around it) the status line
    froze at its tick, still "● live", and after 80 -> 200 -> 80 columns kept the 200-column
    form until the dialog closed."""
    from mlcost_tui.panels.recommendations import RecommendationTable
    from mlcost_tui.screens.confirm import ConfirmScreen
    from tests.tui.test_sizes import screen_text

    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((at_tick(42),)))
        await pilot.pause()
        app.query_one(RecommendationTable).focus()
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        app.post_message(SnapshotArrived((at_tick(43),)))
        await pilot.pause()
        header = str(app.query_one(HeaderPanel).render())
        assert "tick 43" in header, header
        assert "tick 43" in screen_text(app)[2]  # and on screen, around the dialog
        await pilot.resize_terminal(200, 24)
        await pilot.pause()
        await pilot.pause()
        assert str(app.query_one(HeaderPanel).render()).startswith("mlcost-top ")  # the wide form
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        header = str(app.query_one(HeaderPanel).render())
        # the narrow form; the savings do not fit beside the idle alert and today: left out
        # whole (they were past the edge, probe 154 L3)
        assert not header.startswith("mlcost-top ") and "idle alerts 1 (GPU 2 idle)" in header, \
            header
        assert isinstance(app.screen, ConfirmScreen)


@pytest.mark.asyncio
async def test_at_80_columns_the_idle_alerts_come_before_the_budgets():
    """With host budgets set, `today $… of $… (10%)  month $… of $…` filled the 80-column
    header's second line and the idle alerts went past its edge: narrow, the alerts come
    right after the burn and the waste."""
    doc = now_document()
    doc["spend_today"] = 0.29
    doc["budgets"] = [
        {"scope": "host", "name": "host", "target": "host", "period": "daily",
         "period_id": "2026-12-04", "limit": 3.0, "spent": 0.29, "crossed": False},
        {"scope": "host", "name": "host", "target": "host", "period": "monthly",
         "period_id": "2026-12", "limit": 2000.0, "spent": 0.29, "crossed": False}]
    now = Now.from_dict(doc)
    assert now.idle_alerts  # the fixture's idle GPU
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        from tests.tui.test_sizes import screen_text

        second = screen_text(app)[1]
    assert "idle alerts 1" in second and second.index("idle alerts") < second.index("today"), \
        second


@pytest.mark.asyncio
@pytest.mark.parametrize("unseen", [6, 0])
async def test_the_burn_says_the_part_of_it_for_gpus_nvml_does_not_list(unseen):
    """Probe 142 M2: a p4d with 2 of its 8 GPUs listed showed `price $32.77/h` beside a burn of
    a quarter of it, and nothing said why. The daemon now charges them (/v1/now burn's
    `unseen_gpus`, `unseen_per_hour`): the header's burn and the GPU panel's title say so."""
    from mlcost_tui.panels.gpus import GpuPanel

    doc = now_document()
    doc["burn"] = dict(doc["burn"], unseen_gpus=unseen, unseen_per_hour=unseen * 4.0966,
                       warning="6 GPUs of p4d.24xlarge's 8 not seen by NVML" if unseen else "")
    now = Now.from_dict(doc)
    assert (now.unseen_gpus, now.burn_warning.startswith("6 GPUs")) == (unseen, bool(unseen))
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(200, 48)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        header = str(app.query_one(HeaderPanel).render())
        title = str(app.query_one(GpuPanel).border_title)
    assert ("(6 GPUs not seen by NVML: $24.58/h)" in header) is bool(unseen), header
    assert ("· 6 more not seen by NVML ($24.58/h, wasted)" in title) is bool(unseen), title
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:  # narrow: said shorter
        app.post_message(SnapshotArrived((HostSnapshot("unix:/test.sock", now, None, 0.01, TS),)))
        await pilot.pause()
        header = str(app.query_one(HeaderPanel).render())
    assert ("(6 unseen: $24.58/h)" in header) is bool(unseen), header
