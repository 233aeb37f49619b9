"""A job whose preprocessing runs in a thread, written without mlcost in mind: a warm-up pass on
the GPU, then the main thread starts a thread that hashes its shards in plain Python and joins
it (probe 132 H3). Its GPU idles, its main thread waits in Thread.join, its CPU works: a job at
work, never one to stop.

Usage: thread_preprocess.py
"""

import hashlib
import os
import signal
import sys
import threading
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def preprocess() -> None:
    """Hash shards for ever: 50 ms of pure Python, then a 50 ms pause (half a core, so a test
    host's other work goes on)."""
    h = hashlib.sha256()
    buf = bytes(range(256)) * 64
    while True:
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            for i in range(0, len(buf), 64):
                h.update(buf[i:i + 64])
        time.sleep(0.05)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(12 << 30)
    dev.kernel(0.5, sm=0.9)  # warm-up
    _gpu.ready()
    worker = threading.Thread(target=preprocess, daemon=True)
    worker.start()
    worker.join()


if __name__ == "__main__":
    main()
