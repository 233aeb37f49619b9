"""What knowing a process's owner costs: reading and parsing /proc/PID/cgroup once per process
at discovery (never in the tick), per kind of cgroup file and for this process's real one.

    python bench/owners.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from daemon.sources.owners import OwnerReader, parse_cgroup
from daemon.sources.procs import ProcessSource

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "daemon" / "fixtures" / "cgroups"
ROUNDS = 20_000


def per_call_us(fn, rounds: int = ROUNDS) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> None:
    for path in sorted(FIXTURES.glob("*.cgroup")):
        text = path.read_text()
        print(f"parse {path.stem:36s} {per_call_us(lambda t=text: parse_cgroup(t)):6.1f} µs")
    reader = OwnerReader()
    pid = os.getpid()
    print(f"read + parse /proc/{pid}/cgroup (this host)  "
          f"{per_call_us(lambda: reader.owner_of(pid)):6.1f} µs")
    print(f"64 new GPU processes at discovery: "
          f"{per_call_us(lambda: reader.owner_of(pid)) * 64 / 1000:.2f} ms, once each")

    discovery()


class _NoOwners(OwnerReader):
    def owner_of(self, pid: int, devices: tuple[str, ...] = ()) -> dict[str, str]:
        return {}


def discovery(processes: int = 64, rounds: int = 15) -> None:
    """First discovery of 64 new processes, with and without reading their owners."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
             for _ in range(processes)]
    try:
        for name, reader in (("with owners", OwnerReader()), ("without owners", _NoOwners()),
                             ("with owners", OwnerReader())):
            best = float("inf")
            for _ in range(rounds):
                source = ProcessSource(children=False, owners=reader)
                start = time.perf_counter()
                source.discover({p.pid for p in procs}, scan_children=False)
                best = min(best, time.perf_counter() - start)
                source.close()
            print(f"first discovery of {processes} processes {name}: {best * 1000:.1f} ms "
                  f"(best of {rounds})")
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
