"""Two ranks of a job that meet at a torch.distributed barrier after every step. Rank 0 also
rebuilds a lookup index on the CPU each step, so rank 1 waits for it at the barrier.

    python two_ranks.py --rank 0 & python two_ranks.py --rank 1
(the ranks find each other through a file store next to the simulated host)"""

import argparse
import os
import random
import signal
import sys
from datetime import timedelta

import torch.distributed as dist

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def build_index(n: int) -> dict[int, list[int]]:
    rng = random.Random(11)
    index: dict[int, list[int]] = {}
    for i in range(n):
        index.setdefault(rng.randrange(1000), []).append(i)
    return index


def wait_for_peers() -> None:
    dist.barrier()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--store", default=os.path.join(os.environ.get("MLCOST_SIM_DIR", "/tmp"),
                                                   "two-ranks.store"))
    args = p.parse_args()
    dist.init_process_group("gloo", init_method=f"file://{args.store}", rank=args.rank,
                            world_size=2, timeout=timedelta(seconds=600))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(16 << 30)
        while True:
            gpu.kernel(0.05, sm=0.9)
            if args.rank == 0:
                build_index(400000)
            wait_for_peers()


if __name__ == "__main__":
    main()
