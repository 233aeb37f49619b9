"""A training job that keeps its GPUs busy: mostly kernels, a little host work between steps.

With several GPUs it runs one thread per GPU (like single-process data parallelism) and
synchronizes the ranks after every step, as an all-reduce would.
"""

from __future__ import annotations

import hashlib
import random
import threading

from daemon.sim.device import Device
from daemon.sim.workloads import _common

GIB = 1 << 30
# What it holds on each of its GPUs unless --memory-gib says (daemon.sim.scenario.resized
# places the workloads of a resized host by it).
MEMORY_GIB = 30.0


def next_batch(rng: random.Random, batch_size: int) -> bytes:
    """Host side of a well-fed input pipeline: the batch is already prefetched, just pack it."""
    return rng.randbytes(batch_size * 64)


def train_step(dev: Device, batch: bytes, step_seconds: float, sm: float) -> str:
    dev.kernel(step_seconds, sm=sm)  # forward + backward + optimizer step
    return hashlib.blake2b(batch, digest_size=8).hexdigest()


def train_rank(rank: int, gpu: int, args: object, barrier: threading.Barrier, stop: threading.Event,
               log: object) -> None:
    rng = random.Random(rank)
    with Device(gpu_index=gpu) as dev:
        dev.alloc(int(args.memory_gib * GIB))  # type: ignore[attr-defined]
        step = 0
        while not stop.is_set():
            batch = next_batch(rng, args.batch_size)  # type: ignore[attr-defined]
            train_step(dev, batch, args.step_seconds, args.sm)  # type: ignore[attr-defined]
            step += 1
            try:
                barrier.wait()  # all-reduce of gradients across ranks
            except threading.BrokenBarrierError:
                return
            if rank == 0 and step % 200 == 0:
                log.info("step %d", step)  # type: ignore[attr-defined]


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--memory-gib", type=float, default=MEMORY_GIB)
    p.add_argument("--step-seconds", type=float, default=0.25)
    p.add_argument("--sm", type=float, default=0.85)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    log = _common.setup("healthy_train")
    gpus = _common.gpu_list(args.gpu)
    stop = threading.Event()
    barrier = threading.Barrier(len(gpus))
    ranks = [
        threading.Thread(target=train_rank, args=(r, g, args, barrier, stop, log), name=f"rank{r}")
        for r, g in enumerate(gpus[1:], start=1)
    ]
    for t in ranks:
        t.start()
    try:
        train_rank(0, gpus[0], args, barrier, stop, log)
    finally:
        stop.set()
        barrier.abort()
        for t in ranks:
            t.join()


if __name__ == "__main__":
    main()
