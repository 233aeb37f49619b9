"""Fine-tuning that records per-sample metrics for later analysis: after each step, one CSV row
per sample of the batch (id, loss, accuracy, confidence, a few feature statistics)."""

import csv
import os
import random
import signal
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
_rng = random.Random(1)
STATS = [{"correct": _rng.random() > 0.3, "confidence": _rng.random(),
          **{f"feat_{i}": _rng.gauss(0.0, 1.0) for i in range(24)}} for _ in range(1024)]
FIELDS = ["step", "sample", "loss", "correct", "confidence"] + [f"feat_{i}" for i in range(24)]


def record_batch(writer: csv.DictWriter, step: int, losses: list[float]) -> None:
    rows = [dict(STATS[sample], step=step, sample=sample, loss=loss)
            for sample, loss in enumerate(losses)]
    writer.writerows(rows)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd, path = tempfile.mkstemp(prefix="metrics-", suffix=".csv",
                                dir=os.environ.get("MLCOST_SIM_DIR"))
    rng = random.Random(3)
    try:
        with os.fdopen(fd, "w", newline="") as fh, Device(gpu_index=GPU) as gpu:
            gpu.alloc(16 << 30)
            writer = csv.DictWriter(fh, fieldnames=FIELDS)
            writer.writeheader()
            step = 0
            while True:
                step += 1
                gpu.kernel(0.005, sm=0.9)
                losses = [rng.random() for _ in range(len(STATS))]  # from the step
                record_batch(writer, step, losses)
                fh.flush()
                if fh.tell() > 256 << 20:
                    fh.seek(0)
                    fh.truncate()
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
