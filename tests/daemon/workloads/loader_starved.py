"""A training loop whose DataLoader workers (num_workers=2) are starved by slow file reads.

Each worker reads its shard from a FIFO that a helper process fills slowly, like storage that
trickles: the workers block in read(), and the main process waits on the worker queue.
"""

import os
import subprocess
import sys
import tempfile

import _gpu
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

CHUNK = 4096


class ShardStream(Dataset):
    def __init__(self, shard_dir: str) -> None:
        self.shard_dir = shard_dir
        self._file = None

    def __len__(self) -> int:
        return 1_000_000

    def _shard(self):
        if self._file is None:
            wid = get_worker_info().id
            self._file = open(os.path.join(self.shard_dir, f"shard{wid}"), "rb", buffering=0)
        return self._file

    def __getitem__(self, i: int) -> torch.Tensor:
        raw = self._shard().read(CHUNK)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).float()


def main() -> None:
    shard_dir = tempfile.mkdtemp(prefix="mlcost-shards-")
    paths = [os.path.join(shard_dir, f"shard{w}") for w in range(2)]
    for p in paths:
        os.mkfifo(p)
    helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_trickle.py")
    subprocess.Popen([sys.executable, helper, "0.5", *paths])
    dev = _gpu.attach()
    dev.alloc(16 << 30)
    loader = DataLoader(ShardStream(shard_dir), batch_size=8, num_workers=2)
    _gpu.ready()
    for batch in loader:
        dev.kernel(0.02 + 0.0 * float(batch.shape[0]))


if __name__ == "__main__":
    main()
