"""A healthy training loop that logs its metrics as JSON lines after every step."""

import json
import os
import signal
import sys
import tempfile
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def log_metrics(fh, step: int) -> None:
    fh.write(json.dumps({"step": step, "loss": 1.0 / step, "lr": 3e-4, "time": time.time()}) + "\n")
    fh.flush()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd, path = tempfile.mkstemp(prefix="metrics-", suffix=".jsonl",
                                dir=os.environ.get("MLCOST_SIM_DIR"))
    try:
        with os.fdopen(fd, "w") as fh, Device(gpu_index=GPU) as gpu:
            gpu.alloc(30 << 30)
            step = 0
            while True:
                step += 1
                gpu.kernel(0.25, sm=0.9)
                log_metrics(fh, step)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
