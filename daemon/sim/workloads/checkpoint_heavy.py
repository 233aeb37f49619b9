"""A training job that writes a large checkpoint every few seconds and waits for it to reach the
disk (fsync) before training on: the GPU idles while the checkpoint is written."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

from daemon.sim.device import Device
from daemon.sim.workloads import _common

GIB = 1 << 30
# What it holds on each of its GPUs unless --memory-gib says (daemon.sim.scenario.resized
# places the workloads of a resized host by it).
MEMORY_GIB = 26.0
MIB = 1 << 20


def train_step(dev: Device, step_seconds: float, sm: float) -> None:
    dev.kernel(step_seconds, sm=sm)


def serialize_state(rng: random.Random, size_mib: int):
    """The model and optimizer state, one MiB at a time."""
    tensor = rng.randbytes(MIB)
    for i in range(size_mib):
        yield i.to_bytes(8, "little") + tensor[8:]


class SlowVolume:
    """The checkpoint volume (a network disk) as a writer: bytes written into it go to the real
    file at the volume's bandwidth, through a pipe drained by a thread, so the writer blocks in a
    real write() when the volume is behind, as it would on a slow mount."""

    def __init__(self, fd: int, bytes_per_second: float) -> None:
        self.fd = fd
        self._read_fd, self._write_fd = os.pipe()
        self._thread = threading.Thread(target=self._drain, args=(bytes_per_second,),
                                        name="volume", daemon=True)
        self._thread.start()

    def _drain(self, bytes_per_second: float) -> None:
        started = time.monotonic()
        done = 0
        while chunk := os.read(self._read_fd, 256 << 10):
            os.write(self.fd, chunk)
            done += len(chunk)
            lag = done / bytes_per_second - (time.monotonic() - started)
            if lag > 0:
                time.sleep(lag)
        os.close(self._read_fd)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._write_fd, view):]

    def close(self) -> None:
        os.close(self._write_fd)
        self._thread.join()


def save_checkpoint(ckpt_dir: Path, step: int, rng: random.Random, size_mib: int,
                    bytes_per_second: float) -> Path:
    """Write, fsync and rename into place; keep only the newest two checkpoints."""
    final = ckpt_dir / f"checkpoint-{step:07d}.pt"
    tmp = final.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        volume = SlowVolume(fd, bytes_per_second)
        for chunk in serialize_state(rng, size_mib):
            volume.write(chunk)
        volume.close()
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    for old in sorted(ckpt_dir.glob("checkpoint-*.pt"))[:-2]:
        old.unlink()
    return final


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--memory-gib", type=float, default=MEMORY_GIB)
    p.add_argument("--step-seconds", type=float, default=0.25)
    p.add_argument("--sm", type=float, default=0.85)
    p.add_argument("--steps-per-checkpoint", type=int, default=10)
    p.add_argument("--checkpoint-mib", type=int, default=96)
    p.add_argument("--write-mbps", type=float, default=60.0)
    p.add_argument("--checkpoint-dir", default=None)
    args = p.parse_args()
    log = _common.setup("checkpoint_heavy")
    made_dir = args.checkpoint_dir is None
    ckpt_dir = Path(args.checkpoint_dir or tempfile.mkdtemp(
        prefix="checkpoints-", dir=os.environ.get("MLCOST_SIM_DIR")))
    rng = random.Random(0)
    try:
        with Device(gpu_index=_common.gpu_list(args.gpu)[0]) as dev:
            dev.alloc(int(args.memory_gib * GIB))
            step = 0
            while True:
                for _ in range(args.steps_per_checkpoint):
                    train_step(dev, args.step_seconds, args.sm)
                    step += 1
                path = save_checkpoint(ckpt_dir, step, rng, args.checkpoint_mib,
                                       args.write_mbps * 1e6)
                log.info("step %d: saved %s", step, path.name)
    finally:
        if made_dir:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
        else:
            for leftover in ckpt_dir.glob("checkpoint-*"):
                leftover.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
