"""A GPU worker that takes jobs from a SQLite job table, written without mlcost in mind: it
looks for a pending row, runs it on the GPU, and sleeps when there is none (probe 132 H1). Its
stacks show the sleep alone; it is a queue consumer, never one to stop.

Usage: sqlite_job_worker.py --db PATH [--every S]
"""

import argparse
import os
import signal
import sqlite3
import sys
import time

import _gpu

GPU = int(os.environ.get("MLCOST_SIM_GPUS", "0").split(",")[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--every", type=float, default=2.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    db = sqlite3.connect(args.db, isolation_level=None)
    db.execute("create table if not exists jobs(id integer primary key, status text)")
    dev = _gpu.attach(GPU)
    dev.alloc(12 << 30)
    dev.kernel(0.5, sm=0.8)  # model warm-up
    _gpu.ready()
    while True:
        row = db.execute("select id from jobs where status='pending' limit 1").fetchone()
        if row is None:
            time.sleep(args.every)
            continue
        dev.kernel(1.0, sm=0.9)
        db.execute("update jobs set status='done' where id=?", row)


if __name__ == "__main__":
    main()
