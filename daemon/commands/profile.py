"""`mlcostd profile -- COMMAND`: run one command under observation and say what it cost.

The recording is the daemon's own (runtime/profile.py): NVML, /proc and py-spy stack samples of
the command's process tree only, from its first second, into a store of its own
(OUT/profile.db). When the command exits (or after --duration) this writes to OUT:

  profile.json  the report document (commands/report.py `build`) over the run's exact range,
                plus a `profile` key: the command, its exit status, the run's times, steps,
                cost (per step, per 1k steps, per 1k tokens/requests), workload kind, phase
                balance and largest phase, GPU utilization, peak GPU memory, gates and
                representativeness
  profile.html  the snapshot report's page of OUT/profile.db, the verdict above its charts
  summary.md    a short Markdown summary for a CI job summary ($GITHUB_STEP_SUMMARY)

leaves profile.db one self-contained file (journal mode DELETE: no -wal or -shm beside it),
and exits with the command's status, or GATE_EXIT_STATUS when a gate is crossed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from daemon import clock
from daemon import config as config_module
from daemon.analysis.compare import gpu_models, price_per_gpu_hour
from daemon.analysis.latency_report import PROFILED_COMMAND, cost_per_1k_text, target_text
from daemon.analysis.phase_balance import balance_keys, run_phase_balance
from daemon.analysis.rules.base import plural
from daemon.commands import gates as gate_checks
from daemon.commands.gates import GATE_EXIT_STATUS, Gate
from daemon.commands.report_energy import amount_text, grid_text
from daemon.commands.startup_signals import KeptSignals
from daemon.config import Config
from daemon.runtime.streams import StderrHandler, say
from daemon.sources.redact import REDACTED, redacted_words
from daemon.sources.safe_text import one_line, shell_quoted, without_url_credentials
from daemon.wire import money, process_key

log = logging.getLogger(__name__)

DEFAULT_OUT = "mlcost-profile"
DEFAULT_SCENARIO = "single-gpu"  # daemon/sim/scenarios/single-gpu.toml: one A10G, g5.xlarge
# Ticks four times a second, stacks twice a second per process (py-spy's per-process limit
# is checked against a tick's start, so ticks at the limit itself would skip every other one).
PROFILE_INTERVAL_S = 0.25
# Representativeness: below these a profile says it may not stand for the workload.
MIN_DURATION_S = gate_checks.MIN_RUN_S
MIN_STACK_SAMPLES = gate_checks.MIN_PHASE_SAMPLES
MIN_STEPS = 10
STARTUP_SHARE = 0.5  # more than half the run before the first GPU work or the first step
MAX_COMMAND_CHARS = 500
MAX_LEFTOVER_CHARS = 200  # of each process left running, as named
MAX_PATTERN_CHARS = 200  # of --progress, as said in a warning
TOP_RECOMMENDATIONS = 3
OUTPUT_FILES = ("profile.json", "profile.html", "summary.md")
# One profile at a time in an --out folder: a second one there would delete the first's store.
# Held (flock) from before the folder is cleared until the files are written; it names the pid.
PROFILE_LOCK = "profile.lock"
# What else the profile keeps in --out while it runs: its store, SQLite's files beside it, the
# writer lock's and its own lock.
STORE_FILES = ("profile.db", "profile.db-wal", "profile.db-shm", "profile.db.lock", PROFILE_LOCK)
COMMAND_NOT_STARTED_STATUS = 127  # as the shell's for a command it cannot run
NOT_STARTED = "the profile was interrupted (SIGINT/SIGTERM) before the command started"

DESCRIPTION = f"""\
Run COMMAND under observation: its GPUs (NVML), its processes (/proc) and its Python stacks
(py-spy, from the first second) — that process tree only — into a store of its own. When it
exits, or after --duration, write profile.json, profile.html and summary.md to --out, print
the verdict, and exit with the command's status, or with status {GATE_EXIT_STATUS} when a gate is crossed.

Steps: --progress REGEX counts them in the command's own output (passed through unchanged):
with a group the group is the step number (tqdm: '(\\d+)/\\d+', a log: 'step (\\d+)'), and a
number that starts over (a bar per epoch: 1/60 after 60/60) adds a run of steps; without one
each match is a step. [[cost.unit_costs]] in --config prices tokens or requests too.

Latency: --latency URL METRIC where the command serves a Prometheus latency histogram (vLLM's
http://localhost:8000/metrics vllm:e2e_request_latency_seconds, TGI's tgi_request_duration):
read every second while it runs, p50/p99 of the requests it served and the cost per request
go into profile.json, summary.md and profile.html. ([[cost.latency]] in --config works too,
for a job by name.)

Gates (any number; each is a JUnit test case with --junit):
  --max-cost DOLLARS               the run's cost (the command's processes, by the cost model)
  --max-cost-per-1k-steps DOLLARS  needs --progress
  --max-data-wait PCT              the share of the GPU processes' time their GPU waited
                                   for input: data_wait (reading it) plus host_preprocess
                                   (preparing it in the loop), as their stack samples read;
                                   an idle wait (a sleep or poll in the loader reads idle)
                                   is not counted: the phases line shows it, and
                                   --min-utilization gates it (fails closed on fewer than
                                   20 stack samples: profile 30 s or more)
  --min-utilization PCT            mean utilization of the GPUs the command used
  --max-gpu-memory PCT             peak memory of the fullest GPU it used, as a share of that
                                   GPU's: fail in CI, not with out-of-memory in production
  --max-regression PCT --baseline OLD (a profile's folder, or OLD/profile.json)
                                   cost per step up by more than PCT against an earlier
                                   profile; where neither counted steps, the run's total
                                   cost (taken as the same work both runs; refused with
                                   --duration and no --progress: a fixed length costs the
                                   same however slow the code); one with steps and one
                                   without fails. The cost model charges a GPU's share only
                                   while a GPU is held, so start-up before the first GPU
                                   use is not in it (profile.json's host_cost, the host's
                                   price over the whole run, is). A plain threshold, without
                                   a noise allowance: `mlcostd compare OLD OUT` says whether
                                   a change is beyond the runs' noise

A gate that cannot be checked fails (exit {GATE_EXIT_STATUS}, saying why): a cost gate where the host has no
price, where NVML is unavailable (no --simulate, no NVIDIA driver) or where the command used no
GPU (the cost model reads $0); a GPU gate where NVML is unavailable or no GPU was used.

Exit status: the command's own (128+N when signal N ended it); {GATE_EXIT_STATUS} when it exited 0 (or was
stopped by --duration) and a gate was crossed; 127 when it cannot be started (the files and
the JUnit file say so); 128+N when signal N reached the profile before it started (the files
say it was not started; only while mlcostd itself starts, before it has read its options, is
nothing written), or after it exited (the files are written whole first); 2 for a bad option,
a folder it cannot write, an --out another profile is recording into (one profile at a time
per folder), a recorder that cannot start, or a file it could not write at the end.

It runs unprivileged: py-spy may read the user's own child (on hosts with yama ptrace_scope=1 a
process must allow it, e.g. prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY), as the simulated GPU's
client does; in a container add --cap-add SYS_PTRACE). With --simulate the command runs on a
simulated GPU host (default scenario {DEFAULT_SCENARIO!r}: one NVIDIA A10G of an AWS g5.xlarge, on-demand, no
other workloads; a named scenario brings its workloads, which share its GPUs): the command
attaches with daemon.sim.device.Device, whose state dir is in $MLCOST_SIM_DIR.
"""

EPILOG = """\
examples:
  mlcostd profile -- python train.py --epochs 1
  mlcostd profile --duration 2m --progress 'step (\\d+)' -- python train.py
  mlcostd profile --max-data-wait 20% --min-utilization 60% --junit gates.xml -- ./eval.sh
  mlcostd profile --max-regression 10% --baseline main/profile.json --out pr -- python bench.py
  mlcostd profile --simulate -- python my_script_using_daemon_sim_device.py
  mlcostd profile --latency http://localhost:8000/metrics vllm:e2e_request_latency_seconds \\
      --duration 5m -- ./serve_and_load_test.sh
  cat mlcost-profile/summary.md >> "$GITHUB_STEP_SUMMARY"
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help="TOML config file ([instance] price, [[cost.unit_costs]], ...)")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"folder for profile.json, profile.html, summary.md and the "
                             f"profile's store profile.db (default ./{DEFAULT_OUT}/)")
    parser.add_argument("--duration", metavar="DURATION",
                        help="stop the command after this long, "
                             f"{config_module.POSITIVE_DURATION}; a number alone is seconds, "
                             "as in every mlcostd duration (--duration 90 is 90s): "
                             "SIGTERM to its process group, SIGKILL 5 s later; the profile "
                             "then exits 0 unless a gate is crossed")
    parser.add_argument("--simulate", nargs="?", const=DEFAULT_SCENARIO, metavar="SCENARIO",
                        help=f"run on a simulated GPU host (default {DEFAULT_SCENARIO!r}); "
                             "put -- before the command (`--simulate python x.py` takes "
                             "python for the scenario)")
    parser.add_argument("--progress", metavar="REGEX",
                        help="count steps in the command's output (see above)")
    parser.add_argument("--latency", nargs=2, action="append", metavar=("URL", "METRIC"),
                        help="the command serves a Prometheus latency histogram METRIC (in "
                             "seconds) at URL: p50/p99 of its requests and the cost per "
                             "request (repeatable)")
    parser.add_argument("--junit", metavar="FILE",
                        help="write the gates as JUnit XML (the command's failure too), its "
                             "folder created when missing, as --out's is")
    gates = parser.add_argument_group("gates")
    gates.add_argument("--max-cost", metavar="DOLLARS")
    gates.add_argument("--max-cost-per-1k-steps", metavar="DOLLARS")
    gates.add_argument("--max-data-wait", metavar="PCT",
                       help="fail when the GPU processes' input wait, data_wait plus "
                            "host_preprocess, is more than PCT of their time (idle waits "
                            "are not counted; see above)")
    gates.add_argument("--min-utilization", metavar="PCT")
    gates.add_argument("--max-gpu-memory", metavar="PCT")
    gates.add_argument("--max-regression", metavar="PCT",
                       help="fail when the cost per step (the total cost where neither "
                            "run counted steps) is up by more than PCT on --baseline's; the "
                            "cost model charges a GPU's share only while a GPU is held: "
                            "start-up before the first GPU use is not in the cost per step "
                            "(profile.json's host_cost is the host's price over the whole "
                            "run); a plain threshold, no noise allowance (mlcostd compare "
                            "says whether a change is beyond the runs' noise)")
    gates.add_argument("--baseline", metavar="PROFILE",
                       help="an earlier profile's folder (its --out) or its profile.json, for "
                            "--max-regression")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS",
                        help="the command to profile")


class UsageError(ValueError):
    """A bad option: the message names it and what is allowed."""


def _limits(args: argparse.Namespace) -> dict[str, float]:
    parsers = {"max_cost": gate_checks.parse_dollars,
               "max_cost_per_1k_steps": gate_checks.parse_dollars,
               "max_data_wait": gate_checks.parse_percent,
               "min_utilization": gate_checks.parse_percent,
               "max_gpu_memory": gate_checks.parse_percent,
               "max_regression": gate_checks.parse_regression}
    limits = {}
    for name, parse in parsers.items():
        text = getattr(args, name)
        if text is None:
            continue
        flag = f"--{name.replace('_', '-')}"
        try:
            limits[name] = parse(text)
        except ValueError as exc:
            raise UsageError(f"{flag} {exc}") from None
        if parse is not gate_checks.parse_dollars:
            warning = gate_checks.fraction_warning(flag, text, limits[name])
            if warning is not None:
                say(f"mlcostd profile: warning: {warning}")
    return limits


def _latency_table(url: str, metric: str) -> dict[str, str]:
    """--latency URL METRIC as a [[cost.latency]] table for the profiled command; UsageError
    names what is wrong."""
    table = {"target": PROFILED_COMMAND, "url": url, "metric": metric}
    try:
        config_module.latency_setting(table)
    except ValueError as exc:
        raise UsageError(f"--latency {without_url_credentials(url)[:200]!r} {metric[:100]!r}: "
                         f"{exc}") from None
    return table


def _check_scenario(scenario: str, given: list[str]) -> None:
    """--simulate's scenario exists (a built-in or a .toml file), or UsageError says so, and,
    where no -- came before the command, that the first word taken for a scenario
    (`--simulate python tq.py`) is the command's."""
    from daemon.sim.scenario import ScenarioError, load

    try:
        load(scenario)
    except ScenarioError as exc:
        hint = ""
        if not given or given[0] != "--":
            example = one_line(shlex.join([scenario, *given]))[:200]
            hint = f"; the command goes after --: mlcostd profile --simulate -- {example}"
        raise UsageError(f"--simulate {exc}{hint}") from None


def profile_config(config: Config, out: Path) -> Config:
    """The daemon's config for a profile: its own store in `out`, ticks four times a second,
    stacks as often as py-spy may (the user asked for this run to be profiled), the
    unit-cost counters read every 5 s, no incident snapshots."""
    config = config_module.with_overrides(
        config, "daemon", db=str(out / "profile.db"),
        interval=min(config.daemon.interval, PROFILE_INTERVAL_S))
    config = config_module.with_overrides(
        config, "attribution", stacks=True, dump_interval=0.5,
        dumps_per_second=max(config.attribution.dumps_per_second, 4.0),
        cpu_budget=max(config.attribution.cpu_budget, 0.25))
    config = config_module.with_overrides(config, "cost", evaluate_every=5.0)
    return config_module.with_overrides(config, "snapshots", max_per_hour=0.0,
                                        folder=str(out / "snapshots"))


def _own_file(path: Path, out: Path) -> str | None:
    """What `path` is of the profile's own in `out` ("the profile's own profile.json in --out
    jo"), links and `..` resolved; None when it is none of them."""
    target = os.path.realpath(path)
    if target == os.path.realpath(out):
        return f"the --out folder {out}"
    for name in (*OUTPUT_FILES, *STORE_FILES):
        if target == os.path.realpath(out / name):
            return f"the profile's own {name} in --out {out}, which the profile writes"
    return None


def _not_a_folder(folder: Path) -> str | None:
    """"afile is a file, not a folder" when `folder` or a folder above it is not one (what
    mkdir says as "[Errno 17] File exists: 'afile'"), else None."""
    for part in (*reversed(folder.parents), folder):
        if os.path.lexists(part) and not os.path.isdir(part):
            return f"{part} is {'a file, ' if os.path.isfile(part) else ''}not a folder"
    return None


def folder_problem(folder: Path, option: str) -> str | None:
    """Why the profile cannot keep files in `folder` (`option` --out's, or --junit's), as the
    rest of a line that says what to do; None when it can. It is created as the profile's own
    when missing (0700, the folders above it as the umask says), judged by the rule for every
    folder mlcostd writes into (daemon.store.files.check_folder: no other user's link on its
    path, no folder on it another user owns or can write unless sticky like /tmp: mlcostd may
    run as root, and whoever could change the folder would choose what root writes and
    removes there, or forge the files after), and a file is made and removed in it, so that a
    folder the profile cannot write is found before the run, not after it."""
    from daemon.store.files import RefusedFile, check_folder, open_private, temp_path

    fix = (f"give {option} a folder you can write (it is created when missing)"
           if option == "--out" else
           f"give {option} a file in a folder you can write (it is created when missing)")
    in_the_way = _not_a_folder(folder)
    if in_the_way is not None:
        return f"{in_the_way}; {fix}"
    try:
        check_folder(folder, f"{option} folder",
                     f"give {option} {'a file in ' if option != '--out' else ''}a folder of "
                     "your own that no other user can write (a missing one is created 0700)",
                     create=True)
    except RefusedFile as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot create the folder {folder} ({exc.strerror or exc}); {fix}"
    probe = temp_path(folder / "write-check")
    try:
        os.close(open_private(probe, os.O_WRONLY | os.O_EXCL))
        os.unlink(probe)
    except OSError as exc:
        return f"the folder {folder} is not writable ({exc.strerror or exc}); {fix}"
    return None


def shown_command(argv: list[str], limit: int = MAX_COMMAND_CHARS) -> str:
    """A command line as a shell takes it back (`bash -c 'python x.py'`, not `bash -c python
    x.py`, which runs something else): its arguments redacted (daemon.sources.redact), each
    shell-quoted (the markers that stand for what was hidden or cut left bare), one with a
    control character as `$'tab\\there'` (safe_text.shell_quoted), and cut to `limit`
    characters."""
    words = redacted_words(argv)
    quoted = [w if w == REDACTED or (w.startswith("<truncated: ") and w.endswith(">"))
              else shell_quoted(w) for w in words]
    return one_line(" ".join(quoted))[:limit]


def _fresh_store(out: Path) -> None:
    """A profile is of one run: an earlier profile's store in the same folder goes."""
    from daemon.store.files import check_existing

    for suffix in ("", "-wal", "-shm"):
        path = out / f"profile.db{suffix}"
        check_existing(path)  # a link or someone else's file is refused, not removed
        path.unlink(missing_ok=True)


MAX_JUNIT_BYTES = 1 << 20  # a JUnit file of the profile's is a few KiB


def _clear_earlier_junit(out: Path) -> list[str]:
    """Remove the JUnit files earlier profiles wrote into `out` (its top level only): a run
    without --junit must not leave the last run's (a pass, beside a crash) for a CI to read.
    A file is one of them when it is a regular file of mlcostd's user with one link, at most
    MAX_JUNIT_BYTES, that begins as every JUnit file the profile writes (gates.JUNIT_HEAD);
    anything else, links and folders included, is left alone and never followed. The names
    removed."""
    from daemon.store.files import RefusedFile, open_checked

    removed = []
    with os.scandir(out) as entries:
        for entry in entries:
            if entry.name in (*OUTPUT_FILES, *STORE_FILES) or not entry.is_file(
                    follow_symlinks=False):
                continue
            try:
                fd = open_checked(entry.path)  # no link followed, a regular file of ours
            except (OSError, RefusedFile):
                continue
            try:
                if os.fstat(fd).st_size > MAX_JUNIT_BYTES:
                    continue
                head = os.read(fd, len(gate_checks.JUNIT_HEAD))
            except OSError:
                continue
            finally:
                os.close(fd)
            if head != gate_checks.JUNIT_HEAD:
                continue
            try:
                os.unlink(entry.path)
            except OSError as exc:
                log.warning("cannot remove an earlier profile's JUnit file %s: %s",
                            entry.path, exc)
                continue
            removed.append(entry.name)
    return removed


def _finish_store(config: Config) -> None:
    """The recorder is done with OUT/profile.db: one self-contained file from here on, so the
    folder holds only what the profile says it writes, however it is read later."""
    from daemon.store.writer import StoreError, finish

    try:
        finish(config_module.db_path(config))
    except StoreError as exc:  # its content is whole as it is: only the side files stay
        log.warning("%s", exc)


def run(args: argparse.Namespace, kept: KeptSignals | None = None) -> int:
    """The profile, from its options to its exit status. SIGINT and SIGTERM are kept from its
    start (`kept`: since cli read the options): one that comes before the recorder is up is
    handed to it, which leaves the command unstarted, records on until it stops, and the files
    are written as of any run (exit 128+N)."""
    kept = kept or KeptSignals()
    try:
        return _run(args, kept)
    finally:
        kept.restore()


def _run(args: argparse.Namespace, kept: KeptSignals) -> int:
    from daemon.store.files import check_existing
    from daemon.store.lock import LockHeld, PidLock

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    out = Path(args.out)
    try:
        if args.simulate:  # first: `--simulate python` took the command for a scenario
            _check_scenario(args.simulate, list(args.argv))
        if not argv:
            raise UsageError("no command: put it after --, e.g. mlcostd profile -- python "
                             "train.py")
        limits = _limits(args)
        if ("max_regression" in limits) != bool(args.baseline):
            raise UsageError("--max-regression and --baseline go together: --max-regression "
                             "10% --baseline OLD/profile.json")
        if "max_cost_per_1k_steps" in limits and not args.progress:  # found out at the end
            raise UsageError("--max-cost-per-1k-steps needs --progress REGEX to count steps "
                             "in the command's output, e.g. --progress 'step (\\d+)'")
        baseline = gate_checks.read_baseline(args.baseline) if args.baseline else None
        duration = None
        if args.duration:
            try:
                duration = config_module.parse_duration(args.duration)
            except ValueError as exc:
                raise UsageError(f"--duration {exc}") from None
            if duration <= 0:
                raise UsageError(f"--duration {args.duration!r} is not more than 0: a "
                                 f"duration is {config_module.POSITIVE_DURATION}")
            if "max_regression" in limits and not args.progress:  # a gate that always passes
                raise UsageError(f"--max-regression with --duration needs --progress REGEX to "
                                 f"count steps: {gate_checks.FIXED_LENGTH}: the gate could "
                                 "not see slower code; count steps in the command's output, "
                                 "e.g. --progress 'step (\\d+)'")
        latency = [_latency_table(url, metric) for url, metric in args.latency or []]
        if args.progress:
            try:
                re.compile(args.progress)
            except re.error as exc:
                raise UsageError(f"--progress '{one_line(args.progress)[:MAX_PATTERN_CHARS]}' "
                                 f"is not a regular expression: {exc}") from None
        if args.junit:  # replaced after the run: a link, FIFO or device there is refused now
            in_the_way = _not_a_folder(Path(args.junit).parent)
            if in_the_way is not None:
                raise UsageError(f"cannot use --junit {args.junit}: {in_the_way}; give "
                                 "--junit a file in a folder you can write (it is created "
                                 "when missing)")
            own = _own_file(Path(args.junit), out)
            if own is not None:  # it would be overwritten, or overwrite it
                raise UsageError(f"--junit {args.junit} is {own}; give the JUnit file a name "
                                 f"of its own, e.g. --junit {out / 'gates.xml'}")
            try:
                check_existing(args.junit)
            except OSError as exc:
                raise UsageError(f"cannot use --junit {args.junit}: {exc}") from None
    except (UsageError, ValueError) as exc:
        say(f"mlcostd profile: {exc}")
        return 2
    config_path = args.config
    if args.simulate and config_path is None:
        from daemon.commands.cli import SIMULATE_CONFIG

        config_path = str(SIMULATE_CONFIG)
    config = profile_config(config_module.load(config_path), out)
    if latency:
        config = config_module.with_overrides(config, "cost",
                                              latency=[*config.cost.latency, *latency])
    logging.basicConfig(level=logging.WARNING, handlers=[StderrHandler(sys.stderr)],
                        format="%(asctime)s mlcostd profile %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    # Both folders before anything in them is removed: found now, not once the run is over.
    problem = folder_problem(out, "--out")
    if problem is not None:
        say(f"mlcostd profile: cannot use --out {out}: {problem}")
        return 2
    problem = folder_problem(Path(args.junit).parent, "--junit") if args.junit else None
    if problem is not None:
        say(f"mlcostd profile: cannot use --junit {args.junit}: {problem}")
        return 2
    lock = PidLock(out / PROFILE_LOCK)
    try:  # before anything in --out is removed: another profile's store is its own
        lock.acquire()
    except LockHeld as held:
        say(f"mlcostd profile: another mlcostd profile (pid {held.owner}) is recording into "
            f"--out {out}; its files were left alone: wait for it to finish, or give this "
            "one a different --out")
        return 2
    except OSError as exc:  # RefusedFile too: a link or someone else's file at the lock's path
        say(f"mlcostd profile: cannot use --out {out}: {exc}")
        return 2
    try:
        return _record(args, kept, argv, out, config, limits, baseline, duration)
    finally:
        lock.release()


def _record(args: argparse.Namespace, kept: KeptSignals, argv: list[str], out: Path,
            config: Config, limits: dict[str, float], baseline: dict[str, Any] | None,
            duration: float | None) -> int:
    """The run, its files and its exit status, once `out` is this profile's alone."""
    from daemon.runtime.daemon import DaemonError
    from daemon.runtime.profile import ProfileRecorder
    from daemon.store.files import RefusedFile, check_existing

    try:
        _fresh_store(out)
        for name in OUTPUT_FILES:  # replaced at the end
            check_existing(out / name)
        _clear_earlier_junit(out)
    except (OSError, RefusedFile) as exc:
        say(f"mlcostd profile: cannot use --out {out}: {exc}")
        return 2
    recorder = ProfileRecorder(config, argv, simulate=args.simulate, duration_s=duration,
                               progress=args.progress, signals_before=kept.received)
    late: list[int] = []  # SIGINT/SIGTERM after the command exited
    try:
        result = asyncio.run(recorder.run())
    except DaemonError as exc:
        say(f"mlcostd profile: the recorder cannot start: {exc}")
        return 2
    finally:  # the outputs are written next: a signal must not leave them half-written (a
        # traceback, or SIGTERM's death between profile.json and profile.html), so it is kept
        # and acted on once they are whole
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda signum, _frame: late.append(signum))
    if result.signal_after_exit is not None:  # it came while the recording stopped
        late.insert(0, result.signal_after_exit)
    _finish_store(config)
    document = build_document(config, result, limits, baseline, args)
    checked = [Gate(**{k: g[k] for k in ("flag", "limit_text", "passed", "message", "value",
                                         "limit")}) for g in document["profile"]["gates"]]
    # The verdict is printed whatever could not be written: it is the run's, and the lines
    # after it say what is missing. (OSError: RefusedFile too, a link or FIFO put there while
    # the command ran, or a folder made unwritable since the check before the run.)
    unwritten = []
    written: list[Path] = []
    try:
        write_outputs(out, document, config)
        written += [out / name for name in OUTPUT_FILES]
    except OSError as exc:
        unwritten.append(f"cannot write the profile's files to {out}: {exc}")
    if args.junit:
        try:
            gate_checks.write_junit(Path(args.junit), checked, document["profile"]["duration_s"],
                                    command_failure(document["profile"]))
            written.append(Path(args.junit))
        except OSError as exc:
            unwritten.append(f"could not write the JUnit file {args.junit}: {exc}; the verdict "
                             "and the gates above are not in it")
    say(verdict_text(document, written), end="")
    if unwritten:
        for line in unwritten:
            say(f"mlcostd profile: {line}")
        return 2
    if late:  # it came after the command exited: it stops the profile, which is whole
        say(f"mlcostd profile: {signal.Signals(late[0]).name} came after the command had "
            f"exited: the profile's files were written whole first; exiting {128 + late[0]}")
        return 128 + late[0]
    if result.exit_status is None and result.interrupted_by is not None:
        return 128 + result.interrupted_by  # interrupted before the command started
    if result.error:
        return COMMAND_NOT_STARTED_STATUS
    failed = not result.stopped_after_duration and result.exit_status not in (0, None)
    if failed:
        return int(result.exit_status or 1)
    return GATE_EXIT_STATUS if any(not g.passed for g in checked) else 0


def build_document(config: Config, result: Any, limits: dict[str, float],
                   baseline: dict[str, Any] | None, args: argparse.Namespace
                   ) -> dict[str, Any]:
    """The report document over the run, with the `profile` key."""
    from daemon.commands import report
    from daemon.store import queries
    from daemon.store.reader import StoreReader

    db = config_module.db_path(config)
    reader = StoreReader(str(db), tidy=True)
    try:
        latest = reader.latest()
        start = result.started_at
        until = max(result.ended_at, latest.ts if latest else result.ended_at)
        document = report.build(reader, max(until - start, 0.001), until=until, config=config)
        # those of the processes the phase balance is of (its GPU processes), as compare
        # counts them: a launcher's samples, which the balance leaves out, are not counted
        balanced = balance_keys(document.get("processes") or [])
        stack_samples = sum(1 for row in queries.stack_samples(reader, start, until)
                            if process_key(row["pid"], row["start_time"]) in balanced)
    finally:
        reader.close()
    document["profile"] = profile_facts(document, result, stack_samples)
    profile = document["profile"]
    profile["gates"] = [g.as_dict() for g in check_gates(limits, profile, baseline,
                                                         args.baseline)]
    profile["database"] = str(db)
    return document


def _latency(document: dict[str, Any]) -> list[dict[str, Any]]:
    """p50/p99 of each latency histogram over the run and the cost per request (the report's
    `spend.latency`; --latency's target is the whole command)."""
    out = []
    for entry in (document.get("spend") or {}).get("latency") or []:
        found = {key: entry.get(key) for key in (
            "target", "url", "metric", "p50_seconds", "p99_seconds", "requests",
            "cost_per_request", "sm_share", "gpu_utilization", "error")}
        found["target"] = target_text(found["target"])
        out.append(found)
    return out


def _latency_lines(profile: dict[str, Any]) -> list[str]:
    """'p50 52.6 ms, p99 2.20 s over 200 requests of METRIC, $0.0123 per 1k requests' each."""
    out = []
    for entry in profile.get("latency") or []:
        metric = one_line(str(entry.get("metric")))[:80]
        if entry.get("error"):
            out.append(f"{metric}: {one_line(str(entry['error']))[:120]}")
            continue
        out.append(f"p50 {clock.latency_text(entry.get('p50_seconds'))}, p99 "
                   f"{clock.latency_text(entry.get('p99_seconds'))} over "
                   f"{entry.get('requests') or 0:,.0f} requests of {metric}; "
                   f"{cost_per_1k_text(entry.get('cost_per_request'))}")
    return out


def _phase_balance(processes: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per phase of the tree's GPU processes (all its processes when none used a GPU),
    as shares of their time together, largest first (run_phase_balance, as `compare` reads
    the same runs)."""
    return {phase: round(share, 4) for phase, share in run_phase_balance(processes).items()}


def profile_facts(document: dict[str, Any], result: Any, stack_samples: int
                  ) -> dict[str, Any]:
    """The `profile` key: what this run was and cost (gates are added by the caller)."""
    processes = document.get("processes") or []
    duration = max(result.ended_at - result.started_at, 0.0)
    costs = [p["cost"] for p in processes if isinstance(p.get("cost"), int | float)]
    burn = document.get("burn") or {}
    price = burn.get("price_per_hour")
    if not isinstance(price, int | float) or price <= 0:
        price = None  # (the host price is 0 where there is none: no cost of $0 from it)
    nvml = nvml_unavailable(document)
    # Unknown, not $0, without a price or without NVML (no GPU read): every cost gate then
    # fails closed, and says why.
    cost_unknown = (NVML_UNAVAILABLE if nvml is not None else
                    no_price_text(burn.get("price_source")) if price is None else None)
    cost = sum(costs) if cost_unknown is None else None
    steps = result.steps
    used = sorted({g for p in processes for g in (p.get("gpus") or [])})
    gpus = [g for g in document.get("gpus") or [] if g.get("index") in used]
    utils = [g["utilization"] for g in gpus if isinstance(g.get("utilization"), int | float)]
    balance = _phase_balance(processes)
    gpu_procs = sorted((p for p in processes if p.get("gpus")),
                       key=lambda p: -(p.get("cost") or 0.0))
    unit_costs = []
    for meter in result.unit_costs:
        per_unit = meter.get("unit_cost")
        per = meter.get("per") or 0
        unit_costs.append(dict(meter, cost_per_1k=(
            per_unit / per * 1000 if per_unit is not None and per and cost is not None
            else None)))
    facts = {
        "command": shown_command(result.argv),
        "exit_status": result.exit_status,
        "exit_signal": getattr(result, "exit_signal_name", None),  # "SIGSEGV"
        "stopped_after_duration": result.stopped_after_duration,
        "interrupted": result.interrupted,
        "killed_after_signal": getattr(result, "killed_after_signal", False),
        "start_error": result.error,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
        "duration_s": round(duration, 3),
        "steps": steps,
        "progress": one_line(result.progress)[:MAX_PATTERN_CHARS] if result.progress else None,
        "progress_lines": result.progress_lines if result.progress else None,
        "progress_restarts": (getattr(result, "progress_restarts", 0) if result.progress
                              else None),
        "steps_source": "progress" if result.step_timeline or steps else None,
        "first_step_after_s": (round(result.first_step_at - result.started_at, 3)
                               if result.first_step_at else None),
        "step_timeline": [[round(ts - result.started_at, 3), n]
                          for ts, n in result.step_timeline],
        "first_gpu_work_after_s": (round(result.first_gpu_work_at - result.started_at, 3)
                                   if result.first_gpu_work_at else None),
        "cost": round(cost, 6) if cost is not None else None,
        "cost_unknown": cost_unknown,
        "nvml_unavailable": nvml,
        "host_cost": round(price * duration / 3600, 6) if price is not None else None,
        "cost_per_hour": (cost / (duration / 3600) if cost is not None and duration > 0
                          else None),
        "cost_per_step": cost / steps if cost is not None and steps else None,
        "cost_per_1k_steps": cost / steps * 1000 if cost is not None and steps else None,
        "unit_costs": unit_costs,
        "latency": _latency(document),
        "workload_kind": _kind(gpu_procs[0], result.kinds) if gpu_procs else None,
        "gpus_used": used,
        "gpu_models": gpu_models(document, used),
        "instance_type": gate_checks.instance_type(document),
        "price_per_gpu_hour": price_per_gpu_hour(document),
        "gpu_utilization": round(sum(utils) / len(utils), 2) if utils else None,
        "gpu_memory_peak": memory_peak(gpus),
        "phase_balance": balance,
        "largest_phase": next(iter(balance), None),
        "stack_samples": stack_samples,
        "shared_gpus": {str(g): pids for g, pids in result.shared_gpus.items()},
        "left_running": result.left_running,
        "left_running_processes": [
            {"pid": pid, "command": shown_command(argv, MAX_LEFTOVER_CHARS)}
            for pid, argv in getattr(result, "left_running_named", [])],
        "recommendations": len(document.get("recommendations") or []),
        "energy": run_energy(document),
    }
    facts["warnings"] = representativeness(facts, result)
    facts["representative"] = not facts["warnings"]
    return facts


def nvml_unavailable(document: dict[str, Any]) -> str | None:
    """Why NVML could not be read at the run's end ("NVML unavailable: NVML Shared Library
    Not Found ...": a CI runner without the NVIDIA driver, no --simulate), one line without
    the daemon's retry note; None where it was read."""
    status = (document.get("host") or {}).get("nvml_status")
    if not isinstance(status, str) or status == "ok":
        return None
    return one_line(status.split("; retrying")[0].removeprefix("NVML unavailable: "))[:300]


def no_price_text(source: object) -> str:
    """"no price for this host: set [instance].price_per_hour (none/custom is not in the
    catalog)", from the host price's source."""
    said = one_line(source)[:300] if isinstance(source, str) else ""
    said = said.removeprefix("no price").removeprefix(":").strip()
    return "no price for this host" + (f": {said}" if said else
                                       ": set [instance].price_per_hour in --config")


def memory_peak(gpus: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The most memory any GPU the command used held at once during the run (the report's
    `memory_peak_bytes`; `memory_used_bytes` is the latest, after the command exited), as a
    share of that GPU's memory: {gpu, gpus, peak_bytes, total_bytes, percent}. None where no
    GPU was used or its memory was not read."""
    peaks = [g for g in gpus if isinstance(g.get("memory_peak_bytes"), int)]
    if not peaks:
        return None

    def share(gpu: dict[str, Any]) -> float | None:
        total = gpu.get("memory_total_bytes")
        return 100 * gpu["memory_peak_bytes"] / total if isinstance(total, int) and total else None

    top = max(peaks, key=lambda g: (share(g) or 0.0, g["memory_peak_bytes"]))
    percent = share(top)
    return {"gpu": top.get("index"), "gpus": len(peaks), "peak_bytes": top["memory_peak_bytes"],
            "total_bytes": top.get("memory_total_bytes"),
            "percent": None if percent is None else round(percent, 2)}


def memory_peak_text(profile: dict[str, Any]) -> str | None:
    """"peak 3.3 GiB of 140 GiB (2%) on GPU 0", None without a reading."""
    peak = profile.get("gpu_memory_peak")
    if not peak:
        return None
    text = f"peak {peak['peak_bytes'] / 2**30:,.1f} GiB"
    if peak.get("total_bytes"):
        text += f" of {peak['total_bytes'] / 2**30:,.0f} GiB ({peak['percent']:.0f}%)"
    text += f" on GPU {peak['gpu']}"
    if peak["gpus"] > 1:
        text += f", the fullest of the {peak['gpus']} it used"
    return text


def _kind(proc: dict[str, Any], seen: dict[str, dict[str, Any]]) -> str | None:
    """A process's workload kind: as the report has it, else as it was while it ran (the
    daemon forgets the kinds of processes that have exited)."""
    if proc.get("kind"):
        return str(proc["kind"])
    kind = (seen.get(process_key(proc["pid"], proc["start_time"])) or {}).get("kind")
    return one_line(kind)[:32] if isinstance(kind, str) else None


def representativeness(facts: dict[str, Any], result: Any) -> list[dict[str, str]]:
    """Why this profile may not stand for the workload: each {code, message}. Of a command
    that was not started, only that: nothing of it was recorded."""
    if facts.get("start_error"):
        return [{"code": "failed", "message": f"the command could not be started "
                                              f"({facts['start_error']}): nothing of it was "
                                              "recorded"}]
    if facts["interrupted"] and facts["exit_status"] is None:
        return [{"code": "interrupted", "message": f"{NOT_STARTED}: nothing of it was "
                                                   "recorded"}]
    warnings = []
    duration = facts["duration_s"]

    def warn(code: str, message: str) -> None:
        warnings.append({"code": code, "message": message})

    if duration < MIN_DURATION_S:
        took = gate_checks.beside(duration, MIN_DURATION_S)
        warn("too_short", f"the run took {took} s (under {MIN_DURATION_S:.0f} s): "
                          "phases that come round less often (checkpoints, eval) may be "
                          "missed; profile a longer run, or --duration on a longer one")
    if facts["stack_samples"] < MIN_STACK_SAMPLES:
        warn("few_stack_samples", f"{facts['stack_samples']} stack samples (under "
                                  f"{MIN_STACK_SAMPLES}): the phase balance is rough")
    first_work = facts["first_gpu_work_after_s"]
    if facts.get("nvml_unavailable"):
        warn("no_nvml", f"NVML unavailable ({facts['nvml_unavailable']}): no GPU was read, so "
                        "the GPUs used, their utilization and memory and the run's cost are "
                        "unknown and their gates fail; profile where the NVIDIA driver is "
                        "(`mlcostd check` says what is missing), or with --simulate")
    elif not facts["gpus_used"]:
        warn("no_gpu", "the command used no GPU")
    elif first_work is None:
        warn("no_gpu_work", "the command held a GPU but ran no work on it")
    elif duration > 0 and first_work > STARTUP_SHARE * duration:
        warn("startup", f"start-up (imports, compilation, loading) took {first_work:.0f} s of "
                        f"{duration:.0f} s before the first GPU work: profile a longer run")
    first_step = facts["first_step_after_s"]
    if first_step is not None and duration > 0 and first_step > STARTUP_SHARE * duration:
        warn("startup_steps", f"the first step came {first_step:.0f} s into a {duration:.0f} s "
                              "run: most of it was start-up")
    pattern = facts.get("progress")  # as typed (a repr would double each backslash)
    if pattern and not facts["steps"]:  # a pattern that is not the command's output format
        matched = facts.get("progress_lines") or 0
        warn("no_steps", f"--progress '{pattern}' matched no line of the command's output: "
                         "no steps were counted; check it against what the command prints "
                         "(each line's first 4 KiB)" if not matched else
                         f"--progress '{pattern}' matched {plural(matched, 'line')} but "
                         "counted no step: its group was never a step number above 0")
    elif result.step_timeline or facts["steps"]:
        if facts["steps"] < MIN_STEPS:
            warn("few_steps", f"{facts['steps']} steps counted (under {MIN_STEPS}): the cost "
                              "per step is rough")
    for gpu, pids in facts["shared_gpus"].items():
        shown = ", ".join(str(p) for p in pids[:8]) + (" ..." if len(pids) > 8 else "")
        warn("shared_gpu", f"GPU {gpu} was shared with {len(pids)} process(es) outside the "
                           f"command's tree (pid {shown}): its utilization is not the "
                           "command's alone")
    status = facts["exit_status"]
    if status not in (0, None) and not facts["stopped_after_duration"]:
        warn("failed", f"the command {ended(facts)}: a profile of a failed run")
    if facts["interrupted"]:
        from daemon.runtime.profile import STOP_GRACE_S

        second = getattr(result, "killed_on_second_signal", False)
        warn("interrupted", "the run was interrupted (SIGINT/SIGTERM)" + (
            "" if not facts.get("killed_after_signal") else
            "; a second one killed the command (SIGKILL to its process group)" if second else
            f"; the command had not exited {STOP_GRACE_S:.0f} s after it and was killed "
            "(SIGKILL to its process group)"))
    return warnings


# What a GPU or cost figure, and its gate, says without NVML (the warning no_nvml says why).
NVML_UNAVAILABLE = "NVML unavailable: no GPU was read (see the warning)"
# A cost gate of a command that used no GPU (NVML read, the host priced): the cost model
# charges a GPU's share while one is held, so a run that fell back to the CPU reads $0, which
# passes any limit.
NO_GPU_COST = ("the command used no GPU (the cost model charges a GPU's share while one is "
               "held: a run on the CPU reads $0)")


def check_gates(limits: dict[str, float], profile: dict[str, Any],
                baseline: dict[str, Any] | None, baseline_path: str | None) -> list[Gate]:
    found = []
    nvml = profile.get("nvml_unavailable")
    no_gpu = NVML_UNAVAILABLE if nvml else None
    # Why the cost cannot decide a gate: unknown (NVML, no price), or $0 for want of a GPU
    unchecked = profile.get("cost_unknown") or (
        None if profile["gpus_used"] else NO_GPU_COST)
    if "max_cost" in limits:
        found.append(gate_checks.max_cost(limits["max_cost"], profile["cost"], unchecked))
    if "max_cost_per_1k_steps" in limits:
        found.append(gate_checks.max_cost_per_1k_steps(
            limits["max_cost_per_1k_steps"], profile["cost_per_1k_steps"], profile["steps"],
            profile.get("progress"), profile.get("progress_lines"),
            unchecked if profile["steps"] else None))
    if "max_data_wait" in limits:
        balance = profile["phase_balance"]
        duration = profile["duration_s"]
        found.append(gate_checks.max_data_wait(
            limits["max_data_wait"], balance or None,
            samples=profile["stack_samples"],
            short_run_s=duration if duration < MIN_DURATION_S else None))
    if "min_utilization" in limits:
        found.append(gate_checks.min_utilization(limits["min_utilization"],
                                                 profile["gpu_utilization"], no_gpu))
    if "max_gpu_memory" in limits:
        found.append(gate_checks.max_gpu_memory(limits["max_gpu_memory"],
                                                profile["gpu_memory_peak"], no_gpu))
    if "max_regression" in limits and baseline is not None:
        found.append(gate_checks.max_regression(limits["max_regression"], profile, baseline,
                                                baseline_path or "the baseline",
                                                profile.get("cost_unknown")))
    return found


# -- outputs ------------------------------------------------------------------------------------


def write_outputs(out: Path, document: dict[str, Any], config: Config) -> None:
    """profile.json, profile.html and summary.md (the JUnit file is the caller's: one that
    cannot be written must not keep these from being written)."""
    from daemon.runtime.snapshots import render_html_file
    from daemon.store.files import write_private

    write_private(out / "profile.json", (json.dumps(document, indent=2) + "\n").encode())
    try:
        window = document.get("window") or {}  # the run's range, as profile.json's figures
        render_html_file(config_module.db_path(config), out / "profile.html",
                         title=f"mlcost profile of {document['profile']['command']}",
                         summary=[line.strip() for line in verdict_lines(document)],
                         since=window.get("since"), until=window.get("until"))
    except Exception as exc:  # the page is a convenience: the JSON and summary still count
        log.warning("cannot write %s: %s", out / "profile.html", exc)
    write_private(out / "summary.md", summary_markdown(document).encode("utf-8"))


def _md(text: Any) -> str:
    """Text from a process or a store, safe in a Markdown table cell: one line, control bytes
    shown, nothing that makes a link, HTML or a new cell."""
    shown = one_line(str(text))
    for char, escaped in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;"),
                          ("[", "\\["), ("]", "\\]"), ("`", "'"), ("*", "\\*"), ("_", "\\_")):
        shown = shown.replace(char, escaped)
    return shown


def command_failure(profile: dict[str, Any]) -> str | None:
    """"the command exited with status N" (or "was killed by SIGSEGV (status 139)") when it
    failed (not stopped by --duration), or that it was not started."""
    status = profile["exit_status"]
    if profile.get("start_error"):
        return f"the command could not be started: {profile['start_error']}"
    if status is None and profile.get("interrupted"):
        return NOT_STARTED
    if status not in (0, None) and not profile["stopped_after_duration"]:
        return f"the command {ended(profile)}"
    return None


def ended(profile: dict[str, Any]) -> str:
    """"exited with status 1", or "was killed by SIGSEGV (status 139)": exit(139) and a
    segfault are told apart (a profile.json of an older mlcostd has no exit_signal)."""
    return gate_checks.killed_by(profile) or f"exited with status {profile['exit_status']}"


def verdict(document: dict[str, Any]) -> str:
    profile = document["profile"]
    failed = [g for g in profile["gates"] if not g["passed"]]
    crashed = command_failure(profile)
    said = " (NVML unavailable: no GPU was read)" if profile.get("nvml_unavailable") else ""
    if crashed:
        return f"FAILED: {crashed}{said}"
    if failed:
        return (f"FAILED: {len(failed)} of {plural(len(profile['gates']), 'gate')} crossed"
                f"{said}")
    if profile["gates"]:
        return f"passed: {plural(len(profile['gates']), 'gate')}{said}"
    return "done (no gates; NVML unavailable: no GPU was read)" if said else "done (no gates)"


def run_energy(document: dict[str, Any]) -> dict[str, Any] | None:
    """The run's energy and carbon: its processes' shares of their GPUs' measured power
    (daemon.commands.report_energy), with the grid intensity used; None when no power was
    measured."""
    figures = [p["energy"] for p in document.get("processes") or [] if p.get("energy")]
    if not figures:
        return None
    grid = (document.get("carbon") or {}).get("grid") or {}
    grams = [f.get("co2e_grams") for f in figures]
    return {"joules": sum(f["joules"] for f in figures),
            "kwh": sum(f["kwh"] for f in figures),
            "co2e_grams": None if None in grams else sum(g for g in grams if g is not None),
            "grid": grid}


def energy_line(profile: dict[str, Any]) -> str | None:
    """The run's energy in a line ("0.0042 kWh 1.50 g CO2e at ..."), None without."""
    energy = profile.get("energy")
    if not energy:
        return None
    # (the report's and the page's rule: the page's energy block says the same)
    return (f"{amount_text(energy['kwh'], energy.get('co2e_grams'))} "
            f"{grid_text(energy.get('grid') or {})}")


def summary_markdown(document: dict[str, Any]) -> str:
    """The CI job summary: verdict, gates, phase balance, cost, top recommendations."""
    profile = document["profile"]
    out = [f"## mlcost profile: `{profile['command'].replace('`', chr(39))}`", "",
           f"**{_md(verdict(document))}**", ""]
    host = document.get("host") or {}
    instance = host.get("instance") or {}
    where = " ".join(str(instance.get(k)) for k in ("provider", "type") if instance.get(k))
    took = f"{profile['duration_s']:.0f} s"
    if profile["stopped_after_duration"]:
        took += " (stopped by --duration)"
    status = profile["exit_status"]
    out.append(f"Run: {took}, " + ("not started" if status is None else f"exit status {status}"
                                   + (f" (killed by {_md(one_line(profile['exit_signal']))})"
                                      if isinstance(profile.get("exit_signal"), str) else ""))
               + (f", on {_md(where)}" + (" (simulated)" if host.get("simulated") else "")
                  if where else "") + ".")
    out.append("")
    if profile["gates"]:
        out += ["| gate | limit | measured | result |", "|---|---|---|---|"]
        for gate in profile["gates"]:
            value = gate["value"]
            limit = gate.get("limit")
            measured = "-" if value is None else (
                gate_checks.dollars(value, limit) if gate["limit_text"].startswith("$") else
                f"{gate_checks.beside(value, limit) if limit is not None else f'{value:.0f}'}%")
            out.append(f"| {_md(gate['flag'])} | {_md(gate['limit_text'])} | {measured} | "
                       f"{'passed' if gate['passed'] else 'FAILED'} |")
        out += ["", *[f"- {_md(g['message'])}" for g in profile["gates"] if not g["passed"]]]
        out.append("")
    balance = profile["phase_balance"]
    if balance:
        out.append("Phase balance: " + ", ".join(f"{_md(phase)} {share:.0%}"
                                                  for phase, share in balance.items())
                   + f" (largest: **{_md(profile['largest_phase'])}**)")
    else:
        out.append("Phase balance: not recorded (no stack samples)")
    util = profile["gpu_utilization"]
    out.append("GPU utilization: " + (f"{util:.0f}%" if util is not None else "-")
               + (f"; workload kind: {_md(profile['workload_kind'])}"
                  if profile["workload_kind"] else ""))
    memory = memory_peak_text(profile)
    if memory is not None:
        out += ["", f"GPU memory: {memory}"]
    cost = f"Cost: {cost_text(profile)} for the run"
    if profile["cost_per_hour"] is not None:
        cost += f" ({money(profile['cost_per_hour'], small=True)}/h)"
    if profile["steps"]:
        cost += (f"; {profile['steps']} steps{_md(restarts_text(profile))}, "
                 f"{money(profile['cost_per_1k_steps'], small=True, none='unknown')} per 1k steps")
    for meter in profile["unit_costs"]:
        if meter.get("cost_per_1k") is not None:
            cost += f"; {money(meter['cost_per_1k'], small=True)} per 1k {_md(meter.get('unit'))}"
    out += ["", cost, ""]
    energy = energy_line(profile)
    if energy is not None:
        out += [f"Energy: {_md(energy)}", ""]
    for line in _latency_lines(profile):
        out += [f"Latency: {_md(line)}", ""]
    recs = (document.get("recommendations") or [])[:TOP_RECOMMENDATIONS]
    if recs:
        out.append("Top recommendations:")
        for number, rec in enumerate(recs, start=1):
            saves = rec.get("savings_per_month")
            money_text = f" (up to {money(saves, small=True)}/month)" if saves else ""
            out.append(f"{number}. {_md(rec.get('summary', ''))}{money_text}")
        out.append("")
    if profile["warnings"]:
        out.append("Not representative:")
        out += [f"- {_md(w['message'])}" for w in profile["warnings"]]
        out.append("")
    out.append("Files: profile.json, profile.html, summary.md (mlcostd profile).")
    return "\n".join(out) + "\n"


def cost_text(profile: dict[str, Any]) -> str:
    """The run's cost, "$0.0123", or "unknown (no price for this host: ...)"."""
    if profile.get("cost") is None:
        why = profile.get("cost_unknown")
        return f"unknown ({why})" if why else "unknown"
    return money(profile["cost"], small=True)


def restarts_text(profile: dict[str, Any]) -> str:
    """" (the step number started over 2 times: each run's steps added)" where it did (a
    progress bar per epoch), else ""."""
    restarts = profile.get("progress_restarts") or 0
    if not restarts:
        return ""
    return (f" (the step number started over {plural(restarts, 'time')}: each run's steps "
            "added)")


def verdict_text(document: dict[str, Any], written: list[Path]) -> str:
    """What the profile prints when it is done (to stderr: stdout is the command's), with
    the files it wrote."""
    lines = verdict_lines(document)
    if written:
        lines.append("  wrote " + ", ".join(str(path) for path in written))
    return "\n".join(lines) + "\n"


def verdict_lines(document: dict[str, Any]) -> list[str]:
    """The verdict, phases, cost, memory, energy, latency, recommendations, gates and
    warnings, a line each: printed when the profile is done and shown atop profile.html."""
    profile = document["profile"]
    lines = [f"mlcostd profile: {verdict(document)}"]
    balance = profile["phase_balance"]
    if balance:
        lines.append("  phases: " + ", ".join(f"{p} {s:.0%}" for p, s in balance.items()))
    cost = f"  cost: {cost_text(profile)} in {profile['duration_s']:.0f} s"
    if profile["steps"]:
        cost += (f", {profile['steps']} steps{restarts_text(profile)}, "
                 f"{money(profile['cost_per_1k_steps'], small=True, none='unknown')}/1k steps")
    lines.append(cost)
    memory = memory_peak_text(profile)
    if memory is not None:
        lines.append(f"  GPU memory: {memory}")
    energy = energy_line(profile)
    if energy is not None:
        lines.append(f"  energy: {energy}")
    lines += [f"  latency: {line}" for line in _latency_lines(profile)]
    for rec in (document.get("recommendations") or [])[:TOP_RECOMMENDATIONS]:
        lines.append(f"  recommendation: {one_line(str(rec.get('summary', '')))}")
    for gate in profile["gates"]:
        lines.append(("  " if gate["passed"] else "  FAILED ") + gate["message"])
    for warning in profile["warnings"]:
        lines.append(f"  not representative: {warning['message']}")
    if profile["left_running"]:
        from daemon.runtime.profile import LEFTOVER_GRACE_S

        named = profile.get("left_running_processes") or []
        lines.append(f"  stopped {plural(profile['left_running'], 'process', 'processes')} "
                     f"the command left running (still running {LEFTOVER_GRACE_S:.0f} s after it "
                     "exited)" + (":" if named else ""))
        lines += [f"    pid {p['pid']}: {one_line(str(p['command']))[:MAX_LEFTOVER_CHARS]}"
                  for p in named]
        if profile["left_running"] > len(named):
            lines.append(f"    and {profile['left_running'] - len(named)} more")
    return lines
