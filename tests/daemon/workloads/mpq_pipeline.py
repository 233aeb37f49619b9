"""A pipeline, written without mlcost in mind (probe 143 F1): the parent (no GPU) takes work
from somewhere and puts a job on a multiprocessing.Queue now and then; a child process keeps
the model on the GPU and takes each job from the queue, blocked in its get between jobs.
The child works on demand: stopping it stops the pipeline.

Usage: mpq_pipeline.py --every S --done-file PATH (the parent appends a line per job done)
"""

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def gpu_worker(jobs, results) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(16 << 30)
    while True:
        job = jobs.get()
        for _ in range(20):
            dev.kernel(0.1, sm=0.9)
        results.put((job, "ok"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=float, required=True)
    parser.add_argument("--done-file", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    jobs, results = mp.Queue(), mp.Queue()
    mp.Process(target=gpu_worker, args=(jobs, results), daemon=True).start()
    n = 0
    while True:
        time.sleep(args.every)
        n += 1
        jobs.put({"batch": n})
        results.get()
        with open(args.done_file, "a") as done:
            done.write(f"{n} {time.time():.3f}\n")


if __name__ == "__main__":
    main()
