"""A GPU worker of a simulation farm, written without mlcost in mind: connected to its job
server, it waits on the socket with select() and a 1 s timeout (so that it can send its
heartbeat file's mtime between jobs), reads each job (a length-prefixed pickle), runs it on the
GPU and answers. Between jobs it waits in select.

Usage: select_job_worker.py --server HOST:PORT [--step-ms MS]
"""

import argparse
import os
import pickle
import select
import signal
import socket
import struct
import sys
import tempfile

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the job server")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    heartbeat = os.path.join(tempfile.mkdtemp(), "alive")
    host, port = args.server.rsplit(":", 1)
    with Device(gpu_index=GPU) as gpu, socket.create_connection((host, int(port))) as sock:
        gpu.alloc(7 << 30)
        while True:
            ready, _, _ = select.select([sock], [], [], 1.0)
            with open(heartbeat, "w"):
                pass
            if not ready:
                continue
            (size,) = HEADER.unpack(recv_exact(sock, HEADER.size))
            job = pickle.loads(recv_exact(sock, size))
            gpu.kernel(args.step_ms / 1000, sm=0.8)
            sock.sendall(b"done %d\n" % job["id"])


if __name__ == "__main__":
    main()
