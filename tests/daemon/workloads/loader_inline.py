"""A training loop whose DataLoader decodes in the main process (num_workers=0).

__getitem__ does CPU work (parses a text record), so the simulated GPU waits on the host.
"""

import json

import _gpu
import torch
from torch.utils.data import DataLoader, Dataset


class TextRecords(Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        record = json.dumps({"id": i, "values": list(range(400))})
        values = [float(v) * 0.5 for v in json.loads(record)["values"] for _ in range(8)]
        return torch.tensor(values[:512])


def main() -> None:
    dev = _gpu.attach()
    dev.alloc(8 << 30)
    loader = DataLoader(TextRecords(), batch_size=16, num_workers=0)
    _gpu.ready()
    for batch in loader:
        dev.kernel(0.01 + 0.0 * float(batch.shape[0]))


if __name__ == "__main__":
    main()
