"""daemon.sim.workloads.data_starved's training loop (DataLoader-like worker processes reading a
shard from slow storage into a queue) that appends the time of every finished step to a file,
as `mlcostd profile --progress` sees a script's progress: the input of `mlcostd compare`'s
cost per step. `--workers` is the fix under test: more loaders keep the GPU fed.

usage: counted_starved.py STEPS_FILE WORKERS READ_MBPS
"""

import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import _gpu

from daemon.sim.workloads import data_starved

BATCH_BYTES = 1 << 20
STEP_SECONDS = 0.05


def main() -> None:
    steps_file, workers, read_mbps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    data_dir = Path(tempfile.mkdtemp(prefix="dataset-", dir=Path(steps_file).parent))
    path = data_starved.write_dataset(data_dir, 32)
    queue: mp.Queue = mp.Queue(maxsize=2 * workers)
    for w in range(workers):
        mp.Process(target=data_starved.loader_worker, name=f"loader-{w}", daemon=True,
                   args=(path, BATCH_BYTES, read_mbps * 1e6, w, workers, queue,
                         os.getpid())).start()
    dev = _gpu.attach()
    dev.alloc(16 << 30)
    with open(steps_file, "a", buffering=1) as steps:
        for batch in iter(queue.get, None):
            data_starved.train_step(dev, batch, STEP_SECONDS, 0.8)
            steps.write(f"{time.time():.3f}\n")


if __name__ == "__main__":
    main()
