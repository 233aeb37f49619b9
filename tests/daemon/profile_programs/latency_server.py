"""A model server under a load test, as `mlcostd profile --latency` sees one: a real aiohttp
server exports a request-latency histogram made by prometheus-client (as vLLM, TGI and Triton
do) while each request runs a kernel on the simulated GPU. Every request takes FAST_S, and with
--slow-every N each Nth takes SLOW_S: p99 swings while p50 is fine."""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from daemon.sim.device import Device

FAST_S = 0.05
SLOW_S = 2.0
BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0)


async def serve(args: argparse.Namespace) -> None:
    registry = CollectorRegistry()
    latency = Histogram("request_latency_seconds", "End-to-end request latency",
                        buckets=BUCKETS, registry=registry)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    with Device(gpu_index=0) as gpu:
        gpu.alloc(8 << 30)
        for number in range(1, args.requests + 1):
            await asyncio.to_thread(gpu.kernel, FAST_S, sm=0.6)
            slow = args.slow_every and number % args.slow_every == 0
            latency.observe(SLOW_S if slow else FAST_S)
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--slow-every", type=int, default=0)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
