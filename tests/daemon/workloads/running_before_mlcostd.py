"""A scorer that was running before mlcostd started, written without mlcost in mind: its model
stays loaded on the GPU and it sleeps until its next run, an hour away. On a real host it holds
its GPU when mlcostd starts; here it waits for the simulated host of the mlcostd it is to be
found by (the state dir that tell_sim_dir.py, that mlcostd's workload, writes into --dir-file),
attaches to its GPU 0, says so in DIR_FILE.attached, runs `--run-s` seconds of kernels (0: its
last run came before mlcostd was there to see it), then sleeps. SIGUSR1: a restarted mlcostd
simulates the host anew; it attaches to the host --dir-file names now (no run), as a process
on a real host goes on holding its GPU through mlcostd's restart.

Usage: running_before_mlcostd.py --dir-file PATH [--every S] [--run-s S]
"""

import argparse
import signal
import sys
import time
from pathlib import Path

from daemon.sim.device import Device


class Restarted(Exception):
    """The mlcostd simulating its host started again (SIGUSR1)."""


def restarted(*_: object) -> None:
    raise Restarted


def attach(told: Path) -> Device:
    while not told.exists():  # no simulated host yet: mlcostd has not started
        time.sleep(0.1)
    gpu = Device(gpu_index=0, state_dir=told.read_text())
    gpu.alloc(8 << 30)  # the model, loaded long ago
    Path(f"{told}.attached").write_text("attached")
    return gpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir-file", required=True)
    parser.add_argument("--every", type=float, default=3600.0, help="seconds between runs")
    parser.add_argument("--run-s", type=float, default=0.0, help="seconds of kernels at first")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGUSR1, restarted)
    told = Path(args.dir_file)
    gpu = attach(told)
    if args.run_s:
        gpu.kernel(args.run_s, sm=0.7)  # score the rows that came in
    while True:
        try:
            time.sleep(args.every)  # until the next run
        except Restarted:
            gpu = attach(told)  # (the old host's folder is gone with its mlcostd)


if __name__ == "__main__":
    main()
