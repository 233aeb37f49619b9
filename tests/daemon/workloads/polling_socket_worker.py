"""A GPU worker of a render farm, written without mlcost in mind: a network thread keeps the
TCP connection to the dispatcher and puts each job line it receives on a queue.Queue; the main
thread takes them with get(timeout=5) so that it looks at its stop flag every few seconds
(SIGTERM sets it: the job in hand finishes, then it leaves), runs each on the GPU and answers
"done <job>" on the connection. Between jobs the network thread blocks reading the socket and
the main thread wakes every 5 s from its timed get, finds the queue empty and waits again.

Usage: polling_socket_worker.py HOST:PORT [--step-ms MS] [--poll-s SECONDS]
"""

import argparse
import os
import queue
import signal
import socket
import threading

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
jobs: "queue.Queue[str]" = queue.Queue()
stopping = threading.Event()


def receive(conn: socket.socket) -> None:
    for line in conn.makefile("r", encoding="utf-8"):
        jobs.put(line.strip())
    stopping.set()  # the dispatcher went away


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dispatcher", help="HOST:PORT")
    parser.add_argument("--step-ms", type=float, default=500.0)
    parser.add_argument("--poll-s", type=float, default=5.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    host, port = args.dispatcher.rsplit(":", 1)
    with Device(gpu_index=GPU) as gpu, socket.create_connection((host, int(port))) as conn:
        gpu.alloc(7 << 30)
        threading.Thread(target=receive, args=(conn,), name="receiver", daemon=True).start()
        while not stopping.is_set():
            try:
                job = jobs.get(timeout=args.poll_s)
            except queue.Empty:
                continue  # nothing yet: look at the stop flag, then wait again
            gpu.kernel(args.step_ms / 1000, sm=0.8)
            conn.sendall(f"done {job}\n".encode())


if __name__ == "__main__":
    main()
