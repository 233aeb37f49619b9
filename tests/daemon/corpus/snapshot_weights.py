"""Trains a few steps, then pickles the whole model state to disk and fsyncs it, every time.

--steps is the training steps between snapshots (default 3)."""

import argparse
import os
import pickle
import signal
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def build_state() -> dict:
    return {f"block{i}.weight": os.urandom(16 << 20) for i in range(14)}


def persist_state(state: dict, path: str) -> None:
    tmp = path + ".partial"
    with open(tmp, "wb") as fh:
        pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    out = tempfile.mkdtemp(prefix="snapshots-", dir=os.environ.get("MLCOST_SIM_DIR"))
    path = os.path.join(out, "latest.pkl")
    state = build_state()
    try:
        with Device(gpu_index=GPU) as gpu:
            gpu.alloc(18 << 30)
            while True:
                for _ in range(args.steps):
                    gpu.kernel(0.05, sm=0.9)
                persist_state(state, path)
    finally:
        for name in os.listdir(out):
            os.unlink(os.path.join(out, name))
        os.rmdir(out)


if __name__ == "__main__":
    main()
