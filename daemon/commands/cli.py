"""The `mlcostd` command: run, check, report, snapshot, prices, profile."""

from __future__ import annotations

from daemon.commands.startup_signals import KeptSignals, while_starting

# The console script's first act is to import this module: Ctrl-C or SIGTERM while it loads
# (a tenth of a second or more) is one line and exit 130/143, not a traceback from an import.
with while_starting():
    import argparse
    import asyncio
    import contextlib
    import errno
    import json
    import logging
    import os
    import re
    import signal
    import sqlite3
    import sys
    from pathlib import Path
    from typing import Any

    from daemon import __version__, clock
    from daemon import config as config_module
    from daemon.config import Config, ConfigError
    from daemon.config.values import DURATION_FORMS
    from daemon.runtime.streams import open_standard_streams
    from daemon.sources.safe_text import lines

log = logging.getLogger("mlcostd")

SIMULATE_CONFIG = Path(__file__).parent.parent / "sim" / "simulate.toml"

EPILOG = """\
examples:
  mlcostd run --simulate demo             record the built-in simulated GPU host
  mlcostd run                             record this host (as root, under systemd)
  mlcostd report --since 1h               what the GPUs and processes did in the last hour
  mlcostd report --since 30m --json       the same as a JSON document (see the README)
  mlcostd snapshot --since 30m --html     the last 30 min as a snapshot file and its HTML report
  mlcostd idle --for 30m && shutdown      stop the host once idle for 30 min (README: autostop)
  mlcostd mcp --socket PATH               read-only tools for an AI assistant (README: MCP)
  mlcostd check                           what works on this host and how to fix what doesn't
  mlcostd prices --instance p5.48xlarge   what an instance costs, where the price is from, its age
  mlcostd prices --refresh catalog        refresh prices from the public SkyPilot catalogs (no key)
  mlcostd profile --max-data-wait 20% -- python train.py
                                          profile one command (a CI step) and gate it on cost
"""

PRICES_DESCRIPTION = """GPU instance prices: the catalog (bundled, dated; plus [pricing].extra_catalogs), overlaid with
the live prices a refresh cached. Every price says its source and age; one older than 90 days,
from before a known price cut, or an estimate prints a warning with the command that refreshes it.

refresh sources (--refresh):
  aws        AWS Price List + EC2 spot history (boto3; needs AWS credentials)
  azure      Azure Retail Prices API (public, no key)
  gcp        GCP Cloud Billing Catalog (API key in a 0600 file: --gcp-key-file or
             [pricing].gcp_api_key_file)
  catalog    SkyPilot vms.csv catalogs for aws, gcp, azure, lambda (no key; --catalog-url or
             [pricing].catalog_url)
  sagemaker  SageMaker ml.* prices for --managed (AWS Price List; needs AWS credentials)
  vertex     Vertex AI training/prediction machine prices for --managed (Cloud Billing
             Catalog; the same API key file as gcp)
  azureml    Azure ML's per-vCPU/GPU surcharges for --managed (Retail Prices API, no key)
also: --audit lists what the sanity rules left out, --managed compares SageMaker, Vertex AI and
Azure ML with the same hardware self-managed, --observed lists what fits the workloads this
host ran, ranked per workload kind (--kind), with Inferentia, Trainium and TPU rows that say
what moving to them costs.
"""


class Parser(argparse.ArgumentParser):
    """argparse's parser, except that a value like `-5s` is a value, as `-5` is: `--duration
    -5s` reaches the flag's own check, which says what a duration is, not argparse's "expected
    one argument". (Older Pythons' argparse takes only a bare negative number for a value;
    newer ones use this pattern. No mlcostd option looks like a negative number.) The
    subcommands' parsers are of this class too (add_subparsers' default parser_class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A long option is spelled out: `run --simulat demo` was taken for --simulate, and a
        # typo of one option could be read as another (probe 141 L1). The subcommands'
        # parsers are made by this __init__ too.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"-\.?\d")

    def _print_message(self, message: str, file: Any = None) -> None:
        """argparse's, except that a write that fails is not dropped: `--help` to a full disk
        exited 0 with nothing written (main says it in one line, exit 1)."""
        if message:
            (file if file is not None else sys.stderr).write(message)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help=f"TOML config file (default: {config_module.DEFAULT_CONFIG_PATH} "
                             "if it exists; every setting has a default)")
    parser.add_argument("--db", metavar="FILE",
                        help="SQLite database (default: [daemon].db, else "
                             f"{config_module.default_db_path()})")


def interval_seconds(text: str) -> float:
    """`run --interval`: what [daemon].interval takes, read by the config's own parser (a
    number of seconds, or a duration such as 500ms, 2s, 1m) and held to its range; anything
    else is argparse's error, naming the value and the forms."""
    where, key = "--interval", "[daemon].interval"
    try:
        seconds: float = config_module.from_dict(
            {"daemon": {"interval": text}}, where=where).daemon.interval
    except ConfigError as exc:  # "--interval: [daemon].interval = 'x': 'x' is not...": from
        said = str(exc).removeprefix(f"{where}: {key} = ")  # the value, once
        shown, _, detail = said.partition(": ")
        raise argparse.ArgumentTypeError(detail if detail.startswith(shown) else said) from None
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mlcostd",
        description="mlcost's recorder: samples every GPU and GPU process on this host into "
                    "SQLite and reports what they did.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"mlcostd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="record this host in the foreground until SIGTERM/Ctrl-C",
                         description="Record GPUs, GPU processes and their workers every "
                                     "interval into the database, until SIGTERM or Ctrl-C.")
    _add_common(run)
    run.add_argument("--interval", metavar="DURATION", type=interval_seconds,
                     help="time between samples: a number of seconds or a duration as in the "
                          "config (500ms, 2s, 1m), 100ms to 60s (default: [daemon].interval, "
                          "1s)")
    run.add_argument("--simulate", metavar="SCENARIO",
                     help="record a simulated GPU host instead of NVML: a built-in scenario "
                          f"({', '.join(builtin_scenarios())}) or a scenario .toml file; its "
                          "workloads start with the daemon and stop with it; without --config it "
                          "reads daemon/sim/simulate.toml (idle events after 1 min); without "
                          "--db and --socket it records into a store and serves on a socket of "
                          "the scenario's own (~/.local/state/mlcost/simulated/SCENARIO/, "
                          "$XDG_RUNTIME_DIR/mlcost/simulated/SCENARIO/), never this host's")
    run.add_argument("--socket", metavar="FILE",
                     help="unix socket of the HTTP API (default: [api].socket, else "
                          f"{config_module.default_socket_path()})")
    run.add_argument("--listen", metavar="HOST:PORT",
                     help="also serve the API on TCP; every request then needs the bearer "
                          "token from --token-file")
    run.add_argument("--token-file", metavar="FILE",
                     help="bearer token for --listen, and used only with it (mode 0600; "
                          "generated if missing; default: mlcostd.token beside the socket)")
    run.add_argument("--metrics-listen", metavar="HOST:PORT",
                     help="also serve Prometheus /metrics alone on TCP, without a token "
                          "(default: [api].metrics_listen; /metrics is always on the API too)")
    run.add_argument("--no-stacks", action="store_true",
                     help="never run py-spy: phases come from /proc alone (wchan, thread "
                          "states, I/O, CPU), shown with low confidence, as on a host that "
                          "denies ptrace ([attribution] stacks = false)")
    run.add_argument("--watch", action="store_true",
                     help="also print a live summary of the last 10 s every 5 s")
    run.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                     help="default: [daemon].log_level (info)")

    check = sub.add_parser("check", help="what works on this host (NVML, py-spy, delay "
                                         "accounting, PSI), and the fix for what doesn't",
                           description="Check what mlcostd can read on this host: NVML and "
                                       "its per-process data, py-spy and its permission, delay "
                                       "accounting, PSI, the cloud instance and its price. "
                                       "Each line says ok, warn or fail, and the fix. Exits 1 "
                                       "when something fails.")
    _add_common(check)
    check.add_argument("--simulate", metavar="SCENARIO",
                       help="check against a simulated host instead of this one's NVML: a "
                            f"built-in scenario ({', '.join(builtin_scenarios())}) or a "
                            "scenario .toml file; with the config and the store `run "
                            "--simulate SCENARIO` uses (without --config, daemon/sim/"
                            "simulate.toml; without --db, the scenario's own store)")
    check.add_argument("--json", action="store_true", help="print JSON")

    report = sub.add_parser("report", help="what the host did over a window",
                            description="Summarise the recorded window: GPUs, GPU processes "
                                        "and their workers, their cost, and the review (spend "
                                        "per day and month against the period before, by "
                                        "kind, job and user; unit costs, storage, waste, "
                                        "energy; the recommendations acted on, snoozed, "
                                        "ignored or new).")
    _add_common(report)
    report.add_argument("--since", metavar="DURATION",
                        help="how far back the window reaches from its end: 30s, 15m, 1h, "
                             "30d, or a number alone: seconds (default: 1h of a store a daemon records into; the whole "
                             "recorded range of a snapshot or a stopped store)")
    report.add_argument("--until", metavar="TIME",
                        help="where the window ends: Unix seconds or ISO 8601 such as "
                             "2026-12-01T09:30 (default: now while a daemon records into the "
                             "store, else the store's last sample)")
    report.add_argument("--by", metavar="KEYS", default="kind,job,user",
                        help="how the review splits spend: any of kind, job, user, "
                             "comma-separated (default kind,job,user)")
    report.add_argument("--json", action="store_true",
                        help="print the JSON document described in the README")
    report.add_argument("--html", metavar="FILE",
                        help="also write the review as one self-contained HTML page")

    from daemon.commands import snapshot as snapshot_command

    snapshot = sub.add_parser("snapshot", help="a time range as a snapshot file (a store of "
                                               "its own), its HTML report, an S3 upload",
                              description=snapshot_command.__doc__,
                              formatter_class=snapshot_command.HelpFormatter)
    _add_common(snapshot)
    snapshot_command.add_arguments(snapshot)

    from daemon.commands import profile as profile_command

    profile = sub.add_parser("profile", help="run one command under observation: its cost, "
                                             "phases, recommendations; CI gates (profile.json, "
                                             "profile.html, summary.md, JUnit)",
                             description=profile_command.DESCRIPTION,
                             epilog=profile_command.EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    profile_command.add_arguments(profile)

    from daemon.commands import compare as compare_command

    compare = sub.add_parser("compare", help="before and after: two profiles, snapshots or "
                                             "ranges, a verdict per figure",
                             description=compare_command.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(compare)
    compare_command.add_arguments(compare)

    from daemon.commands import idle as idle_command

    idle = sub.add_parser("idle", help="is this host idle? for autostop scripts (exit 0 idle, "
                                       "1 active or unknown)",
                          description=idle_command.__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    idle.add_argument("--config", metavar="FILE",
                      help="TOML config file: [api].socket says where the daemon listens")
    idle_command.add_arguments(idle)

    from daemon.commands import mcp as mcp_command

    mcp = sub.add_parser("mcp", help="read-only tools for AI assistants (Model Context "
                                     "Protocol, stdio): costs, idle GPUs, recommendations",
                         description=mcp_command.__doc__,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    mcp_command.add_arguments(mcp)

    from pricing import cli as pricing_cli  # pricing is part of the distribution

    prices = sub.add_parser("prices", help="GPU instance prices with source and age; what "
                                           "fits; refresh (aws, azure, gcp, catalog, "
                                           "sagemaker, vertex, azureml); --audit; --managed",
                            description=PRICES_DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    pricing_cli.add_arguments(prices)
    observed = prices.add_argument_group(
        "the GPU selection matrix of a workload this host has run")
    observed.add_argument("--observed", action="store_true",
                          help="list the instances that fit what the recorded GPU processes "
                               "needed (GPUs, peak memory), ranked per workload kind "
                               "(training: cost of a run; batch inference: cost of the "
                               "accelerator-hours; online inference: a month of serving), "
                               "with Inferentia, Trainium and TPU rows that say what moving "
                               "costs")
    observed.add_argument("--kind", choices=("training", "batch_inference", "online_inference",
                                             "all"),
                          help="with --observed: rank for this kind (default: the kinds "
                               "recorded for the processes, else all three)")
    observed.add_argument("--pid", type=pricing_cli.number_in(1, 1 << 22, whole=True),
                          help="with --observed: only this process")
    observed.add_argument("--since", metavar="DURATION",
                          help="with --observed: the window to read (default 1h)")
    observed.add_argument("--until", metavar="TIME",
                          help="with --observed: where the window ends (Unix seconds or ISO "
                               "8601, local time; default: now, or the last sample of a "
                               "store no daemon records into, such as a snapshot)")
    observed.add_argument("--run-hours", type=pricing_cli.number_in(0.001, 24 * 366),
                          metavar="H",
                          help="with --observed: hours of one run (default: the observed "
                               "runtime so far)")
    observed.add_argument("--config", metavar="FILE",
                          help="TOML config file: [pricing] gives the defaults of --cache, "
                               "--gcp-key-file and --catalog-url, and extra catalogs")
    observed.add_argument("--db", metavar="FILE", help="SQLite database to read")
    return parser


def _load_config(args: argparse.Namespace) -> Config:
    """The config a command runs with: --config (under --simulate without it, the simulated
    host's own, SIMULATE_CONFIG), then --db over [daemon].db."""
    path = args.config
    if path is None and getattr(args, "simulate", None):
        path = str(SIMULATE_CONFIG)  # short idle thresholds: see the file
    config = config_module.load(path)
    if getattr(args, "db", None):
        config = config_module.with_overrides(config, "daemon", db=args.db)
    return config


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s mlcostd %(levelname)s %(message)s",
        datefmt="%H:%M:%S", stream=sys.stderr)
    from daemon.sources.redact import RedactingFilter

    for handler in logging.getLogger().handlers:  # no secret reaches the log, whatever it says
        handler.addFilter(RedactingFilter())
    if logging.getLogger().level > logging.DEBUG:  # the AWS libraries' own notes: debug only
        for library in ("botocore", "boto3", "s3transfer", "urllib3"):
            logging.getLogger(library).setLevel(logging.WARNING)


def cmd_run(args: argparse.Namespace) -> int:
    from daemon.runtime.daemon import Daemon, DaemonError

    config = _load_config(args)
    if args.interval is not None:  # seconds, checked by interval_seconds
        config = config_module.with_overrides(config, "daemon", interval=args.interval)
    if args.no_stacks:
        config = config_module.with_overrides(config, "attribution", stacks=False)
    api_flags = {name: getattr(args, flag) for name, flag in
                 (("socket", "socket"), ("listen", "listen"), ("token_file", "token_file"),
                  ("metrics_listen", "metrics_listen"))
                 if getattr(args, flag)}
    if api_flags:
        try:  # the same checks as the file's [api] table
            config_module.from_dict({"api": api_flags}, where="command line")
        except ConfigError as exc:
            message = str(exc)
            for name in api_flags:
                message = message.replace(f"[api].{name}", "--" + name.replace("_", "-"))
            raise ConfigError(message) from None
        config = config_module.with_overrides(config, "api", **api_flags)
    # a simulated host's own store and socket where nothing else says where (as `check` finds)
    given = config
    config = config_module.with_simulated_paths(config, args.simulate)
    own_files = []
    if config.daemon.db != given.daemon.db:
        own_files.append(f"records into {config.daemon.db} (mlcostd report --db "
                         f"{config.daemon.db})")
    if config.api.socket != given.api.socket:
        own_files.append(f"serves its API on {config.api.socket} (mlcost-top --connect "
                         f"unix:{config.api.socket})")
    if args.token_file and not config.api.listen:
        # Only the TCP listener reads the token: a --token-file nothing reads (a directory or a
        # typo as much as a good file) is said, not silently left unused.
        print("mlcostd: --token-file is used only with --listen (the bearer token of the "
              "TCP API; the unix socket needs none); add --listen HOST:PORT (or [api].listen), "
              "or leave --token-file out", file=sys.stderr)
        return 2
    _setup_logging(args.log_level or config.daemon.log_level)
    if own_files:
        log.info("the simulated host %s, its own, not this host's: %s", args.simulate,
                 "; ".join(own_files))
    db_origin = ("--db" if args.db else
                 f"[daemon].db in {given.source}" if given.daemon.db else None)
    daemon = Daemon(config, simulate=args.simulate, db_origin=db_origin)

    async def main() -> int:
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(daemon.run())]
        if args.watch:
            tasks.append(asyncio.create_task(_watch(daemon)))
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return tasks[0].result() if tasks[0] in done else 0

    try:
        return asyncio.run(main())
    except DaemonError as exc:  # cannot start: the same status as a config error
        print(f"mlcostd: {exc}", file=sys.stderr)
        return 2
    finally:  # stopped: a late SIGINT or SIGTERM must not turn the exit into a traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


WATCH_WINDOW_S = 10.0


def builtin_scenarios() -> list[str]:
    """The built-in --simulate scenarios, as daemon/sim names them."""
    from daemon.sim.scenario import builtin_names

    return builtin_names()


def terminal_width() -> int | None:
    """The terminal's width when stdout is one (lines wrap there); None for a pipe or a file,
    where no line is cut."""
    import shutil

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def watch_text(db: Path, recommendations_since_s: float = WATCH_WINDOW_S,
               started_at: float | None = None) -> str:
    """The live view's text: a short summary of the last WATCH_WINDOW_S seconds of this run
    (none from before `started_at`: a run started on an old store shows its own processes),
    read back from the store like any reader. Blocking (SQLite): run it off the event loop."""
    from daemon.commands import report
    from daemon.store.reader import StoreReader

    since_s = WATCH_WINDOW_S
    if started_at is not None:
        ran_s = max(clock.now() - started_at, 0.001)
        since_s, recommendations_since_s = (min(since_s, ran_s),
                                            min(recommendations_since_s, ran_s))
    try:
        reader = StoreReader(str(db), timeout_s=2.0)
        try:
            return report.render_watch(report.build(
                reader, since_s, recommendations_since_s=recommendations_since_s),
                terminal_width())
        finally:
            reader.close()
    except Exception as exc:  # the view must never stop the recorder
        return f"(live view unavailable: {exc})\n"


async def _watch(daemon: Any, first_after_s: float = 3.0, every_s: float = 5.0) -> None:
    """Every `every_s`, a summary of the last 10 s of this run. The store is read in a
    thread, so the tick loop (on this event loop) never waits on the view."""
    db = daemon.db
    # Recommendations are re-evaluated every [cost].evaluate_every: look back two of those, so
    # one that stands is not dropped between two evaluations.
    recommendations_since_s = max(WATCH_WINDOW_S, 2 * daemon.config.cost.evaluate_every + 5)
    await asyncio.sleep(first_after_s)
    while True:
        text = await asyncio.to_thread(watch_text, db, recommendations_since_s,
                                       daemon.started_at)
        if sys.stdout.isatty():
            sys.stdout.write("\x1b[2J\x1b[H")  # our own clear; none from the text below
        sys.stdout.write(lines(f"{clock.local_time(clock.now(), date=False)}  recording {db}  "
                               f"(Ctrl-C stops the daemon and its workloads)\n\n{text}"))
        sys.stdout.flush()
        await asyncio.sleep(every_s)


def cmd_check(args: argparse.Namespace) -> int:
    from daemon.commands import check

    # under --simulate, the store `run --simulate` records into, read with the same config
    config = config_module.with_simulated_paths(_load_config(args), args.simulate)
    running = None
    simulated = None
    if args.simulate:
        from daemon.sim import nvml as sim_nvml
        from daemon.sim import scenario

        try:
            loaded = scenario.load(args.simulate)
        except scenario.ScenarioError as exc:
            print(f"mlcostd check: --simulate {exc}", file=sys.stderr)
            return 2
        simulated = {"provider": loaded.instance.provider, "type": loaded.instance.type,
                     "region": loaded.instance.region, "lifecycle": loaded.instance.lifecycle}
        running = scenario.start(loaded)
        sim_nvml.install(running.state_dir)
    try:
        checks = check.run_checks(config_module.db_path(config),
                                  check.price_checks(config, simulated)
                                  + check.owner_checks(config), config=config)
    finally:
        if running is not None:
            sim_nvml.uninstall()
            running.stop()
    if args.json:
        print(json.dumps(check.as_json(checks), indent=2))
    else:
        sys.stdout.write(check.render(checks))
    return 1 if any(c.status == check.FAIL for c in checks) else 0


def range_arguments(since: str | None, until: str | None) -> tuple[float | None, float | None]:
    """--since (a duration of at least 1 s) and --until (a past time), checked for range;
    None where not given. ValueError names the flag and the value."""
    span = None
    if since is not None:
        try:
            span = config_module.parse_duration(since)
        except ValueError as exc:
            raise ValueError(f"--since {exc}") from None
        if span < 1:
            raise ValueError(f"--since {since!r} must be at least 1 s; give a duration "
                             f"({DURATION_FORMS})")
    end = None
    if until is not None:
        try:
            end = clock.parse_time(until)
        except ValueError as exc:
            raise ValueError(f"--until {exc}") from None
        if end > clock.now() + 60:
            raise ValueError(f"--until {until!r} is in the future; give a past time: "
                             f"{clock.TIME_FORMS}")
    return span, end


def cmd_report(args: argparse.Namespace) -> int:
    from daemon.commands import report
    from daemon.store.errors import damaged_store, is_damaged
    from daemon.store.reader import StoreReader
    from daemon.store.shape import READ_ERRORS, StoreShapeError, check_shape, read_failure

    config = _load_config(args)
    try:
        since, until = range_arguments(args.since, args.until)
        by = report.parse_by(args.by)
    except ValueError as exc:
        print(f"mlcostd report: {exc}", file=sys.stderr)
        return 2
    db = config_module.db_path(config)
    if args.html:  # before any work: never over the store, a database or a file not a page
        from daemon.sources.safe_text import one_line
        from daemon.store.files import page_problem

        problem = page_problem(args.html, (db,))
        if problem is not None:
            print(f"mlcostd report: --html {one_line(problem)[:400]}", file=sys.stderr)
            return 2
    if not Path(db).exists():  # nothing to read is a refusal, as a file that is no store is
        print(f"mlcostd report: no database at {db}. Start the recorder first "
              f"(`mlcostd run`), or pass --db (`mlcostd run --simulate demo` records into "
              f"{config_module.simulated_db_path('demo')})", file=sys.stderr)
        return 2
    try:
        reader = StoreReader(str(db), tidy=True)
        try:
            check_shape(reader)  # a view or a missing column: refused before any row is read
            start, end = report.resolve_window(reader, since, until)
            document = report.build(reader, end - start, until=end, config=config, by=by)
        finally:
            reader.close()
    except StoreShapeError as exc:
        print(f"mlcostd report: {exc}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:
        if is_damaged(exc):
            print(f"mlcostd report: {damaged_store(db, exc)}", file=sys.stderr)
            return 2
        print(f"mlcostd report: {db} is not an mlcostd database "
              f"({' '.join(str(exc).split())[:160]}); pass the daemon's database (--db, "
              "[daemon].db) or a copy of it", file=sys.stderr)
        return 2
    except READ_ERRORS as exc:  # a row of the wrong type, a query past its deadline ...
        print(f"mlcostd report: {read_failure(db, exc)}", file=sys.stderr)
        return 2
    if args.html:
        from daemon.report_html import review as review_page
        from daemon.store.files import write_page

        try:
            write_page(Path(args.html), review_page.render(document), (db,))
        except OSError as exc:
            print(f"mlcostd report: cannot write --html {args.html}: "
                  f"{exc.strerror or exc}; give a writable path", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(report.render_text(document, terminal_width()))
        if args.html:
            print(f"html: {args.html}")
    return 0


def cmd_prices_observed(args: argparse.Namespace) -> int:
    from daemon.analysis import selection
    from daemon.store.reader import StoreReader
    from daemon.store.shape import read_failure
    from pricing import Catalog
    from pricing import cli as pricing_cli

    config = _load_config(args)
    db = config_module.db_path(config)
    if not Path(db).exists():
        print(f"mlcostd prices: no database at {db}; pass --db or start `mlcostd run`",
              file=sys.stderr)
        return 2
    try:
        span, until = range_arguments(args.since or "1h", args.until)
    except ValueError as exc:
        print(f"mlcostd prices: {exc}", file=sys.stderr)
        return 2
    if args.limit is None:
        args.limit = pricing_cli.DEFAULT_LIMIT
    from daemon.commands.report import resolve_window

    reader = StoreReader(str(db), tidy=True)
    try:
        # as the report's window: a snapshot or a stopped store ends at its last sample
        start, end = resolve_window(reader, span, until)
        since = end - start
        need = selection.observed_need(reader, since, pid=args.pid, run_hours=args.run_hours,
                                       until=end)
        kinds, why = selection.kinds_to_rank(need, args.kind)
        # Ranked for the kinds its processes had: each kind for what its own processes needed.
        needs = {kind: selection.observed_need(reader, since, pid=args.pid,
                                               run_hours=args.run_hours, kind=kind, until=end)
                 if args.kind is None and len(need.kinds) > 1 else need for kind in kinds}
    except ValueError as exc:
        print(f"mlcostd prices: {exc}", file=sys.stderr)
        return 1
    except sqlite3.Error as exc:  # damaged, or no store: said in a line, not a traceback
        print(f"mlcostd prices: {read_failure(db, exc)}", file=sys.stderr)
        return 1
    finally:
        reader.close()
    args = _prices_defaults(args, config)  # the daemon's cache and extra catalogs
    catalog = Catalog.load(cache_path=args.cache, extra_catalogs=args.extra_catalogs) \
        .with_texts(args.shown_text)
    rows = selection.selection_matrix(need, catalog, provider=args.provider,
                                      region=args.region, limit=args.limit)
    sections = [selection.kind_matrix(needs[kind], catalog, kind, provider=args.provider,
                                      region=args.region, limit=args.limit) for kind in kinds]
    if args.json:
        print(json.dumps(selection.as_json(need, rows, sections, why), indent=2))
    else:
        sys.stdout.write(selection.render_kinds(need, sections, why))
    return 0


def _prices_defaults(args: argparse.Namespace, config: Config) -> argparse.Namespace:
    """`mlcostd prices` flags the command line leaves out, from [pricing]: the cache the daemon
    reads (so a refresh is what the daemon uses), the GCP key file, the catalog URL and the
    extra catalogs."""
    pricing = config.pricing
    if args.cache is None:
        args.cache = str(config_module.price_cache_path(config))
    # only where they are read: a flag the command line left out is no companion it gave
    # (pricing.cli.COMPANIONS refuses --catalog-url without --refresh catalog)
    if args.gcp_key_file is None and pricing.gcp_api_key_file and args.refresh in ("gcp",
                                                                                  "vertex"):
        args.gcp_key_file = pricing.gcp_api_key_file
    if args.catalog_url is None and pricing.catalog_url and args.refresh == "catalog":
        args.catalog_url = pricing.catalog_url
    args.extra_catalogs = list(pricing.extra_catalogs)
    from daemon.sources.redact import redact_field

    args.shown_text = redact_field  # (each price's source, note and URL, as the daemon shows)
    return args


def _command_parser(parser: argparse.ArgumentParser,
                    command: str | None) -> argparse.ArgumentParser:
    """The subcommand's parser (`mlcostd snapshot --sinse 1m` shows snapshot's usage), else
    `parser`."""
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def _did_you_mean(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """" (did you mean --simulate?)" for the first unknown long option that is close to one of
    the parser's (a long option is never shortened: Parser), else ""."""
    import difflib

    options = [o for o in parser._option_string_actions if o.startswith("--")]
    for given in extra:
        if given.startswith("--"):
            close = difflib.get_close_matches(given.split("=", 1)[0], options, n=1)
            if close:
                return f" (did you mean {close[0]}?)"
    return ""


# What a write of the output fails with when it cannot be written: the disk or the quota is
# full, the file too large, the device failing.
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def main(argv: list[str] | None = None) -> int:
    # A stream closed at start (`mlcostd run <&- 2>&-`): /dev/null stands in, so the store,
    # a socket or the event loop never takes fd 0-2, where a library's or a child's
    # message would land (runtime/streams.py)
    open_standard_streams()
    try:
        with while_starting():  # until the command runs: one line, exit 130/143
            parser = build_parser()
            try:
                args, extra = parser.parse_known_args(argv)
            except SystemExit as done:
                if done.code in (0, None):  # --help: to a full disk, said below, not dropped
                    sys.stdout.flush()
                raise
            # From its options on, the profile keeps them: one that comes before its recorder
            # is up is acted on once it is, and its files are written (README "Profile a
            # command").
            kept_signals = KeptSignals() if args.command == "profile" and not extra else None
        status = _main(parser, args, extra, kept_signals)
        if sys.stdout is not None:  # (None: its reader exited, `mlcostd report | head`)
            sys.stdout.flush()  # what is still buffered: a full disk is said below, not at exit
        return status
    except KeyboardInterrupt:  # Ctrl-C while a command runs: no traceback
        return 130
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRNOS:
            raise
        # A full disk (or quota, or a device error) under `mlcostd report > FILE`: one line, as
        # any refusal; a cron job mailed a traceback. Standard output is let go to /dev/null,
        # so the interpreter's own flush at exit has nothing left to fail on.
        where = exc.filename if exc.filename else "standard output"
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"mlcostd: could not write {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str],
          kept_signals: KeptSignals | None) -> int:
    if extra:  # said with the command's own usage, not mlcostd's list of commands
        command_parser = _command_parser(parser, args.command)
        command_parser.error(f"unrecognized arguments: {' '.join(extra)}"
                             f"{_did_you_mean(command_parser, extra)}")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "check":
            return cmd_check(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "snapshot":
            from daemon.commands import snapshot as snapshot_command

            return snapshot_command.run(args, _load_config(args))
        if args.command == "profile":
            from daemon.commands import profile as profile_command

            return profile_command.run(args, kept_signals)

        if args.command == "compare":
            from daemon.commands import compare as compare_command

            return compare_command.run(args, _load_config(args))

        if args.command == "idle":
            from daemon.commands import idle as idle_command

            return idle_command.run(args, _load_config(args))

        if args.command == "mcp":
            from daemon.commands import mcp as mcp_command

            return mcp_command.run(args, _load_config(args))

        if args.command == "prices":
            from pricing import cli as pricing_cli

            # a flag given without the one it goes with (--headroom without --fits, --pid
            # without --observed) is refused, never ignored: pricing.cli.COMPANIONS
            companions = pricing_cli.companion_error(args)
            if companions:
                print(f"mlcostd prices: {companions}", file=sys.stderr)
                return 2
            if args.observed:
                return cmd_prices_observed(args)
            return pricing_cli.run(_prices_defaults(args, config_module.load(args.config)))
    except ConfigError as exc:
        print(f"mlcostd: config error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `mlcostd report | head`
        sys.stdout = None  # type: ignore[assignment]
        return 0
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
