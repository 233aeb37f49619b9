"""A load generator for the HTTP services in this folder: keeps `--concurrency` clients posting
to the service at about `--rate` requests a second each (0: back to back), until it is stopped.
With --stream it reads each response chunk by chunk as it arrives.

    python load_client.py --port-file PATH [--rate 2] [--concurrency 1] [--stream]"""

import argparse
import http.client
import json
import os
import random
import signal
import sys
import threading
import time


def wait_for_port(path: str) -> int:
    while not os.path.exists(path):
        time.sleep(0.1)
    with open(path) as f:
        return int(f.read())


def client(port: int, rate: float, stream: bool, seed: int) -> None:
    rng = random.Random(seed)
    while True:
        if rate > 0:
            time.sleep(rng.expovariate(rate))
        body = json.dumps([rng.random() for _ in range(4)])
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/generate" if stream else "/score", body,
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            while response.read(256):
                pass
            conn.close()
        except OSError:
            time.sleep(0.5)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--rate", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--stream", action="store_true")
    args = p.parse_args()
    port = wait_for_port(args.port_file)
    threads = [threading.Thread(target=client, args=(port, args.rate, args.stream, i), daemon=True)
               for i in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.exit(0)


if __name__ == "__main__":
    main()
