"""A training loop whose samples live in redis, written without mlcost in mind: a preprocessing
job left the dataset there (one key per sample, a few hundred KB each: a decoded image, a
tokenized document); each step reads its batch's samples from the redis server with GET (or
one MGET, or a pipeline of GETs) and runs a short step on the GPU. Most of its time goes into
reading: its GPU waits for input.

Usage: redis_fed_loop.py --server HOST:PORT [--read get|mget|pipeline] [--samples N]
                         [--sample-kb KB] [--batch N] [--step-ms MS]
"""

import argparse
import itertools
import os
import signal
import sys

import _gpu
import redis


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the redis server")
    parser.add_argument("--read", choices=("get", "mget", "pipeline"), default="get")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--sample-kb", type=int, default=512)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--step-ms", type=float, default=1.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.server.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    keys = [f"train:{os.getpid()}:sample:{i}" for i in range(args.samples)]
    for key in keys:  # the dataset a preprocessing job would have left in redis
        r.set(key, os.urandom(args.sample_kb << 10))
    dev = _gpu.attach()
    dev.alloc(8 << 30)
    _gpu.ready()
    order = itertools.cycle(keys)
    while True:
        batch_keys = [next(order) for _ in range(args.batch)]
        if args.read == "get":
            batch = [r.get(key) for key in batch_keys]
        elif args.read == "mget":
            batch = r.mget(batch_keys)
        else:
            pipe = r.pipeline(transaction=False)
            for key in batch_keys:
                pipe.get(key)
            batch = pipe.execute()
        assert all(batch)
        dev.kernel(args.step_ms / 1000, sm=0.8)


if __name__ == "__main__":
    main()
