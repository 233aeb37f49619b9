"""A GPU worker of a thumbnail service, written without mlcost in mind: producers push jobs on a
redis list; this process takes the next one with a plain LPOP (or RPOP), which answers at once,
and when the list is empty it sleeps a moment and asks again (polling, not a blocking pop). It
runs each job on the GPU and pushes the result on another list.

Usage: redis_polling_worker.py --server HOST:PORT [--queue NAME] [--pop lpop|rpop]
                               [--sleep S] [--step-ms MS]
"""

import argparse
import json
import os
import signal
import sys
import time

import _gpu
import redis

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the redis server")
    parser.add_argument("--queue", default="jobs")
    parser.add_argument("--pop", choices=("lpop", "rpop"), default="lpop")
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.server.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    _gpu.ready()
    while True:
        raw = r.lpop(args.queue) if args.pop == "lpop" else r.rpop(args.queue)
        if raw is None:
            time.sleep(args.sleep)  # nothing queued: ask again in a moment
            continue
        job = json.loads(raw)  # type: ignore[arg-type]  # (bytes: a JSON job)
        dev.kernel(args.step_ms / 1000, sm=0.8)
        r.rpush(f"{args.queue}:done", json.dumps({"id": job["id"], "thumbnails": 12}))


if __name__ == "__main__":
    main()
