"""Keep a nearest-neighbour index fresh, written without mlcost in mind: embed the new
documents on the GPU, then rebuild the index in a child process (multiprocessing.Process: the
build is pure Python and would hold the GIL) and wait for it with join() before the next pass.
The build is far slower than the embedding, so the GPU waits while the child works.

With --stall the child waits for the document ids the parent was meant to send it on a pipe
and never did (a bug): it never builds, never ends, and the parent waits in join() for ever.

Usage: index_rebuild.py [--build-s S] [--step-ms MS] [--stall]
"""

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def build_index(seconds: float) -> None:
    end = time.monotonic() + seconds
    acc = 0
    while time.monotonic() < end:
        for i in range(10_000):
            acc = (acc * 31 + i) % 1_000_000_007


def build_from(ids: "mp.connection.Connection") -> None:
    wanted = ids.recv()  # the parent never sends them
    build_index(float(len(wanted)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-s", type=float, default=120.0)
    parser.add_argument("--step-ms", type=float, default=500.0)
    parser.add_argument("--stall", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(11 << 30)
        while True:
            gpu.kernel(args.step_ms / 1000, sm=0.9)  # embed the new documents
            if args.stall:
                receive, _send = mp.Pipe(duplex=False)
                builder = mp.Process(target=build_from, args=(receive,), daemon=True)
            else:
                builder = mp.Process(target=build_index, args=(args.build_s,), daemon=True)
            builder.start()
            builder.join()


if __name__ == "__main__":
    main()
