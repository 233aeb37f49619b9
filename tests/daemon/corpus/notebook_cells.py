"""A notebook kernel and the cells its user ran (started by jupyter_stub.py, as Jupyter starts
ipykernel). Every cell first loads a model onto the GPU; then, by --cells:
  idle   the user ran the cells and left: the kernel waits on its shell channel for the next
  train  a cell trains the model in a loop and is still running
  input  a cell asked the user a question with input() and waits for the answer"""

import argparse
import os
import selectors
import signal
import socket
import sys
import threading

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def heartbeat(channel: socket.socket) -> None:
    """The kernel's heartbeat thread: echoes pings from the front end."""
    while True:
        data = channel.recv(64)
        if not data:
            return
        channel.sendall(data)


def wait_for_next_cell(shell: socket.socket) -> None:
    with selectors.DefaultSelector() as sel:
        sel.register(shell, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select(timeout=30.0):
                key.fileobj.recv(4096)


def cell_train(gpu: Device) -> None:
    losses = []
    for step in range(10**9):
        gpu.kernel(0.12, sm=0.9)
        losses.append(1.0 / (step + 1))


def cell_ask(gpu: Device) -> None:
    gpu.kernel(0.3, sm=0.6)
    answer = input("Results look fine. Continue training for another epoch? [y/N] ")
    if answer.strip().lower() == "y":
        cell_train(gpu)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    p = argparse.ArgumentParser()
    p.add_argument("--cells", choices=["idle", "train", "input"], required=True)
    p.add_argument("-f", dest="connection_file")
    args = p.parse_args()
    shell, frontend = socket.socketpair()
    beat, beat_peer = socket.socketpair()
    threading.Thread(target=heartbeat, args=(beat,), daemon=True).start()
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(14 << 30)
        gpu.kernel(0.4, sm=0.6)  # the model's first forward pass in the loading cell
        if args.cells == "train":
            cell_train(gpu)
        elif args.cells == "input":
            cell_ask(gpu)
        wait_for_next_cell(shell)


if __name__ == "__main__":
    main()
