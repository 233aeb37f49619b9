"""A GPU worker of a document-OCR service that watches its inbox with inotify itself (through
ctypes, no dependency), without mlcost in mind: an uploader moves each page into the inbox; the
worker blocks reading its inotify descriptor until the kernel reports a file, runs the page on
the GPU, writes the text to an outbox and moves the page there. `--selector`: it waits on the
descriptor with the selectors module instead, waking every few seconds to write a heartbeat
line to its log, as services that must notice a shutdown flag do.

Usage: inotify_inbox_worker.py --inbox DIR --outbox DIR [--selector] [--step-ms MS]
"""

import argparse
import ctypes
import ctypes.util
import json
import os
import selectors
import signal
import struct
import sys
from pathlib import Path

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
IN_CLOSE_WRITE, IN_MOVED_TO, IN_CLOEXEC = 0x8, 0x80, 0o2000000
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then the name, NUL-padded

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def watch(folder: Path) -> int:
    fd = libc.inotify_init1(IN_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(folder),
                                        IN_CLOSE_WRITE | IN_MOVED_TO) < 0:
        raise OSError(ctypes.get_errno(), f"inotify on {folder}")
    return fd


def names(buffer: bytes):
    at = 0
    while at < len(buffer):
        _, _, _, size = EVENT.unpack_from(buffer, at)
        at += EVENT.size
        yield os.fsdecode(buffer[at:at + size].rstrip(b"\0"))
        at += size


def ocr(dev, page: Path, outbox: Path, step_ms: float) -> None:
    if not page.exists():
        return
    dev.kernel(step_ms / 1000, sm=0.8)
    (outbox / f"{page.stem}.json").write_text(json.dumps({"page": page.name, "text": ""}))
    page.rename(outbox / page.name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inbox", required=True, type=Path)
    parser.add_argument("--outbox", required=True, type=Path)
    parser.add_argument("--selector", action="store_true")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    fd = watch(args.inbox)
    _gpu.ready()
    if args.selector:
        selector = selectors.DefaultSelector()
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if not selector.select(timeout=5.0):
                print("alive", flush=True)
                continue
            for name in names(os.read(fd, 65536)):
                ocr(dev, args.inbox / name, args.outbox, args.step_ms)
    while True:
        for name in names(os.read(fd, 65536)):
            ocr(dev, args.inbox / name, args.outbox, args.step_ms)


if __name__ == "__main__":
    main()
