"""What reading a frame's source line costs: the path walked as the process's user
(daemon.analysis.source_lines) against opening the path as root in one call. Prints figures.

The classifier reads a few lines per dump it classifies (the innermost user line, up to
RECORD_LINES_LOOKED_AT lines above a bare write), and dumps are rate-limited ([attribution]:
at most dumps_per_second): a few hundred reads a second at the very most. Each read walks the
path one component at a time (an openat, an fstat and, for a user who is not root, a getxattr
for the folder's ACL per component), then reads the line from a cache keyed by the file's
identity or from the file.

Figures per read, for a file 4 and 9 folders deep, read for root (capabilities: no ACL
looked at) and for another user; the last line times the old check (one open of the whole path
and an fstat) for comparison.
usage: python bench/source_lines.py [--reads 20000]   (as root)
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from daemon.analysis import source_lines
from daemon.analysis.source_lines import ROOT, Credentials, read_source_line
from daemon.sources.frames import Frame

OTHER = Credentials(65534, frozenset({65534}))


def per_read_us(frame: Frame, reader: Credentials, reads: int, cold: bool) -> float:
    start = time.perf_counter()
    for _ in range(reads):
        if cold:
            source_lines._SOURCE_LINES.clear()
        assert read_source_line(frame, reader) is not None
    return (time.perf_counter() - start) / reads * 1e6


def old_check_us(path: str, reads: int) -> float:
    start = time.perf_counter()
    for _ in range(reads):
        handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            stat.S_ISREG(os.fstat(handle).st_mode)
        finally:
            os.close(handle)
    return (time.perf_counter() - start) / reads * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=20000)
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="mlcost-bench-", dir="/tmp"))
    try:
        top.chmod(0o755)
        paths: dict[int, str] = {}
        for depth in (4, 9):
            folder = top.joinpath(*(f"d{i}" for i in range(depth - 2)))  # /tmp and top count
            folder.mkdir(parents=True, exist_ok=True)
            source = folder / "train.py"
            source.write_text("import torch\n" * 200 + "loss.backward()\n" + "x = 1\n" * 300)
            paths[depth] = str(source)
        for parent in top.rglob("*"):
            parent.chmod(0o755 if parent.is_dir() else 0o644)
        for depth, path in paths.items():
            frame = Frame("main", path, 201)
            for name, reader in (("root", ROOT), ("another user", OTHER)):
                warm = per_read_us(frame, reader, args.reads, cold=False)
                cold = per_read_us(frame, reader, args.reads // 10, cold=True)
                print(f"{depth} folders deep, {name:12}: {warm:6.1f} us a read (line kept), "
                      f"{cold:6.1f} us (line read from the file)")
        print(f"old check (one open as root + fstat), 9 deep: "
              f"{old_check_us(paths[9], args.reads):6.1f} us")
    finally:
        shutil.rmtree(top)


if __name__ == "__main__":
    main()
