"""A training loop that checkpoints every --save-every steps to slow remote storage (a network
mount that takes --storage-bytes-per-s), as users write it: in a saver thread that the loop
joins before the next save and once at its end (the default), or on the loop's own thread
(--blocking)."""

from __future__ import annotations

import argparse
import os
import threading
import time

from daemon.sim.device import Device

CHUNK = 1 << 20


def save(state: bytes, path: str, chunks: int, bytes_per_s: float) -> None:
    """Write `chunks` MiB of `state` to `path` at the storage's pace, then fsync."""
    with open(path + ".tmp", "wb") as f:
        for _ in range(chunks):
            f.write(state)
            time.sleep(CHUNK / bytes_per_s)  # the remote storage takes its time
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--checkpoint-mb", type=int, default=40)
    parser.add_argument("--storage-bytes-per-s", type=float, default=20e6)
    parser.add_argument("--dir", required=True, help="where the checkpoints go")
    parser.add_argument("--blocking", action="store_true", help="save on the loop's thread")
    args = parser.parse_args()
    state = os.urandom(CHUNK)
    path = os.path.join(args.dir, "checkpoint.pt")
    saver: threading.Thread | None = None
    with Device(gpu_index=0) as gpu:
        gpu.alloc(4 << 30)
        for step in range(1, args.steps + 1):
            gpu.kernel(0.15, sm=0.9)  # forward and backward
            print(f"step {step}/{args.steps}", flush=True)
            if step % args.save_every:
                continue
            save_args = (state, path, args.checkpoint_mb, args.storage_bytes_per_s)
            if args.blocking:
                save(*save_args)
                continue
            if saver is not None:
                saver.join()
            saver = threading.Thread(target=save, args=save_args)
            saver.start()
        if saver is not None:
            saver.join()  # the last checkpoint is whole before the job exits


if __name__ == "__main__":
    main()
