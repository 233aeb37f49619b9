"""An inference server that runs every request on its own (batch size 1): many tiny kernels
that use a sliver of the SMs, so the GPU looks busy while most of it sits unused.

A real HTTP server on 127.0.0.1 (a port the kernel picks), with its clients in a thread of the
same process sending requests at a steady rate over one keep-alive connection: everything but
the GPU is real, so mlcost sees a process that listens, accepts a connection and serves."""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from daemon.sim.device import Device
from daemon.sim.workloads import _common

GIB = 1 << 30
# What it holds on each of its GPUs unless --memory-gib says (daemon.sim.scenario.resized
# places the workloads of a resized host by it).
MEMORY_GIB = 18.0
MAX_BODY = 65536


def client_traffic(port: int, rate: float, stop: threading.Event) -> None:
    """Requests arriving at a steady rate (the front end's clients), one connection kept open."""
    rng = random.Random(0)
    interval = 1.0 / rate
    next_at = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop.is_set():
        body = json.dumps({"prompt": f"query {rng.randrange(10**6)}", "sent": time.monotonic()})
        try:
            conn.request("POST", "/v1/generate", body=body,
                         headers={"Content-Type": "application/json"})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn.close()  # the server restarts or is stopping: connect again
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            stop.wait(0.5)
        next_at = max(next_at + interval, time.monotonic() - 1.0)  # no burst after a stall
        stop.wait(max(0.0, next_at - time.monotonic()))
    conn.close()


def tokenize(prompt: str) -> list[int]:
    return [b for b in hashlib.sha256(prompt.encode()).digest()[:16]]


def generate(dev: Device, tokens: list[int], kernel_seconds: float, sm: float) -> str:
    dev.kernel(kernel_seconds, sm=sm)  # one forward pass for one request
    return "".join(chr(97 + t % 26) for t in tokens)


class GenerateServer(HTTPServer):
    def __init__(self, dev: Device, kernel_seconds: float, sm: float, log: Any) -> None:
        super().__init__(("127.0.0.1", 0), GenerateHandler)
        self.dev, self.kernel_seconds, self.sm, self.log = dev, kernel_seconds, sm, log
        self.served = 0
        self.latency = 0.0


class GenerateHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the clients' connection stays open
    # Headers and body go out in two writes: with Nagle on, the body waits for the client's
    # delayed ACK (~40 ms a request), which would cap the server at a third of its rate.
    disable_nagle_algorithm = True
    server: GenerateServer

    def do_POST(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.send_error(400, "body must be JSON")
            return
        srv = self.server
        # batch size 1: take one request, run it, answer, repeat
        text = generate(srv.dev, tokenize(str(request.get("prompt", ""))), srv.kernel_seconds,
                        srv.sm)
        body = json.dumps({"text": text}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        srv.served += 1
        sent = request.get("sent")
        if isinstance(sent, int | float):
            srv.latency += time.monotonic() - sent
        if srv.served % 1000 == 0:
            srv.log.info("served %d, mean latency %.1f ms", srv.served,
                         1000 * srv.latency / srv.served)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would flood the log


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--memory-gib", type=float, default=MEMORY_GIB)
    p.add_argument("--rate", type=float, default=50.0, help="requests per second")
    p.add_argument("--kernel-seconds", type=float, default=0.017)
    p.add_argument("--sm", type=float, default=0.12)
    args = p.parse_args()
    log = _common.setup("inference_server")
    stop = threading.Event()
    with Device(gpu_index=_common.gpu_list(args.gpu)[0]) as dev:
        dev.alloc(int(args.memory_gib * GIB))
        server = GenerateServer(dev, args.kernel_seconds, args.sm, log)
        log.info("serving on 127.0.0.1:%d", server.server_address[1])
        traffic = threading.Thread(target=client_traffic,
                                   args=(server.server_address[1], args.rate, stop),
                                   name="http-clients", daemon=True)
        traffic.start()
        try:
            server.serve_forever()
        finally:
            stop.set()
            server.server_close()


if __name__ == "__main__":
    main()
