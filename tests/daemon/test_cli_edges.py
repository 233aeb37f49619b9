"""Rough edges of the command line a new user hits first: the report wraps at the terminal and
never cuts a line for a pipe; open events of a stopped recorder are not "ongoing"; a bad
--simulate or a --db that is not a store is a clear error (exit 2), not a traceback; every
built-in scenario is in `run --help`, and `check --help` says what it checks."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from daemon.commands import report
from daemon.sim.scenario import builtin_names

MLCOSTD = [sys.executable, "-m", "daemon"]
LONG = "pid 1234 (alice) holds GPU 3 idle " + "and keeps holding it " * 12 + "— the end"


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(MLCOSTD + list(args), capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def test_lines_wrap_at_the_terminal_and_are_never_cut_for_a_pipe():
    lines = ["Recommendations", f"  [$1,898/month] {LONG}"]
    assert report.fit(lines, None) == lines  # a pipe or a file: as they are
    wrapped = report.fit(lines, 60)
    assert all(len(line) <= 60 for line in wrapped) and len(wrapped) > 3
    assert " ".join(w.strip() for w in wrapped[1:]).split() == lines[1].split()  # nothing lost
    assert all(w.startswith("      ") for w in wrapped[2:])  # under their own indent


def test_events_of_a_stopped_recorder_are_open_when_it_stopped_not_ongoing():
    event = {"kind": "gpu_held_idle", "target": "gpu:3", "started_at": 1.7e9,
             "ended_at": None, "cost_so_far": 2.5}
    live = report._render_events([event])
    stopped = report._render_events([event], stopped_at=1.7e9 + 600)
    assert "(ongoing)" in live[-1]
    assert "ongoing" not in stopped[-1] and "open when the recording stopped at" in stopped[-1]


def test_a_long_range_lists_its_costliest_events_with_their_dates():
    """A month's report once listed every idle event (hundreds of lines), each by its time of
    day alone: which day was '09:12:00'? The text lists the 20 costliest (actions, the audit
    trail, all), says how many more and what they cost, and dates what is not on the
    window's last day."""
    end = time.mktime((2026, 11, 14, 12, 0, 0, 0, 0, -1))  # local noon
    events = [{"kind": "gpu_held_idle", "target": f"gpu:{i % 8}", "started_at": end - i * 3600,
               "ended_at": end - i * 3600 + 600, "cost_so_far": float(i)} for i in range(1, 31)]
    action = {"kind": "action", "target": "rec", "started_at": end - 30 * 3600,
              "ended_at": end - 30 * 3600, "cost_so_far": None,
              "detail": {"who": "ana", "action": "snooze", "outcome": "ok"}}
    lines = report._render_events(events + [action], until=end)
    listed = [line for line in lines if "gpu_held_idle" in line]
    assert len(listed) == 20 and all("$1.00 " not in line for line in listed)  # the costliest
    assert "  … and 10 more ($55.00 so far; `--json` lists them all)" in lines
    assert any("2026-11-13 06:00:00 ana: action snooze on rec: ok" in line for line in lines)
    assert "  gpu_held_idle gpu:7: since 2026-11-13 21:00:00 (ended), $15.00 so far" in lines
    assert "  gpu_held_idle gpu:1: since 11:00:00 (ended), $1.00 so far" in (
        report._render_events(events[:1], until=end))


def test_the_events_text_says_how_many_low_utilization_windows_it_leaves_out():
    """The text left every low-utilization window out without a word (95 in the JSON of a
    demo hour, none in the text): it says how many, why, and where they are."""
    end = time.mktime((2026, 11, 14, 12, 0, 0, 0, 0, -1))
    windows = [{"kind": "low_utilization", "target": f"{100 + i}:1780000000.000",
                "started_at": end - 60 * i, "ended_at": end - 60 * i + 30,
                "cost_so_far": None} for i in range(1, 96)]
    idle = {"kind": "gpu_held_idle", "target": "gpu:3", "started_at": end - 600,
            "ended_at": None, "cost_so_far": 2.5}
    said = ('  (95 low-utilization windows not listed: where stacks were sampled, their '
            'findings are under "Where the time goes"; `--json` lists them)')
    lines = report._render_events(windows + [idle], until=end)
    assert lines[-1] == said and sum("gpu_held_idle" in line for line in lines) == 1
    assert not any("low_utilization" in line for line in lines)
    assert report._render_events(windows, until=end) == ["", "Events", said]
    assert said.replace("95", "1").replace("windows", "window") in (
        report._render_events(windows[:1], until=end))


def test_check_with_an_unknown_scenario_says_which_exist(tmp_path):
    result = cli("check", "--simulate", "nosuch", "--db", str(tmp_path / "x.db"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "nosuch" in result.stderr and "hopper" in result.stderr


def test_report_of_a_file_that_is_not_a_store_says_so(tmp_path):
    junk = tmp_path / "notes.db"
    junk.write_text("not a database at all\n" * 50)
    result = cli("report", "--db", str(junk))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "is not an mlcostd database" in result.stderr and str(junk) in result.stderr


def test_a_store_path_that_is_a_fifo_device_or_folder_is_refused_not_waited_on(tmp_path):
    """`report --db FIFO` waited for a writer without end (the reader opened it); `check` said
    such a path was writable; `snapshot` and mlcost-top --replay said "no store at" a file that
    is there. Each now names what is wrong."""
    fifo = tmp_path / "store.fifo"
    os.mkfifo(fifo)  # no writer: an open that waits for one never returns
    for path in (fifo, "/dev/zero", tmp_path):
        result = cli("report", "--db", str(path))  # (cli's timeout: 120 s)
        assert result.returncode == 2, result.stderr
        assert f"{path} is not an mlcostd database (not a regular file" in result.stderr
        snapshot = cli("snapshot", "--db", str(path), "--out", str(tmp_path / "out.db"))
        assert f"{path} is not a regular file" in snapshot.stderr, snapshot.stderr
        replay = subprocess.run(
            [sys.executable, "-c", "import sys; from mlcost_tui.cli import main; sys.exit(main())",
             "--replay", str(path)], capture_output=True, text=True, timeout=60)
        assert replay.returncode == 2 and f"{path} is not a regular file" in replay.stderr
    check = cli("check", "--simulate", "idle-host", "--db", str(fifo))
    assert f"[FAIL] database: {fifo} is a FIFO, not a regular file" in check.stdout, check.stdout
    assert "is writable" not in check.stdout and "Traceback" not in check.stderr


def test_a_store_folder_nobody_may_write_gets_advice_for_who_runs_it(tmp_path):
    """--db on /sys as root said "mlcostd's user cannot write there: run as root" to root
    (probe 115 F14): the advice follows who runs it."""
    result = cli("run", "--simulate", "idle-host", "--db", "/sys/kernel/mlcost-test.db",
                 "--socket", str(tmp_path / "api.sock"))
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    if os.geteuid() == 0:
        assert "run as root" not in line and "even root cannot write there" in line, line
    else:
        assert "run as root" in line, line
    assert "pass --db with a path" in line, line


def test_help_lists_every_scenario_and_describes_check():
    run_help = " ".join(cli("run", "--help").stdout.split())
    for name in builtin_names():
        assert name in run_help.replace("- ", "-")
    check_help = cli("check", "--help").stdout
    assert "Check what mlcostd can read on this host" in " ".join(check_help.split())


def test_a_mistyped_option_is_said_with_its_commands_usage():
    """`mlcostd snapshot --sinse 1m` printed mlcostd's list of commands, not snapshot's
    options."""
    done = cli("snapshot", "--sinse", "1m")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: mlcostd snapshot ")
    assert "--since DURATION" in done.stderr
    assert done.stderr.rstrip().endswith(
        "mlcostd snapshot: error: unrecognized arguments: --sinse 1m (did you mean --since?)")
    top = cli("--bogus")
    assert top.returncode == 2 and top.stderr.startswith("usage: mlcostd [-h]")


def test_watch_keeps_a_recommendation_between_two_evaluations(tmp_path):
    """--watch shows the last 10 s, but the rules run every [cost].evaluate_every: a
    recommendation last evaluated 20 s ago still stands and must not flicker to 'none'."""
    import time

    from daemon.commands.cli import WATCH_WINDOW_S, watch_text
    from daemon.sources.sample import ProcessSample, Sample
    from daemon.store import facts
    from daemon.store.writer import Store

    path = tmp_path / "x.db"
    store = Store(str(path))
    now = time.time()
    for i in range(3):
        store.write(Sample(ts=now - 2 + i, tick=i + 1, processes=(
            ProcessSample(10, now - 60, 1, "alice", "python train.py"),)))
    facts.write_recommendations(store, [{
        "id": "r1", "rule": "idle_gpu_held", "target": "gpu:0", "savings_per_month": 100.0,
        "summary": "GPU 0 held idle by pid 10", "action": {"kind": "none"}}], now - 20)
    store.close()
    assert "recommendations: 0\n" in watch_text(path, WATCH_WINDOW_S)  # the old window: gone
    text = watch_text(path, 2 * 30.0 + 5)
    assert "GPU 0 held idle by pid 10" in text and "recommendations: 1" in text


def test_watch_is_a_short_summary_of_this_runs_last_seconds(tmp_path):
    """`mlcostd run --watch` printed the whole report every 5 s (review, inference audit,
    phases: 100+ lines), and its first print after a restart on an old store listed the last
    run's processes. It is a summary of the last 10 s of this run (README, --help)."""
    import time

    from daemon.commands.cli import watch_text
    from daemon.runtime.resume import record_start
    from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
    from daemon.store.writer import Store

    path = tmp_path / "x.db"
    store = Store(str(path))
    now = time.time()
    gpus = tuple(GpuSample(g, f"GPU-{g}", "A100", utilization=50.0, power_watts=200.0,
                           memory_used_bytes=10 << 30, memory_total_bytes=40 << 30)
                 for g in range(2))
    old = ProcessSample(4242, now - 600, 1, "alice", "python old_run.py",
                        gpus=(GpuUse(0, 10 << 30, 50.0),))
    new = ProcessSample(5151, now - 60, 1, "bob", "python this_run.py",
                        gpus=(GpuUse(1, 10 << 30, 50.0),))
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                            "price": {"per_hour": 4.0, "gpus": 2, "source": "test"}})
    record_start(store, now - 9.5)  # the last run: its last ticks 6-8 s ago
    for i in range(3):
        store.write(Sample(ts=now - 8 + i, tick=i + 1, gpus=gpus, processes=(old,)))
    record_start(store, now - 4.5)  # this run, started on its store
    for i in range(4):
        store.write(Sample(ts=now - 4 + i, tick=i + 1, gpus=gpus, processes=(new,)))
    store.close()
    text = watch_text(path, 65.0, started_at=now - 4.5)
    assert "5151" in text and "this_run.py" in text, text
    assert "4242" not in text and "old_run.py" not in text, text
    for whole_report_only in ("Review:", "Inference audit", "Where the time goes",
                              "Workload kinds", "Events"):
        assert whole_report_only not in text, text
    assert len(text.splitlines()) <= 20, text
    assert "mlcostd report --db" in text  # where the rest is


def _side_files(db) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name + "-"))


def test_a_report_leaves_no_wal_or_shm_beside_a_stopped_store(mlcostd):
    """A read-only SQLite connection that closes last leaves the -wal and -shm files behind:
    `mlcostd report` on a stopped recorder's store used to leave both there for good. Beside a
    running daemon it reads as before, and the daemon goes on recording."""
    daemon = mlcostd("idle-host", interval=0.5)
    daemon.wait_for_ticks(3)
    live = cli("report", "--db", str(daemon.db))
    assert live.returncode == 0, live.stderr
    assert "mlcost report" in live.stdout
    ticks = len(daemon.ticks())
    daemon.wait_for_ticks(ticks + 2)  # the writer was not stopped by the reader
    assert daemon.stop() == 0
    assert _side_files(daemon.db) == []  # a clean stop removes them
    stopped = cli("report", "--db", str(daemon.db))
    assert stopped.returncode == 0, stopped.stderr
    assert "mlcost report" in stopped.stdout
    assert _side_files(daemon.db) == []
    assert os.stat(daemon.db).st_mode & 0o777 == 0o600


def test_at_80_columns_wrapped_lines_sit_under_their_indent_and_commands_are_shortened():
    """At 80 columns a continuation line sometimes began one space too far in (textwrap kept
    the space it broke at), and README said no line is cut while the command column was. A
    continuation is exactly 4 columns under its line's indent, no line ends in the space it
    broke at, nothing is lost; a command is shortened with `…` in a terminal, whole in a pipe."""
    recommendation = ("  [$1,898/month] " + "pid 1234 holds GPU 3 idle and keeps it " * 6
                      + "— the end")
    table = "  " + "  ".join(["4242", "alice", "0,1", "38.1 GiB", "97%"] * 4)
    for line in (recommendation, table, "Review: " + "word " * 40):
        indent = len(line) - len(line.lstrip())
        for start in range(4):  # where the words fall against the width
            text = line[:indent] + "x" * start + line[indent:]
            wrapped = report.fit([text], 80)
            assert len(wrapped) > 1 and all(len(w) <= 80 for w in wrapped)
            assert wrapped[0].startswith(text[:indent + 1])
            for follow in wrapped[1:]:
                assert follow[:indent + 4] == " " * (indent + 4) and follow[indent + 4] != " ", \
                    (text, wrapped)
            assert not any(w.endswith(" ") for w in wrapped), wrapped
            assert " ".join(wrapped).split() == text.split()  # nothing lost
    command = ("/opt/conda/envs/train/bin/python -m torch.distributed.run --nproc-per-node 8 "
               "train.py --config configs/llama-70b.yaml --data /mnt/data/shards")
    shown = report.shown_command(command, 48)
    assert len(shown) <= 48 and shown.endswith("…") and "train.py" in shown
    assert report.shown_command(command, None) == command


def test_the_report_at_80_columns_wraps_under_the_indent_and_a_pipe_keeps_the_command(
        tmp_path):
    """The whole text renderer on a report of a real store, with a long command line: at 80
    columns no line is longer, none ends in the space it broke at, every continuation sits
    4 columns under its line's indent, and the command is shortened with `…`; for a pipe
    (None) the command is whole and no line is wrapped."""
    from daemon.store.reader import StoreReader
    from tests.daemon.scripted import recording_daemon

    daemon = recording_daemon(tmp_path, 5.0, ticks=10, t0=time.time() - 30)
    assert daemon.store is not None
    daemon.store.close()
    reader = StoreReader(str(tmp_path / "mlcost.db"))
    try:
        document = report.build(reader, 600)
    finally:
        reader.close()
    command = ("/opt/conda/envs/train/bin/python -m torch.distributed.run --nproc-per-node 8 "
               "train.py --config configs/llama-70b.yaml --data /mnt/data/shards")
    [process] = document["processes"]
    process["command"] = command
    piped = report.render_text(document, None)
    assert command in piped.splitlines()[piped.splitlines().index(
        next(line for line in piped.splitlines() if line.startswith("  4242 ")))]
    text = report.render_text(document, 80).splitlines()
    assert command not in "\n".join(text) and any("train.py" in line and "…" in line
                                                  for line in text)
    assert all(len(line) <= 80 and not line.endswith(" ") for line in text), text
    wrapped = [whole for whole in piped.splitlines() if len(whole) > 80]
    continued = 0
    for line in text:
        if (line in piped.splitlines() or any(whole.startswith(line) for whole in wrapped)
                or "…" in line):
            continue  # a line as it is, the first line of a wrapped one, or a short command
        continued += 1
        indent = len(line) - len(line.lstrip())
        assert any(len(whole) - len(whole.lstrip()) + 4 == indent for whole in wrapped), \
            (line, text)
    assert continued >= 3  # the burn line, the price warning, the process table


def test_a_missing_store_is_a_refusal_exit_2_like_every_other(tmp_path):
    """`report --db missing.db` and `snapshot` with no store exited 1, while a file that is
    no store, a bad flag and a range with no tick exit 2: nothing to read is a refusal too
    (README: exit status 1 is for a failure along the way, such as a write or an upload)."""
    missing = str(tmp_path / "missing.db")
    for args, says in (
            (["report", "--db", missing], f"mlcostd report: no database at {missing}."),
            (["snapshot", "--db", missing, "--socket", str(tmp_path / "none.sock")],
             f"mlcostd snapshot: no store at {missing}; start the recorder"),
            (["prices", "--observed", "--db", missing],
             f"mlcostd prices: no database at {missing}; pass --db")):
        done = cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith(says) and done.stderr.count("\n") == 1, done.stderr
        assert done.stdout == "" and not os.path.exists(missing)


def test_the_readme_synopses_name_every_option_and_every_built_in_scenario():
    """README's `mlcostd run` synopsis lacked --no-stacks and --log-level, `report`'s lacked
    --config, and "Built-in scenarios" left out single-gpu: what a user reads first names
    what the command takes."""
    import re
    from pathlib import Path

    from daemon.commands.cli import _command_parser, build_parser

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    parser = build_parser()
    for command in ("run", "report"):
        block = readme.split(f"### `mlcostd {command}`\n\n```\n", 1)[1].split("```", 1)[0]
        options = {option for action in _command_parser(parser, command)._actions
                   for option in action.option_strings if option.startswith("--")}
        assert options - {"--help"} <= set(re.findall(r"--[a-z-]+", block)), (command, block)
    said = readme.split("Built-in scenarios: ", 1)[1].split("\nA scenario is", 1)[0]
    assert set(builtin_names()) <= set(re.findall(r"`([a-z-]+)`", said)), said


def test_output_to_a_full_disk_is_one_line_and_exit_1_not_a_traceback():
    """`mlcostd report > /var/log/...` from cron on a full disk mailed a Python traceback
    (probe 126 F11). /dev/full answers every write with ENOSPC, as a full disk does."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # (and --help, whose lost text exited 0: probe 126 F12)
    for args in (["prices"], ["prices", "--json"], ["report", "--help"], ["--help"]):
        with open("/dev/full", "w") as full:
            done = subprocess.run(MLCOSTD + args, stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=120, env=env)
        assert done.returncode == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, args
        assert "mlcostd: could not write standard output: No space left on device" \
            in done.stderr.splitlines(), (args, done.stderr)


def test_output_to_a_pipe_whose_reader_exited_ends_quietly_with_exit_0():
    """`mlcostd prices | head -1` once head has exited: the BrokenPipeError was caught (exit
    0, as designed), then main's own flush of the stdout it had let go raised AttributeError,
    a traceback and exit 1. Here the reader is gone before the first write."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for args in (["prices"], ["prices", "--json"]):
        reader, writer = os.pipe()
        os.close(reader)
        try:
            done = subprocess.run(MLCOSTD + args, stdout=writer, stderr=subprocess.PIPE,
                                  text=True, timeout=120, env=env)
        finally:
            os.close(writer)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, args


def open_files(fds: str) -> set[str]:
    """What the descriptors in /proc/PID/fd point to (one closed meanwhile is left out)."""
    found = set()
    for name in os.listdir(fds):
        try:
            found.add(os.readlink(f"{fds}/{name}"))
        except OSError:
            pass
    return found


def test_a_daemon_started_with_its_standard_streams_closed_keeps_its_files_off_fds_0_to_2(
        tmp_path):
    """`mlcostd run ... <&- 2>&-` (a careless init script): the store, a socket or the event
    loop took fd 0 or 2, where a library's message or a child's stderr would land. /dev/null
    stands in for a stream closed at start, as it does for `mlcostd profile`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    db, sock = tmp_path / "s" / "m.db", tmp_path / "sock" / "mlcostd.sock"
    daemon = subprocess.Popen(
        ["bash", "-c", 'exec "$@" <&- 2>&-', "bash", *MLCOSTD, "run", "--simulate", "idle-host",
         "--db", str(db), "--socket", str(sock)], stdout=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        fds = f"/proc/{daemon.pid}/fd"
        while not (sock.exists() and str(db) in open_files(fds)):
            assert daemon.poll() is None and time.monotonic() < deadline, "no store opened"
            time.sleep(0.05)
        assert [os.readlink(f"{fds}/{n}") for n in (0, 2)] == [os.devnull, os.devnull]
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
