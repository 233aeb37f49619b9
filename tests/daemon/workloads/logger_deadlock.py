"""A training script whose step thread and stats-logger thread deadlock on two locks (a real
lock-order bug): the step thread holds the model lock and wants the stats lock, the logger the
other way round. The main thread joins them; the model stays on the GPU and nothing runs again.

Usage: logger_deadlock.py [--steps N]
"""

import argparse
import os
import signal
import sys
import threading
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
stats_lock = threading.Lock()
model_lock = threading.Lock()
stats = {"steps": 0, "loss": 0.0}


def train_steps(gpu, steps: int) -> None:
    for step in range(steps):
        gpu.kernel(0.1, sm=0.9)
        with stats_lock:
            stats["steps"] += 1
            stats["loss"] = 1.0 / (step + 1)
    with model_lock:  # average the weights into the model, then record it
        gpu.kernel(2.0, sm=0.5)
        with stats_lock:
            stats["swapped"] = stats["steps"]


def log_stats(every_s: float) -> None:
    while True:
        time.sleep(every_s)
        with stats_lock:  # a snapshot of the stats, with the model's version
            line = f"step {stats['steps']} loss {stats['loss']:.4f}"
            with model_lock:
                print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # its threads never end
    gpu = _gpu.attach(GPU)
    gpu.alloc(25 << 30)
    trainer = threading.Thread(target=train_steps, args=(gpu, args.steps), name="trainer")
    logger = threading.Thread(target=log_stats, args=(0.4,), name="stats-logger", daemon=True)
    trainer.start()
    logger.start()
    trainer.join()
    sys.exit(0)


if __name__ == "__main__":
    main()
