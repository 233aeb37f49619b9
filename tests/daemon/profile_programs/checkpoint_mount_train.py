"""A training loop that saves a checkpoint every N steps to a network mount (an NFS share, an
object store's fuse mount): the write goes at the mount's speed, and the loop waits for it, as
torch.save to such a path does. With --save-in-thread, the fix the blocking_checkpoint advice
gives: the state is copied and a thread writes it while the loop trains on."""

from __future__ import annotations

import argparse
import os
import threading
import time
import zlib

from daemon.sim.device import Device

CHUNK = 1 << 20


def save_checkpoint(path: str, state: bytes, bytes_per_second: float) -> None:
    """Write `state` to `path` as a slow mount takes it: each chunk is due at a time of its own
    (a sleep that overslept on a loaded host is made up by the next)."""
    due = time.monotonic()
    with open(path + ".tmp", "wb") as f:
        for start in range(0, len(state), CHUNK):
            f.write(state[start:start + CHUNK])
            due += min(CHUNK, len(state) - start) / bytes_per_second
            time.sleep(max(0.0, due - time.monotonic()))
    os.replace(path + ".tmp", path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=450)
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--checkpoint-mb", type=int, default=36)
    parser.add_argument("--mount-mb-per-s", type=float, default=20.0)
    parser.add_argument("--save-in-thread", action="store_true")
    args = parser.parse_args()
    weights = bytearray(os.urandom(args.checkpoint_mb << 20))
    saver: threading.Thread | None = None
    with Device(gpu_index=0) as gpu:
        gpu.alloc(8 << 30)
        for step in range(1, args.steps + 1):
            gpu.kernel(0.1, sm=0.9)  # forward and backward
            weights[step % len(weights)] ^= 1  # the optimizer's update
            if step % 10 == 0:
                loss = zlib.crc32(weights[:4096]) % 1000 / 1000
                print(f"step {step}/{args.steps} loss {loss:.3f}", flush=True)
            if step % args.save_every == 0:
                path = os.path.join(args.checkpoint_dir, "last.pt")
                if args.save_in_thread:
                    if saver is not None:
                        saver.join()
                    saver = threading.Thread(target=save_checkpoint, name="saver", args=(
                        path, bytes(weights), args.mount_mb_per_s * 1e6))
                    saver.start()
                else:
                    save_checkpoint(path, bytes(weights), args.mount_mb_per_s * 1e6)
        if saver is not None:
            saver.join()


if __name__ == "__main__":
    main()
