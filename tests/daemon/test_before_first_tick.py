"""Before its first tick a daemon does not know its burn (probe 154 H1): /v1/now's rates are
null, not 0.0 (mlcost-top read `burn $0.00/h` for a $32.77/h host after every restart), and
/metrics leaves the host's burn and waste gauges out, so a scrape in that moment is a gap in
Prometheus, not a $0 sample of a host that bills. Its price is known and said.

The daemon is the real Daemon class serving its real API on a unix socket, its sources
scripted (tests/daemon/test_now_cache.py): the test takes its first tick, so the moment before
it is held as long as the test needs."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from daemon.api.server import ApiServer
from daemon.client import Client
from daemon.wire import Now
from tests.daemon.scripted import PRICE
from tests.daemon.test_now_cache import scripted_daemon

RATES = ("mlcost_host_burn_dollars_per_hour", "mlcost_host_wasted_dollars_per_hour",
         "mlcost_idle_burn_dollars_per_hour")


async def metrics(socket_path) -> dict[str, float]:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get("http://x/metrics") as response:
            assert response.status == 200
            text = await response.text()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if not sample.labels.keys() - {"Hostname"}}


def test_before_the_first_tick_the_burn_is_unknown_in_v1_now_and_absent_from_metrics(tmp_path):
    daemon = scripted_daemon(tmp_path)

    async def main() -> None:
        socket_path = tmp_path / "run" / "mlcostd.sock"
        server = ApiServer(daemon, socket_path)
        await server.start()
        try:
            async with Client(f"unix:{socket_path}") as client:
                raw = await client.now_raw()
                assert raw["ts"] is None and raw["gpus"] == []
                burn = raw["burn"]
                assert burn["total_per_hour"] is None, burn
                assert burn["wasted_per_hour"] is None and burn["idle_per_hour"] is None, burn
                assert burn["price_per_gpu"] == PRICE.per_gpu  # the price is known
                now = Now.from_dict(raw)  # the wire's reading: unknown, not $0
                assert now.burn_per_hour is None and now.wasted_per_hour is None
                assert now.price is not None and now.price.per_hour == PRICE.per_hour
                before = await metrics(socket_path)
                assert before["mlcost_host_price_dollars_per_hour"] == PRICE.per_hour
                assert not before.keys() & set(RATES), {k: before[k] for k in RATES
                                                        if k in before}
                assert "mlcost_last_sample_timestamp_seconds" not in before

                daemon.tick_now()  # the first tick: the rates are known from now on
                raw = await client.now_raw()
                assert raw["ts"] is not None
                assert raw["burn"]["total_per_hour"] == PRICE.per_hour
                after = await metrics(socket_path)
                assert after["mlcost_host_burn_dollars_per_hour"] == PRICE.per_hour
                assert set(RATES) <= after.keys()
        finally:
            await server.stop()

    try:
        asyncio.run(main())
    finally:
        daemon.store.close()
