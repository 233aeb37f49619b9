"""Runs inference in chunks and packs each chunk's predictions into a deflated zip archive."""

import os
import random
import signal
import sys
import tempfile
import zipfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def fake_predictions(n: int) -> list[bytes]:
    rng = random.Random(7)
    lines = [f"{i},{rng.random():.6f},{rng.choice(['cat', 'dog', 'bird'])}\n" for i in range(20000)]
    blob = "".join(lines).encode()
    return [blob + os.urandom(1 << 20) for _ in range(n)]


def pack_outputs(chunks: list[bytes], path: str) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for i, chunk in enumerate(chunks):
            zf.writestr(f"part-{i:04d}.csv", chunk)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = tempfile.mkdtemp(prefix="predictions-", dir=os.environ.get("MLCOST_SIM_DIR"))
    chunks = fake_predictions(24)
    try:
        with Device(gpu_index=GPU) as gpu:
            gpu.alloc(10 << 30)
            n = 0
            while True:
                gpu.kernel(0.1, sm=0.7)
                pack_outputs(chunks, os.path.join(out, f"preds-{n % 2}.zip"))
                n += 1
    finally:
        for name in os.listdir(out):
            os.unlink(os.path.join(out, name))
        os.rmdir(out)


if __name__ == "__main__":
    main()
