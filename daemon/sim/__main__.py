"""`python -m daemon.sim SCENARIO`: start a simulated GPU host and keep it up until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys

from daemon.sim import scenario, state


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m daemon.sim",
        description="Start a simulated GPU host (workloads + NVML state) until Ctrl-C.",
        allow_abbrev=False,
    )
    p.add_argument("scenario", nargs="?", default="demo",
                   help=f"a built-in ({', '.join(scenario.builtin_names())}) or a .toml path")
    p.add_argument("--state-dir", help="use this directory instead of a new temp dir")
    p.add_argument("--keep", action="store_true", help="leave the state dir after stopping")
    p.add_argument("--list", action="store_true", help="list the built-in scenarios and exit")
    args = p.parse_args(argv)
    if args.list:
        for name in scenario.builtin_names():
            sc = scenario.load(name)
            print(f"{name:12} {sc.gpu_count} x {sc.gpu_model} ({sc.instance.type})")
        return 0
    try:
        sc = scenario.load(args.scenario)
    except scenario.ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    running = scenario.start(sc, args.state_dir, keep=args.keep)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        print(f"simulated host '{sc.name}': {sc.gpu_count} x {sc.gpu_model}, "
              f"{sc.instance.provider} {sc.instance.type} {sc.instance.lifecycle}")
        for name, pid, gpus in running.workloads:
            print(f"  pid {pid:>7}  GPU {','.join(map(str, gpus)):5}  {name}")
        print(f"state dir: {running.state_dir}  (workload output: {running.log_path})")
        print(f"export {state.STATE_DIR_ENV}={running.state_dir}")
        print("Ctrl-C stops the workloads.", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
