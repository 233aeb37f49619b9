"""A small HTTP scoring service: one POST /score request at a time, a tiny forward pass on the
GPU per request. The standard library's http.server, as a quick internal service is often
written: `serve_forever` runs in a thread and the main thread waits on it, or (with
--main-thread) `serve_forever` runs on the main thread. Traffic is whatever clients send."""

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
WEIGHTS = [0.25, -0.5, 0.75, 0.1]


def make_handler(gpu):
    class ScoreHandler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = min(int(self.headers.get("Content-Length") or 0), 65536)
            try:
                features = json.loads(self.rfile.read(length) or b"[]")
            except ValueError:
                self.send_error(400, "body must be a JSON list of numbers")
                return
            gpu.kernel(0.004, sm=0.002)  # a tiny model: a sliver of the SMs for 4 ms
            score = sum(w * float(x) for w, x in zip(WEIGHTS, features, strict=False))
            body = json.dumps({"score": score}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return ScoreHandler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", help="where to write the bound port, for its clients")
    parser.add_argument("--main-thread", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(3 << 30)
        server = HTTPServer(("127.0.0.1", 0), make_handler(gpu))
        if args.port_file:
            tmp = args.port_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(server.server_address[1]))
            os.replace(tmp, args.port_file)
        if args.main_thread:
            server.serve_forever()
        else:
            worker = threading.Thread(target=server.serve_forever, name="http")
            worker.start()
            worker.join()


if __name__ == "__main__":
    main()
