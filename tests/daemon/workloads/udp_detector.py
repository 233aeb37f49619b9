"""A detection service on UDP, written without mlcost in mind: a camera gateway sends a frame
reference in a datagram; each one gets a GPU pass and a reply datagram. Three ways to wait for
the next datagram, as services are written: an asyncio datagram endpoint, selectors over two
UDP sockets (requests and admin), a bare recvfrom loop. It binds a fixed port below the host's
ephemeral range (as a service's configured port is), or with --ephemeral a port inside it on
0.0.0.0 (as probe 143's camdetect_udp.py bound 47151: the row a statsd client's socket has),
and writes it to --port-file.

Usage: udp_detector.py --port-file PATH [--loop asyncio|selectors|recvfrom] [--ephemeral]
"""

import argparse
import asyncio
import os
import random
import selectors
import signal
import socket
import sys

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def configured_ports(count: int) -> list[socket.socket]:
    """`count` UDP sockets bound on 0.0.0.0 to free ports below the ephemeral range."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    found: list[socket.socket] = []
    while len(found) < count:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind(("0.0.0.0", random.randrange(max(low - 12000, 1024), low)))
        except OSError:
            sock.close()
            continue
        found.append(sock)
    return found


def ephemeral_ports(count: int) -> list[socket.socket]:
    """`count` UDP sockets bound on 0.0.0.0 to free ports inside the ephemeral range."""
    found: list[socket.socket] = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", 0))  # the kernel's pick: in ip_local_port_range
        found.append(sock)
    return found


def detect(gpu: Device, data: bytes) -> bytes:
    gpu.kernel(0.3, sm=0.5)
    return b'{"frame": %d, "boxes": []}' % len(data)


class Detect(asyncio.DatagramProtocol):
    def __init__(self, gpu: Device) -> None:
        self.gpu = gpu

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        asyncio.get_running_loop().create_task(self.answer(data, addr))

    async def answer(self, data: bytes, addr) -> None:
        reply = await asyncio.to_thread(detect, self.gpu, data)
        self.transport.sendto(reply, addr)


async def serve_asyncio(gpu: Device, sock: socket.socket) -> None:
    await asyncio.get_running_loop().create_datagram_endpoint(lambda: Detect(gpu), sock=sock)
    await asyncio.Event().wait()


def serve_selectors(gpu: Device, requests: socket.socket, admin: socket.socket) -> None:
    waiting = selectors.DefaultSelector()
    waiting.register(requests, selectors.EVENT_READ, "requests")
    waiting.register(admin, selectors.EVENT_READ, "admin")
    while True:
        for key, _ in waiting.select():
            data, addr = key.fileobj.recvfrom(2048)
            key.fileobj.sendto(detect(gpu, data) if key.data == "requests" else b"ok", addr)


def serve_recvfrom(gpu: Device, sock: socket.socket) -> None:
    while True:
        data, addr = sock.recvfrom(2048)
        sock.sendto(detect(gpu, data), addr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--loop", choices=("asyncio", "selectors", "recvfrom"), default="asyncio")
    parser.add_argument("--ephemeral", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    socks = (ephemeral_ports if args.ephemeral else configured_ports)(
        2 if args.loop == "selectors" else 1)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(9 << 30)
        with open(args.port_file + ".tmp", "w") as f:
            f.write(" ".join(str(s.getsockname()[1]) for s in socks))
        os.replace(args.port_file + ".tmp", args.port_file)
        if args.loop == "asyncio":
            asyncio.run(serve_asyncio(gpu, socks[0]))
        elif args.loop == "selectors":
            serve_selectors(gpu, *socks)
        else:
            serve_recvfrom(gpu, socks[0])


if __name__ == "__main__":
    main()
