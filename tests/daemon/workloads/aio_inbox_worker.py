"""A GPU worker of a transcription service written as an asyncio program, without mlcost in
mind: an uploader drops audio files into an inbox folder; this worker looks at the folder once
a second (the listing in a thread, so the loop stays free), runs each new file through its model
on the GPU (in a thread too: the GPU call blocks), writes the text to an outbox and moves the
file there. Between looks it awaits asyncio.sleep.

Usage: aio_inbox_worker.py --inbox DIR --outbox DIR [--every S] [--step-ms MS]
"""

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def new_files(inbox: Path) -> list[Path]:
    with os.scandir(inbox) as entries:
        return sorted(Path(e.path) for e in entries if e.is_file() and e.name.endswith(".wav"))


def transcribe(dev, audio: Path, outbox: Path, step_ms: float) -> None:
    dev.kernel(step_ms / 1000, sm=0.8)
    (outbox / f"{audio.stem}.json").write_text(json.dumps({"file": audio.name, "text": ""}))
    audio.rename(outbox / audio.name)


async def serve(dev, inbox: Path, outbox: Path, every: float, step_ms: float) -> None:
    while True:
        for audio in await asyncio.to_thread(new_files, inbox):
            await asyncio.to_thread(transcribe, dev, audio, outbox, step_ms)
        await asyncio.sleep(every)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inbox", required=True, type=Path)
    parser.add_argument("--outbox", required=True, type=Path)
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dev = _gpu.attach(GPU)
    dev.alloc(10 << 30)
    _gpu.ready()
    asyncio.run(serve(dev, args.inbox, args.outbox, args.every, args.step_ms))


if __name__ == "__main__":
    main()
