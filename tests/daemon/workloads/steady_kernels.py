"""A training loop that keeps its GPU busy: a 90-ms kernel at sm 1.0, then 10 ms of host
bookkeeping (a sleep here), so its SM share is ~90%.

Usage: steady_kernels.py
"""

import os
import signal
import sys
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(12 << 30)
    _gpu.ready()
    while True:
        dev.kernel(0.09, sm=1.0)
        time.sleep(0.01)


if __name__ == "__main__":
    main()
