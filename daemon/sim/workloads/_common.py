"""What every workload program does at start: arguments, logging, clean shutdown."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--gpu", default=os.environ.get("MLCOST_SIM_GPUS", "0"),
                   help="GPU index, or a comma-separated list")
    return p


def gpu_list(value: str) -> list[int]:
    return [int(x) for x in value.split(",") if x.strip()]


def setup(name: str) -> logging.Logger:
    """Log to stderr with the program's name; exit cleanly on SIGTERM; exit if orphaned."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s {name}[%(process)d] %(message)s",
    )
    signal.signal(signal.SIGTERM, _exit_on_signal)
    parent = os.getppid()
    threading.Thread(target=_exit_when_orphaned, args=(parent,), name="parent-watch",
                     daemon=True).start()
    return logging.getLogger(name)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    # SystemExit unwinds the stack, so `finally` blocks remove temp files.
    raise SystemExit(0)


def _exit_when_orphaned(parent: int) -> None:
    # If whoever started us is gone without stopping us, stop ourselves like a SIGTERM would.
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
