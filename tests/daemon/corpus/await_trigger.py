"""A job that loaded its model onto the GPU and now polls for a go-file that never comes."""

import os
import signal
import sys
import time

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def wait_for_go(flag: str) -> None:
    while not os.path.exists(flag):
        time.sleep(0.5)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(22 << 30)
        wait_for_go("/nonexistent/mlcost-corpus-go")


if __name__ == "__main__":
    main()
