"""A training loop that reads each batch from slow remote storage inside the loop (like a
DataLoader with num_workers=0 on a network mount): the GPU waits for every batch."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zlib

from remote_dataset import RemoteShard

from daemon.sim.device import Device

BATCH_BYTES = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--exit-status", type=int, default=0)
    parser.add_argument("--pid-file", help="write this process's pid here")
    parser.add_argument("--leave-child", help="start a helper that outlives this script (in a "
                        "session of its own, as a daemonized tensorboard would) and write its "
                        "pid here")
    args = parser.parse_args()
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(str(os.getpid()))
    if args.leave_child:
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                   start_new_session=True)
        with open(args.leave_child, "w") as f:
            f.write(str(sleeper.pid))
    shard = RemoteShard(bytes_per_second=4e6)
    with Device(gpu_index=0) as gpu:
        gpu.alloc(8 << 30)
        for step in range(1, args.steps + 1):
            batch = shard.read(BATCH_BYTES)
            gpu.kernel(0.03, sm=0.9)  # forward and backward
            loss = zlib.crc32(batch) % 1000 / 1000
            print(f"step {step}/{args.steps} loss {loss:.3f}", flush=True)
    sys.exit(args.exit_status)


if __name__ == "__main__":
    main()
