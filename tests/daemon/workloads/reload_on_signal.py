"""A re-ranker, written without mlcost in mind: it keeps its model on the GPU and waits in
signal.pause() until the catalog service pokes it with SIGUSR1; from then on it re-ranks the
catalog on its own, a GPU pass every 2 s (the stream of catalog updates the poke started).
It writes --ready-file once its model is on the GPU. (Probe 143 F8's reload_on_signal.py
re-ranked once a poke, every 40 s.)

Usage: reload_on_signal.py --ready-file PATH
"""

import argparse
import os
import signal
import sys
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ready-file", required=True)
    args = parser.parse_args()
    poked: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGUSR1, lambda *_: poked.append(1))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(11 << 30)
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(args.ready_file + ".tmp", args.ready_file)
        while not poked:
            signal.pause()
        while True:
            for _ in range(10):
                gpu.kernel(0.1, sm=0.8)
            time.sleep(2)


if __name__ == "__main__":
    main()
