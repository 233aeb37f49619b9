"""A generation benchmark that exports how many tokens it generated on a Prometheus /metrics
page (as vLLM and TGI do): each step runs a kernel and adds the tokens of one batch."""

from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from daemon.sim.device import Device

TOKENS_PER_STEP = 512
generated = 0


class Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = (f"# TYPE generated_tokens counter\ngenerated_tokens_total {generated}\n"
                .encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def main() -> None:
    global generated
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with Device(gpu_index=0) as gpu:
        gpu.alloc(20 << 30)
        for _ in range(args.steps):
            gpu.kernel(0.06, sm=0.8)
            generated += TOKENS_PER_STEP
    server.shutdown()


if __name__ == "__main__":
    main()
