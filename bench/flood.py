"""Health under a descriptor flood: more idle TCP connections than the daemon may open.

Starts `mlcostd run --simulate SCENARIO --listen 127.0.0.1:0` in a temporary folder, lowers its
file limit to --limit with prlimit, opens --connections idle TCP connections to its port (as many
as the backlog takes), then times /v1/health on the unix socket --calls times and counts the
ticks recorded meanwhile and what the flood added to the log. Prints the figures.

Targets (issue 10): health within 1 s, every GPU recorded, the log under 1 MB during the flood.
The fault suite (tests/faults/test_hostile_client.py) checks the behaviour; the speed lives here.
usage: python bench/flood.py [--connections 1100] [--limit 1024] [--calls 10] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from daemon.client import Client

ROOT = Path(__file__).resolve().parents[1]
TCP_PORT = re.compile(r"API on http://[^:]+:(\d+) ")


def wait_for(what: str, found, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"bench/flood.py: {what} did not come within {timeout_s:.0f} s")


async def timed_health(sock: Path, calls: int) -> tuple[list[float], int, int]:
    """(seconds per call, first tick, last tick)."""
    took, ticks = [], []
    async with Client(f"unix:{sock}", timeout_s=30.0) as client:
        for _ in range(calls):
            started = time.perf_counter()
            health = await client.health()
            took.append(time.perf_counter() - started)
            ticks.append(health.tick or 0)
    return took, ticks[0], ticks[-1]


async def health_tick(sock: Path) -> int:
    async with Client(f"unix:{sock}", timeout_s=30.0) as client:
        return (await client.health()).tick or 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--limit", type=int, default=1024, help="the daemon's file limit")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the flood stays")
    parser.add_argument("--scenario", default="demo")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="mlcost-flood-"))
    db, sock, log_path = folder / "mlcost.db", folder / "api" / "mlcostd.sock", folder / "log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "run", "--simulate", args.scenario, "--db", str(db),
         "--socket", str(sock), "--interval", "1", "--listen", "127.0.0.1:0"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True)
    flood: list[socket.socket] = []
    try:
        port = int(wait_for("the TCP port", lambda: TCP_PORT.search(log_path.read_text())).group(1))
        wait_for("a first tick", lambda: asyncio.run(health_tick(sock)) > 0)
        subprocess.run(["prlimit", f"--pid={proc.pid}", f"--nofile={args.limit}:{args.limit}"],
                       check=True)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, args.connections + 200), hard))
        quiet, _, _ = asyncio.run(timed_health(sock, args.calls))
        log_before = log_path.stat().st_size
        for _ in range(args.connections):
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            except OSError:
                break  # the backlog is full: the flood is as big as it gets
        started = time.monotonic()
        took, first, _ = asyncio.run(timed_health(sock, args.calls))
        time.sleep(max(0.0, args.seconds - (time.monotonic() - started)))  # the flood stays on
        last = asyncio.run(health_tick(sock))
        flooded_s = time.monotonic() - started
        growth = log_path.stat().st_size - log_before
    finally:
        for conn in flood:
            conn.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()

    def ms(values: list[float]) -> str:
        return (f"median {statistics.median(values) * 1e3:.1f} ms, "
                f"max {max(values) * 1e3:.1f} ms")

    print(f"connections held: {len(flood)} (asked {args.connections}) at a {args.limit}-file "
          f"limit, for {flooded_s:.1f} s")
    print(f"health before the flood: {ms(quiet)}")
    print(f"health during the flood: {ms(took)}  (target: within 1 s)")
    print(f"ticks recorded during the flood: {last - first} in {flooded_s:.1f} s at a 1 s tick")
    print(f"log growth during the flood: {growth} bytes  (target: under 1 MB)")
    print(f"daemon exit: {proc.returncode}")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
