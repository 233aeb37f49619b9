"""The command `mlcost-top`: its options, and which source the App is started on (this host's
mlcostd, --connect targets, an embedded --demo daemon, or a --replay of a recorded store)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mlcost_tui.sources import POLL_INTERVAL_RANGE_S, POLL_INTERVAL_S


def build_parser() -> argparse.ArgumentParser:
    from daemon.client import default_target

    parser = argparse.ArgumentParser(
        prog="mlcost-top",
        description="Live GPU cost monitor: burn per GPU and process, idle money, phases and "
                    "recommendations, from mlcostd's API.",
        epilog="examples:\n  mlcost-top --demo                      a simulated 8-GPU host\n"
               "  mlcost-top                             this host's mlcostd\n"
               "  mlcost-top --connect http://gpu1:9347 --connect http://gpu2:9347 "
               "--token-file ~/.mlcost-token   a fleet table\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False)  # a long option spelled out: a typo is an error, never another one
    parser.add_argument("--connect", action="append", metavar="TARGET", default=[],
                        help="unix:PATH or http://HOST:PORT of an mlcostd (repeat for a fleet "
                             f"table; default {default_target()})")
    parser.add_argument("--token-file", metavar="FILE",
                        help="bearer token for http:// targets (the daemon's [api].token_file)")
    parser.add_argument("--prometheus", metavar="URL",
                        help="the fleet table from Prometheus (e.g. http://prometheus:9090): "
                             "burn, waste, idle GPUs per host; enter opens a host's daemon "
                             "(with --token-file) when it serves its API on TCP")
    parser.add_argument("--prometheus-job", metavar="REGEX",
                        help="with --prometheus: the scrape job(s) of the mlcostd targets, a "
                             "regex as in job=~\"REGEX\" (default mlcost.*)")
    parser.add_argument("--demo", action="store_true",
                        help="start an embedded mlcostd on the simulated demo host; it and its "
                             "workloads stop when you quit")
    parser.add_argument("--scenario", default="demo", help=argparse.SUPPRESS)
    parser.add_argument("--readonly", action="store_true",
                        help="never change anything: no SIGTERM, no resize, no snooze (dry "
                             "runs and copy still work)")
    parser.add_argument("--interval", type=float, default=POLL_INTERVAL_S, metavar="SECONDS",
                        help=f"seconds between polls, {POLL_INTERVAL_RANGE_S[0]:g} to "
                             f"{POLL_INTERVAL_RANGE_S[1]:g} (default {POLL_INTERVAL_S:g})")
    parser.add_argument("--replay", metavar="FILE",
                        help="replay a snapshot (`mlcostd snapshot`) or a recorded mlcostd "
                             "store (the daemon's database or a copy); [ ] step a tick, "
                             "{ } a minute, space plays")
    return parser


def replay_main(path: str) -> int:
    """`mlcost-top --replay FILE`: loads neither the client, NVML, psutil nor the store writer."""
    from daemon.replay import ReplayError
    from mlcost_tui.app import MlcostTop
    from mlcost_tui.sources import open_replay

    try:
        replay = open_replay(path)
    except ReplayError as exc:
        print(f"mlcost-top: {exc}", file=sys.stderr)
        return 2
    MlcostTop([], poll=False, replay=replay).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lowest, highest = POLL_INTERVAL_RANGE_S
    if not lowest <= args.interval <= highest:  # (nan and inf too: a busy loop, a frozen view)
        # (checked with --replay too: a value refused without it is not taken with it)
        print(f"mlcost-top: --interval {args.interval:g} is not between {lowest:g} and "
              f"{highest:g} seconds", file=sys.stderr)
        return 2
    if args.prometheus_job is not None and not args.prometheus:
        print("mlcost-top: --prometheus-job names the scrape job of --prometheus; use it with "
              "--prometheus URL", file=sys.stderr)
        return 2
    if args.replay:
        if args.demo or args.connect or args.prometheus:
            print("mlcost-top: --replay shows a recording; use it without --demo, --connect and "
                  "--prometheus", file=sys.stderr)
            return 2
        return replay_main(args.replay)
    if args.demo and args.connect:
        print("mlcost-top: --demo starts its own daemon; use it without --connect",
              file=sys.stderr)
        return 2

    from daemon.client import Client, ClientError, default_target, read_token_file
    from mlcost_tui.app import MlcostTop

    token = None
    if args.token_file:
        try:
            token = read_token_file(args.token_file)
        except ClientError as exc:
            print(f"mlcost-top: {exc}", file=sys.stderr)
            return 2
    if args.prometheus:
        from mlcost_tui.prometheus import DEFAULT_JOB, PrometheusError, PrometheusFleet

        if args.connect or args.demo:
            print("mlcost-top: --prometheus shows the fleet Prometheus scrapes; use it without "
                  "--connect and --demo", file=sys.stderr)
            return 2
        from mlcost_tui.screens.prometheus_fleet import PrometheusFleetScreen

        try:
            source = PrometheusFleet(args.prometheus, job=args.prometheus_job or DEFAULT_JOB)
        except PrometheusError as exc:
            print(f"mlcost-top: {exc}", file=sys.stderr)
            return 2
        screen = PrometheusFleetScreen(source, token=token, interval_s=max(args.interval, 5.0))
        MlcostTop([], readonly=args.readonly, interval_s=args.interval, prometheus=screen).run()
        return 0
    demo = None
    targets = list(args.connect)
    if args.demo:
        from mlcost_tui.demo import EmbeddedDaemon

        demo = EmbeddedDaemon(args.scenario)
        demo.start()
        targets = [demo.target]
    elif not targets:
        targets = [default_target()]
        path = Path(targets[0][len("unix:"):])
        if not path.exists():
            print(f"mlcost-top: no mlcostd at {targets[0]}: start it with `sudo mlcostd run`, "
                  "connect elsewhere with --connect (a simulated host's socket: its start says "
                  "where), or try `mlcost-top --demo`", file=sys.stderr)
            return 1
    try:
        clients = [Client(t, token=token) for t in targets]
    except ClientError as exc:
        print(f"mlcost-top: {exc}", file=sys.stderr)
        if demo:
            demo.stop()
        return 2
    names = [c.name for c in clients]
    twice = next((name for at, name in enumerate(names) if name in names[:at]), None)
    if twice is not None:  # its figures would count twice in the fleet's totals
        print(f"mlcost-top: --connect {twice} is given twice", file=sys.stderr)
        return 2
    first = None
    if demo is None and len(targets) == 1:
        from mlcost_tui.prefetch import first_snapshot

        first = first_snapshot(targets[0], token)  # real figures on the first frame
    app = MlcostTop(clients, readonly=args.readonly, interval_s=args.interval, first=first,
                    starting="mlcost-top: starting the simulated demo host (mlcostd --simulate "
                             f"{args.scenario})…" if demo else None,
                    start_failure=demo.failure if demo else None)
    del first  # the App's now: it lets go of it once drawn (a whole /v1/now)
    def hang_up(signum: int, frame: object = None) -> None:
        if demo is not None:
            demo.stop()  # the terminal went away: take the embedded daemon down with us
        os._exit(128 + signum)

    if demo is not None:
        for signum in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(signum, hang_up)
    watch_terminal(lambda: hang_up(signal.SIGHUP))
    try:
        app.run()
    finally:
        if demo is not None:
            failure = demo.failure()
            demo.stop(wait=False)  # the shell comes back now; a reaper waits for the daemon
            if failure:
                print(f"mlcost-top: {failure}", file=sys.stderr)
            print(demo.exit_note())
    return 0


def watch_terminal(gone: Callable[[], None], every_s: float = 1.0) -> None:
    """Call `gone` (from a thread) once the terminal hangs up. A closed terminal sends SIGHUP to
    its session leader only: under `make demo` that is make, so mlcost-top was never told, its
    screen writes blocked, and it and the demo's daemon and workloads ran on with no one to see
    them. The thread asks the terminal every `every_s`; nothing to watch without one."""
    try:
        fd = sys.__stdin__.fileno() if sys.__stdin__ is not None else -1
        termios.tcgetattr(fd)
    except (OSError, ValueError, termios.error):
        return

    def watch() -> None:
        while True:
            time.sleep(every_s)
            try:
                termios.tcgetattr(fd)
            except termios.error:  # EIO: hung up
                gone()
                return

    threading.Thread(target=watch, name="terminal-watch", daemon=True).start()


def console() -> None:
    """The console script `mlcost-top`: main(), then exit without the interpreter's teardown.
    Once the app has quit and the demo's daemon is handed to its reaper nothing is left to save,
    and collecting the app's objects at exit took 3 s of the 3.4 s from `q` to the shell on the
    demo (2 CPUs; bench/tui_quit.py)."""
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    console()
