"""A program with unfamiliar names whose stall is a plain blocking read of a slow FIFO."""

import os
import subprocess
import sys
import tempfile

import _gpu


class Almanac:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def next_tide(self) -> bytes:
        return os.read(self.fd, 1 << 16)


def churn(almanac: Almanac, dev) -> None:
    while True:
        tide = almanac.next_tide()
        dev.kernel(0.005 + 0.0 * len(tide))


def main() -> None:
    path = os.path.join(tempfile.mkdtemp(prefix="mlcost-opaque-"), "tides")
    os.mkfifo(path)
    helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_trickle.py")
    subprocess.Popen([sys.executable, helper, "1.0", path])
    fd = os.open(path, os.O_RDONLY)
    dev = _gpu.attach()
    dev.alloc(2 << 30)
    _gpu.ready()
    churn(Almanac(fd), dev)


if __name__ == "__main__":
    main()
