"""Two-rank model-parallel training that exchanges halo activations with point-to-point ops
(torch.distributed over gloo, ranks started by torch.multiprocessing.spawn).

Bug, as its author made it: after the warm-up steps both ranks post their recv before their send
(a refactor moved the send below), so each waits for the other forever: no rank works, both
GPUs idle, both processes block in `dist.recv`. Usage: halo_deadlock.py PORT (a free port for
the rendezvous)."""
import os
import sys

import _gpu
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

GPUS = [int(g) for g in os.environ.get("MLCOST_SIM_GPUS", "0,1").split(",")]
WARM_UP_STEPS = 3


def worker(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    dev = _gpu.attach(GPUS[rank])
    dev.alloc(10 << 30)
    peer = 1 - rank
    halo = torch.zeros(1 << 12)
    step = 0
    while True:
        dev.kernel(0.5, sm=0.9)
        if step < WARM_UP_STEPS:
            if rank == 0:
                dist.send(halo, peer)
                dist.recv(halo, peer)
            else:
                dist.recv(halo, peer)
                dist.send(halo, peer)
        else:
            dist.recv(halo, peer)  # both ranks wait here for the other's send
            dist.send(halo, peer)
        step += 1


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1])), nprocs=2)
