"""What stack sampling costs: the target's slowdown, py-spy dump latency, daemon CPU per hour.

    .venv/bin/python bench/stack_overhead.py [--seconds 8] [--rounds 3] [--dumps 60]

Run as root (py-spy must be able to read the target). Prints figures; asserts nothing.

1. Slowdown: a CPU-bound Python target counts loop iterations for --seconds, with no sampling
   and with mlcostd's default policy ([attribution] defaults: one dump of a pid every 2 s), in
   alternating rounds; slowdown = 1 - sampled rate / unsampled rate (target: <= 1%).
2. Latency: --dumps back-to-back dumps of that target (limits off): p50 / p99 wall time.
3. Daemon CPU per hour of a stalled workload: the default policy dumps a stalled process every
   min_interval_s, so per hour = 3600 / min_interval_s dumps x (py-spy CPU + our own CPU) per
   dump, measured on a blocked target; capped by the CPU budget.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

from daemon.sources.stacks import StackSampler

CPU_TARGET = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
n = 0
def work(k):
    return sum(i * i for i in range(k))
while time.monotonic() < end:
    work(200)
    n += 1
print(n, flush=True)
"""

STALLED_TARGET = """
import os, time
def wait_for_data(fd):
    return os.read(fd, 1)
r, w = os.pipe()
print("READY", flush=True)
wait_for_data(r)
"""


def default_policy() -> StackSampler:
    """The sampler exactly as mlcostd builds it from its default [attribution] settings."""
    from daemon.config import AttributionConfig

    config = AttributionConfig()
    return StackSampler(min_interval_s=config.dump_interval,
                        global_max_per_s=config.dumps_per_second,
                        cpu_budget_ratio=config.cpu_budget)


def run_target(seconds: float, sample: bool) -> float:
    proc = subprocess.Popen([sys.executable, "-c", CPU_TARGET, str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    if sample:
        sampler = default_policy()  # mlcostd's default policy

        async def sample_until_exit() -> None:
            while proc.poll() is None:
                await sampler.dump(proc.pid)
                await asyncio.sleep(0.1)  # ask often: the per-pid limit decides

        asyncio.run(sample_until_exit())
    out, _ = proc.communicate()
    return int(out.strip()) / seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dumps", type=int, default=60)
    args = ap.parse_args()

    plain, sampled = [], []
    for _ in range(args.rounds):
        plain.append(run_target(args.seconds, sample=False))
        sampled.append(run_target(args.seconds, sample=True))
    base, with_spy = statistics.median(plain), statistics.median(sampled)
    print(f"target slowdown under default sampling: {100 * (1 - with_spy / base):+.2f}% "
          f"(median of {args.rounds} rounds of {args.seconds:.0f}s: {base:,.0f} vs "
          f"{with_spy:,.0f} iterations/s; rounds plain={[round(x) for x in plain]} "
          f"sampled={[round(x) for x in sampled]})")

    # Latency, back to back, on the CPU-bound target.
    proc = subprocess.Popen([sys.executable, "-c", CPU_TARGET, "600"], stdout=subprocess.PIPE)
    time.sleep(0.5)
    fast = StackSampler(min_interval_s=0.0, global_max_per_s=1e6, global_burst=1e6,
                        cpu_budget_ratio=1.0, timeout_s=5.0)

    async def many() -> list[float]:
        walls = []
        for _ in range(args.dumps):
            result = await fast.dump(proc.pid)
            if result.ok:
                walls.append(result.wall_s)
        return walls

    walls = asyncio.run(many())
    proc.kill()
    proc.wait()
    print(f"py-spy dump latency (busy target, {len(walls)} dumps): "
          f"p50 {1000 * percentile(walls, 0.5):.1f} ms, p99 {1000 * percentile(walls, 0.99):.1f} ms; "
          f"py-spy CPU {1000 * fast.cpu_seconds_total / max(1, fast.dumps_total):.1f} ms/dump")

    # Daemon-side CPU per hour on a stalled (blocked) workload.
    stalled_proc = subprocess.Popen([sys.executable, "-c", STALLED_TARGET], stdout=subprocess.PIPE, text=True)
    assert stalled_proc.stdout is not None and stalled_proc.stdout.readline().strip() == "READY"
    stalled = StackSampler(min_interval_s=0.0, global_max_per_s=1e6, global_burst=1e6,
                           cpu_budget_ratio=1.0, timeout_s=5.0)
    own_before = time.process_time()

    async def dumps() -> None:
        for _ in range(args.dumps):
            await stalled.dump(stalled_proc.pid)

    asyncio.run(dumps())
    own = (time.process_time() - own_before) / args.dumps
    stalled_proc.kill()
    stalled_proc.wait()
    spy = stalled.cpu_seconds_total / max(1, stalled.dumps_total)
    policy = default_policy()
    per_hour = 3600 / policy.min_interval_s
    cap = policy.cpu_budget_ratio * 3600
    total = per_hour * (spy + own)
    print(f"daemon CPU on stacks per hour of one stalled workload (a dump every "
          f"{policy.min_interval_s:.0f}s = {per_hour:.0f} dumps/h): {total:.1f} s/h "
          f"(py-spy {1000 * spy:.1f} ms + daemon {1000 * own:.1f} ms per dump); the CPU budget "
          f"caps py-spy at {cap:.0f} s/h ({100 * policy.cpu_budget_ratio:.0f}% of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
