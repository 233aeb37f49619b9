"""Two ranks that average host-side statistics with torch.distributed over gloo, for ever: after
one pass on the GPU they keep all-reducing a CPU tensor (gloo's ring: each rank copies and adds
its chunks on its CPU). Their GPUs idle and their stacks sit in `dist.all_reduce`, as a hung
job's would, but data moves: their CPUs are busy. Usage: host_ring_reduce.py PORT."""
import os
import sys

import _gpu
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

GPUS = [int(g) for g in os.environ.get("MLCOST_SIM_GPUS", "0,1").split(",")]


def worker(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    dev = _gpu.attach(GPUS[rank])
    dev.alloc(4 << 30)
    dev.kernel(0.5, sm=0.9)
    stats = torch.ones(1 << 20)
    while True:
        dist.all_reduce(stats)
        stats /= world


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1])), nprocs=2)
