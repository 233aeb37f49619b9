"""Score data shards, written without mlcost in mind: each shard is fetched by an external
download tool (an `aws s3 cp` or `curl` in production; here `sleep --fetch-s` stands in for a
tool that waits on the network and uses no CPU, as the test host has no network), run with
subprocess.check_call, then the model scores it on the GPU.

Usage: fetch_then_infer.py [--fetch-s S] [--step-ms MS]
"""

import argparse
import os
import signal
import subprocess
import sys

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def fetch(shard: int, seconds: float) -> str:
    subprocess.check_call(["sleep", str(seconds)])
    return f"shard-{shard:05d}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fetch-s", type=float, default=600.0)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(8 << 30)
        shard = 0
        while True:
            gpu.kernel(args.step_ms / 1000, sm=0.8)  # score the previous shard
            fetch(shard, args.fetch_s)
            shard += 1


if __name__ == "__main__":
    main()
