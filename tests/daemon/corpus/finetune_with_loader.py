"""Fine-tunes a small classifier head with a torch DataLoader (two workers, cheap samples) and
an SGD optimizer; the forward and backward pass of the big model run on the GPU."""

import os
import signal
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


class Reviews(Dataset):
    def __len__(self) -> int:
        return 100000

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=g), index % 2


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    head = torch.nn.Linear(32, 2)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.01)
    loader = DataLoader(Reviews(), batch_size=64, shuffle=True, num_workers=2,
                        persistent_workers=True)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(22 << 30)
        while True:
            for features, labels in loader:
                gpu.kernel(0.2, sm=0.9)  # the backbone's forward and backward
                loss = torch.nn.functional.cross_entropy(head(features), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


if __name__ == "__main__":
    main()
