"""A text-generation endpoint that streams tokens: each POST /generate produces 48 tokens, one
decoding step on the GPU per token, each sent as soon as it is decoded (chunked transfer). Two
clients keep a stream open at all times (load_client.py --stream)."""

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
VOCAB = ["the", "a", "model", "token", "stream", "of", "words", "."]


class StreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    gpu: Device
    device_lock = threading.Lock()

    def decode_step(self, step: int) -> str:
        with self.device_lock:
            self.gpu.kernel(0.015, sm=0.5)
        return VOCAB[step % len(VOCAB)]

    def do_POST(self):
        length = min(int(self.headers.get("Content-Length") or 0), 65536)
        json.loads(self.rfile.read(length) or b"[]")
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for step in range(48):
            chunk = (self.decode_step(step) + " ").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    port_file = os.path.join(tempfile.mkdtemp(dir=os.environ.get("MLCOST_SIM_DIR")), "port")
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(20 << 30)
        StreamHandler.gpu = gpu
        server = ThreadingHTTPServer(("127.0.0.1", 0), StreamHandler)
        with open(port_file, "w") as f:
            f.write(str(server.server_address[1]))
        subprocess.Popen([sys.executable, os.path.join(HERE, "load_client.py"), "--port-file",
                          port_file, "--rate", "0", "--concurrency", "2", "--stream"])
        server.serve_forever()


if __name__ == "__main__":
    main()
