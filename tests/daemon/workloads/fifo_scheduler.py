"""A stand-in scheduler for fifo_job_worker.py: writes one JSON job a line into the named pipe
FIFO every EVERY seconds (the first at once), until killed.

Usage: fifo_scheduler.py FIFO [EVERY]
"""

import json
import sys
import time


def main() -> None:
    every = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
    with open(sys.argv[1], "w") as jobs:  # waits for the worker to open its end
        n = 0
        while True:
            jobs.write(json.dumps({"id": n, "audio": "x" * 4000}) + "\n")
            jobs.flush()
            n += 1
            time.sleep(every)


if __name__ == "__main__":
    main()
