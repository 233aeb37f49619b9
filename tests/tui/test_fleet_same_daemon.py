"""One daemon reached at two targets (its unix socket and its http listener) is one daemon in
the fleet view: counted once in the totals and the count of daemons, its second row saying
it is the same daemon, the table's title saying which targets are one.

Probe 141 L12: `--connect unix:… --connect http://127.0.0.1:PORT` to one mlcostd showed
`16 GPUs` and `burn $65.55/h`, twice the host's; the refusal of a target given twice only
caught the same string. Each daemon says who it is (daemon_id, chosen at its start, in
/v1/now and /v1/health), whatever it is reached as."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from simhost import pilot_wait_for, poll

from daemon.client import Client
from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.messages import HostSnapshot
from mlcost_tui.panels.fleet import FleetPanel
from mlcost_tui.panels.header import HeaderPanel
from mlcost_tui.sources import fleet_totals, one_per_daemon, same_daemon


@pytest.fixture(scope="module")
def two_targets(shared_daemon):
    """The session's shared daemon (tests/conftest.py) as its unix socket and its TCP
    listener (with its token)."""
    port = poll(shared_daemon.tcp_port, 30, "the TCP port", explain=shared_daemon.log_tail)
    token = shared_daemon.socket.with_name("mlcostd.token").read_text().strip()
    shared_daemon.wait_for_ticks(3)
    return f"unix:{shared_daemon.socket}", f"http://127.0.0.1:{port}", token


def test_a_daemon_says_the_same_id_at_each_of_its_targets(two_targets):
    unix, http, token = two_targets

    async def ask() -> list[tuple[str, str]]:
        said = []
        for target, key in ((unix, None), (http, token)):
            async with Client(target, token=key) as client:
                said.append(((await client.health()).daemon_id,
                             (await client.now_raw())["daemon_id"]))
        return said

    (health_unix, now_unix), (health_http, now_http) = asyncio.run(ask())
    assert len(health_unix) == 16 and health_unix == now_unix == health_http == now_http


@pytest.mark.asyncio
async def test_one_daemon_at_two_targets_is_counted_once_in_the_fleet(two_targets):
    unix, http, token = two_targets
    app = MlcostTop([Client(unix), Client(http, token=token)], interval_s=0.3)
    async with app.run_test(size=(200, 40)) as pilot:
        fleet = app.query_one(FleetPanel)
        await pilot_wait_for(pilot, lambda: len(app.hosts) == 2 and all(
            h.now is not None and h.error is None for h in app.hosts) and fleet.row_count == 2)
        one = app.hosts[0].now
        assert one is not None and len(one.gpus) == 1  # the idle-host scenario: 1 GPU
        totals = fleet_totals(app.hosts)
        assert totals is not None and totals.now is not None
        assert len(totals.now.gpus) == 1 and totals.now.hostname == "fleet of 1 (1 answering)"
        assert totals.now.burn_per_hour == pytest.approx(one.burn_per_hour, rel=0.2)
        header = str(app.query_one(HeaderPanel).render())
        assert "1 daemon, newest tick" in header and "1 GPU," in header, header
        assert "same daemon" in str(fleet.get_row(http)[2])
        assert "same daemon" not in str(fleet.get_row(unix)[2])
        title = str(fleet.border_title)
        assert title.startswith("Fleet: 1 daemon at 2 targets (") and "counted once" in title
        assert f"{http.split('://')[1]} is " in title, title


def test_the_target_that_answers_is_the_one_counted():
    """Of two targets of one daemon, the one that answers now carries its figures; a daemon
    that gives no id (an older one) is told apart by its target alone."""
    now = Now.from_dict({"ts": 1.7e9, "tick": 7, "daemon_id": "a1b2", "gpus": [{"index": 0}]})
    down = HostSnapshot("unix:/run/a.sock", now, "no mlcostd at unix:/run/a.sock", 0.0, 1.0,
                        attempt=3)
    up = HostSnapshot("http://10.0.0.1:9347", now, None, 0.0, 1.0)
    assert same_daemon([down, up]) == {"unix:/run/a.sock": "http://10.0.0.1:9347"}
    assert one_per_daemon([down, up]) == (up,)
    older = dataclasses.replace(now, daemon_id="")
    hosts = [dataclasses.replace(down, now=older, error=None), dataclasses.replace(up, now=older)]
    assert same_daemon(hosts) == {} and len(one_per_daemon(hosts)) == 2
