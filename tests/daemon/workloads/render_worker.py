"""A GPU worker of a render farm, written without mlcost in mind: it connects to the job
server, reads one job at a time (a length-prefixed pickle, with sock.recv), runs it on the GPU
and sends the result back. Between jobs it waits in recv.

Usage: render_worker.py --server HOST:PORT [--step-ms MS]
"""

import argparse
import os
import pickle
import signal
import socket
import struct
import sys

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
HEADER = struct.Struct("!I")


def recv_exact(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("the job server went away")
        buf += chunk
    return bytes(buf)


def next_job(sock: socket.socket) -> dict:
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size))
    return pickle.loads(recv_exact(sock, size))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the job server")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.server.rsplit(":", 1)
    with Device(gpu_index=GPU) as gpu, socket.create_connection((host, int(port))) as sock:
        gpu.alloc(11 << 30)
        while True:
            job = next_job(sock)
            gpu.kernel(args.step_ms / 1000, sm=0.8)
            sock.sendall(b"done %d\n" % job["id"])


if __name__ == "__main__":
    main()
