"""Train on batches that a concurrent.futures pool makes, written without mlcost in mind: the
loop submits batch-making work (decoding and augmenting in plain Python) to a
ProcessPoolExecutor (or a ThreadPoolExecutor) and waits on the results before each short GPU
step. The pool is far slower than the step, so the GPU waits most of the time while the pool's
workers keep their cores busy. How it takes the results:

  result        pool.submit(...) a few batches ahead, then future.result() on the oldest
  map           for batch in pool.map(make_batch, an epoch's ids), epoch after epoch
  as_completed  submit a round of batches, then for f in as_completed(round)
  wait          submit a round of batches, then concurrent.futures.wait(round)

Prints READY when its first batch is made, then runs until killed.

Usage: executor_fed.py [--pool process|thread] [--take result|map|as_completed|wait]
                       [--workers N] [--step-ms MS]
"""

import argparse
import collections
import concurrent.futures
import itertools
import multiprocessing
import os
import random
import signal

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
SIDE = 64
AHEAD = 4  # batches submitted ahead of the loop
EPOCH = 64  # batches of one pool.map (it submits them all at once)


def make_batch(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    frame = [[rng.randrange(256) for _ in range(SIDE)] for _ in range(SIDE)]
    for _ in range(400):  # far slower than the step: ~1-3% GPU busy
        frame = [[min(255, int(p * 1.01)) for p in row[::-1]] for row in frame]
    return frame


def batches(pool: concurrent.futures.Executor, take: str):  # noqa: ANN201 - a generator
    seeds = itertools.count()
    if take == "map":
        for epoch in itertools.count():
            yield from pool.map(make_batch, range(epoch * EPOCH, (epoch + 1) * EPOCH))
    elif take == "result":
        ahead = collections.deque(pool.submit(make_batch, next(seeds)) for _ in range(AHEAD))
        while True:
            batch = ahead.popleft().result()
            ahead.append(pool.submit(make_batch, next(seeds)))
            yield batch
    else:
        while True:
            round_ = [pool.submit(make_batch, next(seeds)) for _ in range(AHEAD)]
            if take == "as_completed":
                for done in concurrent.futures.as_completed(round_):
                    yield done.result()
            else:
                finished, _ = concurrent.futures.wait(round_)
                yield from (f.result() for f in finished)


def stop(*_: object) -> None:
    """Now, at once: an exit would wait for the batches submitted ahead. A worker process
    inherits this; its parent takes it down too, signalled alone (a worker waiting for its next
    task never learns that its parent died)."""
    for worker in multiprocessing.active_children():
        worker.kill()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pool", choices=("process", "thread"), default="process")
    parser.add_argument("--take", choices=("result", "map", "as_completed", "wait"),
                        default="result")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=10.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, stop)
    executor = (concurrent.futures.ProcessPoolExecutor if args.pool == "process"
                else concurrent.futures.ThreadPoolExecutor)
    with executor(max_workers=args.workers) as pool, Device(gpu_index=GPU) as gpu:
        gpu.alloc(10 << 30)
        for i, batch in enumerate(batches(pool, args.take)):
            if i == 0:
                print("READY", flush=True)
            gpu.kernel(args.step_ms / 1000 + 0 * len(batch), sm=0.9)


if __name__ == "__main__":
    main()
