"""The fleet header's "today" when a host stops answering (probe 148 M4): it summed the day's
spend over the daemons that answered this poll only, so a host's spend left the total the moment
it stopped answering (today $0.84 -> $0.52) while its row still showed its last figures. Money
spent does not un-spend: today keeps each host's last known spend of the same UTC day, and says
so; the burn and the waste are rates now, over the hosts that answer."""

from __future__ import annotations

import pytest

from daemon.wire import Now
from mlcost_tui import format as fmt
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot, SnapshotArrived
from mlcost_tui.sources import fleet_header
from tests.tui.fixtures import TS, StubClient, now_document
from tests.tui.test_sizes import screen_text

DAY_S = 86_400.0


def host(name: str, ts: float, spend: float, burn: float, error: str | None = None,
         answered_at: float | None = None) -> HostSnapshot:
    doc = now_document()
    doc["ts"], doc["hostname"], doc["spend_today"] = ts, name, spend
    doc["burn"]["total_per_hour"] = burn
    doc["events"] = []  # no idle alert: at 80 columns it comes first and takes the line
    return HostSnapshot(f"unix:/{name}.sock", Now.from_dict(doc), error, 0.01, TS,
                        attempt=1 if error else 0, answered_at=answered_at)


def test_a_host_that_stops_answering_keeps_its_spend_in_today():
    both = (host("a", TS, 0.52, 32.77), host("b", TS, 0.32, 32.78))
    totals, kept = fleet_header(both)
    assert totals is not None and totals.now is not None and not kept
    assert totals.now.spend_today == pytest.approx(0.84)
    answered = TS - 10
    down = (host("a", TS + 10, 0.53, 32.77),
            host("b", TS, 0.32, 32.78, "connection refused", answered_at=answered))
    totals, kept = fleet_header(down)
    assert totals is not None and totals.now is not None
    assert totals.now.spend_today == pytest.approx(0.85)  # $0.53 now + b's last $0.32
    assert [h.target for h in kept] == ["unix:/b.sock"]
    assert totals.now.burn_per_hour == pytest.approx(32.77)  # a rate: the answering host's
    # a last answer of an earlier UTC day is not today's spend
    yesterday = (host("a", TS + DAY_S, 0.01, 32.77),
                 host("b", TS, 0.32, 32.78, "connection refused", answered_at=answered))
    totals, kept = fleet_header(yesterday)
    assert totals is not None and totals.now is not None and not kept
    assert totals.now.spend_today == pytest.approx(0.01)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_fleet_header_says_today_holds_a_host_as_of_its_last_answer(size):
    clients = [StubClient(), StubClient()]
    clients[0].name, clients[1].name = "unix:/a.sock", "unix:/b.sock"
    app = MlcostTop(clients, poll=False)  # type: ignore[arg-type]
    answered = TS - 10
    async with app.run_test(size=size) as pilot:
        app.post_message(SnapshotArrived((host("a", TS, 0.52, 32.77),
                                          host("b", TS, 0.32, 32.78))))
        await pilot.pause()
        line = screen_text(app)[1]
        assert f"today {fmt.money(0.84)}" in line and "as of" not in line, line
        app.post_message(SnapshotArrived((
            host("a", TS + 10, 0.53, 32.77),
            host("b", TS, 0.32, 32.78, "connection refused", answered_at=answered))))
        await pilot.pause()
        line = screen_text(app)[1]
        said = f"today {fmt.money(0.85)} (1 host as of {fmt.clock_time(answered)[:5]})"
        assert said in line, line
        assert f"burn {fmt.money(32.77, '/h')}" in line, line
