"""A training loop whose user pressed Ctrl-Z in its shell and forgot it, written without mlcost
in mind: after --steps steps it stops itself with SIGSTOP (what Ctrl-Z sends is SIGTSTP, whose
default action is the same stop), holding its GPU memory, until someone continues it.

Usage: stopped_loop.py [--steps N] [--step-ms MS]
"""

import argparse
import os
import signal
import sys

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-ms", type=float, default=200.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(20 << 30)
        for step in range(1, 1 << 30):
            gpu.kernel(args.step_ms / 1000, sm=0.9)
            if step == args.steps:
                os.kill(os.getpid(), signal.SIGSTOP)


if __name__ == "__main__":
    main()
