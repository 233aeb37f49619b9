"""A Lightning fit (CPU) with slow DataLoader workers, validation and checkpoints every epoch."""

import tempfile
import time

import _gpu
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowStorage(Dataset):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        time.sleep(self.delay)  # stands for a slow network/disk read in the worker
        return torch.randn(1024), torch.randn(1024)


class Regressor(L.LightningModule):
    def __init__(self, dev) -> None:
        super().__init__()
        self.body = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(16)])
        self.dev = dev
        self.announced = False

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = ((self.body(x) - y) ** 2).mean()
        self.dev.kernel(0.01)
        if not self.announced:
            self.announced = True
            _gpu.ready()
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        for _ in range(20):
            out = self.body(x)
        return ((out - y) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def main() -> None:
    torch.set_num_threads(1)
    dev = _gpu.attach()
    dev.alloc(6 << 30)
    train = DataLoader(SlowStorage(0.2), batch_size=8, num_workers=2)
    val = DataLoader(SlowStorage(0.0), batch_size=64, num_workers=0)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=1_000_000, limit_train_batches=4,
        limit_val_batches=2, num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tempfile.mkdtemp(prefix="mlcost-pl-"),
    )
    trainer.fit(Regressor(dev), train, val)


if __name__ == "__main__":
    main()
