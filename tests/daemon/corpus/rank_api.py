"""A ranking API under steady load: a threaded standard-library HTTP server (serve_forever on
the main thread), each POST /score runs the ranking model on the GPU (one request at a time on
the device). It starts its own load test (load_client.py, four clients back to back)."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
HERE = os.path.dirname(os.path.abspath(__file__))


class RankHandler(BaseHTTPRequestHandler):
    gpu: Device
    device_lock = threading.Lock()

    def do_POST(self):
        length = min(int(self.headers.get("Content-Length") or 0), 65536)
        features = json.loads(self.rfile.read(length) or b"[]")
        with self.device_lock:
            self.gpu.kernel(0.03, sm=0.7)
        body = json.dumps({"rank": sorted(range(len(features)), key=features.__getitem__)})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    port_file = os.path.join(tempfile.mkdtemp(dir=os.environ.get("MLCOST_SIM_DIR")), "port")
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(10 << 30)
        RankHandler.gpu = gpu
        server = ThreadingHTTPServer(("127.0.0.1", 0), RankHandler)
        with open(port_file, "w") as f:
            f.write(str(server.server_address[1]))
        subprocess.Popen([sys.executable, os.path.join(HERE, "load_client.py"), "--port-file",
                          port_file, "--rate", "0", "--concurrency", "4"])
        server.serve_forever()


if __name__ == "__main__":
    main()
