"""Scenario files: loading, validation, and stop() leaving nothing behind."""

from __future__ import annotations

import os
import time

import psutil
import pytest
from hostile_http import finishes_within

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
def test_a_scenario_booted_as_another_type_changes_that_alone(name, tmp_path):
    """The simulated host after a resize (daemon.sim.ec2): the same scenario, its name (so its
    GPU UUIDs) and GPUs, on the new instance type."""
    before = scenario.load(name)
    booted = tmp_path / f"{name}.toml"
    booted.write_text(scenario.booted_as(name, "g6e.12xlarge"))
    after = scenario.load(booted)
    assert after.instance.type == "g6e.12xlarge"
    assert after.instance.region == before.instance.region
    assert (after.name, after.gpu, after.workloads, after.faults) == (
        before.name, before.gpu, before.workloads, before.faults)
    assert after.gpu_uuid(0) == before.gpu_uuid(0)


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
