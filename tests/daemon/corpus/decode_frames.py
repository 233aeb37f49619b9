"""Video clips stored as zlib-compressed raw frames, decoded and colour-corrected on the main
thread before each step."""

import os
import signal
import sys
import zlib

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])
WIDTH, HEIGHT = 96, 64
GAMMA = [min(255, int((v / 255) ** 0.8 * 255)) for v in range(256)]


def encode_clip(n_frames: int) -> list[bytes]:
    frame = bytes((x * 7 + y * 3) % 256 for y in range(HEIGHT) for x in range(WIDTH * 3))
    return [zlib.compress(frame, 6) for _ in range(n_frames)]


def unpack_frame(blob: bytes) -> list[list[int]]:
    raw = zlib.decompress(blob)
    rows = []
    for y in range(HEIGHT):
        line = raw[y * WIDTH * 3:(y + 1) * WIDTH * 3]
        rows.append([GAMMA[v] for v in line])
    return rows


def decode_clip(clip: list[bytes]) -> list:
    return [unpack_frame(blob) for blob in clip]


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    clip = encode_clip(600)
    with Device(gpu_index=GPU) as gpu:
        gpu.alloc(16 << 30)
        while True:
            frames = decode_clip(clip)
            gpu.kernel(0.05 + 0 * len(frames), sm=0.8)


if __name__ == "__main__":
    main()
