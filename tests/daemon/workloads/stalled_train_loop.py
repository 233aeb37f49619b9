"""A training loop that stalls, written without mlcost in mind: it counts its steps in redis
(INCR, a dashboard reads them), runs a few steps on the GPU, then waits in its loop for a
SIGUSR1 that nobody sends (an operator meant to, and went home). It sleeps in its loop holding
the GPU, its redis connection open: a job to stop, not a worker waiting for jobs. (It waited
for a resume file once; a sleep in a loop that checks for a path now reads as a wait for a file
another process writes, looked at first: probe 152 H2.)

Usage: stalled_train_loop.py --server HOST:PORT [--steps N] [--step-ms MS]
"""

import argparse
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
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=100.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    resumed = []
    signal.signal(signal.SIGUSR1, lambda *_: resumed.append(True))  # lets it go on
    host, port = args.server.rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    dev = _gpu.attach(GPU)
    dev.alloc(12 << 30)
    _gpu.ready()
    step = 0
    while True:
        if step >= args.steps and not resumed:
            time.sleep(1.0)  # paused until the operator sends SIGUSR1
            continue
        dev.kernel(args.step_ms / 1000, sm=0.8)
        step += 1
        r.incr(f"train:{os.getpid()}:steps")


if __name__ == "__main__":
    main()
