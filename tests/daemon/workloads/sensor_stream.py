"""Light streaming inference, written without mlcost in mind: a small model scores a sensor
frame every 3 s, a 30 ms kernel at 30% of the SMs (probe 132 H2). It works all the time, though
its SM share averages 0.2%.

Usage: sensor_stream.py [--every S]
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
    parser.add_argument("--every", type=float, default=3.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(8 << 30)
    _gpu.ready()
    while True:
        dev.kernel(0.03, sm=0.3)
        time.sleep(args.every)


if __name__ == "__main__":
    main()
