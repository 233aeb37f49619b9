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
# A helper daemonizing itself: fork, a new session, fork again. Its parent exits at once; the
# grandchild prints its pid, lets go of the pipe (so the caller's read ends) and sleeps, with
# argv[1] (the test's temp path) on its command line.
DAEMONIZE = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
print(os.getpid(), flush=True)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
time.sleep(600)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--exit-status", type=int, default=0)
    parser.add_argument("--pid-file", help="write this process's pid here")
    parser.add_argument("--storage-bytes-per-s", type=float, default=4e6,
                        help="how fast the remote storage serves the batches")
    parser.add_argument("--leave-child", help="start a helper that outlives this script, "
                        "daemonized as a tensorboard or a server would be (a double fork: it is "
                        "an orphan in a session of its own at once), and write its pid here")
    args = parser.parse_args()
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(str(os.getpid()))
    if args.leave_child:
        helper = subprocess.run([sys.executable, "-c", DAEMONIZE, args.leave_child],
                                check=True, capture_output=True, text=True)
        with open(args.leave_child, "w") as f:
            f.write(helper.stdout.strip())
    shard = RemoteShard(bytes_per_second=args.storage_bytes_per_s)
    with Device(gpu_index=0) as gpu:
        gpu.alloc(8 << 30)
        for step in range(1, args.steps + 1):
            batch = shard.read(BATCH_BYTES)
            gpu.kernel(0.12, sm=0.9)  # forward and backward, as in prefetch_train.py
            loss = zlib.crc32(batch) % 1000 / 1000
            print(f"step {step}/{args.steps} loss {loss:.3f}", flush=True)
    sys.exit(args.exit_status)


if __name__ == "__main__":
    main()
