"""A GPU worker of an image-tagging service built on the watchdog library, without mlcost in
mind: an uploader moves each image into an inbox folder; watchdog's observer reports the new
file, and the handler tags it on the GPU, writes the tags to an outbox and moves the image
there. The main thread keeps the program alive as watchdog's documentation shows
(`while observer.is_alive(): observer.join(1)`).

Usage: watchdog_inbox_worker.py --inbox DIR --outbox DIR [--step-ms MS]
"""

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import _gpu
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


class Tagger(FileSystemEventHandler):
    def __init__(self, dev, outbox: Path, step_ms: float) -> None:
        self.dev, self.outbox, self.step_ms = dev, outbox, step_ms

    def on_created(self, event: FileSystemEvent) -> None:
        self.tag(Path(os.fsdecode(event.src_path)))

    def on_moved(self, event: FileSystemEvent) -> None:
        self.tag(Path(os.fsdecode(event.dest_path)))

    def tag(self, image: Path) -> None:
        if image.suffix != ".jpg" or not image.exists():
            return
        self.dev.kernel(self.step_ms / 1000, sm=0.8)
        (self.outbox / f"{image.stem}.json").write_text(json.dumps({"image": image.name,
                                                                    "tags": []}))
        image.rename(self.outbox / image.name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inbox", required=True, type=Path)
    parser.add_argument("--outbox", required=True, type=Path)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    observer = Observer()
    observer.schedule(Tagger(dev, args.outbox, args.step_ms), str(args.inbox))
    observer.start()
    _gpu.ready()
    try:
        while observer.is_alive():
            observer.join(1)
    finally:
        observer.stop()
        observer.join()


if __name__ == "__main__":
    main()
