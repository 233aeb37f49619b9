"""A GPU worker that dials its coordinator with multiprocessing.connection.Client and waits in
conn.recv() for its next work item, written without mlcost in mind (probe 143 F6). It works on
demand: stopping it loses the coordinator's worker.

Usage: mp_client_worker.py --coordinator HOST:PORT
"""

import argparse
import os
import signal
import sys
from multiprocessing.connection import Client

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = args.coordinator.rsplit(":", 1)
    dev = _gpu.attach(GPU)
    dev.alloc(15 << 30)
    conn = Client((host, int(port)), authkey=b"mlcost-test")
    while True:
        item = conn.recv()
        for _ in range(20):
            dev.kernel(0.1, sm=0.9)
        conn.send({"done": item})


if __name__ == "__main__":
    main()
