"""An asyncio embedding job that stalls, written without mlcost in mind: it embeds a few
batches on the GPU, then awaits the upstream service's "next shard" notification, which never
comes (the callback was lost). `--poll S`: it waits for a resume file instead, looking for it
every S seconds with asyncio.sleep (a job waiting on an operator who went home).

Usage: aio_stalled_job.py [--steps N] [--step-ms MS] [--poll S --resume PATH]
"""

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


async def run(dev, args: argparse.Namespace) -> None:
    next_shard = asyncio.Event()
    while True:
        for _ in range(args.steps):
            await asyncio.to_thread(dev.kernel, args.step_ms / 1000, 0.8)
        if args.poll:
            while not Path(args.resume).exists():
                await asyncio.sleep(args.poll)
        else:
            await next_shard.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=200.0)
    parser.add_argument("--poll", type=float, default=0.0)
    parser.add_argument("--resume")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(12 << 30)
    _gpu.ready()
    asyncio.run(run(dev, args))


if __name__ == "__main__":
    main()
