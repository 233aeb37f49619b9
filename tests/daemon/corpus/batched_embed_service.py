"""An embedding service that batches requests: handler threads put each request on a queue and
wait; the main thread collects up to 16 requests (or whatever came within 10 ms) and runs them as
one batch on the GPU. Eight clients post back to back (load_client.py)."""

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BATCH = 16
pending: "queue.Queue[tuple[list, dict]]" = queue.Queue()


class EmbedHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = min(int(self.headers.get("Content-Length") or 0), 65536)
        slot = {"done": threading.Event()}
        pending.put((json.loads(self.rfile.read(length) or b"[]"), slot))
        slot["done"].wait()
        body = json.dumps({"embedding": slot["vector"]})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def next_batch() -> list:
    batch = [pending.get()]
    deadline = time.monotonic() + 0.01
    while len(batch) < MAX_BATCH:
        try:
            batch.append(pending.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            break
    return batch


def embed_forever(gpu: Device) -> None:
    while True:
        batch = next_batch()
        gpu.kernel(0.04 + 0.002 * len(batch), sm=0.8)
        for features, slot in batch:
            slot["vector"] = [x * 0.5 for x in features]
            slot["done"].set()


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    port_file = os.path.join(tempfile.mkdtemp(dir=os.environ.get("MLCOST_SIM_DIR")), "port")
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(8 << 30)
        server = ThreadingHTTPServer(("127.0.0.1", 0), EmbedHandler)
        with open(port_file, "w") as f:
            f.write(str(server.server_address[1]))
        threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
        subprocess.Popen([sys.executable, os.path.join(HERE, "load_client.py"), "--port-file",
                          port_file, "--rate", "0", "--concurrency", "8"])
        embed_forever(gpu)


if __name__ == "__main__":
    main()
