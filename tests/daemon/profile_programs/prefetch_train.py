"""The same training loop, fixed: four loader threads read batches ahead into a queue (like a
DataLoader with num_workers=4 and prefetching), so the GPU does not wait for the storage."""

from __future__ import annotations

import argparse
import queue
import threading
import zlib

from remote_dataset import RemoteShard

from daemon.sim.device import Device

BATCH_BYTES = 1 << 20
LOADERS = 4


def load_ahead(batches: queue.Queue[bytes]) -> None:
    shard = RemoteShard(bytes_per_second=4e6)
    while True:
        batches.put(shard.read(BATCH_BYTES))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args()
    batches: queue.Queue[bytes] = queue.Queue(maxsize=4 * LOADERS)
    for n in range(LOADERS):
        threading.Thread(target=load_ahead, args=(batches,), name=f"loader-{n}",
                         daemon=True).start()
    with Device(gpu_index=0) as gpu:
        gpu.alloc(8 << 30)
        for step in range(1, args.steps + 1):
            batch = batches.get()
            gpu.kernel(0.12, sm=0.9)  # forward and backward
            loss = zlib.crc32(batch) % 1000 / 1000
            print(f"step {step}/{args.steps} loss {loss:.3f}", flush=True)


if __name__ == "__main__":
    main()
