"""A GPU worker of a transcoding service, written without mlcost in mind: producers push jobs
on a redis list; this process pops the next one with BLPOP (redis-py), runs it on the GPU and
pushes the result on another list. Between jobs it waits in BLPOP, which returns None after
its timeout with nothing queued, and it asks again.

Usage: redis_job_worker.py --server HOST:PORT | --socket PATH [--queue NAME] [--step-ms MS]
"""

import argparse
import json
import os
import signal
import sys

import redis

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def connect(args: argparse.Namespace) -> redis.Redis:
    if args.socket:
        return redis.Redis(unix_socket_path=args.socket)
    host, port = args.server.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port))


def main() -> None:
    parser = argparse.ArgumentParser()
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="HOST:PORT of the redis server")
    where.add_argument("--socket", help="unix socket of the redis server")
    parser.add_argument("--queue", default="jobs")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    r = connect(args)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(10 << 30)
        print("READY", flush=True)
        while True:
            # below redis-py's own socket timeout (5 s from 6.x on), which a longer BLPOP
            # would run into
            popped = r.blpop(args.queue, timeout=2)
            if popped is None:
                continue
            job = json.loads(popped[1])
            gpu.kernel(args.step_ms / 1000, sm=0.8)
            r.rpush(f"{args.queue}:done", json.dumps({"id": job["id"], "frames": 240}))


if __name__ == "__main__":
    main()
