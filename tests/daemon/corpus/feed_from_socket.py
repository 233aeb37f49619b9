"""Training batches arrive pickled over a socket from a remote feeder that can only send ~6 MB/s."""

import os
import pickle
import signal
import socket
import sys
import threading
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
RATE = 6e6


def remote_feeder(conn: socket.socket) -> None:
    payload = pickle.dumps({"x": os.urandom(2 << 20), "y": list(range(512))})
    view = memoryview(payload)
    while True:
        for start in range(0, len(view), 64 << 10):
            piece = view[start:start + (64 << 10)]
            conn.sendall(piece)
            time.sleep(len(piece) / RATE)


def receive_batch(stream) -> dict:
    return pickle.load(stream)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ours, theirs = socket.socketpair()
    threading.Thread(target=remote_feeder, args=(theirs,), daemon=True).start()
    stream = ours.makefile("rb")
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(14 << 30)
        while True:
            batch = receive_batch(stream)
            gpu.kernel(0.03 + 0 * len(batch["y"]), sm=0.8)


if __name__ == "__main__":
    main()
