"""An HTTP front end (no GPU) that hands each request to its GPU worker process over a
multiprocessing Pipe, written without mlcost in mind (probe 132 H5). The worker waits on its
pipe between requests: it is part of the server, and stopping it hangs the service.

Usage: pipe_front_end.py --port-file PATH
"""

import argparse
import http.server
import multiprocessing as mp
import os
import signal
import sys
import threading

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def gpu_worker(conn) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(12 << 30)
    dev.kernel(0.5, sm=0.8)  # warm-up
    conn.send(b"ready")
    while True:
        conn.recv()
        dev.kernel(0.3, sm=0.9)
        conn.send(b"ok")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    parent, child = mp.Pipe()
    mp.Process(target=gpu_worker, args=(child,), daemon=True).start()
    parent.recv()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as behind a load balancer

        def do_GET(self) -> None:
            with lock:
                parent.send(self.path)
                out = parent.recv()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    _gpu.ready()
    server.serve_forever()


if __name__ == "__main__":
    main()
