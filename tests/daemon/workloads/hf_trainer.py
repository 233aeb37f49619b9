"""A Hugging Face Trainer run (CPU) that evaluates and checkpoints often, on the simulated GPU.

The model is a plain nn.Module built locally (no hub download); the "GPU" step is a callback.
"""

import tempfile

import _gpu
import torch
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments


class Regressor(nn.Module):
    def __init__(self, width: int = 2048, depth: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])

    def forward(self, x, labels=None):
        out = self.body(x)
        loss = ((out - labels) ** 2).mean()
        return {"loss": loss, "logits": out}


class GpuStep(TrainerCallback):
    def __init__(self, dev) -> None:
        self.dev = dev
        self.announced = False

    def on_step_end(self, args, state, control, **kwargs):
        self.dev.kernel(0.02)
        if not self.announced:
            self.announced = True
            _gpu.ready()


def main() -> None:
    torch.set_num_threads(1)
    data = [{"x": torch.randn(2048), "labels": torch.randn(2048)} for _ in range(64)]
    dev = _gpu.attach()
    dev.alloc(12 << 30)
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="mlcost-hf-"),
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        eval_strategy="steps",
        eval_steps=3,
        save_strategy="steps",
        save_steps=3,
        save_total_limit=1,
        max_steps=1_000_000,
        logging_steps=1_000_000,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Trainer(model=Regressor(), args=args, train_dataset=data, eval_dataset=data,
            callbacks=[GpuStep(dev)]).train()


if __name__ == "__main__":
    main()
