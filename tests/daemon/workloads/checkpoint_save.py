"""A training loop that writes a large checkpoint with torch.save and fsync after every step."""

import os
import sys
import tempfile

import _gpu
import torch


def main() -> None:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    n = size_mb * (1 << 20) // 4 // 8
    state = {f"layer{i}.weight": torch.randn(n) for i in range(8)}
    out = os.path.join(tempfile.mkdtemp(prefix="mlcost-ckpt-"), "model.pt")
    dev = _gpu.attach()
    dev.alloc(20 << 30)
    _gpu.ready()
    while True:
        dev.kernel(0.05)
        with open(out, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())


if __name__ == "__main__":
    main()
