"""Slow storage: writes a small chunk to each FIFO in turn, forever (run as a helper process)."""

import os
import sys
import time

parent = os.getppid()  # exit when the workload that started us is gone
paths = sys.argv[2:]
delay = float(sys.argv[1])
# O_RDWR never blocks on a FIFO without readers; O_NONBLOCK: a full pipe must not hang us
fds = [os.open(p, os.O_RDWR | os.O_NONBLOCK) for p in paths]
chunk = b"\0" * 4096
while os.getppid() == parent:
    for fd in fds:
        try:
            os.write(fd, chunk)
        except BlockingIOError:
            pass  # nobody is reading: the pipe is full
    time.sleep(delay)
