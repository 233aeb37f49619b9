"""A GPU worker of an embedding service, written without mlcost in mind, on asyncio: it pops
the next job from a redis list with redis.asyncio's BLPOP (`await r.blpop(...)`), runs it on
the GPU and pushes the result on another list. Between jobs its event loop waits for redis's
answer.

Usage: redis_async_worker.py --server HOST:PORT [--queue NAME] [--step-ms MS]
"""

import argparse
import asyncio
import json
import os
import signal
import sys

import _gpu
import redis.asyncio as aioredis

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


async def work(args: argparse.Namespace) -> None:
    host, port = args.server.rsplit(":", 1)
    r = aioredis.Redis(host=host, port=int(port))
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    _gpu.ready()
    while True:
        # below redis-py's own socket timeout, which a longer BLPOP would run into
        popped = await r.blpop([args.queue], timeout=2)
        if popped is None:
            continue
        job = json.loads(popped[1])
        dev.kernel(args.step_ms / 1000, sm=0.8)
        await r.rpush(f"{args.queue}:done", json.dumps({"id": job["id"], "vectors": 64}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the redis server")
    parser.add_argument("--queue", default="jobs")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(work(args))


if __name__ == "__main__":
    main()
