"""A training loop whose main thread hashes each step's features in plain Python between its
kernels, for a fixed time budget: ~45 ms of hashing per 50-ms kernel, so its GPU is busy about
half the time (45% SM share at sm 0.9), above [attribution].low_sm_share, and no
low-utilization window ever opens; the hashing is what keeps the GPU waiting.

The hashing runs to a deadline, not over a fixed number of rows, so the share stays near 45%
however loaded the host is (a fixed amount of work takes longer on a busy host, and the share
would drop under low_sm_share, where a window opens and samples it anyway).

Usage: hash_between_kernels.py [--budget 0.045] [--kernel 0.05]
"""

import argparse
import hashlib
import os
import signal
import sys
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def hash_features(budget_s: float) -> int:
    """Hash feature rows until the step's budget is spent; the number of rows hashed."""
    end = time.monotonic() + budget_s
    rows = 0
    digest = hashlib.sha256()
    while time.monotonic() < end:
        for row in range(rows, rows + 64):
            digest.update(f"{row}:feature:{row * 31 % 4096}".encode())
        rows += 64
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=0.045)
    parser.add_argument("--kernel", type=float, default=0.05)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(12 << 30)
    _gpu.ready()
    while True:
        hash_features(args.budget)
        dev.kernel(args.kernel, sm=0.9)


if __name__ == "__main__":
    main()
