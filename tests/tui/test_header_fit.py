"""The header before a daemon's first tick, and figures the header's width cannot hold.

probe 154 H1: right after a daemon (re)start, before its first tick, the header read
`burn $0.00/h  wasted $0.00/h` under `● live ... tick N at -  0 GPUs` for a host billing
$32.77/h: the rates are not known then, and the header says so.
probe 154 L3: at 80 columns the edge cut the second line with `…`, which cuts a dollar figure
mid-number (`today $61…`): a part that does not fit is left out whole, the least needed first.
probe 154 L6: a fleet with no host answering showed its last burn, waste and today as current;
today now says `(N hosts as of …)` as when only some hosts do not answer, and the figures are
dimmed."""

from __future__ import annotations

import dataclasses
import re

import pytest
from rich.text import Text

from daemon.wire import Now
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.panels.header import HeaderPanel, Part, fit
from tests.tui.fixtures import TS, StubClient, now_document
from tests.tui.test_sizes import screen_text

SIZES = [(80, 24), (200, 50)]
# a dollar figure, whole: `$612.00`, `$17,000`, `$32.77/h`, `$2,796/month`
FIGURE = re.compile(r"\$[0-9][0-9,]*(\.[0-9]{2})?(/h|/month)?")


def before_first_tick(doc: dict) -> dict:
    """/v1/now of a daemon that answers before its first tick: no ts, no GPUs or processes,
    its price known."""
    doc = dict(doc)
    doc["ts"], doc["gpus"], doc["processes"], doc["events"] = None, [], [], []
    doc["recommendations"] = []
    doc.pop("spend_today", None)
    return doc


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("rates", [None, 0.0], ids=["null", "old-daemon-zero"])
async def test_before_the_first_tick_the_burn_is_unknown_not_zero(size, rates):
    doc = before_first_tick(now_document())
    doc["burn"] = dict(doc["burn"], total_per_hour=rates, wasted_per_hour=rates,
                       idle_per_hour=rates, gpus=[])
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", Now.from_dict(doc),
                                                       None, 0.01, TS),)))
        await pilot.pause()
        lines = screen_text(app)[:3]
        assert "price $32.77/h" in lines[0], lines
        assert "$0.00" not in lines[1], lines
        assert "burn -" in lines[1] and "wasted -" in lines[1], lines
        assert "● starting: no tick yet" in lines[2] and "● live" not in lines[2], lines
        assert "tick 0 at -" not in lines[2] and "0 GPUs" not in lines[2], lines
        # and the first tick makes it live, with its figures
        app.post_message(SnapshotArrived((HostSnapshot(
            "unix:/t.sock", Now.from_dict(now_document()), None, 0.01, TS),)))
        await pilot.pause()
        lines = screen_text(app)[:3]
        assert f"burn {fmt.money(32.77, '/h')}" in lines[1] and "● live" in lines[2], lines


def budgeted(detail: str = "GPU 2 idle for 15 min") -> Now:
    doc = now_document()
    doc["spend_today"] = 612.0
    doc["events"][0]["detail"] = detail
    doc["budgets"] = [
        {"scope": "host", "name": "host", "target": "host", "period": "daily",
         "period_id": "2026-12-07", "limit": 800.0, "spent": 612.0, "crossed": False},
        {"scope": "host", "name": "host", "target": "host", "period": "monthly",
         "period_id": "2026-12", "limit": 20000.0, "spent": 17000.0, "crossed": False}]
    return Now.from_dict(doc)


def figures_whole(line: str) -> None:
    """Every `$` on the line starts a whole figure: none is cut by the edge's `…`."""
    for found in re.finditer(r"\$", line):
        figure = FIGURE.match(line, found.start())
        assert figure is not None, line
        after = line[figure.end():figure.end() + 1]
        assert after in ("", " ", ")"), (figure.group(), line)


@pytest.mark.asyncio
@pytest.mark.parametrize("detail", ["GPU 2 idle for 15 min",
                                    "GPU 2 idle for 3 h 12 min, held by pid 1003 (python)"])
async def test_at_80_columns_a_budgeted_today_is_whole_or_left_out(detail):
    app = MlcostTop([StubClient()], poll=False)  # type: ignore[list-item]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((HostSnapshot("unix:/t.sock", budgeted(detail),
                                                       None, 0.01, TS),)))
        await pilot.pause()
        lines = screen_text(app)[:3]
        for line in lines:
            figures_whole(line)
        line = lines[1]
        assert "…" not in line, line
        # what matters first: the burn, the waste, the idle alert, today's spend
        assert line.startswith(f" burn {fmt.money(32.77, '/h')}  wasted "), line
        assert "idle alerts 1 (GPU 2 idle" in line, line
        assert "today $612.00" in line, line
        # at 200 columns all of it, budgets and savings too
        await pilot.resize_terminal(200, 50)
        await pilot.pause()
        await pilot.pause()
        line = screen_text(app)[1]
        figures_whole(line)
        for said in ("today $612.00 of $800.00 (76%)", "month $17,000 of $20,000 (85%)",
                     "potential savings $", f"({detail})"):
            assert said in line, line


def test_fit_leaves_parts_out_whole_the_least_needed_first():
    parts = [Part(Text("burn $32.77/h"), 0), Part(Text("  today $612.00"), 2),
             Part(Text(" of $800.00 (76%)"), 4), Part(Text("  idle alerts 4"), 1)]
    assert fit(parts, 200).plain == "burn $32.77/h  today $612.00 of $800.00 (76%)  idle alerts 4"
    assert fit(parts, 45).plain == "burn $32.77/h  today $612.00  idle alerts 4"
    assert fit(parts, 30).plain == "burn $32.77/h  idle alerts 4"
    assert fit(parts, 10).plain == "burn $32.77/h"  # rank 0 stays: the edge cuts it
    assert fit(parts, 0).plain == fit(parts, 200).plain  # not laid out yet: all
    # a shorter form is said before anything is left out; words last may meet the edge
    short = [Part(Text("burn $1.00/h"), 0),
             Part(Text(" (GPU 2 idle for 15 min)"), 3, True, Text(" (GPU 2 idle)")),
             Part(Text("  today $5.00"), 2), Part(Text(" · run mlcostd prices --refresh"), 5,
                                                  True)]
    assert fit(short, 40).plain == "burn $1.00/h (GPU 2 idle)  today $5.00"
    assert fit(short, 52).plain.endswith(" · run mlcostd prices --refresh")


def fleet_host(name: str, spend: float, burn: float, error: str | None,
               answered_at: float | None) -> HostSnapshot:
    doc = now_document()
    doc["ts"], doc["hostname"], doc["spend_today"] = TS, name, spend
    doc["burn"]["total_per_hour"] = burn
    doc["events"] = []
    return HostSnapshot(f"unix:/{name}.sock", Now.from_dict(doc), error, 0.01, TS,
                        attempt=1 if error else 0, answered_at=answered_at)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_a_fleet_with_no_host_answering_says_its_figures_are_as_of(size):
    clients = [StubClient(), StubClient()]
    clients[0].name, clients[1].name = "unix:/a.sock", "unix:/b.sock"
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    first, last = TS - 30, TS - 10
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((
            fleet_host("a", 0.52, 32.77, "connection refused", answered_at=last),
            fleet_host("b", 0.32, 32.78, "connection refused", answered_at=first))))
        await pilot.pause()
        lines = screen_text(app)[:3]
        assert "fleet of 2 (0 answering)" in lines[0], lines
        said = f"today {fmt.money(0.84)} (2 hosts as of {fmt.clock_time(first)[:5]})"
        assert said in lines[1], lines
        # the kept rates and spend dimmed, as the panels of a host that does not answer
        header = app.query_one(HeaderPanel).content
        assert isinstance(header, Text)
        burn = fmt.money(32.77 + 32.78, "/h")
        start = header.plain.index(burn)
        assert any(span.start <= start < span.end and "dim" in str(span.style)
                   for span in header.spans), header.spans


@pytest.mark.asyncio
@pytest.mark.parametrize("both", [False, True], ids=["one-alerting", "both-alerting"])
async def test_at_80_columns_a_fleet_with_no_host_answering_keeps_today_and_its_note(both):
    """With an idle alert on one host the 80-column line had no room for `today $0.84 (2 hosts
    as of …)`: it was left out whole, the note with it. Said shorter, it stays."""
    clients = [StubClient(), StubClient()]
    clients[0].name, clients[1].name = "unix:/a.sock", "unix:/b.sock"
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    first, last = TS - 30, TS - 10
    alerting = fleet_host("a", 0.52, 32.77, "connection refused", answered_at=last)
    assert alerting.now is not None
    alerting = dataclasses.replace(alerting, now=Now.from_dict(dict(
        now_document(), ts=TS, hostname="a", spend_today=0.52)))
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((
            dataclasses.replace(alerting, error="connection refused", answered_at=last,
                                attempt=1),
            dataclasses.replace(alerting, target="unix:/b.sock", now=Now.from_dict(dict(
                now_document(), ts=TS, hostname="b", spend_today=0.32)), answered_at=first,
                error="connection refused", attempt=1) if both else
            fleet_host("b", 0.32, 32.78, "connection refused", answered_at=first))))
        await pilot.pause()
        line = screen_text(app)[1]
        figures_whole(line)
        assert f"idle alerts {2 if both else 1}" in line, line
        assert f"today {fmt.money(0.84)} (2 as of {fmt.clock_time(first)[:5]})" in line, line


@pytest.mark.asyncio
async def test_at_80_columns_the_fleet_status_line_says_its_counts_whole_or_not_at_all():
    """'● live  2 daemons, newest tick at …  9 GPUs, 6 processes, 7 recommenda…' (seen in
    tmux): the counts are said shorter, without the recommendations (their panel says them)."""
    clients = [StubClient(), StubClient()]
    clients[0].name, clients[1].name = "unix:/a.sock", "unix:/b.sock"
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SnapshotArrived((fleet_host("a", 0.52, 32.77, None, TS),
                                          fleet_host("b", 0.32, 32.78, None, TS))))
        await pilot.pause()
        line = screen_text(app)[2]
        assert "…" not in line, line
        assert "2 daemons, newest tick at" in line and "8 GPUs, 8 processes" in line, line
        assert "recommenda" not in line, line
