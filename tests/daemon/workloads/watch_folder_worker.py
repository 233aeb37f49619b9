"""A GPU worker of a scan-processing service, written without mlcost in mind: an uploader drops
each scan into an inbox folder; this process looks at the folder every couple of seconds, runs
each new file through its model on the GPU, writes the result beside it in an outbox and moves
the scan to a done folder. Between files it sleeps in its loop (`--asyncio`: the same loop as a
coroutine awaiting asyncio.sleep).

Usage: watch_folder_worker.py --inbox DIR --outbox DIR [--asyncio] [--every S] [--step-ms MS]
"""

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def process(dev, scan: Path, outbox: Path, step_ms: float) -> None:
    dev.kernel(step_ms / 1000, sm=0.8)
    (outbox / f"{scan.stem}.json").write_text(json.dumps({"scan": scan.name, "lesions": 0}))
    scan.rename(outbox / scan.name)


def watch(dev, args: argparse.Namespace) -> None:
    while True:
        for name in sorted(os.listdir(args.inbox)):
            process(dev, Path(args.inbox) / name, Path(args.outbox), args.step_ms)
        time.sleep(args.every)  # nothing new: look again in a moment


async def watch_async(dev, args: argparse.Namespace) -> None:
    inbox = Path(args.inbox)
    while True:
        for scan in sorted(inbox.glob("*.npy")):
            process(dev, scan, Path(args.outbox), args.step_ms)
        await asyncio.sleep(args.every)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inbox", required=True)
    parser.add_argument("--outbox", required=True)
    parser.add_argument("--asyncio", action="store_true")
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    _gpu.ready()
    if args.asyncio:
        asyncio.run(watch_async(dev, args))
    else:
        watch(dev, args)


if __name__ == "__main__":
    main()
