"""Data-parallel training with a hand-written all-reduce: two ranks started with multiprocessing
(fork), one GPU each, that average their gradients over a TCP connection after every step
(rank 0 listens, rank 1 connects). Rank 0 also re-tokenizes its shard of the corpus on the CPU
before each step (a slow pure-Python tokenizer), so rank 1 sits in `conn.recv` waiting for it.

    MLCOST_SIM_GPUS=0,1 python socket_allreduce_ranks.py PORT [--retokenize-s 15]
"""

import argparse
import array
import multiprocessing as mp
import os
import signal
import socket
import sys
import time

import _gpu

GPUS = [int(g) for g in os.environ.get("MLCOST_SIM_GPUS", "0,1").split(",")]
GRAD_FLOATS = 16384


def retokenize(seconds: float) -> int:
    """Rebuild the vocabulary of rank 0's shard, word by word."""
    vocab: dict[str, int] = {}
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        for _ in range(2000):
            vocab.setdefault(str(i * 2654435761 % 1000003), len(vocab))
            i += 1
    return len(vocab)


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = conn.recv(n - len(got))
        if not chunk:
            sys.exit(0)  # the other rank is gone: the job is over
        got += chunk
    return got


def allreduce(conn: socket.socket, grads: array.array) -> array.array:
    """Average `grads` with the other rank's: send ours, take theirs."""
    conn.sendall(grads.tobytes())
    theirs = array.array("f")
    theirs.frombytes(recv_exactly(conn, len(grads) * grads.itemsize))
    return array.array("f", ((a + b) / 2 for a, b in zip(grads, theirs, strict=True)))


def rank(r: int, port: int, retokenize_s: float) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if r == 0:
        server = socket.create_server(("127.0.0.1", port))
        conn, _ = server.accept()
    else:
        for _ in range(300):
            try:
                conn = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.1)
        else:
            sys.exit("rank 1: rank 0 never listened")
    gpu = _gpu.attach(GPUS[r])
    gpu.alloc(20 << 30)
    grads = array.array("f", [0.0]) * GRAD_FLOATS
    step = 0
    while True:
        if r == 0:
            retokenize(retokenize_s)
        for _ in range(10):
            gpu.kernel(0.1, sm=0.95)  # forward and backward
        grads = allreduce(conn, grads)
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--retokenize-s", type=float, default=15.0)
    args = parser.parse_args()
    ranks = [mp.Process(target=rank, args=(r, args.port, args.retokenize_s)) for r in (0, 1)]
    for proc in ranks:
        proc.start()

    def stop(*_):
        for proc in ranks:
            proc.terminate()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    for proc in ranks:
        proc.join()


if __name__ == "__main__":
    main()
