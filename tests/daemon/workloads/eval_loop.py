"""An evaluation pass under @torch.no_grad() calling an nn.Module, then a short GPU step."""

import _gpu
import torch
from torch import nn


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[torch.Tensor], dev) -> float:
    total = 0.0
    for x in batches:
        out = model(x)
        dev.kernel(0.005)
        total += float(out.mean())
    return total


def main() -> None:
    torch.set_num_threads(1)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(1024, 1024), nn.ReLU())])
    model.eval()
    batches = [torch.randn(256, 1024) for _ in range(4)]
    dev = _gpu.attach()
    dev.alloc(4 << 30)
    _gpu.ready()
    while True:
        evaluate(model, batches, dev)


if __name__ == "__main__":
    main()
