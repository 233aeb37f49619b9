"""Evaluate a model and save its metrics from two threads, written without mlcost in mind, with
a lock-order bug: the evaluator takes the metrics lock then the checkpoint lock, the saver the
other way round, and after the first evaluation they deadlock. The main thread waits on a
queue.Queue for the evaluator's report, which never comes: a stalled job holding its GPU.

Usage: deadlocked_eval.py [--eval-s S]
"""

import argparse
import os
import queue
import signal
import threading

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
metrics_lock = threading.Lock()
ckpt_lock = threading.Lock()
reports: "queue.Queue[str]" = queue.Queue()


def evaluator(gpu: Device, seconds: float, evaluating: threading.Event,
              saving: threading.Event) -> None:
    gpu.kernel(seconds, sm=0.8)
    with metrics_lock:
        evaluating.set()
        saving.wait()
        with ckpt_lock:
            reports.put("evaluated")


def saver(evaluating: threading.Event, saving: threading.Event) -> None:
    with ckpt_lock:
        saving.set()
        evaluating.wait()
        with metrics_lock:
            reports.put("saved")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval-s", type=float, default=3.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # its threads never end
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(13 << 30)
        evaluating, saving = threading.Event(), threading.Event()
        threading.Thread(target=evaluator, args=(gpu, args.eval_s, evaluating, saving),
                         daemon=True).start()
        threading.Thread(target=saver, args=(evaluating, saving), daemon=True).start()
        for _ in range(2):
            print(reports.get(), flush=True)


if __name__ == "__main__":
    main()
