"""A language-model fine-tune that tokenizes its text on the fly with a hand-written tokenizer."""

import os
import random
import re
import signal
import sys

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
WORD = re.compile(r"\w+|[^\w\s]")


def make_docs(n: int) -> list[str]:
    rng = random.Random(3)
    words = ["gradient", "tensor", "kernel", "the", "of", "model", "loss", "batch", ",", "."]
    return [" ".join(rng.choice(words) for _ in range(400)) for _ in range(n)]


def split_words(text: str, vocab: dict[str, int]) -> list[int]:
    ids = []
    for word in WORD.findall(text.lower()):
        if word in vocab:
            ids.append(vocab[word])
            continue
        for i in range(len(word)):
            ids.append(vocab.setdefault(word[: i + 1], len(vocab)))
    return ids


def encode_batch(docs: list[str], vocab: dict[str, int]) -> list[list[int]]:
    return [split_words(doc, vocab) for doc in docs]


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    docs = make_docs(3000)
    vocab: dict[str, int] = {}
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(20 << 30)
        while True:
            vocab.clear()
            batch = encode_batch(docs, vocab)
            gpu.kernel(0.05 + 0 * len(batch), sm=0.9)


if __name__ == "__main__":
    main()
