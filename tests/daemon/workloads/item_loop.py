"""A loop that pulls a scalar to the host every step (`.item()`): the host-sync pattern.

On a real GPU `.item()` blocks until the queued kernels finish and leaves no Python frame; here
the matmul on the CPU stands for that wait, so the leaf is the same user line every time.
"""

import _gpu
import torch


def main() -> None:
    torch.set_num_threads(1)
    a = torch.randn(768, 768)
    dev = _gpu.attach()
    dev.alloc(1 << 30)
    _gpu.ready()
    history = []
    while True:
        dev.kernel(0.002)
        history.append((a @ a @ a).sum().item())
        del history[:-10]


if __name__ == "__main__":
    main()
