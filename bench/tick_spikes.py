"""Which ticks are expensive, and what ran in them. Prints figures.

Runs mlcostd's Daemon as bench/collector.py does (simulated 8-GPU host, real workload
processes, stacks off, one /v1/now per tick as a connected client asks) and prints, per tick:
the main thread's CPU (time.thread_time) in `Daemon._tick` and in `Daemon.now`, the parts of
both (store write, analysis, attribution, the /v1/now build, the phase facts handed over),
the periodic work that ran in that tick's second on any thread (store maintenance, kinds
rounds, discovery, the rules' round, garbage collections over 0.2 ms), and whether a second
/v1/now asked just before the next tick (after maintenance) was built again. Then the
distribution over ticks 10 to the end (the window bench/collector.py measures).

usage: python bench/tick_spikes.py [--ticks 40] [--procs 64]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collector import scenario_text  # noqa: E402

from daemon import config as config_module  # noqa: E402
from daemon.runtime.daemon import Daemon  # noqa: E402

Event = tuple[int, str, str, float]  # tick, thread name, what, CPU seconds


class Recorder:
    """What ran in which tick, on which thread, for how much of that thread's CPU."""

    def __init__(self) -> None:
        self.tick = 0
        self.events: list[Event] = []
        self._gc_began: dict[int, float] = {}

    def add(self, what: str, spent: float) -> None:
        self.events.append((self.tick, threading.current_thread().name, what, spent))

    def wrap(self, owner: object, name: str, what: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def measured(*args: object, **kwargs: object) -> object:
            began = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(what, time.thread_time() - began)

        setattr(owner, name, measured)

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            self._gc_began[ident] = time.thread_time()
        elif ident in self._gc_began:
            self.add(f"gc{info['generation']}", time.thread_time() - self._gc_began.pop(ident))


def run(ticks: int, procs: int, work: Path) -> None:
    scenario = work / "bench.toml"
    scenario.write_text(scenario_text(8, procs))
    config = config_module.from_dict({
        "daemon": {"interval": 1.0, "db": str(work / "tick.db")},
        "attribution": {"stacks": False},  # as bench/collector.py
        "api": {"socket": str(work / "api.sock")},
    }, where="bench")
    daemon = Daemon(config, simulate=str(scenario), max_ticks=ticks)
    rec = Recorder()
    rec.wrap(daemon.kinds, "refresh", "kinds")
    rec.wrap(daemon.procs, "discover", "discovery")
    rec.wrap(daemon, "_read_attribution", "rules: store read")
    rec.wrap(daemon, "_build_now", "now: build")
    rows: list[tuple[float, float, int, bool]] = []  # tick CPU, now CPU, phase facts, rebuilt
    original = daemon._tick
    late: list[bool] = []
    facts_before = [0]

    def measured_tick() -> None:
        if not late:  # the store and the analyzer exist once the daemon runs
            late.append(True)
            assert daemon.store is not None
            rec.wrap(daemon.store, "write", "store write")
            rec.wrap(daemon.store, "maintain", "maintenance")
            rec.wrap(daemon.store, "set_meta", "store meta")
            if daemon.analyzer is not None:
                rec.wrap(daemon.analyzer, "update", "analysis")
                rec.wrap(daemon.analyzer, "analyze", "rules")
            if daemon.attribution is not None:
                rec.wrap(daemon.attribution, "on_tick", "attribution")
        rebuilt = False
        if rows:  # a client asking just before this tick, after the maintenance between
            builds = daemon.now_builds
            daemon.now()
            rebuilt = daemon.now_builds != builds
            rows[-1] = (*rows[-1][:3], rebuilt)
        rec.tick = len(rows)
        began = time.thread_time()
        original()
        ticked = time.thread_time()
        daemon.now()
        done = time.thread_time()
        live = daemon.attribution.phases if daemon.attribution is not None else None
        version = live.version if live is not None else 0
        rows.append((ticked - began, done - ticked, version - facts_before[0], False))
        facts_before[0] = version

    daemon._tick = measured_tick  # type: ignore[method-assign]
    gc.callbacks.append(rec.on_gc)
    try:
        asyncio.run(daemon.run())
    finally:
        gc.callbacks.remove(rec.on_gc)
    by_tick: dict[int, list[tuple[str, str, float]]] = {}
    for tick, thread, what, spent in rec.events:
        by_tick.setdefault(tick, []).append((thread, what, spent))
    inline = ("store write", "analysis", "attribution", "now: build")
    print(f"{procs} processes, {ticks} ticks; load average {os.getloadavg()[0]:.2f}")
    print("tick  _tick ms  now ms | " + "  ".join(inline) + " | phase facts | "
          "other work that second (ms, thread) | now rebuilt before next tick")
    for i, (tick_s, now_s, facts, rebuilt) in enumerate(rows):
        events = by_tick.get(i, [])
        main = {what: 0.0 for what in inline}
        other = []
        for thread, what, spent in events:
            if what in main and thread == "MainThread":
                main[what] += spent
            elif spent > 0.0002:
                other.append(f"{what} {spent * 1000:.2f} ({thread})")
        print(f"{i:4d} {tick_s * 1000:8.2f} {now_s * 1000:7.2f} | "
              + "  ".join(f"{main[w] * 1000:.2f}" for w in inline)
              + f" | {facts:4d} | {', '.join(other)} | {'yes' if rebuilt else 'no'}")
    steady = rows[10:]
    for name, column in (("_tick", 0), ("now", 1)):
        ms = sorted(row[column] * 1000 for row in steady)
        print(f"{name} ms, ticks 10-{len(rows) - 1}: median {statistics.median(ms):.2f}, mean "
              f"{statistics.mean(ms):.2f}, p90 {ms[int(0.9 * (len(ms) - 1))]:.2f}, "
              f"max {ms[-1]:.2f}")
    totals: dict[str, float] = {}
    for tick, _, what, spent in rec.events:
        if tick >= 10:
            totals[what] = totals.get(what, 0.0) + spent
    print("per tick over ticks 10-: " + ", ".join(
        f"{what} {spent / max(1, len(steady)) * 1000:.2f} ms"
        for what, spent in sorted(totals.items(), key=lambda kv: -kv[1])))
    print(f"/v1/now asked again before the next tick, rebuilt: "
          f"{sum(1 for row in steady if row[3])} of {len(steady) - 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--procs", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlcost-spikes-") as tmp:
        run(args.ticks, args.procs, Path(tmp))


if __name__ == "__main__":
    main()
