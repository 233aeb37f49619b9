"""A trainer, written without mlcost in mind: it puts its model on the GPU, then waits for the
done-marker that a preprocessing job on the same host writes when its shards are ready, looking
for it every few seconds (`while not os.path.exists(marker): time.sleep(...)`), then trains
(probe 152 H2: it read as a plain sleep, was offered the SIGTERM and let the host stop while the
preprocessing job worked).

Usage: waits_for_marker.py --marker PATH [--every S]
"""

import argparse
import os
import signal
import sys
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker", required=True, help="the file the preprocessing job writes")
    parser.add_argument("--every", type=float, default=5.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    dev.kernel(0.5, sm=0.6)  # the model's first forward pass
    _gpu.ready()
    while not os.path.exists(args.marker):
        time.sleep(args.every)
    while True:
        dev.kernel(0.1, sm=0.9)


if __name__ == "__main__":
    main()
