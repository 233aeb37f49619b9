"""Every price fetch is bounded (issue 20, item 7): an endless answer stops at the byte cap with
a clear error and bounded memory, a trickling one at the deadline, and inf, NaN, huge numbers
and a 50 MB CSV field are refused with an error naming the field and the value, the previous
cached prices kept. The servers are real aiohttp servers on 127.0.0.1 shaped like the price
APIs (local_http.LocalServer), some of them streaming without end."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from local_http import LocalServer, ok

from pricing.cache import CachedPrice, read_cache, write_cache
from pricing.http import AnswerTooLarge, FetchError, fetch
from pricing.refresh_azure import refresh_azure
from pricing.refresh_catalog import refresh_catalog

ROOT = Path(__file__).resolve().parents[2]
HEADER = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,"
          "Region,AvailabilityZone,GpuInfo\n")
ROW = "gpu_1x_h100_pcie,H100,1,26,200,2.49,,us-east-1,us-east-1,\n"
CSV_PATH = "/v7/lambda/vms.csv"
AZURE_PATH = "/api/retail/prices"
SKU = "Standard_NC24ads_A100_v4"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StreamingServer(LocalServer):
    """LocalServer whose routes may also be handlers that stream (an endless or slow body)."""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        replies = self.routes.get(request.path) or []
        if replies and callable(replies[0]):
            return await replies[0](request)  # type: ignore[operator]
        return await super()._handle(request)


async def endless_csv(request: web.Request) -> web.StreamResponse:
    """A vms.csv that never ends: the header, then the same row forever, as fast as it goes."""
    response = web.StreamResponse(headers={"Content-Type": "text/csv"})
    await response.prepare(request)
    await response.write(HEADER.encode())
    rows = (ROW * 2000).encode()
    try:
        while True:
            await response.write(rows)
    except (ConnectionError, asyncio.CancelledError):
        pass
    return response


async def trickle(request: web.Request) -> web.StreamResponse:
    """A 200 whose body comes one byte every 50 ms, forever: each read succeeds, none ends."""
    response = web.StreamResponse(headers={"Content-Type": "text/csv"})
    await response.prepare(request)
    try:
        while True:
            await response.write(b"x")
            await asyncio.sleep(0.05)
    except (ConnectionError, asyncio.CancelledError):
        pass
    return response


def previous_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "prices.json"
    write_cache(cache, [CachedPrice("lambda", "us-east-1", "gpu_1x_h100_pcie", "on-demand",
                                    2.49, 5.0, "earlier"),
                        CachedPrice("azure", "eastus", SKU, "on-demand", 3.673, 5.0,
                                    "earlier")])
    return cache


def assert_cache_kept(cache: Path) -> None:
    assert sorted((p.provider, p.source, p.per_hour) for p in read_cache(cache)) == [
        ("azure", "earlier", 3.673), ("lambda", "earlier", 2.49)]


def get(url: str, **kwargs) -> object:
    async def main() -> object:
        async with aiohttp.ClientSession() as session:
            return await fetch(session, url, as_json=False, **kwargs)

    return asyncio.run(main())


def test_an_endless_answer_stops_at_the_cap_with_bounded_memory():
    cap = 2 << 20
    with StreamingServer({CSV_PATH: [endless_csv]}) as server:
        tracemalloc.start()
        try:
            with pytest.raises(AnswerTooLarge) as caught:
                get(server.url + CSV_PATH, max_bytes=cap, timeout_s=20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    message = str(caught.value)
    assert f"larger than {cap} bytes" in message and CSV_PATH in message, message
    assert peak < 3 * cap, f"reading peaked at {peak} bytes for a {cap}-byte cap"


def test_a_trickling_answer_stops_at_the_deadline():
    with StreamingServer({CSV_PATH: [trickle]}) as server:
        started = time.monotonic()
        with pytest.raises(FetchError, match="no answer within 1 s"):
            get(server.url + CSV_PATH, timeout_s=1.0)
        assert time.monotonic() - started < 10


def test_mlcostd_prices_refresh_catalog_on_an_endless_answer_exits_cleanly(tmp_path):
    """The issue's case end to end: the real command against an endless vms.csv, in a child
    whose address space is capped at 1.5 GiB (the old code grew to 10.7 GB)."""
    cache = previous_cache(tmp_path)

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    with StreamingServer({CSV_PATH: [endless_csv]}) as server:
        done = subprocess.run(
            [sys.executable, "-m", "daemon", "prices", "--refresh", "catalog", "--provider",
             "lambda", "--catalog-url", server.url, "--cache", str(cache)],
            capture_output=True, text=True, timeout=120, cwd=ROOT, env=os.environ,
            preexec_fn=cap_memory)
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr
    assert "the answer is larger than 67108864 bytes" in done.stderr, done.stderr
    assert "previous lambda prices kept" in done.stderr
    assert_cache_kept(cache)


@pytest.mark.parametrize("row, words", [
    ("gpu_1x_h100_pcie,H100,inf,26,200,2.49,,us-east-1,us-east-1,\n",
     "AcceleratorCount='inf' is not a count"),
    ("gpu_1x_h100_pcie,H100,nan,26,200,2.49,,us-east-1,us-east-1,\n",
     "AcceleratorCount='nan' is not a count"),
    ("gpu_1x_h100_pcie,H100,-8,26,200,2.49,,us-east-1,us-east-1,\n",
     "AcceleratorCount='-8' is not a count"),
    ("gpu_1x_h100_pcie,H100,1e300,26,200,2.49,,us-east-1,us-east-1,\n",
     "AcceleratorCount='1e300' is not a count"),
    ("gpu_1x_h100_pcie,H100,1,26,200,2.49,,us-east-1,us-east-1," + "A" * (50 << 20) + "\n",
     "a field longer than 131072 bytes"),
], ids=["count-inf", "count-nan", "count-negative", "count-1e300", "csv-field-50MB"])
def test_a_vms_csv_with_an_impossible_value_is_refused_and_the_cache_kept(tmp_path, row, words):
    cache = previous_cache(tmp_path)
    with LocalServer({CSV_PATH: [ok(HEADER + ROW + row)]}) as server:
        result = refresh_catalog(["lambda"], cache_path=cache, base_url=server.url)
    [message] = result.errors["lambda"]
    assert words in message and "line 3" in message, message
    assert "previous lambda prices kept" in message
    assert len(message) < 600
    assert result.prices == []
    assert_cache_kept(cache)


def azure_page(price_json: str) -> str:
    item = {"currencyCode": "USD", "retailPrice": "PRICE", "unitPrice": 1.0,
            "armRegionName": "eastus", "meterName": "NC24ads A100 v4",
            "productName": "Virtual Machines NCads A100 v4 Series", "skuName": "NC24ads A100 v4",
            "serviceName": "Virtual Machines", "unitOfMeasure": "1 Hour",
            "type": "Consumption", "armSkuName": SKU}
    text = json.dumps({"Items": [item], "NextPageLink": None, "Count": 1})
    return text.replace('"PRICE"', price_json)


@pytest.mark.parametrize("price, words", [
    ("1e400", "the number '1e400', which is not finite"),
    ("NaN", "NaN, which is not a number JSON allows"),
    ("Infinity", "Infinity, which is not a number JSON allows"),
    ("9" * 30, "of 30 digits"),
    ("-3.5", "per_hour=-3.5 $/h is not a price"),
    ("12345678.0", "per_hour=12345678.0 $/h is not a price"),
], ids=["1e400", "NaN", "Infinity", "30-digit-integer", "negative", "absurd"])
def test_a_json_price_that_is_not_a_price_is_refused_and_the_cache_kept(tmp_path, price, words):
    cache = previous_cache(tmp_path)
    with LocalServer({AZURE_PATH: [ok(azure_page(price))]}) as server:
        result = refresh_azure([SKU], "eastus", cache_path=cache,
                               base_url=server.url + AZURE_PATH)
    messages = " ".join(result.messages())
    assert words in messages, messages
    assert not any(p.instance_type == SKU and p.kind == "on-demand" for p in result.prices)
    assert_cache_kept(cache)
