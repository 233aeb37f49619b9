"""Data-parallel training with multiprocessing: one process per GPU, each hashing the features of
its own shard of the data on the CPU, running its step, and meeting the others at a
multiprocessing.Barrier before the next step (where an all-reduce would be). The shards are not
the same size: the last rank's is six times the others', so the others wait for it.

    MLCOST_SIM_GPUS=0,1,2 python train_shards_mp.py [--rows 40000]"""

import argparse
import multiprocessing as mp
import os
import signal
import sys
import zlib

from daemon.sim.device import Device

GPUS = [int(g) for g in os.environ.get("MLCOST_SIM_GPUS", "0,1,2").split(",")]


def hash_features(rows: int, rank: int) -> list[int]:
    return [zlib.crc32(f"{rank}:{row}:feature".encode()) % 4096 for row in range(rows)]


def run_rank(rank: int, world: int, barrier, shard: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    rows = shard * (6 if rank == world - 1 else 1)
    with Device(gpu_index=GPUS[rank]) as gpu:
        gpu.alloc(20 << 30)
        while True:
            features = hash_features(rows, rank)
            gpu.kernel(0.05 + 0 * len(features), sm=0.9)
            barrier.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=40000, help="rows in each rank's shard")
    shard = parser.parse_args().rows
    world = len(GPUS)
    barrier = mp.Barrier(world)
    ranks = [mp.Process(target=run_rank, args=(rank, world, barrier, shard), name=f"rank{rank}")
             for rank in range(world)]
    for proc in ranks:
        proc.start()

    def stop(*_):
        for proc in ranks:
            proc.terminate()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    for proc in ranks:
        proc.join()


if __name__ == "__main__":
    main()
