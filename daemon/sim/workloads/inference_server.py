"""An inference server that runs every request on its own (batch size 1): many tiny kernels
that use a sliver of the SMs, so the GPU looks busy while most of it sits unused."""

from __future__ import annotations

import hashlib
import queue
import random
import threading
import time
from dataclasses import dataclass

from daemon.sim.device import Device
from daemon.sim.workloads import _common

GIB = 1 << 30


@dataclass
class Request:
    prompt: str
    arrived: float


def client_traffic(requests: queue.Queue[Request], rate: float, stop: threading.Event) -> None:
    """Requests arriving at a steady rate (the front end of the server)."""
    rng = random.Random(0)
    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        requests.put(Request(prompt=f"query {rng.randrange(10**6)}", arrived=time.monotonic()))
        next_at += interval
        stop.wait(max(0.0, next_at - time.monotonic()))


def tokenize(prompt: str) -> list[int]:
    return [b for b in hashlib.sha256(prompt.encode()).digest()[:16]]


def generate(dev: Device, tokens: list[int], kernel_seconds: float, sm: float) -> str:
    dev.kernel(kernel_seconds, sm=sm)  # one forward pass for one request
    return "".join(chr(97 + t % 26) for t in tokens)


def serve_forever(dev: Device, requests: queue.Queue[Request], kernel_seconds: float,
                  sm: float, log: object) -> None:
    served = 0
    latency = 0.0
    while True:
        request = requests.get()  # batch size 1: take one request, run it, repeat
        generate(dev, tokenize(request.prompt), kernel_seconds, sm)
        served += 1
        latency += time.monotonic() - request.arrived
        if served % 1000 == 0:
            log.info("served %d, mean latency %.1f ms", served, 1000 * latency / served)  # type: ignore[attr-defined]


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--memory-gib", type=float, default=18.0)
    p.add_argument("--rate", type=float, default=50.0, help="requests per second")
    p.add_argument("--kernel-seconds", type=float, default=0.017)
    p.add_argument("--sm", type=float, default=0.12)
    args = p.parse_args()
    log = _common.setup("inference_server")
    requests: queue.Queue[Request] = queue.Queue()
    stop = threading.Event()
    traffic = threading.Thread(target=client_traffic, args=(requests, args.rate, stop),
                               name="http-frontend", daemon=True)
    with Device(gpu_index=_common.gpu_list(args.gpu)[0]) as dev:
        dev.alloc(int(args.memory_gib * GIB))
        traffic.start()
        try:
            serve_forever(dev, requests, args.kernel_seconds, args.sm, log)
        finally:
            stop.set()


if __name__ == "__main__":
    main()
