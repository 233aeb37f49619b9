"""A workload of a simulated host that tells a process started before it where the host is:
writes its state dir (MLCOST_SIM_DIR) into PATH, waits (at most 30 s) until PATH.attached says
that process attached to a GPU, then exits, so that the daemon's first tick finds it holding
its GPU (running_before_mlcostd.py).

Usage: tell_sim_dir.py PATH
"""

import os
import sys
import time
from pathlib import Path


def main() -> None:
    told = Path(sys.argv[1])
    partial = told.with_name(told.name + ".partial")
    partial.write_text(os.environ["MLCOST_SIM_DIR"])
    os.replace(partial, told)  # whole, or not there
    attached = Path(f"{told}.attached")
    deadline = time.monotonic() + 30.0
    while not attached.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
