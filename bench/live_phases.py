"""The live phase balances as a daemon ages with stalled processes. Prints figures.

    .venv/bin/python bench/live_phases.py [--procs 64] [--stalled 16,4] [--ticks 2400]
                                          [--dump-interval 2]

LivePhases (daemon/analysis/live_phases.py) on its own, fed as a daemon feeds it: one tick a
second over --procs processes, --stalled of them in a low-utilization window from the start,
and classified samples of those as attribution takes them from /proc (`[attribution] stacks =
false`, or ptrace denied): one per process per --dump-interval ([attribution].dump_interval,
2 s by default), at most 8 a second over all. At each of a few ticks it prints, as medians
over the 30 ticks before:
- the live view's balances (`balances(..., drift=PHASES_SHOWN_DRIFT)` over the rules' window),
  what /v1/now and /metrics ask every tick while a client is connected;
- a rules round's balances over the same window (no drift), every [cost].evaluate_every;
- the samples held.
The window fills for 30 minutes, so a short run does not show what a day-old daemon pays.
CPU time of this thread.
"""

from __future__ import annotations

import argparse
import statistics
import time

from daemon.analysis.live_phases import LivePhases
from daemon.analysis.window_ticks import WINDOW_S
from daemon.runtime.daemon import PHASES_SHOWN_DRIFT
from daemon.sources.sample import GpuUse, ProcessSample, Sample

SAMPLES_PER_S = 8  # attribution's PROC_SAMPLES_PER_S
STACKS = ([("kernel wait hrtimer_nanosleep", "<proc>", 0)],
          [("read", "loader.py", 12), ("next", "train.py", 40)],
          [("save", "torch/serialization.py", 1003), ("train", "train.py", 77)])
PHASES = ("idle", "data_wait", "checkpoint")


def run(processes: int, stalled: int, ticks: int, every: int, marks: set[int]) -> None:
    t0 = 1_000_000.0
    live = LivePhases(1.0, since=t0)
    procs = tuple(ProcessSample(
        20_000 + p, t0 - 5 + p / 1000, 1, "root", f"python train.py --rank {p}",
        gpus=(GpuUse(p % 8, 2 << 30, 30.0),), cpu_seconds=0.0, rss_bytes=1 << 20,
        read_bytes=0, write_bytes=0, iowait_seconds=0.0, state="S", threads=1)
        for p in range(processes))
    for proc in procs[:stalled]:
        live.window_opened(proc.key, t0)
    shown: list[float] = []
    rounds: list[float] = []
    for tick in range(1, ticks + 1):
        ts = t0 + tick
        live.on_tick(Sample(ts=ts, tick=tick, gpus=(), processes=procs))
        due = [(n, proc) for n, proc in enumerate(procs[:stalled]) if (tick + n) % every == 0]
        for n, proc in due[:SAMPLES_PER_S]:
            which = (tick + n) % len(STACKS)
            live.add_stack(proc.key, ts, proc.pid, f"stack{which}", STACKS[which],
                           PHASES[which], 5.0, "from /proc")
        began = time.thread_time()
        live.balances(ts - WINDOW_S, ts, drift=PHASES_SHOWN_DRIFT)
        shown.append(time.thread_time() - began)
        if tick % 30 == 0:
            began = time.thread_time()
            live.balances(ts - WINDOW_S, ts)
            rounds.append(time.thread_time() - began)
        if tick in marks:
            held = sum(len(p.samples) for p in live._processes.values())
            print(f"  tick {tick:5d}: live view {statistics.median(shown[-30:]) * 1e3:6.2f} ms "
                  f"a tick, rules round {rounds[-1] * 1e3:6.2f} ms, {held} samples held",
                  flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--stalled", default="16,4", metavar="N,N",
                        help="processes in a window, one run for each count")
    parser.add_argument("--ticks", type=int, default=2400,
                        help="seconds of a daemon's life (the window fills at 1800)")
    parser.add_argument("--dump-interval", type=int, default=2,
                        help="seconds between two samples of one process")
    args = parser.parse_args()
    marks = {t for t in (60, 300, 600, 1200, 1800, 2400, args.ticks) if t <= args.ticks}
    for stalled in (int(n) for n in args.stalled.split(",")):
        print(f"{args.procs} processes, {stalled} stalled, one sample each every "
              f"{args.dump_interval} s, at most {SAMPLES_PER_S} a second:")
        run(args.procs, stalled, args.ticks, args.dump_interval, marks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
