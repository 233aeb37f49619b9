"""Fine-tune on augmented crops, written without mlcost in mind: producer threads decode and
augment samples in plain Python and hand finished batches to the training loop through a
queue.SimpleQueue (whose get is C: the loop's wait leaves no Python frame). The loop runs one
short step per batch on the GPU; the producers are far slower, so the GPU waits most of the
time (~1-2% busy) while the process keeps a core busy decoding.

Usage: augment_pipeline.py [--batch-size N] [--step-ms MS] [--producers N]
"""

import argparse
import os
import queue
import random
import signal
import sys
import threading

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
CROP = 64


def decode_sample(rng: random.Random) -> list[list[int]]:
    raw = rng.randbytes(CROP * CROP)
    return [list(raw[row * CROP:(row + 1) * CROP]) for row in range(CROP)]


def augment(image: list[list[int]], rng: random.Random) -> list[list[int]]:
    gain = rng.uniform(0.8, 1.2)
    flipped = [row[::-1] for row in image] if rng.random() < 0.5 else image
    return [[min(255, int(p * gain + rng.gauss(0, 3))) for p in row] for row in flipped]


def produce(batches: queue.SimpleQueue, seed: int, batch_size: int) -> None:
    rng = random.Random(seed)
    while True:
        batch = []
        for _ in range(batch_size):
            image = decode_sample(rng)
            for _ in range(6):
                image = augment(image, rng)
            batch.append(image)
        batches.put(batch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=192)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--producers", type=int, default=2)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    batches: queue.SimpleQueue = queue.SimpleQueue()
    for i in range(args.producers):
        threading.Thread(target=produce, args=(batches, i, args.batch_size),
                         name=f"producer-{i}", daemon=True).start()
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(12 << 30)
        steps = 0
        while True:
            batch = batches.get()
            gpu.kernel(args.step_ms / 1000 + 0 * len(batch), sm=0.9)
            steps += 1


if __name__ == "__main__":
    main()
