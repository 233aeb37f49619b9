"""A GPU worker of an embedding service, written without mlcost in mind: a submitter process
puts documents on a multiprocessing Manager queue as they come in; this process takes each job
(the proxy's get waits in a socket recv inside multiprocessing), embeds it on the GPU and puts
the result on a second queue. Between jobs it waits.

Usage: embed_job_worker.py [--every S] [--step-ms MS]
"""

import argparse
import multiprocessing
import os
import random
import signal
import sys
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def submit(jobs, every: float) -> None:
    rng = random.Random(7)
    n = 0
    while True:
        jobs.put({"id": n, "text": " ".join(rng.choice("abcdefgh") * 5 for _ in range(2000))})
        n += 1
        time.sleep(every)


def embed(gpu: Device, text: str, step_s: float) -> list[float]:
    gpu.kernel(step_s, sm=0.7)
    return [len(text) / 1000.0] * 8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=float, default=15.0, help="seconds between jobs")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with multiprocessing.Manager() as manager:
        jobs, results = manager.Queue(), manager.Queue()
        multiprocessing.Process(target=submit, args=(jobs, args.every), daemon=True).start()
        with Device(gpu_index=GPU) as gpu:
            gpu.alloc(9 << 30)
            while True:
                job = jobs.get()
                results.put({"id": job["id"],
                             "vector": embed(gpu, job["text"], args.step_ms / 1000)})


if __name__ == "__main__":
    main()
