"""Process a batch of new rows, then wait for the next batch, written without mlcost in mind:
the model is loaded on the GPU once and kept there; each batch computes for a while, then the
loop waits on a threading.Event with a timeout until the next one (an interruptible sleep: the
SIGTERM handler sets the event, so the job stops at once rather than after its wait, the way a
job that must stop promptly is written).

Usage: batches_then_waits.py [--batch-s S] [--every S]
"""

import argparse
import os
import signal
import threading
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-s", type=float, default=30.0, help="seconds of kernels a batch")
    parser.add_argument("--every", type=float, default=600.0, help="seconds between batches")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(8 << 30)  # the model, loaded once
        while True:
            gpu.kernel(args.batch_s, sm=0.8)  # the batch
            print("batch done at", time.strftime("%H:%M:%S"), flush=True)
            if stop.wait(args.every):
                break


if __name__ == "__main__":
    main()
