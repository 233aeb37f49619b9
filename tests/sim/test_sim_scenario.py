"""Scenario files: loading, validation, and stop() leaving nothing behind."""

from __future__ import annotations

import dataclasses
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from hostile_http import finishes_within
from simhost import poll

from daemon.sim import scenario

BASE = '[instance]\nprovider = "aws"\ntype = "g5.xlarge"\nregion = "us-east-1"\n'


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_builtins_load(name):
    sc = scenario.load(name)
    assert sc.name == name and sc.gpu_count >= 1 and sc.description


def test_demo_host():
    sc = scenario.load("demo")
    assert (sc.instance.provider, sc.instance.type, sc.instance.region, sc.instance.lifecycle) == (
        "aws", "p4d.24xlarge", "us-east-1", "on-demand")
    assert (sc.gpu_count, sc.gpu_model) == (8, "NVIDIA A100-SXM4-40GB")
    programs = {w.program for w in sc.workloads}
    assert programs == {"healthy_train", "data_starved", "checkpoint_heavy", "idle_notebook",
                        "inference_server"}
    used = {g for w in sc.workloads for g in w.gpus}
    assert 5 not in used  # the idle GPU
    assert sc.gpu_uuid(3) == scenario.load("demo").gpu_uuid(3) != sc.gpu_uuid(4)


@pytest.mark.parametrize("name", scenario.builtin_names())
def test_a_scenario_booted_as_another_type_has_that_types_gpus(name, tmp_path):
    """The simulated host after a resize (daemon.sim.ec2): the same scenario, its name (so its
    GPU UUIDs) and region, on the new type with the GPUs the price catalog says it has (the
    rebooted demo kept its 8 A100s on a 4 x L40S type, priced over 8 GPUs); each workload
    started again on the GPUs it had that are left, as many as it had (up to the 4) on GPUs
    that exist; a fault of a GPU that is gone gone with it."""
    before = scenario.load(name)
    booted = tmp_path / f"{name}.toml"
    booted.write_text(scenario.booted_as(name, "g6e.12xlarge"))
    after = scenario.load(booted)
    assert after.instance == dataclasses.replace(before.instance, type="g6e.12xlarge")
    assert (after.gpu_model, after.gpu_count) == ("NVIDIA L40S", 4)  # pricing/data/catalog.csv
    assert after.gpu == scenario.GpuSpec("NVIDIA L40S", 4, memory_gib=46068 / 1024,
                                         power_idle_w=35, power_max_w=350, gpm=False)
    assert after.name == before.name and after.gpu_uuid(0) == before.gpu_uuid(0)
    assert [(w.name, w.program, w.command, w.options) for w in after.workloads] == [
        (w.name, w.program, w.command, w.options) for w in before.workloads]
    for was, now in zip(before.workloads, after.workloads, strict=True):
        assert now.gpus[:len([g for g in was.gpus if g < 4])] == tuple(g for g in was.gpus if g < 4)
        assert len(set(now.gpus)) == len(now.gpus) == min(len(was.gpus), 4)
        assert all(0 <= g < 4 for g in now.gpus)
    assert after.faults == tuple(f for f in before.faults if f.gpu is None or f.gpu < 4)
    assert after.description.startswith(before.description)
    assert "Resized to g6e.12xlarge: 4 x NVIDIA L40S" in after.description


def test_the_demo_booted_as_4_l40s_runs_its_five_workloads_on_the_four_gpus():
    """The inference server's GPU 4 is gone: it starts on the GPU with the most memory free,
    beside the notebook (12 + 18 of 45 GiB; GPU 4 mod 4 would have put it beside the trainer,
    30 + 18, more than an L40S holds)."""
    after = scenario.loads(scenario.booted_as("demo", "g6e.12xlarge"))
    assert {w.name: w.gpus for w in after.workloads} == {
        "train-resnet": (0,), "train-starved": (1,), "train-checkpoints": (2,),
        "notebook": (3,), "serve-bs1": (3,)}
    assert after.description.endswith("serve-bs1 (GPU 4 -> 3).")


def test_the_workloads_of_gpus_that_are_gone_go_where_the_most_memory_is_free(tmp_path):
    """8 A10Gs (24 GiB) to 4: the notebooks of GPUs 5 and 6 go to GPU 3 (2 GiB held: 22 free),
    then GPU 1 (20 free, GPU 3 now 16); one of 6 on GPUs 4-7 takes the most free, all 4."""
    def notebook(name: str, gpus: list[int], gib: float) -> str:
        return (f'[[workloads]]\nname = "{name}"\nprogram = "idle_notebook"\ngpus = {gpus}\n'
                f"options = {{ memory_gib = {gib} }}\n")

    file = tmp_path / "eight.toml"
    file.write_text(BASE.replace("g5.xlarge", "g5.48xlarge") + '[gpu]\nmodel = "NVIDIA A10G"\n'
                    "count = 8\n" + notebook("a", [0], 20) + notebook("b", [1], 4)
                    + notebook("c", [2], 10) + notebook("d", [3], 2) + notebook("e", [5], 6)
                    + notebook("f", [6], 6) + notebook("g", [4, 5, 6, 7], 1))
    after = scenario.loads(scenario.booted_as(file, "g5.12xlarge"))
    assert (after.gpu_model, after.gpu_count) == ("NVIDIA A10G", 4)
    assert [w.gpus for w in after.workloads] == [(0,), (1,), (2,), (3,), (3,), (1,),
                                                 (3, 1, 2, 0)]


def test_a_resize_to_the_same_accelerator_keeps_the_scenarios_figures_and_a_spanning_job(
        tmp_path):
    """g5.xlarge -> g5.12xlarge: the scenario's own A10G (its memory and power as written) x 4;
    the hopper's 4-GPU job on a p4de's 8 A100-80GB keeps its GPUs, on a g6e.xlarge's one L40S
    runs on GPU 0 (once)."""
    file = tmp_path / "mine.toml"
    file.write_text(BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\nmemory_gib = 22.5\n'
                    'power_max_w = 299\n[[faults]]\nkind = "hang"\ngpu = 0\n'
                    'call = "nvmlDeviceGetPowerUsage"\nseconds = 0.5\nat_tick = 3\n')
    after = scenario.loads(scenario.booted_as(file, "g5.12xlarge"))
    assert after.gpu == dataclasses.replace(scenario.load(file).gpu, count=4)
    assert after.gpu.memory_gib == 22.5 and after.gpu.power_max_w == 299
    assert after.faults == scenario.load(file).faults
    bigger = scenario.loads(scenario.booted_as("hopper", "p4de.24xlarge"))
    assert (bigger.gpu_model, bigger.gpu_count) == ("NVIDIA A100-SXM4-80GB", 8)
    assert [w.gpus for w in bigger.workloads] == [w.gpus for w in scenario.load("hopper").workloads]
    smaller = scenario.loads(scenario.booted_as("hopper", "g6e.xlarge"))
    assert [w.gpus for w in smaller.workloads] == [(0,), (0,)]


def test_a_workloads_memory_is_its_option_else_its_programs_default():
    from daemon.sim.workloads import healthy_train

    assert healthy_train.MEMORY_GIB == 30.0
    for options, gib in (({"memory_gib": 70}, 70.0), ({}, 30.0)):
        w = scenario.Workload("w", (0,), program="healthy_train", options=options)
        assert scenario.workload_memory_gib(w) == gib
    assert scenario.workload_memory_gib(scenario.Workload("c", (0,), command=("true",))) == 0.0


@pytest.mark.parametrize(("instance_type", "said"), [
    ("g9.unknown", "no price for aws/g9.unknown"),  # no row: its GPUs are unknown
    ("inf2.xlarge", "Inferentia2 x 1"),  # no NVIDIA GPU: the simulated NVML has none of it
])
def test_a_boot_as_a_type_whose_gpus_cannot_be_simulated_is_refused(instance_type, said):
    with pytest.raises(scenario.ScenarioError, match="instance.type") as e:
        scenario.booted_as("demo", instance_type)
    assert said in str(e.value)


@pytest.mark.parametrize("instance_type", ['g5.xlarge"\n[gpu]', "", "a b", "x" * 65])
def test_a_boot_as_a_type_that_is_no_type_name_is_refused(instance_type):
    with pytest.raises(scenario.ScenarioError, match="instance.type"):
        scenario.booted_as("demo", instance_type)


@pytest.mark.parametrize(("text", "key"), [
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 0\n', "gpu.count"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\ncolour = "red"\n', "gpu.colour"),
    (BASE + '[gpu]\nmodel = "Mystery GPU"\ncount = 1\n', "gpu.memory_gib"),
    (BASE.replace('"aws"', "3") + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n', "instance.provider"),
    (BASE + 'lifecycle = "reserved"\n[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n', "instance.lifecycle"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[workloads]]\nname = "x"\n'
     'program = "no_such"\ngpus = [0]\n', "workloads[0].program"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[workloads]]\nname = "x"\n'
     'program = "healthy_train"\ngpus = [3]\n', "workloads[0].gpus"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[faults]]\nkind = "meteor"\n', "faults[0].kind"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[faults]]\nkind = "hang"\ngpu = 0\n'
     'call = "nvmlDeviceGetPowerUsage"\n', "faults[0].seconds"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[faults]]\nkind = "gpu_lost"\ngpu = 0\n'
     'at = 5\nuntil = 2\n', "faults[0].until"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[faults]]\nkind = "gpu_lost"\ngpu = 0\n'
     'at_tick = 5\nuntil_tick = 5\n', "faults[0].until_tick"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[faults]]\nkind = "gpu_lost"\ngpu = 0\n'
     'at_tick = 1.5\n', "faults[0].at_tick"),
    (BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[faults]]\nkind = "nvml_missing"\n'
     'at = 1.0\nuntil_tick = 4\n', "faults[0]"),
    ("[gpu\n", "(file)"),
])
def test_bad_scenarios_name_the_key(text, key):
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.loads(text)
    assert e.value.key == key
    assert key in str(e.value) and "not valid" in str(e.value)


ONE_GPU = BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[faults]]\n'


@pytest.mark.parametrize(("fault", "key", "said"), [
    # mlcostd calls the newest version of a call: the fault on the older one never fired
    ('kind = "hang"\ngpu = 0\ncall = "nvmlDeviceGetMemoryInfo"\nseconds = 2\n', "faults[0].call",
     "did you mean nvmlDeviceGetMemoryInfo_v2?"),
    ('kind = "hang"\ngpu = 0\ncall = "nvmlDeviceGetComputeRunningProcesses"\nseconds = 2\n',
     "faults[0].call", "did you mean nvmlDeviceGetComputeRunningProcesses_v3?"),
    ('kind = "not_supported"\ncalls = ["nvmlDeviceGetPowerUsage", "nvmlDeviceGetHandleByIndex"]\n',
     "faults[0].calls", "did you mean nvmlDeviceGetHandleByIndex_v2?"),
    # a name the library does not have, or a call that is on no GPU
    ('kind = "in_use"\ncalls = ["nvmlDeviceGetPowerUsag"]\n', "faults[0].calls",
     "no nvmlDeviceGetPowerUsag: did you mean nvmlDeviceGetPowerUsage?"),
    ('kind = "hang"\ngpu = 0\ncall = "nvmlSystemGetDriverVersion"\nseconds = 2\n',
     "faults[0].call", "no call on one GPU"),
    # only nvmlInit looks for the library, when a client starts: a later start never fires
    ('kind = "nvml_missing"\nat_tick = 20\n', "faults[0].at_tick", "until_tick"),
    ('kind = "driver_mismatch"\nat = 5.0\nuntil = 9.0\n', "faults[0].at", "nvmlInit"),
])
def test_a_fault_that_could_never_fire_is_refused_saying_what_would(fault, key, said):
    """Probe 142 L7: these loaded and ran without ever firing (the simulated library replaces
    NVML only: its scenario loading knows which of its calls are made)."""
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.loads(ONE_GPU + fault)
    assert e.value.key == key and said in str(e.value), str(e.value)


@pytest.mark.parametrize("fault", [
    # an older call fires where the scenario takes the newer ones away (mlcostd falls back)
    'kind = "hang"\ngpu = 0\ncall = "nvmlDeviceGetMemoryInfo"\nseconds = 2\n[[faults]]\n'
    'kind = "missing_symbol"\nsymbol = "nvmlDeviceGetMemoryInfo_v2"\n',
    'kind = "hang"\ngpu = 0\ncall = "nvmlDeviceGetHandleByIndex_v2"\nseconds = 2\n',
    'kind = "nvml_missing"\nuntil_tick = 3\n', 'kind = "driver_mismatch"\nuntil = 4.0\n',
    'kind = "in_use"\ncalls = ["nvmlGpmSampleGet"]\nat_tick = 2\n',
])
def test_a_fault_that_fires_loads(fault):
    assert scenario.loads(ONE_GPU + fault).faults


def test_a_scenario_path_that_is_no_toml_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "host.toml"
    os.mkfifo(fifo)  # no writer: an open that waits for one never returns
    binary = tmp_path / "binary.toml"
    binary.write_bytes(BASE.encode() + b"name = \"\xc6\"\n")  # (was a UnicodeDecodeError)
    for path, why in ((fifo, "this one is not a regular file"), (tmp_path, "is not a regular"),
                      ("/dev/null", "is not a regular file"),
                      (binary, "byte 0xc6 on line 5 is not")):
        done, outcome = finishes_within(10, scenario.load, str(path))
        assert done, f"loading the scenario {path} was still going after 10 s"
        assert isinstance(outcome, scenario.ScenarioError), (path, outcome)
        assert why in str(outcome) and "scenario" in str(outcome), outcome


def test_unknown_builtin_lists_the_builtins():
    with pytest.raises(scenario.ScenarioError, match="demo"):
        scenario.load("no-such-scenario")


def test_stop_leaves_no_process_and_no_state_dir():
    running = scenario.start(scenario.load("data-stall"))
    assert running.wait_ready(10)
    (_, pid, _), = running.workloads
    # the trainer forks DataLoader-like workers: wait for them to exist
    deadline = time.monotonic() + 10
    while len(psutil.Process(pid).children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    assert len(family) >= 3
    state_dir = running.state_dir
    running.stop()
    running.stop()  # idempotent
    for proc in family:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    assert not state_dir.exists()


def test_a_workload_that_crashes_is_said_in_the_daemons_log(tmp_path, caplog):
    """A workload that asks a GPU for more than it has crashes at start: its traceback was
    only in the scenario's log, and the daemon recorded an empty GPU without a word."""
    import logging
    import sys

    from daemon.runtime import simulation as simulation_module
    from daemon.runtime.simulation import Simulation

    crash = [sys.executable, "-c", "import sys; sys.exit(3)"]
    finish = [sys.executable, "-c", "pass"]
    file = tmp_path / "crash.toml"
    file.write_text('name = "crash"\n' + BASE + '[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n'
                    f'[[workloads]]\nname = "trainer"\ngpus = [0]\ncommand = {crash!r}\n'
                    f'[[workloads]]\nname = "done"\ngpus = [0]\ncommand = {finish!r}\n'
                    .replace("'", '"'))
    sim = Simulation(str(file))
    sim.start()
    try:
        pids = {name: pid for name, pid, _ in sim._running.workloads}
        for pid in pids.values():  # both have exited (reaped below, by newly_exited)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                        break
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.02)
        with caplog.at_level(logging.INFO, logger=simulation_module.__name__):
            sim.ticked(simulation_module.EXITS_EVERY_TICKS)
            sim.ticked(2 * simulation_module.EXITS_EVERY_TICKS)  # each said once
        said = [r for r in caplog.records if r.name == simulation_module.__name__]
        assert [(r.levelname, r.getMessage()) for r in said] == [
            ("WARNING", f"simulated workload 'trainer' (pid {pids['trainer']}) exited with "
                        f"status 3; its output is in {sim._running.log_path}"),
            ("INFO", f"simulated workload 'done' (pid {pids['done']}) finished")]
    finally:
        sim.stop()


ROOT = Path(__file__).resolve().parents[2]
ONE_WORKLOAD = BASE + (
    'lifecycle = "on-demand"\n[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n[[workloads]]\n'
    'name = "train"\nprogram = "healthy_train"\ngpus = [0]\noptions = { memory_gib = 4 }\n')


def _simulation(tmp: Path, scenario_arg: str, *options: str, umask: int = 0o022):
    """`python -m daemon.sim SCENARIO` with its temp dir `tmp` (the umask given), as a running
    demo keeps one: (its process, its state dir once it said it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.sim", scenario_arg, *options], cwd=ROOT,
        env=dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: os.umask(umask))
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("export "):
            return proc, Path(line.strip().partition("=")[2])
    proc.wait(timeout=30)
    pytest.fail(f"python -m daemon.sim {scenario_arg} said no state dir (exit {proc.returncode})")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()


def test_nothing_in_a_state_dir_is_for_another_user_whatever_the_umask(tmp_path):
    """Probe 142 L7: under umask 0 a state dir's files were 0666 and attach/ 0777 (inside its
    0700 folder): every file is 0600 and every folder 0700 now, the workloads' too."""
    scenario_file = tmp_path / "one.toml"
    scenario_file.write_text(ONE_WORKLOAD)
    proc, state_dir = _simulation(tmp_path, str(scenario_file), umask=0)
    try:
        poll(lambda: list((state_dir / "attach").glob("*.att")), 30, "the workload's attach file")
        found = {}
        for path in [state_dir, *state_dir.rglob("*")]:
            found[str(path.relative_to(tmp_path))] = stat.S_IMODE(os.lstat(path).st_mode)
        assert {"host.json", "clock", "workloads.log", "attach"} <= {Path(p).name for p in found}
        wide = {p: oct(m) for p, m in found.items() if m & 0o077}
        assert not wide, wide
    finally:
        _stop(proc)


def test_a_killed_simulations_state_dir_is_removed_at_the_next_start_and_a_running_ones_kept(
        tmp_path, monkeypatch):
    """kill -9 of the daemon left /tmp/mlcost-sim-<scenario>-* behind (probe 142 L7); the next
    simulated start removes those whose maker is gone, and only those: not another running
    demo's (as a `mlcost-top --demo` beside the tests), not one asked to be kept, not another
    process's whose pid a dead one had (the folder older than the process), not one named
    before the pid was in the name."""
    killed, killed_dir = _simulation(tmp_path, "single-gpu")
    running, running_dir = _simulation(tmp_path, "single-gpu")
    kept, kept_dir = _simulation(tmp_path, "single-gpu", "--keep")
    try:
        for proc in (killed, kept):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        assert killed_dir.is_dir() and kept_dir.is_dir()
        # a folder named with the running demo's pid, from before that process started
        reused = tmp_path / f"mlcost-sim-single-gpu-{running.pid}-abcd1234"
        reused.mkdir(mode=0o700)
        os.utime(reused, (time.time() - 3600, time.time() - 3600))
        old_name = tmp_path / "mlcost-sim-single-gpu-k2j4h5g6"
        old_name.mkdir(mode=0o700)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        started = scenario.start(scenario.load("single-gpu"), wait=0)
        try:
            assert started.state_dir.parent == tmp_path
            assert not killed_dir.exists() and not reused.exists()
            assert running_dir.is_dir() and kept_dir.is_dir() and old_name.is_dir()
            assert started.state_dir.name.startswith(f"mlcost-sim-single-gpu-{os.getpid()}-")
        finally:
            started.stop()
        assert scenario.remove_stale_state_dirs(tmp_path) == []  # (nothing else to remove)
        _stop(running)
        assert not running_dir.exists()  # (its own stop removed it)
    finally:
        for proc in (killed, running, kept):
            _stop(proc)
