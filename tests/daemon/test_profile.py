"""`mlcostd profile -- COMMAND` on the simulated GPU: real profiles of the training scripts in
profile_programs/ (a starved one that reads each batch from slow storage in the loop, and the
same loop fixed with loader threads reading ahead), their verdicts, gates, JUnit file, exit
statuses, --duration and what is left running; and the parts that need no run (progress
counting over hostile output, gate messages, JUnit XML, the Markdown summary)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import psutil
import pytest
from simhost import poll

from daemon.analysis.energy import amount_text
from daemon.commands import gates
from daemon.commands.gates import GATE_EXIT_STATUS
from daemon.commands.profile import (
    NOT_STARTED,
    _phase_balance,
    memory_peak,
    memory_peak_text,
    summary_markdown,
    verdict_lines,
)
from daemon.commands.report import render_text
from daemon.report_html.escape import escaped
from daemon.runtime.profile import MAX_LINE_BYTES, ProgressCounter
from daemon.store.reader import StoreReader

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parent / "profile_programs"
STARVED = str(PROGRAMS / "starved_train.py")
PREFETCH = str(PROGRAMS / "prefetch_train.py")
STEP_REGEX = r"step (\d+)/"
RUN_TIMEOUT_S = 300  # a bound on a hang only: the runs take ~10-30 s
# A command that runs one short kernel on the simulated GPU: its cost gates can be checked (a
# command that uses no GPU costs $0 by the cost model, and its cost gates fail closed).
# (Its kernels take 1 s: the profile ticks four times a second, and must see it hold the GPU.)
USES_GPU = ("from daemon.sim.device import Device\nwith Device(0) as gpu:\n"
            "    for _ in range(8):\n        gpu.kernel(0.125)\n")


def profile(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`mlcostd profile --out OUT ARGS` as a user runs it; waits for it to exit."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "daemon", "profile", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL)


def document(out: Path) -> dict[str, Any]:
    return json.loads((out / "profile.json").read_text())


def gone(pid: int) -> bool:
    """Not running (exited, or a zombie waiting for whoever reaps orphans here)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def running_with(text: str) -> list[int]:
    """Processes still running whose command line contains `text` (a test's own temp path)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(
                proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


@pytest.fixture(scope="module")
def starved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """25 steps of ~0.6 s waiting for a batch at 1.5 MB/s and a 0.12 s kernel: 83% data_wait
    over ~18 s, some 25 stack samples on a loaded host. (At the script's 4 MB/s, 68% over ~15
    samples, one run in 15 or so read compute as the larger however fairly it was sampled.)"""
    out = tmp_path_factory.mktemp("starved") / "profile"
    result = profile(out, "--simulate", "--progress", STEP_REGEX, "--",
                     sys.executable, STARVED, "--steps", "25", "--storage-bytes-per-s", "1.5e6")
    return out, result


def test_a_starved_script_profiles_to_data_wait_with_a_prefetch_recommendation(starved):
    out, result = starved
    assert result.returncode == 0, result.stderr
    profile_doc = document(out)
    facts = profile_doc["profile"]
    assert facts["largest_phase"] == "data_wait"
    assert facts["phase_balance"]["data_wait"] > 0.5
    rules = {r["rule"]: r for r in profile_doc["recommendations"]}
    assert "dataloader_starvation" in rules
    assert "prefetch" in rules["dataloader_starvation"]["summary"]
    assert rules["dataloader_starvation"]["savings_per_month"] > 0
    # one figure per fact: the rule quotes the share the phases line shows
    share = facts["phase_balance"]["data_wait"]
    assert rules["dataloader_starvation"]["evidence"]["share"] == pytest.approx(share, abs=1e-4)
    assert f"spends {share:.0%} of its last" in rules["dataloader_starvation"]["summary"]
    assert facts["exit_status"] == 0 and facts["cost"] > 0 and facts["workload_kind"]
    # the report contract's keys, over the run's own range, for this tree only
    for key in ("host", "window", "gpus", "processes", "recommendations", "savings"):
        assert key in profile_doc
    assert profile_doc["host"]["simulated"] == "single-gpu"
    assert [p["command"].split()[-5:] for p in profile_doc["processes"] if p["gpus"]] == [
        [STARVED, "--steps", "25", "--storage-bytes-per-s", "1.5e6"]]
    summary = (out / "summary.md").read_text()
    assert "largest: **data\\_wait**" in summary and "prefetch" in summary
    page = (out / "profile.html").read_text()
    assert "data_wait" in page and "prefetch" in page
    assert "<title>mlcost profile of " in page and "snapshot of" not in page
    # the page covers the run, as profile.json: its process cost is the profile's (it was
    # over the store's ticks, which begin before the command: three costs on one page)
    (trainer,) = [p for p in profile_doc["processes"] if p["gpus"]]
    assert f">${trainer['cost']:.4f}<" in page
    assert f"the host spent <b>${profile_doc['spend']['total']:.4f}</b>" in page
    assert "data_wait" in result.stderr and "wrote" in result.stderr


def test_the_profile_gives_the_gpu_memory_the_run_held_at_its_peak(starved):
    """The script holds 8 GiB while it runs; the report's window ends at the tick after it
    exited, when the GPU holds nothing: the latest reading is 0, the peak is the 8 GiB."""
    out, result = starved
    profile_doc = document(out)
    (gpu,) = profile_doc["gpus"]
    assert gpu["memory_used_bytes"] == 0 and gpu["memory_peak_bytes"] == 8 << 30
    total = gpu["memory_total_bytes"]
    assert profile_doc["profile"]["gpu_memory_peak"] == {
        "gpu": 0, "gpus": 1, "peak_bytes": 8 << 30, "total_bytes": total,
        "percent": round(100 * (8 << 30) / total, 2)}
    (trainer,) = [p for p in profile_doc["processes"] if p["gpus"]]
    assert trainer["gpu_memory_peak_bytes"] == 8 << 30
    said = f"peak 8.0 GiB of {total / 2**30:.0f} GiB ({100 * (8 << 30) / total:.0f}%) on GPU 0"
    assert f"GPU memory: {said}" in result.stderr
    assert f"GPU memory: {said}" in (out / "summary.md").read_text()
    page = (out / "profile.html").read_text()
    assert "peak memory" in page and ">8.0 GiB<" in page
    text = render_text(profile_doc, 200)  # `mlcostd report --db OUT/profile.db` says it too
    assert re.search(r"memory\s+peak\s+power", text)
    assert re.search(rf"0 B / {total / 2**30:.1f} GiB\s+8\.0 GiB\s", text), text


def test_progress_counts_the_steps_and_prices_each(starved):
    out, result = starved
    facts = document(out)["profile"]
    assert facts["steps"] == 25
    assert facts["step_timeline"][-1][1] == 25
    assert facts["cost_per_1k_steps"] == pytest.approx(facts["cost"] / 25 * 1000, rel=1e-3)
    # what a later run's regression gate compares prices and hardware by
    assert facts["price_per_gpu_hour"] == 1.006 and facts["gpu_models"] == ["NVIDIA A10G"]
    # the command's own output reached ours unchanged
    assert "step 25/25 loss" in result.stdout


def test_the_readme_lists_every_key_of_profile_json_profile(starved):
    """Probe 140 F11: profile.json's `profile` held `database`, `energy`, `latency`,
    `recommendations` and `steps_source`, which the README's list of its keys did not name.
    Every key a real profile writes is named (in backticks) in that list."""
    out, _ = starved
    keys = set(document(out)["profile"])
    readme = (ROOT / "README.md").read_text()
    start = readme.index("- `profile.json`: the report document of `mlcostd report --json`")
    section = readme[start:readme.index("- `profile.html`:", start)]
    named = set(re.findall(r"`([a-z0-9_]+)`", section))
    assert keys - named == set()


def test_a_short_run_says_it_is_not_representative(starved):
    out, _ = starved
    facts = document(out)["profile"]
    codes = {w["code"] for w in facts["warnings"]}
    assert "too_short" in codes and facts["representative"] is False


def test_the_data_wait_gate_exits_with_the_gate_status_and_writes_junit(tmp_path):
    """15 steps, some 5 s and a handful of stack samples: the data-wait share is too rough to
    decide a release (identical short runs read 26% to 93%), so its gate fails closed, and its
    line and JUnit case say on how many samples and how to get enough."""
    out, junit = tmp_path / "gated", tmp_path / "gates.xml"
    # the script holds 8 GiB of the simulated A10G's 24: 33%
    result = profile(out, "--simulate", "--max-data-wait", "20%", "--max-cost", "$100",
                     "--max-gpu-memory", "30%", "--junit", str(junit), "--",
                     sys.executable, STARVED, "--steps", "15")
    assert result.returncode == GATE_EXIT_STATUS, result.stderr
    samples = document(out)["profile"]["stack_samples"]
    assert 0 < samples < 20
    said = re.search(r"FAILED (gate --max-data-wait 20%: cannot be checked, input wait was "
                     r"\d+% \(data_wait \d+%, host_preprocess \d+%\) "
                     rf"on only {samples} stack samples \(under 20\): too few to decide, .*; "
                     r"profile a run of 30 s or more \(two stack samples a second\): more "
                     r"steps, or --duration on a longer one)\n", result.stderr)
    assert said, result.stderr
    assert ("FAILED gate --max-gpu-memory 30%: GPU 0 peaked at 8.0 GiB, 33% of its 24 GiB "
            "(3 points over)") in result.stderr
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {"max-data-wait 20%", "max-cost $100.00", "max-gpu-memory 30%"}
    failure = cases["max-data-wait 20%"].find("failure")
    assert failure is not None and failure.get("message") == said.group(1)
    assert cases["max-cost $100.00"].find("failure") is None
    assert cases["max-gpu-memory 30%"].find("failure") is not None
    facts = document(out)["profile"]
    assert {g["gate"]: g["passed"] for g in facts["gates"]} == {
        "max-data-wait": False, "max-cost": True, "max-gpu-memory": False}
    assert "| --max-data-wait | 20% |" in (out / "summary.md").read_text()
    # the page (a CI artifact) says what stderr said, above its charts
    page = (out / "profile.html").read_text()
    summary = page.split('<div class="summary">', 1)[1].split("</div>", 1)[0]
    assert summary.startswith("mlcostd profile: FAILED: 2 of 3 gates crossed<br>")
    assert "FAILED gate --max-data-wait 20%: cannot be checked, input wait was" in summary
    assert "FAILED gate --max-gpu-memory 30%: GPU 0 peaked at 8.0 GiB" in summary
    assert page.index('<div class="summary">') < page.index("<h2>Burn and waste</h2>")


# What torchrun, `accelerate launch` or a `bash -c` CI line does: starts the trainer in a child
# and waits for it (in subprocess.py, sampled as often as the trainer).
LAUNCHER = """import subprocess, sys
sys.exit(subprocess.run([sys.executable, *sys.argv[1:]]).returncode)
"""


def samples_per_process(db: Path) -> dict[int, int]:
    """Stack samples in a profile's store, per pid."""
    with sqlite3.connect(db) as connection:
        return dict(connection.execute(
            "SELECT p.pid, count(*) FROM stack_samples s JOIN processes p ON p.id = s.proc "
            "GROUP BY p.pid").fetchall())


def test_a_launchers_stack_samples_are_not_counted_as_the_trainers(tmp_path):
    """Probe 150 F2: `python launcher.py` running the trainer in a child counted the
    launcher's samples (waiting in subprocess.py, which the phase balance leaves out) toward
    `stack_samples`: "on 31 stack samples" where the balance rested on the trainer's 14, so the
    data-wait gate decided where it must fail closed, and compare counted the same folder 14.
    The count is the GPU process's, in profile.json, the gate line, the warning, summary.md
    and compare alike."""
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    out = tmp_path / "launched"
    result = profile(out, "--simulate", "--max-data-wait", "20%", "--",
                     sys.executable, str(launcher), STARVED, "--steps", "15")
    assert result.returncode in (0, GATE_EXIT_STATUS), result.stderr
    doc = document(out)
    facts = doc["profile"]
    per_pid = samples_per_process(out / "profile.db")
    (trainer,) = [p["pid"] for p in doc["processes"] if p.get("gpus")]
    (parent,) = [p["pid"] for p in doc["processes"] if "launcher.py" in p["command"]]
    assert per_pid.get(parent, 0) > 0, per_pid  # the launcher was sampled, as the probe saw
    samples = per_pid[trainer]
    assert facts["stack_samples"] == samples, (facts["stack_samples"], per_pid)
    (gate,) = facts["gates"]
    few = [w["message"] for w in facts["warnings"] if w["code"] == "few_stack_samples"]
    if samples < 20:
        assert not gate["passed"] and f"on only {samples} stack samples (under 20)" in \
            gate["message"], gate
        assert few == [f"{samples} stack samples (under 20): the phase balance is rough"]
    else:
        assert gate["passed"] and f"on {samples} stack samples" in gate["message"], gate
        assert few == []
    assert gate["message"] in result.stderr
    summary = (out / "summary.md").read_text()
    assert (f"- {few[0]}" in summary) if few else ("stack samples (under" not in summary)
    again = tmp_path / "again.json"  # (compare refuses one file as both sides)
    again.write_text((out / "profile.json").read_text())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "daemon", "compare", str(out), str(again),
                           "--json"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["a"]["stack_samples"] == samples


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("fixed") / "profile"
    # The utilization is over the whole run, start-up included: a loaded machine's slow
    # start-up lowers it, so the floor here is below what the run reaches (~75%).
    # 160 steps, some 20 s: 30-odd stack samples, enough for the data-wait gate to decide.
    result = profile(out, "--simulate", "--max-data-wait", "20%", "--min-utilization", "40%",
                     "--max-gpu-memory", "40%", "--progress", STEP_REGEX, "--",
                     sys.executable, PREFETCH, "--steps", "160")
    return out, result


def test_the_fixed_script_keeps_its_gpu_busy_and_passes_the_gates(fixed):
    out, result = fixed
    assert result.returncode == 0, result.stderr
    facts = document(out)["profile"]
    assert facts["largest_phase"] == "compute"
    assert facts["steps"] == 160
    assert all(g["passed"] for g in facts["gates"])
    # a run under 30 s: the data-wait line says what the share rests on
    (data_wait,) = [g for g in facts["gates"] if g["gate"] == "max-data-wait"]
    assert re.fullmatch(r"gate --max-data-wait 20%: input wait was \d+% \(data_wait \d+%, "
                        rf"host_preprocess \d+%\), on "
                        rf"{facts['stack_samples']} stack samples of a \d+ s run \(under 30 s: "
                        r"phases that come round less often may be missed\)",
                        data_wait["message"]), data_wait["message"]
    assert {g["gate"] for g in facts["gates"]} == {"max-data-wait", "min-utilization",
                                                   "max-gpu-memory"}


def test_on_a_shared_host_only_the_tree_is_recorded_its_status_passes_and_nothing_is_left(
        tmp_path):
    """The data-stall scenario runs a starved trainer of its own on GPU 0: the profile records
    only the command's tree, says the GPU was shared, passes the command's status through, and
    stops the helper the command daemonized (a double fork: an orphan in a session of its own
    from its first moment, re-parented to the profile, a child subreaper), though the command
    exits within a second or two of starting it."""
    out, child = tmp_path / "shared", tmp_path / "helper.pid"
    result = profile(out, "--simulate", "data-stall", "--", sys.executable, STARVED,
                     "--steps", "3", "--exit-status", "3", "--leave-child", str(child))
    assert result.returncode == 3, result.stderr
    facts = document(out)["profile"]
    assert facts["exit_status"] == 3
    codes = {w["code"] for w in facts["warnings"]}
    assert {"shared_gpu", "failed"} <= codes
    assert facts["shared_gpus"]["0"]
    recorded = {p["pid"] for p in document(out)["processes"]}
    assert not recorded & set(facts["shared_gpus"]["0"])
    assert facts["left_running"] >= 1
    assert "the command left running (still running 2 s after it exited):" in result.stderr
    helper = int(child.read_text())
    # named, its command line escaped to one line as a shell takes it back (the helper's
    # code starts with a newline)
    named = {p["pid"]: p["command"] for p in facts["left_running_processes"]}
    assert named[helper].startswith(f"{sys.executable} -c $'\\nimport os, sys, time\\n")
    assert f"\n    pid {helper}: {named[helper]}\n" in result.stderr
    with pytest.raises(psutil.NoSuchProcess):  # stopped
        psutil.Process(helper).status()
    assert running_with(str(tmp_path)) == []


# multiprocessing with 'spawn' starts a resource tracker, which exits when it reads the end of
# its parent's pipe: moments after the command itself exits.
SPAWNS_WORKERS = """
import multiprocessing as mp


def work(queue):
    queue.put("worker done")


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=work, args=(queue,))
    worker.start()
    print(queue.get(), flush=True)
    worker.join()
"""

# A helper of the same shape, made to take its time: it waits for the end of its parent's pipe
# (the command's exit), cleans up for half a second, then exits by itself.
OUTLIVES_BRIEFLY = """
import os, subprocess, sys
read, write = os.pipe()
code = "import os, sys, time; os.read(int(sys.argv[1]), 1); time.sleep(0.5); print(sys.argv[2])"
subprocess.Popen([sys.executable, "-c", code, str(read), sys.argv[1]], pass_fds=(read,))
os.close(read)
"""


@pytest.mark.parametrize("program", [SPAWNS_WORKERS, OUTLIVES_BRIEFLY],
                         ids=["multiprocessing-spawn", "exits-after-the-command"])
def test_what_exits_by_itself_just_after_the_command_was_not_left_running(tmp_path, program):
    """A command using multiprocessing 'spawn' was always said to have "left 1 process
    running", its resource tracker, which the profile then stopped: what the command started
    gets a moment (2 s) to exit by itself once the command has exited."""
    out = tmp_path / "profile"
    script = tmp_path / "command.py"
    script.write_text(program)
    result = profile(out, "--simulate", "--", sys.executable, str(script), str(tmp_path))
    assert result.returncode == 0, result.stderr
    facts = document(out)["profile"]
    assert facts["left_running"] == 0 and facts["left_running_processes"] == []
    assert "left running" not in result.stderr
    assert running_with(str(tmp_path)) == []


def test_duration_stops_a_longer_command_and_its_whole_group(tmp_path):
    """`--duration 3`, a number alone, is 3 s as in every duration mlcostd takes (--since 30,
    --for 30, interval = 1), though README and --help said only "a number and a unit"."""
    out, pid_file = tmp_path / "stopped", tmp_path / "train.pid"
    result = profile(out, "--simulate", "--duration", "3", "--", sys.executable, STARVED,
                     "--steps", "100000", "--pid-file", str(pid_file))
    assert result.returncode == 0, result.stderr
    facts = document(out)["profile"]
    assert facts["stopped_after_duration"] is True
    assert 3 <= facts["duration_s"] < 3 + 10  # (the 5 s SIGKILL grace is not needed here)
    assert facts["exit_status"] == 128 + 15  # SIGTERM
    assert gone(int(pid_file.read_text()))
    assert running_with(str(tmp_path)) == []


def test_a_unit_cost_counter_prices_1k_tokens(tmp_path):
    """[[cost.unit_costs]] as the daemon has it: a Prometheus counter of the command's own,
    read while it runs, gives the cost per 1k tokens."""
    with socket.socket() as probe:  # a free port for the benchmark's /metrics page
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "mlcost.toml"
    config.write_text(f"""
[cost.jobs]
bench = "token_bench"

[[cost.unit_costs]]
target = "bench"
url = "http://127.0.0.1:{port}/metrics"
metric = "generated_tokens_total"
unit = "tokens"
per = 1000000
""")
    out = tmp_path / "tokens"
    result = profile(out, "--simulate", "--config", str(config), "--", sys.executable,
                     str(PROGRAMS / "token_bench.py"), "--port", str(port), "--steps", "200")
    assert result.returncode == 0, result.stderr
    (meter,) = document(out)["profile"]["unit_costs"]
    assert meter["unit"] == "tokens" and meter["units"] > 0 and meter["spend"] > 0
    assert meter["cost_per_1k"] == pytest.approx(meter["spend"] / meter["units"] * 1000)
    assert "per 1k tokens" in (out / "summary.md").read_text()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_reaches_the_command_and_the_profile_still_writes_what_it_saw(tmp_path, signum):
    out = tmp_path / "interrupted"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with subprocess.Popen([sys.executable, "-m", "daemon", "profile", "--out", str(out),
                           "--simulate", "--", sys.executable, STARVED, "--steps", "100000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the command runs under the profile: Ctrl-C now
                if line.startswith("step 1/"):
                    break
            proc.send_signal(signum)
            _, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 128 + signum, stderr  # Python's death by Ctrl-C, or SIGTERM's
    facts = document(out)["profile"]
    assert facts["interrupted"] is True and facts["exit_status"] == 128 + signum
    assert "interrupted" in {w["code"] for w in facts["warnings"]}
    assert running_with(STARVED + " --steps 100000") == []
    assert_the_folder_holds_only_the_profile(out)


# A training loop with a "graceful shutdown" handler that never finishes: it says it got the
# signal and trains on. It stops by itself after IGNORER_S, so a profile that never kills it
# still ends (with the command's status 0).
IGNORER_S = 90
IGNORES_SIGNALS = f"""
import signal, sys, time
from daemon.sim.device import Device

def finishing(signum, frame):
    print("got", signal.Signals(signum).name, "finishing the epoch...", flush=True)

signal.signal(signal.SIGTERM, finishing)
signal.signal(signal.SIGINT, finishing)
with Device(gpu_index=0) as gpu:
    gpu.alloc(1 << 30)
    print("training", flush=True)
    started = time.monotonic()
    while time.monotonic() - started < {IGNORER_S}:
        gpu.kernel(0.05, sm=0.9)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_command_that_outlives_the_profiles_signal_is_killed_and_the_files_written(
        tmp_path, signum):
    """One SIGTERM to the profile reached the command, which ignored it: the profile waited
    for ever, where a supervisor (docker stop: 10 s, Kubernetes: 30 s) SIGKILLs it and nothing
    is written. As --duration does, the profile SIGKILLs the command's group 5 s on."""
    script = tmp_path / "ignorer.py"
    script.write_text(IGNORES_SIGNALS)
    out = tmp_path / "profile"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with subprocess.Popen([sys.executable, "-m", "daemon", "profile", "--out", str(out),
                           "--simulate", "--", sys.executable, str(script)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the command runs under the profile: one signal now
                if line.startswith("training"):
                    break
            proc.send_signal(signum)
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert f"got {signum.name} finishing the epoch" in stdout  # it reached the command
    assert proc.returncode == 128 + signal.SIGKILL, stderr  # the command's status, as ever
    facts = document(out)["profile"]
    assert facts["interrupted"] is True and facts["killed_after_signal"] is True
    assert facts["exit_status"] == 128 + signal.SIGKILL
    (warning,) = [w for w in facts["warnings"] if w["code"] == "interrupted"]
    assert warning["message"] == (
        "the run was interrupted (SIGINT/SIGTERM); the command had not exited 5 s after it "
        "and was killed (SIGKILL to its process group)")
    assert (f"the command did not exit within 5 s of {signum.name}: SIGKILL to its process "
            "group\n") in stderr
    assert re.search(r"^mlcostd profile: FAILED: the command was killed by SIGKILL "
                     r"\(status 137\)$", stderr, re.MULTILINE), stderr
    assert running_with(str(script)) == []
    assert_the_folder_holds_only_the_profile(out)


def test_the_verdict_starts_a_line_of_its_own_after_an_unended_last_line(tmp_path):
    """The command's last line on stderr without a newline ran into the verdict: `err no
    newlinemlcostd profile: done`, which a CI's grep for `^mlcostd profile:` missed. Its
    stdout is passed on byte for byte all the same."""
    command = ("import sys; sys.stdout.write('out no newline'); sys.stdout.flush(); "
               "sys.stderr.write('err no newline')")
    result = profile(tmp_path / "apart", "--simulate", "--", sys.executable, "-c", command)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "out no newline"
    assert "err no newline\nmlcostd profile: done (no gates)\n" in result.stderr, result.stderr
    # stdout and stderr one file (a terminal, 2>&1): stdout's unended line, written last. (Only
    # stdout: the command's two pipes reach the profile in no set order, and a CI run read a
    # stderr line written first after stdout's.)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    merged = subprocess.run(
        [sys.executable, "-m", "daemon", "profile", "--out", str(tmp_path / "merged"),
         "--simulate", "--", sys.executable, "-c", "print('out no newline', end='')"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=RUN_TIMEOUT_S,
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    assert merged.returncode == 0, merged.stdout
    assert "out no newline\nmlcostd profile: done (no gates)\n" in merged.stdout, merged.stdout


# `mlcostd profile ARGS` with a Ctrl-C (or SIGTERM) in its start-up window: the recorder is up
# and has ticked, the command is not started yet. The signal is sent from inside that window
# (to the main thread, so it is delivered before pthread_kill returns); the timer after it
# lets the event loop handle it before the command would be started.
INTERRUPTED_IN_START_UP = """
import asyncio, signal, sys, threading
from daemon.commands.cli import main
from daemon.runtime.profile import ProfileRecorder

start_the_command = ProfileRecorder._run_command

async def interrupted_first(self):
    signal.pthread_kill(threading.main_thread().ident, int(sys.argv[1]))
    await asyncio.sleep(0.1)
    await start_the_command(self)

ProfileRecorder._run_command = interrupted_first
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_before_the_command_starts_exits_at_once_and_leaves_the_profile(
        tmp_path, signum):
    """It waited for a tick that never came (the signal had stopped the recorder), then
    exited 1 with a TimeoutError traceback, leaving profile.db alone (or, earlier still, its
    -wal and -shm and 'Cannot operate on a closed database')."""
    out = tmp_path / "interrupted"
    ran = tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IN_START_UP, str(int(signum)), "profile", "--out",
         str(out), "--simulate", "--", sys.executable, "-c", f"open({str(ran)!r}, 'w')"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL)
    assert done.returncode == 128 + signum, done.stderr
    assert "Traceback" not in done.stderr and "closed database" not in done.stderr, done.stderr
    assert not ran.exists()  # the command was not started
    assert "FAILED: the profile was interrupted (SIGINT/SIGTERM) before the command started" in (
        done.stderr)
    facts = document(out)["profile"]
    assert facts["interrupted"] is True and facts["exit_status"] is None
    assert "interrupted" in {w["code"] for w in facts["warnings"]}
    assert_the_folder_holds_only_the_profile(out)


# `mlcostd profile ARGS` as the console script runs it (`from daemon.commands.cli import main`),
# with a Ctrl-C (or SIGTERM) sent from inside one of its first moments (to the main thread, so it
# is delivered before pthread_kill returns): "importing", as mlcostd's modules load (its config
# module, which the command line imports); "before-the-recorder", once the options are read, as
# the profile prepares its recorder's config. A signal from outside could not be timed to land
# in either: how long they take depends on the host's load.
SIGNALLED_WHILE_STARTING = """
import importlib.abc, signal, sys, threading

phase, signum = sys.argv[1], int(sys.argv[2])

def signal_now():
    signal.pthread_kill(threading.main_thread().ident, signum)

class SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "daemon.config":
            sys.meta_path.remove(self)
            signal_now()
        return None

if phase == "importing":
    sys.meta_path.insert(0, SignalOnImport())
from daemon.commands.cli import main
if phase == "before-the-recorder":
    from daemon.commands import profile as profile_command

    prepare = profile_command.profile_config

    def signalled_first(*args, **kwargs):
        signal_now()
        return prepare(*args, **kwargs)

    profile_command.profile_config = signalled_first
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_mlcostd_loads_is_one_line_and_writes_nothing(tmp_path, signum):
    """Ctrl-C in the first tenths of a second printed a KeyboardInterrupt traceback from the
    console script's imports (`python -m daemon` caught it; the `mlcostd` script did not), and
    SIGTERM there ended it without a word."""
    out, ran = tmp_path / "profile", tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_WHILE_STARTING, "importing", str(int(signum)),
         "profile", "--out", str(out), "--junit", str(out / "gates.xml"), "--simulate", "--",
         sys.executable, "-c", f"open({str(ran)!r}, 'w')"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL)
    assert done.returncode == 128 + signum, done.stderr
    assert done.stderr == (f"mlcostd: stopped by {signum.name} while starting: nothing was run "
                           f"or written; exiting {128 + signum}\n")
    assert not out.exists() and not ran.exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_once_the_options_are_read_leaves_the_command_unstarted_and_the_files(
        tmp_path, signum):
    """Between the options and the recorder (the folders made, the recorder's config), Ctrl-C
    exited 130 with no message and no files, and SIGTERM killed the profile with none: README
    says a profile stopped by either writes the same files. The signal is now kept for the
    recorder, which leaves the command unstarted, as one while the recorder starts does."""
    out, ran = tmp_path / "profile", tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_WHILE_STARTING, "before-the-recorder",
         str(int(signum)), "profile", "--out", str(out), "--junit", str(out / "gates.xml"),
         "--simulate", "--", sys.executable, "-c", f"open({str(ran)!r}, 'w')"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL)
    assert done.returncode == 128 + signum, done.stderr
    assert "Traceback" not in done.stderr
    assert not ran.exists()
    verdict = f"FAILED: {NOT_STARTED}"
    assert f"mlcostd profile: {verdict}\n" in done.stderr
    facts = document(out)["profile"]
    assert facts["interrupted"] is True and facts["exit_status"] is None
    [case] = [c for c in ET.parse(out / "gates.xml").getroot().iter("testcase")]
    assert case.get("name") == "the command" and case.find("error").get("message") == NOT_STARTED
    assert f"**{verdict}**" in (out / "summary.md").read_text()
    (out / "gates.xml").unlink()
    assert_the_folder_holds_only_the_profile(out)


# `mlcostd profile ARGS` with a Ctrl-C (or SIGTERM) after the command has exited, sent from
# inside the phase named, as above (to the main thread: delivered before pthread_kill returns):
# "stopping", as the rules' last round starts, the recorder still on; "writing", once
# profile.json is written and before the page is. A signal from outside could not be timed to
# land in a phase that takes milliseconds.
SIGNALLED_AFTER_THE_COMMAND = """
import signal, sys, threading
from daemon.commands.cli import main
from daemon.runtime import snapshots
from daemon.runtime.daemon import Daemon

def signalled_first(owner, name):
    original = getattr(owner, name)

    def signalled(*args, **kwargs):
        signal.pthread_kill(threading.main_thread().ident, int(sys.argv[1]))
        return original(*args, **kwargs)

    setattr(owner, name, signalled)

signalled_first(*{"stopping": (Daemon, "evaluate"),
                  "writing": (snapshots, "render_html_file")}[sys.argv[2]])
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("phase", ["stopping", "writing"],
                         ids=["while-the-recorder-stops", "while-the-files-are-written"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_after_the_command_exited_leaves_the_profile_whole_then_exits_with_it(
        tmp_path, signum, phase):
    """SIGTERM while the files were written killed the profile between profile.json and
    profile.html: no page, no summary.md (or an earlier run's beside the new JSON). Ctrl-C
    then was ignored: the profile exited 0, as if no one had asked it to stop. One while the
    recorder stopped was taken for an interrupted run, and the profile exited 0 too."""
    out = tmp_path / "late"
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_AFTER_THE_COMMAND, str(int(signum)), phase, "profile",
         "--out", str(out), "--simulate", "--", sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL)
    assert done.returncode == 128 + signum, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.endswith(
        f"mlcostd profile: {signum.name} came after the command had exited: the profile's "
        f"files were written whole first; exiting {128 + signum}\n"), done.stderr
    facts = document(out)["profile"]
    assert facts["exit_status"] == 0 and facts["interrupted"] is False
    assert_the_folder_holds_only_the_profile(out)


def assert_the_folder_holds_only_the_profile(out: Path) -> None:
    """The files the README lists, and nothing else (SQLite's -wal and -shm stayed): a
    profile.db that stands alone, whole, with what was recorded, and stays alone when read."""
    files = ["profile.db", "profile.html", "profile.json", "summary.md"]
    assert sorted(p.name for p in out.iterdir()) == files
    with StoreReader(out / "profile.db") as reader:  # read-only, as compare and the page read
        assert reader.query("PRAGMA integrity_check")[0]["integrity_check"] == "ok"
        assert reader.query("PRAGMA journal_mode")[0]["journal_mode"] == "delete"
        assert reader.latest() is not None
    assert sorted(p.name for p in out.iterdir()) == files


def test_a_finished_profile_folder_holds_only_the_files_it_says_it_wrote(starved):
    out, result = starved
    assert result.returncode == 0, result.stderr
    assert_the_folder_holds_only_the_profile(out)


# -- two profiles into one --out ---------------------------------------------------------------

# A command that holds its GPU until the test creates the file named by its argument: the first
# profile runs as long as the test needs, without a race or a sleep in the test.
WAIT_FOR_FILE = """
import os, sys, time
from daemon.sim.device import Device

with Device(gpu_index=0) as gpu:
    gpu.alloc(1 << 30)
    print("ready", flush=True)
    while not os.path.exists(sys.argv[1]):
        gpu.kernel(0.02, sm=0.5)
        time.sleep(0.02)
print("done", flush=True)
"""


def start_waiting_profile(tmp_path: Path, out: Path) -> tuple[subprocess.Popen[str], Path]:
    """`mlcostd profile --out OUT` of WAIT_FOR_FILE, once its command printed "ready" (the
    profile took --out before it started the command); with the file that ends it."""
    script, go = tmp_path / "wait_for_file.py", tmp_path / "go"
    script.write_text(WAIT_FOR_FILE)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first = subprocess.Popen([sys.executable, "-m", "daemon", "profile", "--out", str(out),
                              "--simulate", "--", sys.executable, str(script), str(go)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    assert first.stdout is not None
    line = first.stdout.readline()
    assert line == "ready\n", (line, first.poll())
    return first, go


def stack_rows(db: Path) -> int:
    """Stack samples a running profile's store holds (read-only, beside its writer)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return connection.execute("SELECT count(*) FROM stack_samples").fetchone()[0]
    except sqlite3.OperationalError:  # its tables not made yet
        return 0
    finally:
        connection.close()


def test_a_second_profile_into_the_same_out_is_refused_and_leaves_the_first_whole(tmp_path):
    """Two profiles started at once with the same --out: the second deleted the first's
    profile.db. Now it refuses, naming the folder and the first's pid, touches nothing, and
    the first ends with its files whole."""
    out = tmp_path / "profile"
    first, go = start_waiting_profile(tmp_path, out)
    try:
        store = (out / "profile.db").stat()
        marker = tmp_path / "second-ran"
        second = profile(out, "--simulate", "--", sys.executable, "-c",
                         f"open({str(marker)!r}, 'w')")
        assert second.returncode == 2, second.stderr
        assert second.stderr == (
            f"mlcostd profile: another mlcostd profile (pid {first.pid}) is recording into "
            f"--out {out}; its files were left alone: wait for it to finish, or give this one "
            "a different --out\n")
        assert not marker.exists()
        now = (out / "profile.db").stat()
        assert (now.st_ino, now.st_dev) == (store.st_ino, store.st_dev)
        # the first ends once it holds a stack sample (its command waits with the GPU idle;
        # ended at once, how many it holds depended on how fast the second was refused)
        poll(lambda: stack_rows(out / "profile.db"), 120, "the first profile's stack sample")
        go.touch()
        stdout, stderr = first.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr
    assert stdout == "done\n"
    facts = document(out)["profile"]
    assert facts["exit_status"] == 0 and facts["interrupted"] is False, facts
    assert "wait_for_file.py" in facts["command"] and facts["gpus_used"] == [0], facts
    assert facts["stack_samples"] >= 1 and facts["gpu_memory_peak"]["peak_bytes"] == 1 << 30
    assert_the_folder_holds_only_the_profile(out)  # its lock gone with it
    # once it is done, the folder is free
    again = profile(out, "--simulate", "--", sys.executable, "-c", "pass")
    assert again.returncode == 0, again.stderr


def test_a_profile_killed_with_sigkill_leaves_the_out_folder_to_the_next(tmp_path):
    """The lock is an flock: the kernel lets go of it with the killed profile's files, and
    the pid left in the lock file does not keep the next profile out."""
    out = tmp_path / "profile"
    first, go = start_waiting_profile(tmp_path, out)
    try:
        first.kill()
        first.wait()
        assert (out / "profile.lock").read_text() == str(first.pid)
    finally:
        go.touch()  # its command, left running by the kill, ends
        if first.poll() is None:
            first.kill()
            first.wait()
    after = profile(out, "--simulate", "--", sys.executable, "-c", "pass")
    assert after.returncode == 0, after.stderr
    assert document(out)["profile"]["exit_status"] == 0
    assert_the_folder_holds_only_the_profile(out)


def test_a_link_planted_at_the_profiles_lock_is_refused_not_followed(tmp_path, capsys):
    """mlcostd runs as root: a link at --out/profile.lock would have it write its pid into
    (and lock) whatever file the link names."""
    from daemon.commands.cli import main

    out, target = tmp_path / "profile", tmp_path / "precious"
    out.mkdir()
    target.write_text("keep me")
    (out / "profile.lock").symlink_to(target)
    (out / "profile.db").write_text("an earlier profile")
    marker = tmp_path / "ran"
    status = main(["profile", "--out", str(out), "--", sys.executable, "-c",
                   f"open({str(marker)!r}, 'w')"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(f"mlcostd profile: cannot use --out {out}: {out / 'profile.lock'} "
                          "is a symbolic link"), err
    assert target.read_text() == "keep me" and not marker.exists()
    assert (out / "profile.db").read_text() == "an earlier profile"


# -- the profile's own paths ---------------------------------------------------------------------


@pytest.fixture
def unwritable(tmp_path: Path):
    """A folder this user cannot create files in: mode 0500, or for root (whom modes do not
    stop) immutable (chattr +i); skipped where neither holds."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("root, and chattr +i is not supported here: no folder root cannot write")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)


def test_the_readme_ci_step_creates_its_junit_files_folder_as_it_creates_the_profiles(tmp_path):
    """README's GitHub Actions step puts --junit in the --out folder, which does not exist
    before the run: the profile exited 2 before running anything ("there is no folder
    mlcost-profile; create it first"). The JUnit file's folder is made as --out's is: 0700,
    the folders above it 0755 less the umask."""
    out = tmp_path / "mlcost-profile"
    reports = tmp_path / "reports" / "ci"
    result = profile(out, "--simulate", "--max-cost", "$100", "--junit", str(out / "gates.xml"),
                     "--", sys.executable, "-c", USES_GPU)
    assert result.returncode == 0, result.stderr
    cases = [c.get("name") for c in ET.parse(out / "gates.xml").getroot().iter("testcase")]
    assert cases == ["max-cost $100.00"]
    assert f"wrote {out / 'profile.json'}, {out / 'profile.html'}, {out / 'summary.md'}, " \
           f"{out / 'gates.xml'}" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "gates.xml", "profile.db", "profile.html", "profile.json", "summary.md"]
    result = profile(tmp_path / "second", "--simulate", "--junit", str(reports / "gates.xml"),
                     "--", sys.executable, "-c", "pass")
    assert result.returncode == 0, result.stderr
    assert (reports / "gates.xml").is_file()
    assert (reports.stat().st_mode & 0o777) == 0o700
    assert ((tmp_path / "second").stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("command", ["no-such-command-here", "not-executable", "a-folder"])
def test_a_command_that_cannot_start_is_an_error_case_in_the_junit_file_and_in_the_files(
        tmp_path, command):
    """`-- no-such-cmd` (a file that is not executable, a folder) exited 127 with a line on
    stderr and nothing else: no JUnit file (a CI that reads only it saw nothing to fail), no
    profile.json or summary.md, though the recorder had run."""
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    (tmp_path / "a-folder").mkdir()
    path = command if command == "no-such-command-here" else str(tmp_path / command)
    out, junit = tmp_path / "profile", tmp_path / "gates.xml"
    result = profile(out, "--simulate", "--max-cost", "$100", "--junit", str(junit), "--", path,
                     "--flag")
    assert result.returncode == 127, result.stderr
    said = f"the command could not be started: cannot run {path!r}: "
    assert f"mlcostd profile: FAILED: {said}" in result.stderr
    [case] = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("error") is not None]
    assert case.get("name") == "the command"
    assert case.find("error").get("message", "").startswith(said)
    facts = document(out)["profile"]
    assert facts["exit_status"] is None and facts["start_error"].startswith(f"cannot run {path!r}")
    assert [w["code"] for w in facts["warnings"]] == ["failed"]
    summary = (out / "summary.md").read_text()
    assert "**FAILED: the command could not be started: cannot run '" in summary
    assert "Run: 0 s, not started" in summary
    assert_the_folder_holds_only_the_profile(out)


@pytest.mark.parametrize("name", ["profile.json", "profile.db", "profile.html", "summary.md",
                                  "../profile/summary.md", ""])
def test_junit_on_one_of_the_profiles_own_files_is_refused_before_the_run(
        tmp_path, capsys, name):
    """`--out jo --junit jo/profile.json` wrote the profile.json, then the JUnit XML over it."""
    from daemon.commands.cli import main

    out, marker = tmp_path / "profile", tmp_path / "ran"
    out.mkdir()
    (out / "profile.json").write_text("an earlier profile")
    junit = str(out / name) if name else str(out)
    status = main(["profile", "--out", str(out), "--junit", junit, "--", sys.executable, "-c",
                   f"open({str(marker)!r}, 'w')"])
    err = capsys.readouterr().err
    assert status == 2
    shown = name.rsplit("/", 1)[-1]
    said = f"the profile's own {shown} in --out {out}" if name else f"the --out folder {out}"
    assert err == (f"mlcostd profile: --junit {junit} is {said}" + (
        ", which the profile writes" if name else "") + "; give the JUnit file a name of its "
        f"own, e.g. --junit {out / 'gates.xml'}\n")
    assert not marker.exists() and (out / "profile.json").read_text() == "an earlier profile"


def test_folders_the_profile_cannot_write_are_refused_before_the_run(tmp_path, capsys,
                                                                      unwritable):
    """--junit into a folder it could not write was found once the run was over (exit 2, no
    verdict); --out there said "cannot take the writer lock ... pass --db", an option the
    profile does not have; --out under a file said "[Errno 17] File exists: 'afile'"."""
    from daemon.commands.cli import main

    marker = tmp_path / "ran"
    afile = tmp_path / "afile"
    afile.write_text("")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "profile.db").write_text("an earlier profile's store")
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    folder_fix = "give --out a folder you can write (it is created when missing)"
    junit_fix = "give --junit a file in a folder you can write (it is created when missing)"
    for args, said in (
            (["--out", str(unwritable)],
             f"cannot use --out {unwritable}: the folder {unwritable} is not writable ("),
            (["--out", str(afile / "sub")],
             f"cannot use --out {afile / 'sub'}: {afile} is a file, not a folder; {folder_fix}"),
            (["--out", str(afile)],
             f"cannot use --out {afile}: {afile} is a file, not a folder; {folder_fix}"),
            (["--out", str(tmp_path / "x"), "--junit", str(unwritable / "gates.xml")],
             f"cannot use --junit {unwritable / 'gates.xml'}: the folder {unwritable} is not "
             "writable ("),
            (["--out", str(tmp_path / "x"), "--junit", str(afile / "gates.xml")],
             f"cannot use --junit {afile / 'gates.xml'}: {afile} is a file, not a folder; "
             f"{junit_fix}")):
        status = main(["profile", *args, *command])
        err = capsys.readouterr().err
        assert status == 2 and said in err, (args, err)
        assert "--db" not in err and "Errno" not in err, err
        assert err.count("\n") == 1, err
    assert not marker.exists() and list(unwritable.iterdir()) == []
    # refused before an earlier profile in --out was cleared away
    assert (tmp_path / "x" / "profile.db").read_text() == "an earlier profile's store"


def test_a_profile_without_junit_clears_the_one_an_earlier_profile_left_in_out(tmp_path):
    """Re-profiling into the same --out without --junit left the previous run's JUnit file (a
    pass) beside a profile of a crash, for a CI that keeps its workspace to upload. The
    profile clears the JUnit files earlier profiles wrote there; nothing else: not a file of
    the user's, not one a link points to (nor the link)."""
    out = tmp_path / "profile"
    passed = profile(out, "--simulate", "--max-cost", "1", "--junit", str(out / "gates.xml"),
                     "--", sys.executable, "-c", USES_GPU)
    assert passed.returncode == 0, passed.stderr
    assert 'failures="0" errors="0"' in (out / "gates.xml").read_text()
    elsewhere = tmp_path / "kept" / "gates.xml"  # a JUnit file of the profile's, linked to
    elsewhere.parent.mkdir()
    elsewhere.write_bytes((out / "gates.xml").read_bytes())
    (out / "linked.xml").symlink_to(elsewhere)
    mine = b"<?xml version='1.0' encoding='utf-8'?>\n<testsuites name=\"pytest\" tests=\"1\"/>\n"
    (out / "pytest.xml").write_bytes(mine)
    (out / "notes.txt").write_text("mine\n")
    crashed = profile(out, "--simulate", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert crashed.returncode == 3, crashed.stderr
    assert not (out / "gates.xml").exists()
    assert (out / "pytest.xml").read_bytes() == mine
    assert (out / "notes.txt").read_text() == "mine\n"
    assert (out / "linked.xml").is_symlink() and elsewhere.read_text().startswith("<?xml")
    assert sorted(p.name for p in out.iterdir()) == [
        "linked.xml", "notes.txt", "profile.db", "profile.html", "profile.json", "pytest.xml",
        "summary.md"]


def test_a_junit_file_that_cannot_be_written_at_the_end_still_leaves_the_verdict(tmp_path):
    """Written once the run is over: when it fails then (here a FIFO the command put at its
    path), the verdict and each gate are still printed, and the profile's files written; the
    line after them says the JUnit file is missing."""
    out, junit = tmp_path / "profile", tmp_path / "gates.xml"
    result = profile(out, "--simulate", "--max-cost", "$100", "--junit", str(junit), "--",
                     sys.executable, "-c", f"import os; os.mkfifo({str(junit)!r})\n{USES_GPU}")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert "mlcostd profile: passed: 1 gate" in lines
    assert any(re.fullmatch(r"  gate --max-cost \$100\.00: the run cost \$0\.\d+", line)
               for line in lines), lines
    assert lines[-2].startswith(f"  wrote {out / 'profile.json'}, ")
    assert lines[-1].startswith(f"mlcostd profile: could not write the JUnit file {junit}: ")
    assert lines[-1].endswith("the verdict and the gates above are not in it")
    assert document(out)["profile"]["gates"][0]["passed"] is True


def test_a_progress_pattern_that_matches_no_line_says_so(tmp_path):
    """--progress 'step (\\d+)/' over a log that prints "iteration 5": the profile said
    `steps: 0` and nothing else (few_steps is said only of a count above 0), so a typo in the
    pattern read as a command that made no progress."""
    out = tmp_path / "typo"
    code = "for i in range(3): print(f'iteration {i + 1}/3')"
    result = profile(out, "--simulate", "--progress", r"nomatch (\d+)", "--", sys.executable,
                     "-c", code)
    # the command as a shell takes it back (it read `python -c for i in range(3): ...`)
    command = f"{sys.executable} -c 'for i in range(3): print(f'\"'\"'iteration {{i + 1}}/3'\"'\"')'"
    assert shlex.split(command) == [sys.executable, "-c", code]
    assert document(out)["profile"]["command"] == command
    assert (out / "summary.md").read_text().startswith(f"## mlcost profile: `{command}`\n")
    assert f"<h1>mlcost profile of {escaped(command)}</h1>" in (out / "profile.html").read_text()
    assert result.returncode == 0, result.stderr
    said = (r"--progress 'nomatch (\d+)' matched no line of the command's output: no steps "
            "were counted; check it against what the command prints (each line's first 4 KiB)")
    assert f"  not representative: {said}\n" in result.stderr
    facts = document(out)["profile"]
    assert facts["steps"] == 0 and facts["progress"] == r"nomatch (\d+)"
    assert {"code": "no_steps", "message": said} in facts["warnings"]
    assert "matched no line of the command's output" in (out / "summary.md").read_text()


def test_a_per_step_gate_with_a_pattern_that_matched_nothing_says_so_and_a_fraction_warns(
        tmp_path):
    """--max-cost-per-1k-steps with a --progress that matched no line said "pass --progress
    REGEX"; and --min-utilization 0.6 was silently 0.6%, a gate that passes everything."""
    out = tmp_path / "nosteps"
    result = profile(out, "--simulate", "--progress", r"step \d+", "--max-cost-per-1k-steps",
                     "0.5", "--min-utilization", "0.6", "--max-gpu-memory", "90", "--", sys.executable,
                     "-c", "print('no steps here')")
    assert result.returncode == GATE_EXIT_STATUS, result.stderr
    assert ("mlcostd profile: warning: --min-utilization 0.6 is read as 0.6%; did you mean 60%? "
            "(write 0.6% to keep it without this warning)\n") in result.stderr
    assert "--max-gpu-memory 90 is read" not in result.stderr  # 90 is 90%
    said = (r"FAILED gate --max-cost-per-1k-steps $0.5000: cannot be checked, no steps were "
            r"counted: --progress 'step \d+' matched no line of the command's output; check it "
            "against what the command prints\n")
    assert said in result.stderr
    assert "pass --progress" not in result.stderr
    gate = document(out)["profile"]["gates"][0]
    assert gate["gate"] == "max-cost-per-1k-steps" and not gate["passed"]
    assert "matched no line" in gate["message"]
    matched = gates.max_cost_per_1k_steps(0.5, None, 0, r"step (\d+)", 1)
    assert matched.message.endswith(r"--progress 'step (\d+)' matched 1 line but its group was "
                                    "never a step number above 0")


def test_a_progress_pattern_whose_group_is_never_a_step_says_so():
    from types import SimpleNamespace

    from daemon.commands.profile import representativeness

    counter = ProgressCounter(r"step (\d+)")
    counter.feed(b"step 0 warm-up\nstep 0 again\nloss 1\n", 1.0)
    assert (counter.steps, counter.lines) == (0, 2)
    facts = {"duration_s": 120.0, "stack_samples": 200, "gpus_used": [0],
             "first_gpu_work_after_s": 3.0, "first_step_after_s": None, "steps": 0,
             "progress": r"step (\d+)", "progress_lines": counter.lines, "shared_gpus": {},
             "exit_status": 0, "stopped_after_duration": False, "interrupted": False}
    assert representativeness(facts, SimpleNamespace(step_timeline=[])) == [
        {"code": "no_steps", "message": r"--progress 'step (\d+)' matched 2 lines but counted "
                                        "no step: its group was never a step number above 0"}]
    # no --progress: nothing to say of steps
    assert representativeness(dict(facts, progress=None, progress_lines=None),
                              SimpleNamespace(step_timeline=[])) == []


def test_bad_options_are_refused_before_anything_runs(tmp_path, capsys):
    from daemon.commands.cli import main

    marker = tmp_path / "ran"
    fifo = tmp_path / "baseline.json"
    os.mkfifo(fifo)  # no writer: an open that waits for one never returns
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    for args, said in ((["--max-data-wait", "lots"], "--max-data-wait 'lots' is not a number"),
                       (["--max-regression", "10%"], "go together"),
                       (["--baseline", str(tmp_path / "none.json"), "--max-regression", "5"],
                        "none.json does not exist"),
                       (["--baseline", str(fifo), "--max-regression", "5"],  # (was: waited on)
                        "baseline.json is not a regular file"),
                       (["--junit", str(fifo)],  # (was: replaced by the XML after the run)
                        "cannot use --junit"),
                       (["--progress", "step ("], "not a regular expression"),
                       (["--max-cost-per-1k-steps", "2"],  # (was: exit 86 once it had run)
                        "--max-cost-per-1k-steps needs --progress"),
                       (["--duration", "soon"], "--duration"),
                       (["--simulate", "typo"], "--simulate typo: scenario = 'typo' is not "
                                                "valid: a built-in scenario ("),
                       ([], "no command")):
        status = main(["profile", "--out", str(tmp_path / "x"), *args,
                       *(command if args else [])])
        assert status == 2 and said in capsys.readouterr().err, args
    assert not marker.exists() and not (tmp_path / "x").exists()


def test_a_command_taken_for_the_simulate_scenario_is_told_to_go_after_the_dashes(
        tmp_path, capsys):
    """`mlcostd profile --simulate python tq.py` said only "scenario = 'python' is not valid"
    (argparse gives --simulate's optional value the first word): the command goes after --."""
    from daemon.commands.cli import main

    status = main(["profile", "--out", str(tmp_path / "x"), "--simulate", "python", "tq.py"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("mlcostd profile: --simulate python: scenario = 'python' is not "
                          "valid: a built-in scenario (")
    assert err.endswith("; the command goes after --: mlcostd profile --simulate -- python "
                        "tq.py\n")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("args, said", [
    (["--duration", "-5s"], "'-5s' is negative"),
    (["--duration=-5s"], "'-5s' is negative"),
    (["--duration", "-1.5m"], "'-1.5m' is negative"),
    (["--duration", "0"], "'0' is not more than 0"),
], ids=["negative", "negative-with-equals", "negative-fraction", "zero"])
def test_a_duration_that_is_not_positive_is_refused_saying_what_a_duration_is(
        tmp_path, capsys, args, said):
    """`--duration -5s` got argparse's "expected one argument" (it took -5s for an option):
    each says what was wrong with the value and what a duration is, status 2, nothing run."""
    from daemon.commands.cli import main

    marker = tmp_path / "ran"
    status = main(["profile", "--out", str(tmp_path / "x"), *args, "--", sys.executable, "-c",
                   f"open({str(marker)!r}, 'w')"])
    assert status == 2
    assert capsys.readouterr().err == (f"mlcostd profile: --duration {said}: a duration is a "
                                       "positive number and a unit (e.g. 30s, 15m, 6h, 8d)\n")
    assert not marker.exists() and not (tmp_path / "x").exists()


def test_the_help_says_what_a_duration_is(capsys):
    from daemon.commands.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["profile", "--help"])
    assert exited.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("--duration DURATION stop the command after this long, a positive number and a "
            "unit (e.g. 30s, 15m, 6h, 8d); a number alone is seconds, as in every mlcostd "
            "duration (--duration 90 is 90s)") in help_text


# -- without a run ------------------------------------------------------------------------------


def test_progress_with_a_group_takes_the_largest_step_number_tqdm_style():
    counter = ProgressCounter(r"(\d+)/\d+")
    counter.feed(b"  3%|#  | 3/100 [00:01<00:30]\r  7%|## | 7/100", 1.0)
    counter.feed(b" [00:02<00:29]\r", 2.0)
    assert counter.steps == 7 and counter.first_step_at == 1.0
    assert counter.timeline == [(1.0, 3), (2.0, 7)]


def tqdm_epochs(epochs: int, steps: int) -> list[bytes]:
    """What a tqdm bar per epoch writes to stderr, chunk by chunk: each epoch's bar from 0/N,
    each step's bar drawn twice (tqdm redraws a step on its refresh), a newline at its end."""
    chunks = []
    for epoch in range(epochs):
        for step in range(steps + 1):
            bar = f"\rEpoch {epoch}: {100 * step // steps:3d}%|{'#' * (10 * step // steps):<10}|"
            chunks += [f"{bar} {step}/{steps} [00:0{step % 10}]".encode()] * 2
        chunks.append(b"\n")
    return chunks


def test_progress_with_a_bar_per_epoch_adds_each_epochs_steps():
    r"""README's tqdm recipe, '(\d+)/\d+', with a bar per epoch (the usual way) counted one
    epoch's steps: the largest step number seen. A number that falls back starts a new run,
    whose steps are added; one redrawn (equal to the last) is the same step."""
    counter = ProgressCounter(r"(\d+)/\d+")
    for ts, chunk in enumerate(tqdm_epochs(3, 60)):
        counter.feed(chunk, float(ts), 2)
    counter.flush(1e6)
    assert counter.steps == 180 and counter.restarts == 2
    counts = [n for _, n in counter.timeline]
    assert counts == sorted(counts) and len(set(counts)) == len(counts) and counts[-1] == 180
    # a log per epoch, every 10 steps: `epoch 2 step 10/100` after `epoch 1 step 100/100`
    logged = ProgressCounter(r"step (\d+)/")
    for epoch in range(3):
        logged.feed(b"".join(b"epoch %d step %d/100 loss 0.1\n" % (epoch, step)
                             for step in range(10, 101, 10)), float(epoch))
    assert logged.steps == 300 and logged.restarts == 2


def test_progress_that_only_rises_counts_as_before():
    """A step counter that only rises (one bar over the whole run, a log's global step) and a
    group that is a running total are one run: the largest number is the count."""
    counter = ProgressCounter(r"(\d+)/\d+")
    for chunk in tqdm_epochs(1, 90):
        counter.feed(chunk, 1.0)
    assert counter.steps == 90 and counter.restarts == 0
    total = ProgressCounter(r"samples=(\d+)")
    total.feed(b"".join(b"samples=%d\n" % n for n in range(32, 32 * 41, 32)), 1.0)
    assert total.steps == 32 * 40 and total.restarts == 0


def test_progress_a_step_or_two_back_is_not_a_new_run():
    """Two writers a step apart (ranks sharing a terminal, a log line on stdout one step
    behind the bar on stderr) go back by a little: that is no new run."""
    counter = ProgressCounter(r"step (\d+)")
    for step in range(1, 51):
        counter.feed(b"rank0 step %d\n" % step, float(step), 2)
        counter.feed(b"rank1 step %d\n" % max(step - 2, 1), float(step), 1)
    assert counter.steps == 50 and counter.restarts == 0


def test_progress_an_evaluation_bar_inside_a_run_wide_bar_is_not_counted():
    """A training bar over the whole run (30/90) with an evaluation bar (0/10 to 10/10) each
    30 steps, as Hugging Face's Trainer draws them: the training bar resumes past its own last
    number, so the evaluation's numbers were an interlude, not a new run of steps."""
    counter = ProgressCounter(r"(\d+)/\d+")
    for step in range(1, 91):
        counter.feed(b"\r%d/90 [train]" % step, float(step), 2)
        if step % 30 == 0 and step < 90:
            for done in range(11):
                counter.feed(b"\r%d/10 [eval]" % done, float(step), 2)
    counter.flush(100.0)
    assert counter.steps == 90 and counter.restarts == 0
    counts = [n for _, n in counter.timeline]
    assert counts == sorted(counts) and counts[-1] == 90


def test_progress_reads_each_stream_s_lines_apart():
    """A line of stdout cut by its chunk was joined to the stderr chunk that came next:
    `step 1` + `x` + `2/` read `step 1x` and `2/`, neither a step."""
    counter = ProgressCounter(r"step (\d+)/")
    counter.feed(b"step 1", 1.0, 1)
    counter.feed(b"warning: x\n", 1.0, 2)
    counter.feed(b"2/100\n", 2.0, 1)
    assert counter.steps == 12


def test_progress_without_a_group_counts_each_match_and_the_last_unended_line():
    counter = ProgressCounter(r"loss=")
    counter.feed(b"loss=1 loss=2\nnothing\nloss=3", 5.0)
    assert counter.steps == 2
    counter.flush(6.0)
    assert counter.steps == 3


def test_progress_matches_only_the_first_bytes_of_a_hostile_line():
    counter = ProgressCounter(r"step (\d+)")
    counter.feed(b"x" * (64 << 10) + b" step 999\n", 1.0)  # past MAX_LINE_BYTES: not read
    assert counter.steps == 0
    # "step 6" straddles the bound: not read either; the line after it is
    counter.feed(b"step 5\n" + b"y" * (MAX_LINE_BYTES - 3) + b"step 6 " + b"z" * 70000, 2.0)
    counter.feed(b"\nstep 7\n", 3.0)
    assert counter.steps == 7 and [n for _, n in counter.timeline] == [5, 7]


def test_gate_messages_say_which_gate_and_by_how_much():
    assert gates.max_data_wait(20, {"data_wait": 0.71}).message == (
        "gate --max-data-wait 20%: input wait was 71% (data_wait 71%, host_preprocess 0%; 51 "
        "points over)")
    assert gates.min_utilization(60, 14).message == (
        "gate --min-utilization 60%: GPU utilization was 14% (46 points under)")
    assert gates.max_cost(0.10, 0.23).message == (
        "gate --max-cost $0.1000: the run cost $0.2300 ($0.1300 over)")
    unknown = gates.max_cost_per_1k_steps(1.0, None, 0)
    assert not unknown.passed and "--progress" in unknown.message
    regression = gates.max_regression(10, {"steps": 100, "cost_per_step": 0.0012},
                                      {"steps": 90, "cost_per_step": 0.0010}, "old.json")
    assert not regression.passed and "+20%, 10 points over" in regression.message
    # a step costs fractions of a cent: said per 1k steps (per step it read $0.0000 vs $0.0001)
    tiny = gates.max_regression(10, {"steps": 30, "cost_per_step": 0.0000396},
                                {"steps": 30, "cost_per_step": 0.0000559}, "old.json")
    assert tiny.passed and tiny.message == (
        "gate --max-regression 10%: cost per 1k steps was $0.0396 against the baseline's "
        "$0.0559 (-29%)")
    # without steps, the total cost (per hour it was the GPU's price: probe 150 F1)
    total = gates.max_regression(10, {"steps": 0, "cost": 0.0100, "cost_per_hour": 1.0},
                                 {"steps": 0, "cost": 0.0098, "cost_per_hour": 0.95}, "old.json")
    assert total.passed and total.message == (
        "gate --max-regression 10%: total cost was $0.0100 against the baseline's $0.0098 "
        "(+2%); no steps counted: taken as the same work both runs; add --progress for cost "
        "per step")
    no_gpu = gates.max_gpu_memory(90, None)
    assert not no_gpu.passed and no_gpu.message == (
        "gate --max-gpu-memory 90%: cannot be checked, the command used no GPU")
    no_total = gates.max_gpu_memory(90, {"gpu": 0, "gpus": 1, "peak_bytes": 1 << 30,
                                         "total_bytes": None, "percent": None})
    assert not no_total.passed and "total memory is unknown" in no_total.message
    fits = gates.max_gpu_memory(90, {"gpu": 3, "gpus": 8, "peak_bytes": 70 << 30,
                                     "total_bytes": 80 << 30, "percent": 87.5})
    assert fits.passed and fits.message == (
        "gate --max-gpu-memory 90%: GPU 3 peaked at 70.0 GiB, 88% of its 80 GiB")
    assert gates.parse_percent("20%") == 20 and gates.parse_dollars("$0.5") == 0.5
    with pytest.raises(ValueError):
        gates.parse_percent("120%")


def test_figures_beside_a_limit_read_on_the_side_they_are_on():
    """"GPU utilization was 59% (1 points under)", and a 29.6 s run "took 30 s (under 30 s)":
    a figure rounded onto its limit, or one point in the plural."""
    from types import SimpleNamespace

    from daemon.commands.profile import representativeness

    assert gates.min_utilization(60, 58.59).message == (
        "gate --min-utilization 60%: GPU utilization was 59% (1 point under)")
    assert gates.min_utilization(60, 59.6).message == (
        "gate --min-utilization 60%: GPU utilization was 59.6% (0.4 points under)")
    assert gates.min_utilization(60, 60.4).message == (  # close to it: said as close
        "gate --min-utilization 60%: GPU utilization was 60.4%")
    assert gates.min_utilization(60, 80.4).message == (
        "gate --min-utilization 60%: GPU utilization was 80%")
    assert gates.max_data_wait(20, {"data_wait": 0.203}, samples=40, short_run_s=29.6
                               ).message == (
        "gate --max-data-wait 20%: input wait was 20.3% (data_wait 20%, host_preprocess 0%; "
        "0.3 points over), on 40 stack samples of a 29.6 s run (under 30 s: phases that come "
        "round less often may be missed)")
    assert gates.max_gpu_memory(
        96, {"gpu": 0, "gpus": 1, "peak_bytes": 1, "total_bytes": 80 << 30, "percent": 96.4}
    ).message.endswith("96.4% of its 80 GiB (0.4 points over)")
    regression = gates.max_regression(10, {"steps": 1, "cost_per_step": 0.0001103},
                                      {"steps": 1, "cost_per_step": 0.0001}, "old.json")
    assert regression.message.endswith("(+10.3%, 0.3 points over); " + gates.NO_NOISE_ALLOWANCE)
    facts = {"duration_s": 29.6, "stack_samples": 200, "gpus_used": [0],
             "first_gpu_work_after_s": 1.0, "first_step_after_s": None, "steps": 0,
             "shared_gpus": {}, "exit_status": 0, "stopped_after_duration": False,
             "interrupted": False}
    said = representativeness(facts, SimpleNamespace(step_timeline=[]))
    assert said[0]["message"].startswith("the run took 29.6 s (under 30 s): ")
    assert representativeness(dict(facts, duration_s=12.4), SimpleNamespace(step_timeline=[])
                              )[0]["message"].startswith("the run took 12 s (under 30 s): ")
    summary = summary_markdown({"profile": {
        "command": "python train.py", "exit_status": 0, "stopped_after_duration": False,
        "duration_s": 40.0, "phase_balance": {}, "largest_phase": None,
        "gpu_utilization": 59.6, "workload_kind": None, "cost": 0.01, "cost_per_hour": 0.9,
        "steps": 0, "cost_per_1k_steps": None, "unit_costs": [], "warnings": [],
        "gates": [gates.min_utilization(60, 59.6).as_dict()]}, "host": {}})
    assert "| --min-utilization | 60% | 59.6% | FAILED |" in summary


def test_a_data_wait_share_on_too_few_stack_samples_fails_closed_and_says_why():
    """Four identical 10 s runs of the starved script (15-odd stack samples each) read
    data_wait at 26%, 93%, 67% and 86%: a gate on such a share passed or failed a release by
    chance. Under 20 samples it cannot be checked; on a run under 30 s it decides, and says on
    how many samples."""
    rough = gates.max_data_wait(20, {"data_wait": 0.67}, samples=15, short_run_s=10.0)
    assert not rough.passed and rough.value == pytest.approx(67.0)
    assert rough.message == (
        "gate --max-data-wait 20%: cannot be checked, input wait was 67% (data_wait 67%, "
        "host_preprocess 0%) on only 15 stack samples (under 20): too few to decide, short runs of the same code read tens of "
        "points apart; profile a run of 30 s or more (two stack samples a second): more steps, "
        "or --duration on a longer one")
    # however low: a share of 15 samples fails closed
    assert not gates.max_data_wait(90, {"data_wait": 0.05}, samples=15).passed
    short = gates.max_data_wait(20, {"data_wait": 0.12}, samples=36, short_run_s=18.4)
    assert short.passed and short.message == (
        "gate --max-data-wait 20%: input wait was 12% (data_wait 12%, host_preprocess 0%), on "
        "36 stack samples of a 18 s run (under 30 s: phases that come round less often may be "
        "missed)")
    over = gates.max_data_wait(20, {"data_wait": 0.71}, samples=36, short_run_s=18.4)
    assert not over.passed and "51 points over), on 36 stack samples" in over.message
    assert gates.max_data_wait(20, {"data_wait": 0.71}, samples=120).message == (
        "gate --max-data-wait 20%: input wait was 71% (data_wait 71%, host_preprocess 0%; 51 "
        "points over)")


def test_the_peak_memory_is_the_fullest_gpus_as_a_share_of_its_own():
    gpus = [{"index": 0, "memory_peak_bytes": 40 << 30, "memory_total_bytes": 80 << 30},
            {"index": 1, "memory_peak_bytes": 20 << 30, "memory_total_bytes": 24 << 30},
            {"index": 2, "memory_peak_bytes": None, "memory_total_bytes": 80 << 30}]
    assert memory_peak(gpus) == {"gpu": 1, "gpus": 2, "peak_bytes": 20 << 30,
                                 "total_bytes": 24 << 30, "percent": 83.33}
    assert memory_peak_text({"gpu_memory_peak": memory_peak(gpus)}) == (
        "peak 20.0 GiB of 24 GiB (83%) on GPU 1, the fullest of the 2 it used")
    assert memory_peak(gpus[2:]) is None and memory_peak([]) is None


def test_a_baseline_may_be_the_folder_of_an_earlier_profile(tmp_path):
    """`--baseline fixed/` was refused ("is not a regular file") though `mlcostd compare
    fixed/ new/` takes a profile's folder: its profile.json is read."""
    folder = tmp_path / "fixed"
    folder.mkdir()
    profile_json(folder / "profile.json", 0.0000874, 1.006, "NVIDIA A10G")
    assert gates.read_baseline(str(folder)) == gates.read_baseline(str(folder / "profile.json"))
    assert gates.read_baseline(f"{folder}/")["cost_per_step"] == 0.0000874
    (folder / "profile.json").unlink()
    with pytest.raises(ValueError, match=f"^--baseline {folder} is a folder without "
                                         "profile.json; pass the folder an earlier"):
        gates.read_baseline(str(folder))


def test_a_profiles_folder_as_the_baseline_gates_a_run(fixed, tmp_path):
    out = tmp_path / "again"
    result = profile(out, "--simulate", "--progress", STEP_REGEX, "--max-regression",
                     "100000%", "--baseline", str(fixed[0]), "--", sys.executable, "-c",
                     f"{USES_GPU}print('step 1/1')")
    assert result.returncode == 0, result.stderr
    (gate,) = document(out)["profile"]["gates"]
    assert gate["gate"] == "max-regression" and gate["passed"], gate
    assert "cost per 1k steps was" in gate["message"]


def test_a_baseline_with_a_number_json_does_not_allow_is_refused(tmp_path):
    """An Infinity cost per step in the baseline made any regression 'nan %': it passed."""
    baseline = tmp_path / "profile.json"
    baseline.write_text('{"profile": {"steps": 10, "cost_per_step": Infinity}}')
    with pytest.raises(ValueError, match="is not JSON .Infinity, which is not a number JSON "
                                         "allows"):
        gates.read_baseline(str(baseline))
    baseline.write_text('{"profile": {"steps": 10, "cost_per_step": 0.5}}')
    assert gates.read_baseline(str(baseline))["cost_per_step"] == 0.5


def profile_json(path: Path, cost_per_step: float, price_per_gpu: float, model: str,
                 with_price_facts: bool = True) -> Path:
    """A profile.json as `mlcostd profile` writes it, of a run of 100 steps on GPU 0
    (`with_price_facts=False`: as one written before the profile kept its price and GPUs)."""
    facts: dict[str, Any] = {"steps": 100, "cost_per_step": cost_per_step, "gpus_used": [0]}
    if with_price_facts:
        facts.update(price_per_gpu_hour=price_per_gpu, gpu_models=[model])
    path.write_text(json.dumps({
        "burn": {"price_per_gpu": price_per_gpu},
        "gpus": [{"index": 0, "name": model}, {"index": 1, "name": "not used"}],
        "profile": facts}))
    return path


def test_a_price_change_between_the_runs_is_not_counted_as_the_codes(tmp_path):
    """The baseline ran at $1.006/GPU-h; after a price cut to $0.503 (a catalog refresh, a
    new [instance] price) a step that takes 20% more GPU time cost 40% less, and the gate
    passed it. On the same GPUs the baseline is re-priced at this run's price; a profile
    written before the price was kept has it in its report."""
    old = gates.read_baseline(str(profile_json(tmp_path / "old.json", 0.0000874, 1.006,
                                               "NVIDIA A10G", with_price_facts=False)))
    assert old["price_per_gpu_hour"] == 1.006 and old["gpu_models"] == ["NVIDIA A10G"]
    slower = gates.read_baseline(str(profile_json(tmp_path / "new.json", 0.0000874 * 1.2 / 2,
                                                  0.503, "NVIDIA A10G")))
    gate = gates.max_regression(10, slower, old, "old.json")
    assert not gate.passed and gate.value == pytest.approx(20.0)
    assert gate.message == (
        "gate --max-regression 10%: cost per 1k steps was $0.0524 against the baseline's "
        "$0.0437 at this run's price ($0.0874 at its own) (+20%, 10 points over); the "
        "baseline ran at $1.0060/GPU-h, this run at $0.5030/GPU-h: the price's change is not "
        "counted; the gate has no noise allowance: `mlcostd compare` of the two profiles "
        "says whether the change is beyond the runs' noise")
    # a price rise fails no faster step
    faster = dict(slower, price_per_gpu_hour=2.012, cost_per_step=0.0000874 * 0.9 * 2)
    assert gates.max_regression(10, faster, old, "old.json").passed
    # other GPUs: compared as they cost, and said
    other = dict(slower, gpu_models=["NVIDIA L4"])
    gate = gates.max_regression(10, other, old, "old.json")
    assert gate.passed and gate.value == pytest.approx(-40.0)
    assert gate.message.endswith(
        "(-40%); the baseline ran at $1.0060/GPU-h, this run at $0.5030/GPU-h, on 1 x NVIDIA "
        "L4 against 1 x NVIDIA A10G: the change is the hardware's and its price's as well as "
        "the code's")
    # at the same price, nothing is said of it
    same = dict(slower, price_per_gpu_hour=1.006, cost_per_step=0.0000874 * 1.05)
    gate = gates.max_regression(10, same, old, "old.json")
    assert gate.passed and "GPU-h" not in gate.message


def test_a_baseline_that_is_not_representative_is_said_so_in_the_regression_gate(tmp_path):
    """A baseline interrupted by Ctrl-C after 13 s (exit 130, `representative: false`) was
    taken as any other: a CI that rolls its baseline forward from its last run adopts a broken
    one unnoticed. The gate compares all the same, and says what the baseline was."""
    path = profile_json(tmp_path / "old.json", 0.0000445, 1.006, "NVIDIA A10G")
    raw = json.loads(path.read_text())
    raw["profile"].update(
        exit_status=130, interrupted=True, duration_s=13.228, representative=False,
        warnings=[{"code": "too_short", "message": "the run took 13 s ..."},
                  {"code": "failed", "message": "the command exited with status 130 ..."},
                  {"code": "interrupted", "message": "the run was interrupted ..."},
                  {"code": "few_stack_samples", "message": "..."}])
    path.write_text(json.dumps(raw))
    old = gates.read_baseline(str(path))
    new = gates.read_baseline(str(profile_json(tmp_path / "new.json", 0.0000362, 1.006,
                                               "NVIDIA A10G")))
    gate = gates.max_regression(10, new, old, "old.json")
    assert gate.passed and gate.value == pytest.approx(100 * (0.0000362 / 0.0000445 - 1))
    assert gate.message == (
        "gate --max-regression 10%: cost per 1k steps was $0.0362 against the baseline's "
        "$0.0445 (-19%); the baseline is not representative: interrupted, exited 130, took "
        "13 s (under 30 s), few stack samples")
    # a crossed gate says it too; a representative baseline, nothing
    slower = dict(new, cost_per_step=0.0000445 * 1.5)
    failed = gates.max_regression(10, slower, old, "old.json")
    assert not failed.passed and failed.message.endswith(
        "(+50%, 40 points over); the baseline is not representative: interrupted, exited 130, "
        "took 13 s (under 30 s), few stack samples; the gate has no noise allowance: "
        "`mlcostd compare` of the two profiles says whether the change is beyond the runs' "
        "noise")
    whole = dict(old, exit_status=0, interrupted=False, duration_s=95.0, representative=True,
                 warnings=[])
    assert "representative" not in gates.max_regression(10, new, whole, "old.json").message
    # hostile fields are read for what they are, or left out
    odd = dict(old, exit_status="130", interrupted="yes", duration_s=True,
               warnings=[{"code": "x\x1b[31m_y"}, "z", {"code": 5}])
    assert gates.max_regression(10, new, odd, "old.json").message.endswith(
        "; the baseline is not representative: x\\x1b[31m y")


def test_the_readme_shows_the_gate_lines_as_they_are_printed():
    """README's example gate line lacked the `FAILED ` the profile prints before a crossed
    gate: a CI grep written from it (`^gate `) missed every failure."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("a failed one after `FAILED `, a passed one without:\n\n```\n", 1)[1]
    shown = block.split("```", 1)[0].splitlines()
    checked = [gates.max_data_wait(20, {"data_wait": 0.71}), gates.min_utilization(60, 82)]
    doc = {"profile": {"gates": [g.as_dict() for g in checked], "exit_status": 0,
                       "stopped_after_duration": False, "phase_balance": {}, "cost": 0.01,
                       "duration_s": 40.0, "steps": 0, "warnings": [], "left_running": 0}}
    printed = verdict_lines(doc)
    assert shown[0] == printed[0] == "mlcostd profile: FAILED: 1 of 2 gates crossed"
    assert shown[2:] == printed[-2:] == [
        "  FAILED gate --max-data-wait 20%: input wait was 71% (data_wait 71%, "
        "host_preprocess 0%; 51 points over)",
        "  gate --min-utilization 60%: GPU utilization was 82%"]
    doc["profile"]["gates"] = [gates.min_utilization(60, 82).as_dict()] * 2
    assert "`mlcostd profile: passed: 2 gates`" in readme
    assert verdict_lines(doc)[0] == "mlcostd profile: passed: 2 gates"


def test_the_phase_balance_is_the_share_the_rules_quote():
    """`phases: compute 80%, eval 20%` above `spends 21% of its last 27 s in evaluation`: the
    balance was summed from the report's phase seconds, rounded to 0.1 s (5.4 of 26.5 s),
    where the rule quotes the process's share (0.2051). Several processes are weighed by
    their phase seconds."""
    trainer = {"pid": 1, "gpus": [0], "phases": {
        "compute": {"seconds": 21.1, "share": 0.7949}, "eval": {"seconds": 5.4, "share": 0.2051}}}
    assert _phase_balance([trainer]) == {"compute": 0.7949, "eval": 0.2051}
    other = {"pid": 2, "gpus": [1], "phases": {"compute": {"seconds": 26.5, "share": 1.0}}}
    both = _phase_balance([trainer, other])
    assert both == {"compute": pytest.approx((0.7949 + 1) / 2, abs=1e-4),
                    "eval": pytest.approx(0.2051 / 2, abs=1e-4)}
    # a share that is not a number (a store of another version): the seconds, as before
    odd = {"pid": 3, "gpus": [0], "phases": {"compute": {"seconds": 3.0, "share": "x"},
                                             "eval": {"seconds": 1.0}}}
    assert _phase_balance([odd]) == {"compute": 0.75, "eval": 0.25}


def test_junit_has_one_case_per_gate_and_a_failure_message_for_each_crossed_one():
    checked = [gates.max_data_wait(20, {"data_wait": 0.71}), gates.min_utilization(60, 80)]
    root = ET.fromstring(gates.junit_xml(checked, seconds=12.5))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "1"
    failures = [c.find("failure") for c in suite.iter("testcase")]
    assert failures[0] is not None and "51 points over" in failures[0].get("message", "")
    assert failures[1] is None
    # how a profile knows its own in --out, to clear it
    assert gates.junit_xml(checked, seconds=12.5).startswith(gates.JUNIT_HEAD)


def test_junit_of_a_command_that_failed_is_in_error_even_when_every_gate_passed():
    """The command crashed (exit 1) and the JUnit file said failures="0": a CI reading only
    the file showed a pass."""
    from daemon.commands.profile import command_failure, verdict

    checked = [gates.min_utilization(10, 80)]
    profile = {"exit_status": 1, "stopped_after_duration": False, "gates": [
        {"passed": True}]}
    failure = command_failure(profile)
    assert failure == "the command exited with status 1"
    root = ET.fromstring(gates.junit_xml(checked, seconds=3.0, command_error=failure))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("errors") == "1"
    assert root.get("errors") == "1" and suite.get("failures") == "0"
    [case] = [c for c in suite.iter("testcase") if c.find("error") is not None]
    assert case.get("name") == "the command"
    assert case.find("error").get("message") == "the command exited with status 1"
    assert verdict({"profile": profile}) == "FAILED: the command exited with status 1"
    # stopped by --duration, or done: no error case; one gate is "1 gate"
    for done in ({"exit_status": -15, "stopped_after_duration": True},
                 {"exit_status": 0, "stopped_after_duration": False}):
        assert command_failure(done) is None
        assert verdict({"profile": {**done, "gates": [{"passed": True}]}}) == "passed: 1 gate"


def test_the_command_is_shown_shell_quoted_redacted_on_one_line():
    from daemon.commands.profile import shown_command

    assert shown_command(["bash", "-c", "python stubborn.py"]) == "bash -c 'python stubborn.py'"
    assert shown_command(["python", "train.py", "--api-key", "sk-live-1234567890abcdef", "--lr",
                          "0.1"]) == "python train.py --api-key <redacted> --lr 0.1"
    hostile = shown_command(["sh", "-c", "echo hi\n\x1b[31mred; rm -rf /"])
    assert hostile == "sh -c $'echo hi\\n\\x1b[31mred; rm -rf /'" and "\n" not in hostile
    assert len(shown_command(["x" * 450, "y" * 100])) == 500
    assert shown_command(["python", "a b.py"], limit=8) == "python '"


def test_the_summary_shows_hostile_text_as_text():
    hostile = "evil | <script>alert(1)</script> [x](http://e) \x1b[31m"
    doc = {"profile": {"command": "python `rm -rf` train.py", "exit_status": 0,
                       "stopped_after_duration": False, "duration_s": 40.0, "gates": [],
                       "phase_balance": {"data_wait": 0.7, "compute": 0.3},
                       "largest_phase": "data_wait", "gpu_utilization": 20.0,
                       "workload_kind": "training", "cost": 0.01, "cost_per_hour": 0.9,
                       "steps": 0, "cost_per_1k_steps": None, "unit_costs": [],
                       "warnings": []},
           "host": {}, "recommendations": [{"summary": hostile, "savings_per_month": 10.0}]}
    text = summary_markdown(doc)
    assert "<script>" not in text and "[x](http" not in text and "\x1b" not in text
    assert "evil \\| &lt;script&gt;alert(1)&lt;/script&gt; \\[x\\](http://e)" in text
    assert "`rm -rf`" not in text


def test_a_profile_says_why_it_may_not_stand_for_the_workload():
    from types import SimpleNamespace

    from daemon.commands.profile import representativeness

    facts = {"duration_s": 120.0, "stack_samples": 200, "gpus_used": [0],
             "first_gpu_work_after_s": 80.0, "first_step_after_s": 90.0, "steps": 4,
             "shared_gpus": {"0": [4242]}, "exit_status": 0,
             "stopped_after_duration": False, "interrupted": False}
    said = {w["code"]: w["message"] for w in representativeness(
        facts, SimpleNamespace(step_timeline=[(1.0, 4)]))}
    assert set(said) == {"startup", "startup_steps", "few_steps", "shared_gpu"}
    assert "80 s of 120 s before the first GPU work" in said["startup"]
    assert "pid 4242" in said["shared_gpu"]
    steady = dict(facts, first_gpu_work_after_s=3.0, first_step_after_s=4.0, steps=500,
                  shared_gpus={})
    assert representativeness(steady, SimpleNamespace(step_timeline=[(1.0, 500)])) == []


def test_compare_of_the_two_profiles_says_the_fix_is_better(starved, fixed):
    """The loop closed: the profiles `mlcostd profile` wrote, compared by `mlcostd compare`
    (its step counts read from the profile's step timeline)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "daemon", "compare", str(starved[0]),
                           str(fixed[0]), "--json"], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    figures = {f["name"]: f for f in result["figures"]}
    assert figures["phase.data_wait"]["b"] < figures["phase.data_wait"]["a"]
    assert figures["utilization"]["b"] > figures["utilization"]["a"]
    per_step = figures["cost_per_1k_steps"]
    assert per_step["b"] < per_step["a"]
    assert per_step["noise_from"] == "bootstrap over steps per bucket"
    # The prefetch is gone from the fixed run's advice, or (a loaded CI runner starves its
    # loader threads at start-up for a few samples: data_wait over the rule's 5%, under the
    # gate's 20%) it is worth less than half as much
    (prefetch,) = [r for r in result["recommendations"] if r["rule"] == "dataloader_starvation"]
    assert prefetch["status"] == "gone" or (
        prefetch["status"] == "changed"
        and prefetch["savings_per_month_b"] < prefetch["savings_per_month_a"] / 2), prefetch
    assert result["verdict"] == "better", json.dumps(result["figures"], indent=1)


def test_latency_gives_p50_p99_and_cost_per_request_of_the_server_the_command_runs(tmp_path):
    """--latency URL METRIC: the command's own aiohttp server exports a latency histogram
    (prometheus-client), read every second while it runs; profile.json, summary.md and
    profile.html say p50/p99 and the cost per request, and compare shows the latency change."""
    with socket.socket() as probe:  # a free port for the server's /metrics page
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "serve"
    requests = 160
    result = profile(out, "--simulate", "--latency", f"http://127.0.0.1:{port}/metrics",
                     "request_latency_seconds", "--", sys.executable,
                     str(PROGRAMS / "latency_server.py"), "--port", str(port),
                     "--requests", str(requests), "--slow-every", "20")
    assert result.returncode == 0, result.stderr
    facts = document(out)["profile"]
    (latency,) = facts["latency"]
    assert latency["target"] == "the command" and latency["error"] is None
    # counted from the command's start (its server was not there) to the last reading
    assert requests / 2 <= latency["requests"] <= requests
    assert latency["p50_seconds"] < 0.1 and latency["p99_seconds"] > 1.0  # 1 in 20 is slow
    assert latency["cost_per_request"] == pytest.approx(
        facts["cost"] / latency["requests"], rel=0.5)
    assert "Latency: p50" in (out / "summary.md").read_text()
    assert "latency: p50" in result.stderr
    assert 'data-table="latency"' in (out / "profile.html").read_text()
    # the same server without its slow requests: compare says p99 went down, better
    fast = tmp_path / "fast"
    result = profile(fast, "--simulate", "--latency", f"http://127.0.0.1:{port}/metrics",
                     "request_latency_seconds", "--", sys.executable,
                     str(PROGRAMS / "latency_server.py"), "--port", str(port),
                     "--requests", str(requests))
    assert result.returncode == 0, result.stderr
    done = subprocess.run([sys.executable, "-m", "daemon", "compare", str(out / "profile.json"),
                           str(fast / "profile.json"), "--json"], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    figures = {f["name"]: f for f in json.loads(done.stdout)["figures"]}
    p99 = figures["latency.p99.(command).request_latency_seconds"]
    assert p99["change"] < -1.0 and p99["verdict"] == "better", p99
    assert figures["latency.p50.(command).request_latency_seconds"]["verdict"] != "worse"


def test_latency_needs_an_http_url(tmp_path):
    result = profile(tmp_path / "x", "--latency", "ftp://h/metrics", "m", "--", "true")
    assert result.returncode == 2 and "--latency 'ftp://h/metrics' 'm': url" in result.stderr
    result = profile(tmp_path / "x", "--latency", "http://bob:hunter2-pw@h/metrics", "m", "--",
                     "true")
    assert result.returncode == 2 and "hunter2" not in result.stderr, result.stderr
    assert "--latency 'http://<redacted>@h/metrics' 'm'" in result.stderr, result.stderr


def test_the_profile_gives_the_runs_energy_and_carbon(starved):
    out, result = starved
    assert result.returncode == 0, result.stderr
    profile_doc = document(out)
    energy = profile_doc["profile"]["energy"]
    # the simulated GPU draws power; the run's process holds it: its share is the run's
    (proc,) = [p for p in profile_doc["processes"] if p["gpus"]]
    assert energy["joules"] == proc["energy"]["joules"] > 0
    grid = profile_doc["carbon"]["grid"]
    if grid["g_per_kwh"] is None:
        assert energy["co2e_grams"] is None and "carbon unknown" in grid["source"]
    else:
        assert energy["co2e_grams"] == pytest.approx(energy["kwh"] * grid["g_per_kwh"])
    summary = (out / "summary.md").read_text()
    # one rule for energy, as the report and the page print it (probe 120 F19: the page said
    # 0.001 kWh where the verdict said 0.0015)
    said = amount_text(energy["kwh"], energy["co2e_grams"])
    assert f"Energy: {said}" in summary
    assert said in (out / "profile.html").read_text()
    assert "energy: " in result.stderr


# A training script with a tqdm-style bar per epoch on stderr (as tqdm draws it: a carriage
# return before each redraw, a newline when the epoch's bar is done), 3 epochs of 20 steps.
TQDM_PER_EPOCH = """
import sys
from daemon.sim.device import Device

with Device(gpu_index=0) as gpu:
    gpu.alloc(2 << 30)
    for epoch in range(3):
        for step in range(21):
            if step:
                gpu.kernel(0.05, sm=0.9)
            bar = f"Epoch {epoch}: {100 * step // 20:3d}%|{'#' * (step // 2):<10}| {step}/20"
            sys.stderr.write(f"\\r{bar} [00:01]\\r{bar} [00:01]")  # drawn twice, as tqdm may
            sys.stderr.flush()
        sys.stderr.write("\\n")
"""


def test_a_tqdm_bar_per_epoch_counts_every_epochs_steps(tmp_path):
    """README's recipe, --progress '(\\d+)/\\d+', on a bar per epoch counted 20 steps of 60:
    the cost per step three times too high, the per-step gate failed, step_timeline flat
    after the first epoch."""
    script = tmp_path / "tqdm_epochs.py"
    script.write_text(TQDM_PER_EPOCH)
    out = tmp_path / "tqdm"
    result = profile(out, "--simulate", "--progress", r"(\d+)/\d+", "--", sys.executable,
                     str(script))
    assert result.returncode == 0, result.stderr
    facts = document(out)["profile"]
    assert facts["steps"] == 60 and facts["progress_restarts"] == 2, facts
    assert facts["cost_per_1k_steps"] == pytest.approx(facts["cost"] / 60 * 1000, rel=1e-3)
    counts = [n for _, n in facts["step_timeline"]]
    assert counts == sorted(counts) and counts[-1] == 60 and counts[19] == 20 < counts[20]
    said = "60 steps (the step number started over 2 times: each run's steps added)"
    assert said in result.stderr and said in (out / "summary.md").read_text()


THREADED = """
import threading
from daemon.sim.device import Device

def work():  # its GPU work in a thread, as DataParallel's parallel_apply runs each replica
    with Device(gpu_index=0) as gpu:
        gpu.alloc(2 << 30)
        for i in range(400):
            gpu.kernel(0.05, sm=0.9)
            print(f"iter {i + 1}", flush=True)

worker = threading.Thread(target=work)
worker.start()
worker.join()  # the main thread waits here the whole run
"""


def test_gpu_work_in_a_thread_is_compute_not_the_main_threads_join(tmp_path):
    """Written without the classifier in mind: every kernel runs in a worker thread while the
    main thread waits in Thread.join. The profile said `phases: idle 100%` beside `GPU
    utilization was 100%`, and compare called a thread-per-GPU change "worse"."""
    script = tmp_path / "threaded.py"
    script.write_text(THREADED)
    out = tmp_path / "threaded"
    result = profile(out, "--simulate", "--duration", "12s", "--min-utilization", "50%",
                     "--", sys.executable, str(script))
    assert result.returncode == 0, result.stderr
    facts = document(out)["profile"]
    assert facts["gpu_utilization"] >= 50
    assert facts["phase_balance"].get("compute", 0.0) >= 0.9, facts["phase_balance"]
    assert facts["phase_balance"].get("idle", 0.0) <= 0.1


def test_a_baseline_field_of_the_wrong_type_is_refused_before_the_run(tmp_path, capsys):
    """A baseline with cost_per_hour "x" (or a GPU model 5) crashed the profile with a
    TypeError once the run was over, and no file but profile.db was written: each field the
    regression gate reads is checked when the baseline is read, and the error names it."""
    from daemon.commands.cli import main

    marker = tmp_path / "ran"
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    for profile_facts, said in (
            ({"cost_per_hour": "x"}, "profile.cost_per_hour is 'x', not a number"),
            ({"steps": 10, "cost_per_step": [1]}, "profile.cost_per_step is [1], not a number"),
            ({"cost_per_hour": 1.0, "price_per_gpu_hour": "2"},
             "profile.price_per_gpu_hour is '2', not a number"),
            ({"cost_per_hour": 1.0, "steps": "10"}, "profile.steps is '10', not a whole number"),
            ({"cost_per_hour": 1.0, "gpu_models": ["A", 5]},
             "profile.gpu_models is ['A', 5], not a list of GPU model names")):
        baseline = tmp_path / "b.json"
        baseline.write_text(json.dumps({"profile": profile_facts}))
        status = main(["profile", "--out", str(tmp_path / "x"), "--max-regression", "10%",
                       "--baseline", str(baseline), *command])
        err = capsys.readouterr().err
        assert status == 2 and f"--baseline {baseline}: {said}" in err, err
        assert "Traceback" not in err and err.count("\n") == 1, err
    # a report's `burn` or `gpus` of the wrong shape (read for an older profile's price)
    baseline.write_text(json.dumps({"profile": {"cost_per_hour": 1}, "burn": [1]}))
    with pytest.raises(ValueError, match="burn is \\[1\\], not an object"):
        gates.read_baseline(str(baseline))
    assert not marker.exists() and not (tmp_path / "x").exists()


def test_a_baselines_gpu_models_reach_the_terminal_and_the_junit_file_as_text(tmp_path):
    """A baseline's GPU model "A\\x1b]0;PWNED\\x07\\x1b[2JX" was printed raw (a terminal title
    set, the screen cleared) and written raw into the JUnit file, which XML parsers then
    refused (not well-formed): no gate reached the CI at all."""
    hostile = "A\x1b]0;PWNED\x07\x1b[2JX\ufffe"
    baseline = profile_json(tmp_path / "old.json", 0.0000874, 1.006, hostile)
    old = gates.read_baseline(str(baseline))
    new = gates.read_baseline(str(profile_json(tmp_path / "new.json", 0.0000874, 0.503,
                                               "NVIDIA A10G")))
    gate = gates.max_regression(10, new, old, str(baseline))
    assert "against 1 x A\\x1b]0;PWNED\\x07\\x1b[2JX" in gate.message, gate.message
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in gate.message)
    # whatever a message holds, the JUnit file is XML 1.0: expat reads it back, shown
    raw = gates.Gate("--max-regression", "10%", False, f"gate: {hostile}\x00\ud800")
    xml = gates.junit_xml([gate, raw], command_error="exec failed: \x1b[31mred\x0c")
    root = ET.fromstring(xml)
    [failure] = [f.get("message") for f in root.iter("failure")]
    assert failure == "gate: A\\x1b]0;PWNED\\x07\\x1b[2JX\\ufffe\\x00\\ud800", failure
    assert "against 1 x A\\x1b]0;PWNED" in root.find(".//system-out").text  # the gate passed
    assert root.find(".//error").get("message") == "exec failed: \\x1b[31mred\\x0c"


def test_the_profiles_recorder_refusing_its_folder_names_out_not_db(tmp_path):
    """The recorder's own check of its store's folder said "pass --db ..., e.g. --db
    .../profile.db": `mlcostd profile --db` is "unrecognized arguments"."""
    from daemon import config as config_module
    from daemon.commands.profile import profile_config
    from daemon.runtime.daemon import DaemonError
    from daemon.runtime.profile import ProfileRecorder

    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o777)
    config = profile_config(config_module.load(None), out)
    recorder = ProfileRecorder(config, ["true"])
    with pytest.raises(DaemonError) as refused:
        recorder.daemon._check_files()
    said = str(refused.value)
    assert f"the database folder {out} is writable by its group or by everyone" in said, said
    assert "give --out a folder of its own" in said and "--db" not in said, said
