"""After each short round of work, writes its artifacts and ships them with an external
compressor (gzip), waiting for the tool to finish before going on."""

import os
import signal
import subprocess
import sys
import tempfile

from daemon.sim.device import Device

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def write_artifact(path: str) -> None:
    with open(path, "wb") as fh:
        for i in range(48):
            fh.write(bytes([i]) * (1 << 19) + os.urandom(1 << 19))


def ship_artifacts(path: str) -> None:
    subprocess.run(["gzip", "-6", "-f", "-k", path], check=True)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = tempfile.mkdtemp(prefix="artifacts-", dir=os.environ.get("MLCOST_SIM_DIR"))
    path = os.path.join(out, "artifact.bin")
    try:
        write_artifact(path)
        with Device(gpu_index=GPU) as gpu:
            gpu.alloc(8 << 30)
            while True:
                gpu.kernel(0.1, sm=0.8)
                ship_artifacts(path)
    finally:
        for name in os.listdir(out):
            os.unlink(os.path.join(out, name))
        os.rmdir(out)


if __name__ == "__main__":
    main()
