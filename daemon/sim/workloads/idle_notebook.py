"""A notebook kernel that loaded a model onto the GPU and now waits for the next cell.

Like a Jupyter kernel it may be started with its connection file (`-f kernel-ID.json`, as
Jupyter's kernel spec passes it; the file is not written here)."""

from __future__ import annotations

import selectors
import socket

from daemon.sim.device import Device
from daemon.sim.workloads import _common

GIB = 1 << 30
# What it holds on each of its GPUs unless --memory-gib says (daemon.sim.scenario.resized
# places the workloads of a resized host by it).
MEMORY_GIB = 12.0


def load_model(dev: Device, memory_gib: float) -> None:
    dev.alloc(int(memory_gib * GIB))
    dev.kernel(0.5, sm=0.6)  # one warm-up forward pass, then nothing


def wait_for_input(channel: socket.socket) -> None:
    """Block on the shell channel like a Jupyter kernel does; nobody ever sends a cell."""
    with selectors.DefaultSelector() as sel:
        sel.register(channel, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select(timeout=30.0):
                key.fileobj.recv(4096)  # type: ignore[union-attr]


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--memory-gib", type=float, default=MEMORY_GIB)
    p.add_argument("-f", "--connection-file", help="where a front end would find the kernel")
    args = p.parse_args()
    log = _common.setup("idle_notebook")
    shell, frontend = socket.socketpair()
    with Device(gpu_index=_common.gpu_list(args.gpu)[0]) as dev:
        load_model(dev, args.memory_gib)
        log.info("model loaded (%.1f GiB); waiting for input", args.memory_gib)
        try:
            wait_for_input(shell)
        finally:
            shell.close()
            frontend.close()


if __name__ == "__main__":
    main()
