"""Offline scoring in small batches: each batch's kernel fills about half the SMs (sm 0.5), the
next is launched as soon as the last one's scores are on the host, so the GPU is never idle
(utilization ~100%) while its SM share is ~50%: in the middle band, healthy.

As in torch, a launch returns at once and runs on the device's stream (here a thread standing
for CUDA's), and `scores.cpu()` blocks in C (a lock's acquire) until its kernel has finished:
a dump of the main thread shows the user's own line as its innermost frame, as real torch's
`.cpu()` does.

Usage: small_batch_scorer.py
"""

import _thread
import os
import queue
import signal
import sys
import threading
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
KERNEL_S = 0.025


class Scores:
    """A result still on the device: `.cpu()` waits (in C) for the kernel that makes it."""

    def __init__(self, done: "_thread.LockType") -> None:
        self.cpu = done.acquire


def stream(dev, work: "queue.SimpleQueue") -> None:
    while True:
        seconds, sm, done = work.get()
        dev.launch(sm)
        time.sleep(seconds)
        dev.synchronize()
        done.release()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(9 << 30)
    work: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=stream, args=(dev, work), name="cuda-stream", daemon=True).start()
    _gpu.ready()
    scored = 0
    while True:
        done = _thread.allocate_lock()
        done.acquire()
        work.put((KERNEL_S, 0.5, done))
        scores = Scores(done)
        scores.cpu()
        scored += 16


if __name__ == "__main__":
    main()
