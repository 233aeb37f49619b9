"""Rank 0 of a two-host data-parallel job written with its own sockets, without mlcost in mind
and without torch.distributed (probe 132 L1): it loads its shard, runs a forward pass, listens
for its peer rank (on another host, still loading its own shard), accepts it and blocks in
`conn.recv()` for the peer's gradients. No collective frames, no rank argument, and its peer
is no GPU process of its job on this host.

Usage: socket_rank.py --port-file PATH
"""

import argparse
import os
import signal
import socket
import sys

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(20 << 30)
    dev.kernel(1.0, sm=0.9)  # its first forward pass
    listener = socket.create_server(("127.0.0.1", 0))
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.replace(tmp, args.port_file)
    peer, _ = listener.accept()
    while True:
        gradients = peer.recv(1 << 20)  # blocks until the peer sends its tensor
        if not gradients:
            break
        dev.kernel(0.5, sm=0.9)  # all-reduce done by hand: apply them


if __name__ == "__main__":
    main()
