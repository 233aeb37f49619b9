"""Two ranks of a data-parallel job started the way torch.multiprocessing.spawn starts them:
`multiprocessing` with the spawn method, the rank passed to the function (never on a command
line). They meet the way gloo's pairs do: each listens on a TCP port of its own, and rank 0 connects
to rank 1's (with --slow-rank-connects, rank 1 to rank 0's); after each step rank 1 sends its "gradients" over that connection and rank 0
waits for them (its all_reduce). Rank 1 builds its features in Python first (a slow tokenizer),
so it is the rank the other waits for: its stacks never show a collective.

    MLCOST_SIM_GPUS=0,1 python spawned_peer_ranks.py [--slow-rank-connects] [--rank0-without-gpu]

With --rank0-without-gpu rank 0 holds no GPU: rank 1 is then a GPU process answering a process
of this host that is no GPU process of its job (a client started beside a server)."""

import multiprocessing as mp
import os
import signal
import socket
import sys

import _gpu

GPUS = [int(g) for g in os.environ.get("MLCOST_SIM_GPUS", "0,1").split(",")]


def tokenize(n: int) -> int:
    vocab: dict[str, int] = {}
    total = 0
    for i in range(n):
        total += vocab.setdefault(str(i * 2654435761 % 1000003), len(vocab))
    return total


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            sys.exit(0)  # the peer is gone: the job is over
        data += chunk
    return data


def worker(rank: int, ports, with_gpu: bool, listener_rank: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Each rank listens (gloo's device listener); of the pair, one connects to the other
    # (gloo's choice), before any GPU work.
    listener = socket.create_server(("127.0.0.1", 0))
    if rank == listener_rank:
        ports.put(listener.getsockname()[1])
        conn, _ = listener.accept()
    else:
        conn = socket.create_connection(("127.0.0.1", ports.get(timeout=60)))
    gpu = _gpu.attach(GPUS[rank]) if with_gpu else None
    if gpu is not None:
        gpu.alloc(8 << 30)
    while True:
        if rank == 1:
            tokenize(400000)
        if gpu is not None:
            gpu.kernel(0.05, sm=0.9)
        if rank == 1:
            conn.sendall(b"gradient")
            recv_exactly(conn, 4)
        else:
            recv_exactly(conn, 8)  # all_reduce: waits for rank 1
            conn.sendall(b"done")


def main() -> None:
    spawn = mp.get_context("spawn")
    ports = spawn.Queue()
    rank0_gpu = "--rank0-without-gpu" not in sys.argv
    listener_rank = 0 if "--slow-rank-connects" in sys.argv else 1
    ranks = [spawn.Process(target=worker, args=(rank, ports, rank0_gpu or rank == 1,
                                                listener_rank))
             for rank in range(2)]
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
