"""A GPU worker of a captioning service, written without mlcost in mind: it asks the job
server for its next job with an HTTP long poll (urllib.request; the server holds the request
open until a job comes or its wait runs out and it answers 204), runs the job on the GPU and
posts the result back. Between jobs it waits for the server's answer.

Usage: poll_job_worker.py --server HOST:PORT [--step-ms MS]
"""

import argparse
import json
import os
import signal
import sys
import urllib.request

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def next_job(base: str) -> dict | None:
    with urllib.request.urlopen(f"{base}/jobs/next", timeout=60) as answer:
        return json.load(answer) if answer.status == 200 else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="HOST:PORT of the job server")
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    base = f"http://{args.server}"
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(12 << 30)
        print("READY", flush=True)
        while True:
            job = next_job(base)
            if job is None:
                continue
            gpu.kernel(args.step_ms / 1000, sm=0.8)
            done = json.dumps({"id": job["id"], "caption": "a cat"}).encode()
            urllib.request.urlopen(urllib.request.Request(
                f"{base}/jobs/{job['id']}/done", data=done, method="POST"), timeout=60).close()


if __name__ == "__main__":
    main()
