"""Embeds a document collection in batches and writes each batch's vectors to a TSV file
(document id, then the 256 components as text) for the search index to load."""

import os
import random
import signal
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
DIM = 256
_rng = random.Random(9)
BASIS = [[_rng.gauss(0.0, 1.0) for _ in range(DIM)] for _ in range(97)]


def embed(gpu: Device, ids: list[int]) -> list[list[float]]:
    gpu.kernel(0.02, sm=0.8)
    return [BASIS[i % len(BASIS)] for i in ids]  # the model's output, copied to the host


def save_vectors(out, ids: list[int], vectors: list[list[float]]) -> None:
    for doc_id, vector in zip(ids, vectors, strict=True):
        out.write(f"{doc_id}\t" + " ".join(f"{x:.6f}" for x in vector) + "\n")
    out.flush()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    folder = tempfile.mkdtemp(prefix="embeddings-", dir=os.environ.get("MLCOST_SIM_DIR"))
    path = os.path.join(folder, "vectors.tsv")
    with Device(gpu_index=GPU) as gpu, open(path, "w") as out:
        gpu.alloc(12 << 30)
        next_id = 0
        while True:
            ids = list(range(next_id, next_id + 128))
            next_id += 128
            save_vectors(out, ids, embed(gpu, ids))
            if out.tell() > 256 << 20:
                out.seek(0)
                out.truncate()


if __name__ == "__main__":
    main()
