"""How long `mlcostd report` takes over a day of a loaded host and over a month. Prints figures.

Builds two stores in a temp folder, then times `python -m daemon report --json` (the whole
command, as a user runs it) for --since 15m (read from the raw samples), 1h, 6h and 24h on the
day store and 30d on the month store, three runs each (each range ends at the store's last
tick, not on an hour: its edge hours, and those of the period before it that the review compares
it with, are cut and placed by their ticks):

- day: 24 h of 1 s ticks at 8 GPUs x 64 GPU processes through the real writer (Store.write and
  its maintenance: minute and hour rollups), raw samples kept for the whole day (--raw-hours),
  and the hour spend the daemon's cost ledger hands the store (daemon.store.facts.write_spend;
  the ledger charges one tick a minute here, the same code at a coarser step, to keep the
  build in minutes).
- month: 30 days of hour rollups (and 8 days of minute rollups, as retention keeps them),
  inserted straight into the rollups table in the schema's units (daemon.store.schema), with
  hour spend rows, and one hour of raw ticks at its end, rolled up by the store's maintenance
  as a daemon's are (all but its last minute, which a report reads raw). 2.6 M ticks through the writer would
  take hours; what the report reads of a month is the rollups, so the rollups are what is
  built.

Targets (issue 23 item 4): --since 24h within 0.5 s, --since 30d within 1 s, and no shorter
range slower than 24h (a user narrowing the range expects it to get faster).
Run it against another checkout (the code before a change) with PYTHONPATH=THAT_CHECKOUT: the
stores are built and read by the `daemon` package found first.
usage: python bench/report.py [--gpus 8] [--processes 64] [--hours 24] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from daemon.analysis.cost import HostPrice, burn
from daemon.analysis.ledger import CostLedger
from daemon.store import facts, schema
from daemon.store.writer import Store

sys.path.insert(0, str(Path(__file__).parent))
from collector import synthetic_sample  # noqa: E402  (the collector bench's synthetic host)

PRICE = {"per_hour": 32.77, "gpus": 8, "gpu_count": 8, "lifecycle": "on-demand", "instance_type": "p4d.24xlarge",
         "provider": "aws", "region": "us-east-1", "source": "bench"}


def host_meta(gpus: int) -> dict[str, object]:
    return {"hostname": "bench", "interval_s": 1.0, "price": dict(PRICE, gpus=gpus, gpu_count=gpus)}


def build_day(path: Path, gpus: int, processes: int, seconds: int, raw_hours: float) -> None:
    rng = random.Random(7)
    store = Store(str(path), raw_retention_s=raw_hours * 3600, max_bytes=1 << 34)
    store.set_meta("host", host_meta(gpus))
    price = HostPrice.from_dict(dict(PRICE, gpus=gpus, gpu_count=gpus))
    assert price is not None
    ledger = CostLedger(max_gap_s=120.0)
    spend = hasattr(facts, "write_spend")  # the code before the change has no hour spend
    start = time.time() - seconds
    for tick in range(1, seconds + 1):
        sample = synthetic_sample(tick, start + tick, gpus, processes, rng)
        store.write(sample)
        if tick % 60 == 0:
            if spend:
                ledger.add(burn(sample, price))
                facts.write_spend(store, *ledger.take_unrecorded())
            while store.maintain(budget_s=1.0):
                pass
    while store.maintain(budget_s=1.0):
        pass
    store.close()


def backfill_spend(path: Path, gpus: int) -> bool:
    """Add the hour spend to a day store built by code that did not record it (the code before
    the change), from its own samples one a minute, through the same ledger as build_day.
    Opening it with this code's Store migrates it. False when there is nothing to add."""
    if not hasattr(facts, "write_spend"):
        return False
    from daemon.store.reader import StoreReader

    reader = StoreReader(str(path))
    try:
        if reader.query("SELECT 1 FROM rollups WHERE kind = ? LIMIT 1", (schema.KIND_SPEND,)):
            return False
        lo, hi = [t / 1000 for t in reader.query(
            "SELECT min(ts) AS lo, max(ts) AS hi FROM ticks")[0].values()]
    finally:
        reader.close()
    store = Store(str(path), raw_retention_s=(hi - lo) + 3600, max_bytes=1 << 34)
    price = HostPrice.from_dict(dict(PRICE, gpus=gpus, gpu_count=gpus))
    assert price is not None
    ledger = CostLedger(max_gap_s=120.0)
    reader = StoreReader(str(path), timeout_s=60.0)
    try:
        for chunk in range(int(lo), int(hi) + 1, 3600):
            for sample in reader.samples(chunk, min(chunk + 3599.999, hi), max_samples=60):
                ledger.add(burn(sample, price))
            facts.write_spend(store, *ledger.take_unrecorded())
    finally:
        reader.close()
        store.close()
    return True


def migrate(path: Path) -> str | None:
    """Open a store built by older code with this code's Store, as a daemon would on start:
    its migrations run (the covering series index). What it did, or None when nothing was due."""
    conn = __import__("sqlite3").connect(str(path))
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    if version >= schema.SCHEMA_VERSION:
        return None
    t0 = time.perf_counter()
    Store(str(path), max_bytes=1 << 34).close()
    return (f"migrated from schema {version} to {schema.SCHEMA_VERSION} in "
            f"{time.perf_counter() - t0:.1f} s")


def build_month(path: Path, gpus: int, processes: int, days: int) -> None:
    """Hour rollups for `days`, minute rollups for the last 8 of them, one raw hour at the end."""
    rng = random.Random(11)
    store = Store(str(path), max_bytes=1 << 34)
    store.set_meta("host", host_meta(gpus))
    rng_sample = random.Random(3)
    end = time.time()
    raw_start = end - 3600
    for tick in range(1, 3601, 10):  # the last hour, every 10 s: processes and GPUs exist
        store.write(synthetic_sample(tick, raw_start + tick, gpus, processes, rng_sample))
    while store.maintain(0.5):  # rolled up as a daemon's store is: all but its last minute
        pass
    store.close()
    conn = __import__("sqlite3").connect(str(path))
    procs = [r[0] for r in conn.execute("SELECT id FROM processes ORDER BY id")]
    first_hour = int((end - days * 86400) // 3600 * 3600)
    last_hour = int(raw_start // 3600 * 3600)
    spend = hasattr(schema, "KIND_SPEND")
    rows = []

    def add(res: int, bucket_s: int, n: int) -> None:
        for g in range(gpus):
            for name, metric in schema.GPU_METRICS.items():
                value = {"utilization": rng.randint(0, 1000), "sm_activity": rng.randint(0, 1000),
                         "memory_used_bytes": rng.randint(0, 40 << 30),
                         "power_watts": rng.randint(50_000, 400_000),
                         "temperature_c": rng.randint(30, 80)}[name]
                rows.append((res, bucket_s * 1000, schema.KIND_GPU, g, metric, n, value * n,
                             value, value))
        for p in procs:
            for name, metric in schema.PROCESS_METRICS.items():
                value = {"sm_share": rng.randint(0, 1000), "gpu_memory_bytes": 2 << 30,
                         "cpu_percent": rng.randint(0, 1000), "rss_bytes": 1 << 30}[name]
                rows.append((res, bucket_s * 1000, schema.KIND_PROCESS, p, metric, n, value * n,
                             value, value))
        if spend and res == schema.HOUR:
            per_hour = 32.77 * schema.MICRODOLLARS
            for name, metric in schema.SPEND_METRICS.items():
                share = {"total": 1.0, "idle": 0.1, "wasted": 0.4, "storage": 0.0}[name]
                rows.append((res, bucket_s * 1000, schema.KIND_SPEND, 0, metric, 3_600_000,
                             round(per_hour * share), 0, 0))
            for p in procs:
                rows.append((res, bucket_s * 1000, schema.KIND_SPEND, p, schema.SPEND_PROCESS,
                             3_600_000, round(per_hour * 0.9 / len(procs)), 0, 0))

    for hour in range(first_hour, last_hour, 3600):
        add(schema.HOUR, hour, 3600)
    for minute in range(max(first_hour, last_hour - 8 * 86400), last_hour, 60):
        add(schema.MINUTE, minute, 60)
    conn.executemany("INSERT OR REPLACE INTO rollups (res, bucket, kind, key, metric, n, sum,"
                     " min, max) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("UPDATE processes SET first_ts = ?", (first_hour * 1000,))
    for key in ("minute_done", "hour_done"):  # the raw hour's rollups are done already
        done = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                     (key, max(last_hour * 1000, int(done[0]) if done else 0)))
    conn.commit()
    conn.close()


# The command as a user runs it, timed from inside: once its modules are imported (what the
# report itself costs; on a loaded machine the interpreter's start alone takes seconds).
_TIMED = ("import sys, time\n"
          "from daemon.commands import cli, report\n"
          "from daemon.store import reader\n"
          "t0, c0 = time.perf_counter(), time.process_time()\n"
          "try:\n"
          "    code = cli.main(sys.argv[1:])\n"
          "finally:\n"
          "    sys.stderr.write(f'\\nTIMED {time.perf_counter() - t0:.4f} '\n"
          "                     f'{time.process_time() - c0:.4f}\\n')\n"
          "sys.exit(code)\n")


def _checkout() -> str:
    """The folder holding the `daemon` package this bench imported."""
    import daemon

    return str(Path(daemon.__file__).resolve().parent.parent)


def time_report(db: Path, since: str,
                runs: int) -> tuple[list[float], list[float], list[float], str]:
    """Wall times of the whole command, wall and CPU times after its imports, what it said."""
    walls, inside, cpu, said = [], [], [], ""
    for _ in range(runs):
        t0 = time.perf_counter()
        # run in the checkout whose `daemon` built the stores: `python -c` puts the working
        # folder before PYTHONPATH, so another checkout's folder would time its code instead
        out = subprocess.run([sys.executable, "-c", _TIMED, "report", "--db", str(db),
                              "--since", since, "--json"], capture_output=True, text=True,
                             env=os.environ, timeout=600, cwd=_checkout())
        walls.append(time.perf_counter() - t0)
        timed = [line for line in out.stderr.splitlines() if line.startswith("TIMED ")]
        inside.append(float(timed[-1].split()[1]) if timed else float("nan"))
        cpu.append(float(timed[-1].split()[2]) if timed else float("nan"))
        errors = "\n".join(line for line in out.stderr.splitlines()
                           if line.strip() and not line.startswith("TIMED "))
        said = "ok" if out.returncode == 0 else f"exit {out.returncode}: {errors[:160]}"
    return walls, inside, cpu, said


def startup(runs: int) -> float:
    """The interpreter and imports alone (`mlcostd --version`): what no report can go under."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "daemon", "--version"], capture_output=True,
                       timeout=120)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--hours", type=float, default=24.0, help="the day store's length")
    parser.add_argument("--raw-hours", type=float, default=24.0,
                        help="raw retention of the day store (the daemon's default is 6)")
    parser.add_argument("--days", type=int, default=30, help="the month store's length")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="build (or reuse) the stores here")
    args = parser.parse_args()
    import daemon

    print(f"code: {Path(daemon.__file__).parent.parent}")
    with tempfile.TemporaryDirectory(prefix="mlcost-bench-report-") as work:
        folder = Path(args.keep) if args.keep else Path(work)
        folder.mkdir(parents=True, exist_ok=True)
        day, month = folder / "day.db", folder / "month.db"
        if not day.exists():
            t0 = time.perf_counter()
            build_day(day, args.gpus, args.processes, int(args.hours * 3600), args.raw_hours)
            print(f"day store: {args.hours:g} h of 1 s ticks at {args.gpus} GPUs x "
                  f"{args.processes} processes, {day.stat().st_size / 1e6:.0f} MB, built in "
                  f"{time.perf_counter() - t0:.0f} s")
        elif backfill_spend(day, args.gpus):
            print("day store: hour spend added from its samples (built by code without it)")
        for db in (day, month):
            if db.exists() and (done := migrate(db)):
                print(f"{db.stem} store: {done}")
        if not month.exists():
            t0 = time.perf_counter()
            build_month(month, args.gpus, args.processes, args.days)
            print(f"month store: {args.days} days of rollups, {month.stat().st_size / 1e6:.0f} "
                  f"MB, built in {time.perf_counter() - t0:.0f} s")
        print(f"interpreter and imports alone: {startup(args.runs):.2f} s")
        medians = {}
        for db, since in ((day, "15m"), (day, "1h"), (day, "6h"), (day, "24h"), (month, "30d")):
            walls, inside, cpu, said = time_report(db, since, args.runs)
            medians[since] = statistics.median(inside)
            print(f"report --since {since:>3} on the {db.stem} store: median "
                  f"{statistics.median(inside):.3f} s after imports "
                  f"(runs: {', '.join(f'{t:.3f}' for t in inside)}), CPU "
                  f"{statistics.median(cpu):.3f} s (runs: {', '.join(f'{t:.3f}' for t in cpu)}),"
                  f" {statistics.median(walls):.2f} s whole command; {said}")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs)")
    print("targets: --since 24h within 0.5 s, --since 30d within 1 s, 15m, 1h and 6h within 24h's "
          f"(here {', '.join(f'{k} {v:.3f} s' for k, v in medians.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
