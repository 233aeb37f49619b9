"""Fine-tune a small LM on raw text; the batches are tokenized on the fly, on the main thread.

Written for probe 144 (/work/probe144/progs/train_tokenize_inline.py, with its torch-like
`gpu.py` shim inlined) without the classifier in mind: a fixed amount of tokenizing (24 docs
of 400 words, pure Python regex + dict, ~50 ms on a quiet core) before each 60-ms step, so its
GPU waits while the batch is tokenized; on a loaded host the same work takes longer and the
GPU waits longer. As in torch, a launch returns at once and runs on the device's stream (here
a thread standing for CUDA's), and `loss.item()` blocks in C (a lock's acquire) until the
step's kernel has finished: the user's own line is the innermost frame of a dump there.

Usage: tokenize_inline.py [--batch-size 24] [--log-every 50]
"""
import _thread
import argparse
import logging
import os
import queue
import random
import re
import signal
import string
import sys
import threading
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
log = logging.getLogger("finetune")


class Loss:
    """A result still on the device: `.item()` waits (in C) for the kernel that makes it."""

    __slots__ = ("item",)

    def __init__(self, done: "_thread.LockType") -> None:
        self.item = done.acquire


def stream(dev, work: "queue.SimpleQueue") -> None:
    while True:
        seconds, sm, done = work.get()
        dev.launch(sm)
        time.sleep(seconds)
        dev.synchronize()
        done.release()


class WordPieceTokenizer:
    def __init__(self, vocab_size=30000):
        self.vocab = {}
        self.vocab_size = vocab_size
        self.pat = re.compile(r"\w+|[^\w\s]")

    def encode(self, text, max_len=512):
        ids = []
        for word in self.pat.findall(text.lower()):
            for i in range(0, len(word), 3):
                piece = word[i:i + 3] if i == 0 else "##" + word[i:i + 3]
                ids.append(self.vocab.setdefault(piece, len(self.vocab) % self.vocab_size))
        return ids[:max_len]


def random_doc(rng, n_words=400):
    return " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
                    for _ in range(n_words))


class Model:
    def __init__(self, work: "queue.SimpleQueue") -> None:
        self.work = work

    def train_step(self, input_ids):
        done = _thread.allocate_lock()
        done.acquire()
        self.work.put((0.060, 0.95, done))   # forward + backward + optimizer.step()
        return Loss(done)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=24)
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    rng = random.Random(0)
    corpus = [random_doc(rng) for _ in range(256)]
    tok = WordPieceTokenizer()
    dev = _gpu.attach(GPU)
    dev.alloc(22 << 30)
    work: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=stream, args=(dev, work), name="cuda-stream", daemon=True).start()
    model = Model(work)
    _gpu.ready()
    step = 0
    while True:
        docs = rng.sample(corpus, args.batch_size)
        input_ids = [tok.encode(d) for d in docs]
        loss = model.train_step(input_ids)
        if step % args.log_every == 0:
            log.info("step %d loss %.4f", step, loss.item())
        else:
            loss.item()
        step += 1


if __name__ == "__main__":
    main()
