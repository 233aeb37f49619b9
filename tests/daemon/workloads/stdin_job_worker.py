"""A GPU worker whose parent hands it jobs over its stdin, written without mlcost in mind (the
way a Node or Go front end drives a Python model process): one JSON job a line on stdin, one
JSON answer a line on stdout. Between jobs it waits in `sys.stdin.readline()` (a read in C).

With --parent it is that parent: it starts the worker with pipes and sends it a job every
--every seconds.

Usage: stdin_job_worker.py [--parent] [--every S] [--step-ms MS]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def serve(step_s: float) -> None:
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(6 << 30)
        while True:
            line = sys.stdin.readline()
            if not line:
                return
            job = json.loads(line)
            gpu.kernel(step_s, sm=0.7)
            print(json.dumps({"id": job["id"], "label": job["id"] % 3}), flush=True)


def drive(every: float, step_ms: float) -> None:
    worker = subprocess.Popen([sys.executable, __file__, "--step-ms", str(step_ms)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert worker.stdin is not None and worker.stdout is not None
    n = 0
    while True:
        worker.stdin.write(json.dumps({"id": n}) + "\n")
        worker.stdin.flush()
        worker.stdout.readline()
        n += 1
        time.sleep(every)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parent", action="store_true")
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.parent:
        drive(args.every, args.step_ms)
    else:
        serve(args.step_ms / 1000)


if __name__ == "__main__":
    main()
