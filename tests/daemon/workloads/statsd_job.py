"""A GPU job that reports to statsd, written without mlcost in mind: it holds its model on the
GPU and waits for its input (here: none comes), sending a gauge datagram to the local statsd
agent every half second from an unbound UDP socket (the kernel gives it an ephemeral port). A
client's socket: it serves nobody. With --sleep it sends its gauge once and then sleeps in
time.sleep (a job that reported its start and waits for nothing).

Usage: statsd_job.py --port-file PATH [--sleep]
"""

import argparse
import os
import selectors
import signal
import socket
import sys
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--sleep", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.sendto(b"job.started:1|c", ("127.0.0.1", 8125))
    ours, _theirs = socket.socketpair()
    waiting = selectors.DefaultSelector()
    waiting.register(ours, selectors.EVENT_READ)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(8 << 30)
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(statsd.getsockname()[1]))
        os.replace(args.port_file + ".tmp", args.port_file)
        statsd.sendto(b"job.gpu_mem_gib:8|g", ("127.0.0.1", 8125))
        while args.sleep:
            time.sleep(3600)
        while True:
            waiting.select(timeout=0.5)
            statsd.sendto(b"job.gpu_mem_gib:8|g", ("127.0.0.1", 8125))


if __name__ == "__main__":
    main()
