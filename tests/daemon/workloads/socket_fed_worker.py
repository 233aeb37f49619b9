"""A GPU worker of a render farm, written without mlcost in mind: a network thread keeps the
TCP connection to the dispatcher and puts each job line it receives on a queue.Queue; the main
thread takes them with get(), runs each on the GPU and answers "done <job>" on the connection.
Between jobs the network thread blocks reading the socket and the main thread in get().

Usage: socket_fed_worker.py HOST:PORT [--step-ms MS]
"""

import argparse
import os
import queue
import signal
import socket
import sys
import threading

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
jobs: "queue.Queue[str]" = queue.Queue()


def receive(conn: socket.socket) -> None:
    for line in conn.makefile("r", encoding="utf-8"):
        jobs.put(line.strip())
    jobs.put("")  # the dispatcher went away


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dispatcher", help="HOST:PORT")
    parser.add_argument("--step-ms", type=float, default=500.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.dispatcher.rsplit(":", 1)
    with Device(gpu_index=GPU) as gpu, socket.create_connection((host, int(port))) as conn:
        gpu.alloc(7 << 30)
        threading.Thread(target=receive, args=(conn,), name="receiver", daemon=True).start()
        while True:
            job = jobs.get()
            if not job:
                return
            gpu.kernel(args.step_ms / 1000, sm=0.8)
            conn.sendall(f"done {job}\n".encode())


if __name__ == "__main__":
    main()
