"""An internal FAQ-answering service with little traffic: http.server with serve_forever in a
background thread (the main thread joins it), a small model answering one question every few
seconds. A load test of one client at ~0.3 requests/s runs beside it."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
HERE = os.path.dirname(os.path.abspath(__file__))


def answer(gpu: Device, question: list) -> dict:
    gpu.kernel(0.01, sm=0.3)
    return {"answer": int(sum(question) * 10) % 7}


class FaqHandler(BaseHTTPRequestHandler):
    gpu: Device

    def do_POST(self):
        length = min(int(self.headers.get("Content-Length") or 0), 65536)
        body = json.dumps(answer(self.gpu, json.loads(self.rfile.read(length) or b"[]")))
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
        gpu.alloc(6 << 30)
        FaqHandler.gpu = gpu
        server = HTTPServer(("127.0.0.1", 0), FaqHandler)
        with open(port_file, "w") as f:
            f.write(str(server.server_address[1]))
        subprocess.Popen([sys.executable, os.path.join(HERE, "load_client.py"), "--port-file",
                          port_file, "--rate", "0.3"])
        worker = threading.Thread(target=server.serve_forever, name="http", daemon=True)
        worker.start()
        worker.join()


if __name__ == "__main__":
    main()
