"""A training loop that dies by a signal (argv[1], SIGSEGV by default) at its 5th step (argv[2]
to die later: 0.05 s a step), as a crash in a native extension does (probe 140 F8)."""

import os
import signal
import sys

from daemon.sim.device import Device

AT = int(sys.argv[2]) if len(sys.argv) > 2 else 5

with Device(0) as gpu:
    gpu.alloc(1 << 30)
    for step in range(1, AT + 1):
        gpu.kernel(0.05)
        print(f"step {step}", flush=True)
        if step == AT:
            os.kill(os.getpid(), getattr(signal, sys.argv[1] if len(sys.argv) > 1 else "SIGSEGV"))
