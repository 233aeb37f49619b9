"""What an incident snapshot costs the daemon in memory: its RSS before, at its peak while one
snapshot (store copy + HTML report) is written, just after, and a few seconds after; then a
second snapshot, to tell a one-off cost from growth.

Fills a store with `--minutes` of 8 GPUs x 64 processes (bench/collector.py's synthetic ticks,
through the real writer), starts `mlcostd run --simulate` on it with as many real workload
processes (bench/collector.py's scenario), lets it tick, and asks it for snapshots of the last
`--minutes` with HTML (POST /v1/snapshots, as `s` in mlcost-top or an incident trigger). RSS is
the daemon's VmRSS; the peak is VmHWM after resetting it (/proc/PID/clear_refs), where the
kernel lets us.

Not part of the test suite: a figure to read, not an assertion.
usage: python bench/snapshot_memory.py [--procs 64] [--gpus 8] [--minutes 30] [--warm-ticks 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from collector import scenario_text, synthetic_sample  # bench/ is sys.path[0] as a script
from soak import health, status_kib

import daemon
from daemon.client import Client
from daemon.store.writer import Store

ROOT = Path(daemon.__file__).resolve().parents[1]  # the checkout whose daemon is measured


def fill(db: Path, gpus: int, procs: int, minutes: float) -> None:
    rng = random.Random(1)
    ticks = int(minutes * 60)
    start = time.time() - ticks - 5
    with Store(db) as store:
        for tick in range(1, ticks + 1):
            store.write(synthetic_sample(tick, start + tick, gpus, procs, rng))
            store.maintain(0.05)


def reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        return True
    except OSError:
        return False


async def snapshot(socket: Path, minutes: float) -> dict[str, object]:
    async with Client(f"unix:{socket}", timeout_s=120.0) as client:
        return await client.take_snapshot(since_s=minutes * 60, html=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="the store filled before the daemon starts, and the range of "
                             "each snapshot (default: 30, the API's default range)")
    parser.add_argument("--warm-ticks", type=int, default=40,
                        help="ticks the daemon runs before the first snapshot (default: 40)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="mlcost-snapmem-"))
    db, socket = folder / "mlcost.db", folder / "api" / "mlcostd.sock"
    began = time.monotonic()
    fill(db, args.gpus, args.procs, args.minutes)
    print(f"# {ROOT}: store of {args.minutes:g} min at {args.gpus} x {args.procs} "
          f"({db.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - began:.0f} s; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    scenario = folder / "scenario.toml"
    scenario.write_text(scenario_text(args.gpus, args.procs))
    log = open(folder / "mlcostd.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "run", "--simulate", str(scenario), "--db", str(db),
         "--socket", str(socket)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        first = None
        while True:
            if proc.poll() is not None:
                print(f"# mlcostd exited with {proc.returncode}; see {folder / 'mlcostd.log'}")
                return 1
            ok, tick = asyncio.run(health(socket))
            if ok and first is None:
                first = tick
            if ok and first is not None and tick - first >= args.warm_ticks:
                break
            time.sleep(1.0)

        def rss() -> float:
            return status_kib(proc.pid, "VmRSS") / 1024

        for attempt in (1, 2):
            before = rss()
            peak_known = reset_peak(proc.pid)
            started = time.monotonic()
            result = asyncio.run(snapshot(socket, args.minutes))
            took = time.monotonic() - started
            after = rss()
            peak = status_kib(proc.pid, "VmHWM") / 1024 if peak_known else float("nan")
            time.sleep(5.0)
            settled = rss()
            print(f"snapshot {attempt} ({result.get('ticks')} ticks, html, {took:.1f} s): "
                  f"RSS before {before:.1f} MB, peak {peak:.1f} MB ({peak - before:+.1f}), "
                  f"just after {after:.1f} MB ({after - before:+.1f}), 5 s after "
                  f"{settled:.1f} MB ({settled - before:+.1f}); load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
