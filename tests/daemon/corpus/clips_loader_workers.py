"""A torch DataLoader with two worker processes; each sample is fetched from a slow store
(~40 ms latency per sample), so the workers cannot keep up with the GPU.

--fetch-ms and --step-ms change the store's latency and the GPU step (a slower store starves it
further: 250 and 40 leave the GPU ~4% busy)."""

import argparse
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


class ClipFolder(Dataset):
    def __init__(self, fetch_seconds: float) -> None:
        self.fetch_seconds = fetch_seconds

    def __len__(self) -> int:
        return 100000

    def fetch(self, index: int) -> bytes:
        time.sleep(self.fetch_seconds)  # a round trip to the object store
        return index.to_bytes(8, "little") * 512

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.frombuffer(bytearray(self.fetch(index)), dtype=torch.uint8)


def run_epochs(gpu: Device, loader: DataLoader, step_seconds: float) -> None:
    while True:
        for batch in loader:
            gpu.kernel(step_seconds + 0 * batch.numel(), sm=0.8)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    p = argparse.ArgumentParser()
    p.add_argument("--fetch-ms", type=float, default=40.0)
    p.add_argument("--step-ms", type=float, default=30.0)
    args = p.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(ClipFolder(args.fetch_ms / 1000), batch_size=16, num_workers=2,
                        shuffle=True)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(20 << 30)
        run_epochs(gpu, loader, args.step_ms / 1000)


if __name__ == "__main__":
    main()
