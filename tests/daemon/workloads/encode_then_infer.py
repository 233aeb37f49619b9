"""Tag video clips, written without mlcost in mind: each clip is first re-encoded by an external
encoder (ffmpeg in production; here a child Python process that keeps a core busy for
--encode-s seconds stands in for it, as the test host has no ffmpeg), run with
subprocess.run(capture_output=True), then the tagging model runs on it on the GPU. The encoder
is far slower than the model, so the GPU waits while the encoder works.

Usage: encode_then_infer.py [--encode-s S] [--step-ms MS]
"""

import argparse
import os
import signal
import subprocess
import sys

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
ENCODER = ("import sys, time\n"
           "end = time.monotonic() + float(sys.argv[1])\n"
           "frames = 0\n"
           "while time.monotonic() < end:\n"
           "    frames += 1\n"
           "print(frames)\n")


def reencode(clip: int, seconds: float) -> str:
    done = subprocess.run([sys.executable, "-c", ENCODER, str(seconds)], capture_output=True,
                          text=True, check=True)
    return f"clip-{clip}: {done.stdout.strip()} frames"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--encode-s", type=float, default=90.0)
    parser.add_argument("--step-ms", type=float, default=300.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(8 << 30)
        clip = 0
        while True:
            gpu.kernel(args.step_ms / 1000, sm=0.8)  # tag the previous clip
            reencode(clip, args.encode_s)
            clip += 1


if __name__ == "__main__":
    main()
