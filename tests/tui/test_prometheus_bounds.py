"""mlcost-top --prometheus reads a bounded answer and only finite numbers (issue 20, item 7): an
endless answer is a PrometheusError naming the cap, and +Inf, NaN or absurd GPU counts read
as unknown instead of ending in an OverflowError."""

from __future__ import annotations

import asyncio
import json

import pytest
from hostile_http import ENDLESS, HostileServer

from mlcost_tui.prometheus import PrometheusError, PrometheusFleet


def vector(value: str) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": "gpu-01:9400", "Hostname": "gpu-01"},
         "value": [1764670000.0, value]}]}}).encode()


def fleet(url: str):
    async def main():
        fleet = PrometheusFleet(url, timeout_s=20)
        try:
            return await fleet.fetch()
        finally:
            if fleet._session is not None:
                await fleet._session.close()

    return asyncio.run(main())


@pytest.mark.parametrize("value", ["+Inf", "-Inf", "NaN", "1e300"])
def test_a_gpu_count_that_is_not_one_reads_as_unknown(value):
    with HostileServer(vector(value), "application/json") as server:
        view = fleet(server.url)
    [host] = view.hosts
    assert host.gpus is None and host.idle_gpus is None
    assert host.burn_per_hour is None or host.burn_per_hour == float(value)  # finite only
    assert view.total("burn_per_hour") is None or value == "1e300"


def test_an_endless_prometheus_answer_is_an_error_naming_the_cap():
    with HostileServer(ENDLESS, "application/json") as server, \
            pytest.raises(PrometheusError) as caught:
        fleet(server.url)
    assert "larger than" in str(caught.value) and server.url in str(caught.value)
