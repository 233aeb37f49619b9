"""A torch DataLoader without workers (num_workers=0) whose transform jitters every sample in
Python on the main thread."""

import os
import random
import signal
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


class Jitter:
    def __init__(self) -> None:
        self.rng = random.Random(5)

    def __call__(self, values: list[float]) -> list[float]:
        return [v * (1.0 + self.rng.uniform(-0.1, 0.1)) for v in values]


class ClipFolder(Dataset):
    def __init__(self) -> None:
        self.base = [float(i % 17) for i in range(6000)]
        self.transform = Jitter()

    def __len__(self) -> int:
        return 100000

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(self.transform(self.base))


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    torch.set_num_threads(1)
    loader = DataLoader(ClipFolder(), batch_size=32, num_workers=0)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(20 << 30)
        while True:
            for batch in loader:
                gpu.kernel(0.03 + 0 * batch.numel(), sm=0.8)


if __name__ == "__main__":
    main()
