"""A GPU worker of a transcription queue, written without mlcost in mind: its scheduler writes
one job a line into a named pipe (a FIFO made with mkfifo); the worker reads the lines as they
come (`for line in jobs:`, a read in C), runs each job on the GPU and appends the result to a
file. Between jobs it waits on the pipe. `--reopen`: its scheduler writes a batch and closes
the pipe, and the worker opens it again for the next batch (`while True: with open(...)`),
waiting in the open until a writer comes; `--open-with` says how it opens it: the builtin open
(`open`), `pathlib` (Path.open), `os` (os.open) or `read_text` (Path.read_text, the whole batch).

Usage: fifo_job_worker.py --fifo PATH [--step-ms MS] [--reopen [--open-with HOW]]
"""

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def transcribe(gpu: Device, job: dict, step_s: float) -> dict:
    gpu.kernel(step_s, sm=0.8)
    return {"id": job["id"], "words": len(job.get("audio", "")) // 5}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fifo", required=True)
    parser.add_argument("--step-ms", type=float, default=400.0)
    parser.add_argument("--reopen", action="store_true")
    parser.add_argument("--open-with", choices=("open", "pathlib", "os", "read_text"),
                        default="open")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(9 << 30)
        if args.reopen and args.open_with == "pathlib":
            while True:
                with Path(args.fifo).open() as batch, open(os.devnull, "w") as results:
                    for line in batch:
                        results.write(json.dumps(transcribe(gpu, json.loads(line),
                                                            args.step_ms / 1000)))
        if args.reopen and args.open_with == "os":
            while True:
                fd = os.open(args.fifo, os.O_RDONLY)
                with os.fdopen(fd) as batch, open(os.devnull, "w") as results:
                    for line in batch:
                        results.write(json.dumps(transcribe(gpu, json.loads(line),
                                                            args.step_ms / 1000)))
        if args.reopen and args.open_with == "read_text":
            while True:
                batch = Path(args.fifo).read_text()
                with open(os.devnull, "w") as results:
                    for line in batch.splitlines():
                        results.write(json.dumps(transcribe(gpu, json.loads(line),
                                                            args.step_ms / 1000)))
        if args.reopen:
            while True:
                with open(args.fifo) as batch, open(os.devnull, "w") as results:
                    for line in batch:
                        results.write(json.dumps(transcribe(gpu, json.loads(line),
                                                            args.step_ms / 1000)))
        with open(args.fifo) as jobs, open(os.devnull, "w") as results:
            for line in jobs:
                results.write(json.dumps(transcribe(gpu, json.loads(line), args.step_ms / 1000)))


if __name__ == "__main__":
    main()
