"""A training loop whose SIGTERM and SIGINT handlers say they save a checkpoint and never
finish (probe 140 F9): only SIGKILL ends it before it stops by itself after STOP_AFTER_S, so a
profile that never kills it still ends."""

import signal
import time

from daemon.sim.device import Device

STOP_AFTER_S = 90


def saving(signum, frame):  # type: ignore[no-untyped-def]
    print(f"got {signal.Signals(signum).name}, saving a checkpoint...", flush=True)


signal.signal(signal.SIGTERM, saving)
signal.signal(signal.SIGINT, saving)
with Device(0) as gpu:
    gpu.alloc(1 << 30)
    print("training", flush=True)
    started = time.monotonic()
    while time.monotonic() - started < STOP_AFTER_S:
        gpu.kernel(0.05)
