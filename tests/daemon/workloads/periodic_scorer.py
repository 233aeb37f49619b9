"""Score the rows that came in since the last run, every few minutes, written without mlcost in
mind: the model is loaded on the GPU once and kept there, each run scores the new rows on the
GPU, then the loop sleeps until the next one (a cron-like job written as a loop, as probe 109's
nightly scorer: 5 s of kernels, then time.sleep(300)).

Usage: periodic_scorer.py [--every S] [--run-s S]
"""

import argparse
import os
import signal
import sys
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--every", type=float, default=300.0, help="seconds between runs")
    parser.add_argument("--run-s", type=float, default=5.0, help="seconds of kernels a run")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(8 << 30)  # the model, loaded once
        while True:
            gpu.kernel(args.run_s, sm=0.7)  # score the new rows
            print("scored the new rows at", time.strftime("%H:%M:%S"), flush=True)
            time.sleep(args.every)


if __name__ == "__main__":
    main()
