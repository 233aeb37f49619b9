"""A training loop that keeps a durable event log: after every few steps it appends one JSON
line per example (id, loss, the logits) and fsyncs the file, so a crash loses no record."""

import json
import os
import random
import signal
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
_rng = random.Random(1)
LOGITS = [[_rng.gauss(0.0, 1.0) for _ in range(200)] for _ in range(128)]


def append_events(fh, step: int, losses: list[float], logits: list[list[float]]) -> None:
    for example, (loss, row) in enumerate(zip(losses, logits, strict=True)):
        record = {"step": step, "example": example, "loss": loss, "logits": row}
        fh.write(json.dumps(record) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    fd, path = tempfile.mkstemp(prefix="events-", suffix=".jsonl",
                                dir=os.environ.get("MLCOST_SIM_DIR"))
    rng = random.Random(5)
    try:
        with os.fdopen(fd, "w") as fh, Device(gpu_index=GPU) as gpu:
            gpu.alloc(24 << 30)
            step = 0
            while True:
                for _ in range(3):
                    step += 1
                    gpu.kernel(0.002, sm=0.9)
                # what the last step returned for each example of its batch
                losses = [rng.random() for _ in range(128)]
                logits = LOGITS[step % 7:] + LOGITS[:step % 7]
                append_events(fh, step, losses, logits)
                if fh.tell() > 256 << 20:  # a ring: write over the oldest records
                    fh.seek(0)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
