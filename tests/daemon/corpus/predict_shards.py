"""Nightly batch prediction: reads input shards (JSON files of feature rows), runs the model on
each batch of 256 rows on the GPU and writes one small summary per shard."""

import json
import os
import random
import signal
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def make_shards(folder: str, count: int) -> list[str]:
    rng = random.Random(2)
    paths = []
    for i in range(count):
        path = os.path.join(folder, f"shard-{i:03d}.json")
        with open(path, "w") as f:
            json.dump([[rng.random() for _ in range(8)] for _ in range(2048)], f)
        paths.append(path)
    return paths


def predict_shard(gpu: Device, path: str) -> dict:
    with open(path) as f:
        rows = json.load(f)
    positives = 0
    for start in range(0, len(rows), 256):
        batch = rows[start:start + 256]
        gpu.kernel(0.25, sm=0.85)
        positives += sum(1 for row in batch if row[0] > 0.5)
    return {"shard": os.path.basename(path), "rows": len(rows), "positives": positives}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    folder = tempfile.mkdtemp(prefix="shards-", dir=os.environ.get("MLCOST_SIM_DIR"))
    shards = make_shards(folder, 4)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(18 << 30)
        while True:
            for path in shards:
                summary = predict_shard(gpu, path)
                with open(path + ".summary", "w") as f:
                    json.dump(summary, f)


if __name__ == "__main__":
    main()
