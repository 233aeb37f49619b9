"""A stand-in job server for render_worker.py: hands each connected worker a job (a
length-prefixed pickle of a 256 kB scene) every EVERY seconds and waits for its answer.
Prints the port it listens on, then serves until killed.

Usage: job_server.py [EVERY]
"""

import os
import pickle
import socket
import struct
import sys
import threading
import time

HEADER = struct.Struct("!I")


def feed(conn: socket.socket, every: float) -> None:
    n = 0
    with conn:
        while True:
            body = pickle.dumps({"id": n, "scene": os.urandom(256 << 10)})
            conn.sendall(HEADER.pack(len(body)) + body)
            if not conn.recv(64):
                return
            n += 1
            time.sleep(every)


def main() -> None:
    every = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=feed, args=(conn, every), daemon=True).start()


if __name__ == "__main__":
    main()
