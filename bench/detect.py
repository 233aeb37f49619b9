"""How long instance detection takes off-cloud, where no metadata service answers. Prints figures.

mlcostd detects its instance once at start (DMI, then one metadata probe per cloud, all within
`detect(timeout_s=1.0)`). Off-cloud, the probes meet either closed ports (refused at once) or a
black hole (a listener that accepts and never answers, as some firewalls behave). Both must stay
within the budget so the daemon's start never waits on them.

Target: <= 1.5 s in every case (the 1 s budget plus thread start-up).
usage: python bench/detect.py [--runs 5]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
from pathlib import Path

from pricing.detect import clear_detect_cache, detect


def closed_port() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def timed(dmi_root: Path, url: str) -> float:
    clear_detect_cache()
    start = time.monotonic()
    found = detect(dmi_root=dmi_root, endpoints={"aws": url, "gcp": url, "azure": url})
    elapsed = time.monotonic() - start
    assert found.provider is None, found
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    black_hole = f"http://127.0.0.1:{hole.getsockname()[1]}"
    with tempfile.TemporaryDirectory() as folder:
        no_dmi = Path(folder) / "no-dmi"
        for name, url in (("closed ports", closed_port()), ("black hole", black_hole)):
            times = [timed(no_dmi, url) for _ in range(args.runs)]
            print(f"{name:12}: median {statistics.median(times):.3f} s, max {max(times):.3f} s "
                  f"over {args.runs} runs (target <= 1.5 s)")
    hole.close()


if __name__ == "__main__":
    main()
