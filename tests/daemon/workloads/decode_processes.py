"""Train on frames that decoder processes prepare, written without mlcost in mind: each
decoder process decodes and augments in plain Python and puts finished batches on a
multiprocessing.Queue; the loop takes them (the get waits in a pipe inside multiprocessing)
and runs one short step per batch on the GPU. The decoders are far slower than the step, so
the GPU waits most of the time while the decoders keep their cores busy.

Usage: decode_processes.py [--decoders N] [--step-ms MS]
"""

import argparse
import multiprocessing
import os
import random
import signal
import sys

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
SIDE = 64


def decode_frame(rng: random.Random) -> list[list[int]]:
    return [[rng.randrange(256) for _ in range(SIDE)] for _ in range(SIDE)]


def decode_batches(batches: multiprocessing.Queue, seed: int) -> None:
    rng = random.Random(seed)
    while True:
        frame = decode_frame(rng)
        for _ in range(400):
            frame = [[min(255, int(p * 1.01)) for p in row[::-1]] for row in frame]
        batches.put(frame)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--decoders", type=int, default=1)
    parser.add_argument("--step-ms", type=float, default=10.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    batches: multiprocessing.Queue = multiprocessing.Queue(maxsize=8)
    for seed in range(args.decoders):
        multiprocessing.Process(target=decode_batches, args=(batches, seed), daemon=True).start()
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(10 << 30)
        while True:
            frame = batches.get()
            gpu.kernel(args.step_ms / 1000 + 0 * len(frame), sm=0.9)


if __name__ == "__main__":
    main()
