"""Scores a large candidate set each round and writes the raw float scores out with array.tofile."""

import array
import os
import signal
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def flush_scores(scores: array.array, path: str) -> None:
    with open(path, "wb") as fh:
        scores.tofile(fh)
        fh.flush()
        os.fsync(fh.fileno())


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = tempfile.mkdtemp(prefix="scores-", dir=os.environ.get("MLCOST_SIM_DIR"))
    scores = array.array("d", bytes(8)) * (24 << 20)  # 192 MiB of doubles
    try:
        with Device(gpu_index=GPU) as gpu:
            gpu.alloc(6 << 30)
            round_no = 0
            while True:
                gpu.kernel(0.08, sm=0.8)
                flush_scores(scores, os.path.join(out, f"round-{round_no % 2}.f64"))
                round_no += 1
    finally:
        for name in os.listdir(out):
            os.unlink(os.path.join(out, name))
        os.rmdir(out)


if __name__ == "__main__":
    main()
