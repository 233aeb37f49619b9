"""A long run of the simulated daemon: its RSS, descriptors, threads and database size each minute.

Starts `mlcostd run --simulate SCENARIO` in a temporary folder (its own database and socket),
and once a minute prints one line: minutes since start, RSS (and its anonymous part, from
/proc/PID/status), open descriptors, threads, the database size (main file + WAL), the ticks
recorded, and whether /v1/health answers ok. At the end it prints the RSS growth after the
first 10 minutes (target: within 10 MB) and stops the daemon.

Not part of the test suite: a figure to read, not an assertion.
usage: python bench/soak.py [--minutes 120] [--scenario demo | --procs 64 [--gpus 8]] [--interval 1]
                            [--every 60]
`--procs N` runs N workload processes on `--gpus` simulated GPUs (bench/collector.py's scenario:
each process keeps one GPU busy), the size the issue's targets name (8 x 64, 8 x 256).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from collector import scenario_text  # bench/ is sys.path[0] when run as a script

from daemon.client import Client, ClientError

ROOT = Path(__file__).resolve().parents[1]
SETTLE_MINUTES = 10  # growth is measured from here on: start-up caches fill before it


def status_kib(pid: int, field: str) -> int:
    """One "<field>: N kB" line of /proc/PID/status (RssAnon, RssFile, VmHWM ...)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


async def health(socket: Path) -> tuple[bool, int]:
    try:
        async with Client(f"unix:{socket}", timeout_s=5.0) as client:
            found = await client.health()
            return found.ok, found.tick or 0
    except (ClientError, OSError, asyncio.TimeoutError):
        return False, 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--scenario", default="demo",
                        help="a built-in scenario or a scenario .toml file (default: demo)")
    parser.add_argument("--procs", type=int, metavar="N",
                        help="instead of --scenario: N workload processes on --gpus GPUs")
    parser.add_argument("--gpus", type=int, default=8, help="with --procs (default: 8)")
    parser.add_argument("--interval", type=float, default=1.0, help="the daemon's tick, seconds")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between lines")
    parser.add_argument("--folder", help="keep the run's files here (default: a temp folder, "
                                         "removed at the end unless the daemon failed)")
    args = parser.parse_args()
    if args.procs is not None and (args.procs < 1 or args.gpus < 1):
        parser.error(f"--procs {args.procs} --gpus {args.gpus}: both must be at least 1")

    folder = Path(args.folder or tempfile.mkdtemp(prefix="mlcost-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    db, socket = folder / "mlcost.db", folder / "api" / "mlcostd.sock"
    scenario = args.scenario
    if args.procs is not None:
        scenario = str(folder / f"soak-{args.gpus}x{args.procs}.toml")
        Path(scenario).write_text(scenario_text(args.gpus, args.procs))
    log = open(folder / "mlcostd.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon", "run", "--simulate", scenario, "--db", str(db),
         "--socket", str(socket), "--interval", str(args.interval)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True)
    daemon = psutil.Process(proc.pid)
    print(f"# mlcostd pid {proc.pid}, --simulate {scenario}, folder {folder}", flush=True)
    print(f"{'min':>6} {'rss_mb':>8} {'anon_mb':>8} {'fds':>5} {'threads':>7} {'db_mb':>8} "
          f"{'ticks':>7} {'health':>6}", flush=True)
    rss: list[tuple[float, float]] = []
    started = time.monotonic()
    try:
        while True:
            minutes = (time.monotonic() - started) / 60
            if proc.poll() is not None:
                print(f"# mlcostd exited with {proc.returncode}; see {folder / 'mlcostd.log'}")
                return 1
            ok, tick = asyncio.run(health(socket))
            rss_mb = daemon.memory_info().rss / 1e6
            rss.append((minutes, rss_mb))
            print(f"{minutes:6.1f} {rss_mb:8.1f} {status_kib(proc.pid, 'RssAnon') / 1e3:8.1f} "
                  f"{daemon.num_fds():5d} {daemon.num_threads():7d} {db_bytes(db) / 1e6:8.1f} "
                  f"{tick:7d} {'ok' if ok else 'NO':>6}", flush=True)
            if minutes >= args.minutes:
                break
            time.sleep(max(0.0, args.every - (time.monotonic() - started) % args.every))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    settled = [mb for minute, mb in rss if minute >= SETTLE_MINUTES]
    if len(settled) >= 2:
        print(f"# RSS after {SETTLE_MINUTES} min: {settled[0]:.1f} MB -> {settled[-1]:.1f} MB "
              f"(growth {settled[-1] - settled[0]:+.1f} MB, max {max(settled):.1f} MB; "
              "target within 10 MB)")
    print(f"# stopped: exit {proc.returncode}")
    if not args.folder:  # its store is ~50 MB an hour at 8 x 64; a failed run keeps it (above)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
