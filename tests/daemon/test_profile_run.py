"""How `mlcostd profile -- COMMAND` runs the command (probe 140 F6-F10), each a real profile on
the simulated GPU of a program in programs/: its print() output arrives as printed, a closed
stdout ends it as a shell pipeline would, a death by a signal is said as one, every SIGKILL
the profile sends is said and flagged, and the `command` field is what a shell takes back."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from test_profile import running_with

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parent / "programs"
RUN_TIMEOUT_S = 300  # a bound on a hang only: the runs take seconds
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
ENV.pop("PYTHONUNBUFFERED", None)  # (the profile's own setting is under test)


def profile_argv(out: Path, *args: str | bytes) -> list[str | bytes]:
    return [sys.executable, "-m", "daemon", "profile", "--out", str(out), "--simulate", *args]


def profile(out: Path, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    """`mlcostd profile --out OUT --simulate ARGS` as a user runs it; waits for it to exit."""
    return subprocess.run(profile_argv(out, *args), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL)


def start(out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(profile_argv(out, *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV,
                            stdin=subprocess.DEVNULL)


def facts(out: Path) -> dict[str, Any]:
    return json.loads((out / "profile.json").read_text())["profile"]


def read_until(proc: subprocess.Popen[str], text: str) -> list[str]:
    """The profile's stdout (the command's) read up to the first line that starts with
    `text`; all of it when none does (the command exited)."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(text):
            break
    return seen


def stderr_of(proc: subprocess.Popen[str]) -> str:
    """What the profile said on stderr, once it has exited (its stdout ended): a test's
    message when the command did not print what the test waited for."""
    proc.wait(timeout=RUN_TIMEOUT_S)
    assert proc.stderr is not None
    return proc.stderr.read()


def test_a_python_commands_print_reaches_the_profiles_stdout_as_it_is_printed(tmp_path):
    """Without --progress a Python command's print() was block-buffered (its stdout is a pipe
    to the profile): a user watching a profiled run saw nothing until it exited. The program
    prints "ready", then waits for a file the test makes once it has read that line."""
    answer = tmp_path / "answer"
    with start(tmp_path / "out", "--", sys.executable,
               str(PROGRAMS / "prints_then_waits.py"), str(answer)) as proc:
        try:
            first = read_until(proc, "ready")
            answer.touch()
            assert proc.stdout is not None
            stdout = proc.stdout.read()  # (what is left, not read ahead into the buffer)
            _, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert first == ["ready\n"]
    assert stdout == "saw it\n", stderr  # not "no one answered": the line came as printed
    assert proc.returncode == 0, stderr


def test_a_closed_stdout_ends_the_command_as_a_shell_pipeline_does(tmp_path):
    """`mlcostd profile -- yes | head -2` never ended: the profile dropped what it could not
    write and the command wrote on, unseen, for ever. Now the command's stdout is closed when
    the profile's is, so `yes` dies of SIGPIPE as in `yes | head -2`, and the files are
    written as of any run."""
    out = tmp_path / "out"
    with start(out, "--", "yes", "probe") as proc:
        try:
            assert proc.stdout is not None
            assert [proc.stdout.readline(), proc.stdout.readline()] == ["probe\n"] * 2
            proc.stdout.close()  # head -2 exits
            _, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 128 + signal.SIGPIPE, stderr  # as `set -o pipefail` says it
    assert facts(out)["exit_signal"] == "SIGPIPE"
    assert "FAILED: the command was killed by SIGPIPE (status 141)" in stderr
    assert {"profile.json", "profile.html", "summary.md"} <= {p.name for p in out.iterdir()}


def test_a_death_by_a_signal_is_said_as_that_signal_not_as_an_exit_status(tmp_path):
    """A segfault was "the command exited with status 139", as an exit(139) is."""
    out, junit = tmp_path / "segv", tmp_path / "gates.xml"
    result = profile(out, "--junit", str(junit), "--", sys.executable,
                     str(PROGRAMS / "killed.py"), "SIGSEGV")
    assert result.returncode == 139, result.stderr
    said = "the command was killed by SIGSEGV (status 139)"
    assert re.search(f"^mlcostd profile: FAILED: {re.escape(said)}$", result.stderr,
                     re.MULTILINE), result.stderr
    found = facts(out)
    assert found["exit_status"] == 139 and found["exit_signal"] == "SIGSEGV"
    assert {"code": "failed", "message": f"{said}: a profile of a failed run"} in found["warnings"]
    (case,) = [c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") ==
               "the command"]
    assert case.find("error").get("message") == said  # type: ignore[union-attr]
    assert "exit status 139 (killed by SIGSEGV)" in (out / "summary.md").read_text()
    # exit(139) is an exit status, not a signal
    exited = profile(tmp_path / "exit", "--", sys.executable, "-c", "raise SystemExit(139)")
    assert exited.returncode == 139, exited.stderr
    assert facts(tmp_path / "exit")["exit_signal"] is None
    assert "FAILED: the command exited with status 139\n" in exited.stderr


def test_a_second_ctrl_c_that_kills_the_command_is_said_and_flagged(tmp_path):
    """The second Ctrl-C SIGKILLs the command's group at once; killed_after_signal stayed
    false and nothing said it was killed."""
    out = tmp_path / "out"
    # (its temp folder as an argument it ignores: what running_with finds is this test's own)
    with start(out, "--", sys.executable, str(PROGRAMS / "stubborn.py"), str(tmp_path)) as proc:
        try:
            assert read_until(proc, "training")[-1:] == ["training\n"], stderr_of(proc)
            proc.send_signal(signal.SIGINT)
            assert read_until(proc, "got SIGINT")[-1:] == [
                "got SIGINT, saving a checkpoint...\n"], stderr_of(proc)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, stderr
    found = facts(out)
    assert found["interrupted"] is True and found["killed_after_signal"] is True
    assert found["exit_signal"] == "SIGKILL"
    assert "the command got a second SIGINT: SIGKILL to its process group\n" in stderr
    (warning,) = [w for w in found["warnings"] if w["code"] == "interrupted"]
    assert warning["message"] == ("the run was interrupted (SIGINT/SIGTERM); a second one "
                                  "killed the command (SIGKILL to its process group)")
    assert running_with(str(tmp_path)) == []


def test_durations_sigkill_of_a_command_that_outlives_its_sigterm_is_said_and_flagged(tmp_path):
    """--duration's stop SIGKILLed a command that ignored its SIGTERM silently: exit status
    137, killed_after_signal false, no line: a checkpoint cut off was not said anywhere."""
    out = tmp_path / "out"
    result = profile(out, "--duration", "2", "--", sys.executable, str(PROGRAMS / "stubborn.py"),
                     str(tmp_path))
    assert result.returncode == 0, result.stderr  # stopped by --duration: not a failure
    assert "got SIGTERM, saving a checkpoint" in result.stdout
    found = facts(out)
    assert found["stopped_after_duration"] is True and found["killed_after_signal"] is True
    assert found["exit_status"] == 137 and found["exit_signal"] == "SIGKILL"
    assert ("the command did not exit within 5 s of --duration's SIGTERM: SIGKILL to its "
            "process group\n") in result.stderr
    assert running_with(str(tmp_path)) == []


def test_the_command_field_is_what_a_shell_takes_back_control_characters_too(tmp_path):
    """`'tab\\there'` (the escape inside single quotes) is read back by a shell as a backslash
    and a t: arguments with control characters are written `$'tab\\there'`."""
    words: list[str | bytes] = ["plain", "two words", "tab\there", "new\nline",
                                "\x1b[31mred", "it's", "back\\slash\t", "\u202eevil",
                                "c1 \x9b", b"not utf-8 \xff"]
    out = tmp_path / "out"
    result = profile(out, "--", sys.executable, "-c", "pass", *words)
    assert result.returncode == 0, result.stderr
    command = facts(out)["command"]
    assert "\n" not in command and "\x1b" not in command and "$'tab\\there'" in command
    back = subprocess.run(["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True,
                          env=dict(ENV, LC_ALL="C.UTF-8"), check=True, timeout=60).stdout
    expected = [os.fsencode(sys.executable), b"-c", b"pass",
                *(w if isinstance(w, bytes) else w.encode() for w in words)]
    assert back.split(b"\0")[:-1] == expected


def test_a_baseline_killed_by_a_signal_is_said_so_in_the_regression_gate(tmp_path):
    """The regression gate's line on a baseline that is not representative said "exited 139"
    of a baseline that segfaulted, where the baseline's own verdict said "was killed by
    SIGSEGV (status 139)" (an exit(139) and a segfault read the same there)."""
    old, new = tmp_path / "old", tmp_path / "new"
    crashed = profile(old, "--progress", r"step (\d+)", "--", sys.executable,
                      str(PROGRAMS / "killed.py"), "SIGSEGV", "30")
    assert crashed.returncode == 139, crashed.stderr
    assert facts(old)["cost_per_step"], crashed.stderr  # (a figure the gate can compare)
    result = profile(new, "--progress", r"step (\d+)", "--max-regression", "1000%",
                     "--baseline", str(old), "--", sys.executable,
                     str(PROGRAMS / "gpu_steps.py"))
    (gate,) = facts(new)["gates"]
    assert "the baseline is not representative: was killed by SIGSEGV (status 139)" in (
        gate["message"]), result.stderr
    assert "exited 139" not in gate["message"]
    assert gate["message"] in result.stderr


def test_a_closed_stderr_leaves_the_files_and_the_exit_status_as_they_would_be(tmp_path):
    """The profile's stderr alone closed: a pipe whose reader exited raised BrokenPipeError at
    the verdict (cli then crashed on its own flush of stdout: exit 1 with the gate crossed),
    and `2>&-` was an AttributeError once the command ran, with no file written. Each now
    ends as the run does, here a crossed gate (86), its files and JUnit file written, the
    command's stdout passed on whole."""
    args = ("--junit", str(tmp_path / "gates.xml"), "--max-cost", "0.000001", "--",
            sys.executable, str(PROGRAMS / "gpu_steps.py"))
    steps = "".join(f"step {n}/10\n" for n in range(1, 11))
    # a pipe whose reader is gone before the profile writes to it
    out = tmp_path / "pipe"
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(profile_argv(out, *args), stdout=subprocess.PIPE, stderr=writer,
                                text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, env=ENV,
                                stdin=subprocess.DEVNULL)
    finally:
        os.close(writer)
    assert result.returncode == 86 and result.stdout == steps
    assert not facts(out)["gates"][0]["passed"]
    assert {"profile.json", "profile.html", "summary.md"} <= {p.name for p in out.iterdir()}
    # stderr not open at all (a shell's `2>&-`)
    out = tmp_path / "closed"
    shell = ["bash", "-c", 'exec "$@" 2>&-', "bash", *profile_argv(out, *args)]
    result = subprocess.run(shell, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                            cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL)
    assert (result.returncode, result.stdout, result.stderr) == (86, steps, "")
    assert not facts(out)["gates"][0]["passed"]
    assert {"profile.json", "profile.html", "summary.md"} <= {p.name for p in out.iterdir()}
    assert ET.parse(tmp_path / "gates.xml").getroot().get("failures") == "1"
