"""Prints a line with print() (no flush), then waits for the file argv[1] (at most
WAIT_S): "saw it" when it came, "no one answered" when it did not. Under a profile whose
stdout is a pipe, the first line reaches the reader only if the command's output is not
block-buffered (probe 140 F6: it arrived at exit)."""

import os
import sys
import time

WAIT_S = 60

print("ready")
deadline = time.monotonic() + WAIT_S
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("saw it" if os.path.exists(sys.argv[1]) else "no one answered")
