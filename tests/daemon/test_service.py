"""mlcostd end to end: `run --simulate`, `report --json`, clean exits and kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest
from simhost import GIB, wait_until

from daemon.sim import scenario
from daemon.sources.procs import delay_accounting_enabled
from daemon.store.writer import StoreReader

MLCOSTD = [sys.executable, "-m", "daemon"]

# What each built-in workload asks its simulated GPU for unless the scenario says otherwise:
# (GiB of device memory, SM fraction of its kernels).
ASKS = {
    "healthy_train": (30.0, 0.85),
    "data_starved": (20.0, 0.8),
    "checkpoint_heavy": (26.0, 0.85),
    "idle_notebook": (12.0, 0.0),
    "inference_server": (18.0, 0.12),
}


def mlcostd(*args, **kwargs):
    return subprocess.run(MLCOSTD + list(args), capture_output=True, text=True, timeout=60,
                          **kwargs)


def workloads_of(pid):
    """The simulated workloads this daemon started (its children)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    return {c.pid for c in children} & workload_pids()


def workload_pids():
    return {p.pid for p in psutil.process_iter(["cmdline"])
            if any("daemon.sim.workloads" in part for part in (p.info["cmdline"] or []))}


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    """Record the demo host for ~95 s, stop it with SIGTERM, return the JSON report.

    95 s: the simulated host's config (daemon/sim/simulate.toml) fires idle events after 1 min
    and lets the rules advise after 1 min of observation; the rules run every 15 s."""
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    before = workload_pids()
    daemon = subprocess.Popen(MLCOSTD + ["run", "--simulate", "demo", "--db", str(db),
                                         "--socket", str(db.parent / "api.sock")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(95)
    daemon.send_signal(signal.SIGTERM)
    output, _ = daemon.communicate(timeout=30)
    report = mlcostd("report", "--db", str(db), "--since", "5m", "--json")
    assert report.returncode == 0, report.stderr
    text = mlcostd("report", "--db", str(db), "--since", "5m")
    return {"rc": daemon.returncode, "log": output, "report": json.loads(report.stdout),
            "text": text.stdout, "before": before, "db": db}


def test_daemon_exits_cleanly_and_leaves_nothing_running(demo_report):
    assert demo_report["rc"] == 0, demo_report["log"]
    assert "stopped after" in demo_report["log"]
    assert "Traceback" not in demo_report["log"]
    leftovers = wait_until(lambda: (workload_pids() - demo_report["before"]) == set() or None,
                           timeout=5)
    assert leftovers


def test_every_simulated_gpu_appears(demo_report):
    report = demo_report["report"]
    demo = scenario.load("demo")
    assert report["host"]["simulated"] == "demo"
    assert report["host"]["instance"]["type"] == "p4d.24xlarge"
    assert [g["index"] for g in report["gpus"]] == list(range(demo.gpu_count))
    for gpu in report["gpus"]:
        assert gpu["name"] == "NVIDIA A100-SXM4-40GB"
        assert gpu["memory_total_bytes"] == 40 * GIB
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["sm_activity"] is None  # A100: no GPM; absent, not 0
    held = {gpu for w in demo.workloads for gpu in w.gpus}
    idle = [g for g in report["gpus"] if g["index"] not in held]
    assert idle and all(g["utilization"] == 0 for g in idle)


def test_each_workload_shows_what_it_asked_the_device_for(demo_report):
    report = demo_report["report"]
    demo = scenario.load("demo")
    by_gpus = {tuple(p["gpus"]): p for p in report["processes"] if p["gpus"]}
    for workload in demo.workloads:
        memory_gib, sm = ASKS[workload.program]
        memory_gib = float(workload.options.get("memory_gib", memory_gib))
        proc = by_gpus[tuple(workload.gpus)]
        assert proc["gpu_memory_bytes"] == int(memory_gib * GIB) * len(workload.gpus), workload
        per_gpu_share = proc["sm_share"] / len(workload.gpus)
        assert per_gpu_share <= sm * 100 + 3, workload
        if workload.program == "idle_notebook":
            assert proc["sm_share"] < 5  # it loaded its model at start, then nothing
        if workload.program == "healthy_train":
            assert per_gpu_share >= sm * 100 * 0.8, workload
        assert proc["user"] and proc["start_time"] > 0 and "daemon.sim.workloads" in proc["command"]


def test_data_starved_process_shows_its_reads_and_waits(demo_report):
    report = demo_report["report"]
    demo = scenario.load("demo")
    (starved,) = [w for w in demo.workloads if w.program == "data_starved"]
    proc = next(p for p in report["processes"] if p["gpus"] == list(starved.gpus))
    assert proc["read_bytes"] > 32 << 20  # it reads its data set from disk, not the cache
    if delay_accounting_enabled():
        assert proc["io_wait_seconds"] is not None
    else:
        assert proc["io_wait_seconds"] is None  # unknown, not 0
    healthy = next(p for p in report["processes"] if p["gpus"] == [0])
    assert healthy["read_bytes"] < proc["read_bytes"] / 10


def test_text_report_names_the_host_and_gpus(demo_report):
    text = demo_report["text"]
    assert "scenario 'demo'" in text and "p4d.24xlarge" in text
    for index in range(8):
        assert f"\n  {index}    NVIDIA A100-SXM4-40GB" in text


def test_report_without_database_says_how_to_start(tmp_path):
    result = mlcostd("report", "--db", str(tmp_path / "none.db"))
    assert result.returncode == 1
    assert "mlcostd run" in result.stderr


def test_second_daemon_on_the_same_database_refuses(tmp_path):
    db = tmp_path / "x.db"
    first = subprocess.Popen(MLCOSTD + ["run", "--simulate", "idle-host", "--db", str(db)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: db.exists(), timeout=10)
        second = mlcostd("run", "--simulate", "idle-host", "--db", str(db))
        assert second.returncode == 1
        assert f"pid {first.pid}" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)


def test_unknown_scenario_is_a_clear_error(tmp_path):
    result = mlcostd("run", "--simulate", "no-such-host", "--db", str(tmp_path / "x.db"))
    assert result.returncode == 1
    assert "no-such-host" in result.stderr and "demo" in result.stderr


def test_kill_9_at_random_points_loses_no_committed_tick(tmp_path):
    db = tmp_path / "crash.db"
    rng = random.Random(7)
    seen_before_kill = []
    for _ in range(4):
        daemon = subprocess.Popen(
            MLCOSTD + ["run", "--simulate", "idle-host", "--db", str(db), "--interval", "0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: db.exists(), timeout=10)
        workloads = wait_until(lambda pid=daemon.pid: workloads_of(pid) or None, timeout=10)
        time.sleep(rng.uniform(1.0, 2.5))
        reader = StoreReader(str(db))
        seen = reader.ticks()
        reader.close()
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait()
        seen_before_kill.append(seen)
        # Its workloads die with it (PR_SET_PDEATHSIG), even after SIGKILL.
        wait_until(lambda workloads=workloads: not (workloads & workload_pids()), timeout=10)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    reader = StoreReader(str(db))
    stored = reader.ticks()
    rows = reader.query("SELECT count(*) AS n FROM ticks")[0]["n"]
    reader.close()
    assert rows == len(stored)
    assert stored == list(range(1, len(stored) + 1))  # numbered on across restarts, no gaps
    for seen in seen_before_kill:
        assert seen and set(seen) <= set(stored)


def _proc(report, program):
    demo = scenario.load("demo")
    (workload,) = [w for w in demo.workloads if w.program == program]
    return next(p for p in report["processes"] if p["gpus"] == list(workload.gpus))


def _largest(phases):
    return max(phases, key=lambda phase: phases[phase]["share"])


def test_phase_balance_points_at_the_lines_responsible(demo_report):
    report = demo_report["report"]
    starved = _proc(report, "data_starved")
    assert _largest(starved["phases"]) == "data_wait", starved["phases"]
    top = starved["phases"]["data_wait"]["top_stacks"][0]
    assert top["file"].endswith("daemon/sim/workloads/data_starved.py") and top["line"] > 0
    assert top["function"] == "read_shard"
    checkpoint = _proc(report, "checkpoint_heavy")
    assert checkpoint["phases"].get("checkpoint", {}).get("share", 0) >= 0.15
    assert checkpoint["phases"]["checkpoint"]["top_stacks"][0]["file"].endswith(
        "checkpoint_heavy.py")
    healthy = _proc(report, "healthy_train")
    assert healthy["phases"]["compute"]["share"] >= 0.9
    notebook = _proc(report, "idle_notebook")
    assert _largest(notebook["phases"]) == "idle"
    assert starved["stack_status"] == "ok"
    text = demo_report["text"]
    assert "data_starved.py:" in text and "read_shard" in text


def test_burn_is_the_catalog_price_split_per_gpu(demo_report):
    burn = demo_report["report"]["burn"]
    assert burn["price_per_hour"] == pytest.approx(32.7726)
    assert burn["price_per_gpu"] == pytest.approx(32.7726 / 8)
    assert burn["total_per_hour"] == pytest.approx(32.7726, rel=1e-6)
    assert 0 < burn["wasted_per_hour"] < burn["total_per_hour"]
    healthy = _proc(demo_report["report"], "healthy_train")
    assert healthy["burn_per_hour"] == pytest.approx(32.7726 / 8, rel=0.01)


def test_idle_gpu_and_idle_notebook_are_flagged(demo_report):
    events = {(e["kind"], e["target"]) for e in demo_report["report"]["events"]}
    assert ("gpu_unheld_idle", "gpu:5") in events
    assert ("gpu_held_idle", "gpu:3") in events


def test_recommendations_with_savings(demo_report):
    recs = {r["rule"]: r for r in demo_report["report"]["recommendations"]}
    expected = {"idle_gpu_held", "dataloader_starvation", "blocking_checkpoint",
                "underbatched_inference", "spot_training", "over_provisioned"}
    assert expected <= set(recs), sorted(recs)
    for name in expected:
        rec = recs[name]
        assert rec["savings_per_month"] > 0 and "upper bound" in rec["method"], rec
        assert rec["evidence"] and rec["action"]["kind"]
    assert "data_starved.py:" in recs["dataloader_starvation"]["summary"]
    shrink = recs["over_provisioned"]["action"]
    assert shrink["kind"] == "resize" and shrink["from"] == "p4d.24xlarge" and shrink["to"]
    assert recs["idle_gpu_held"]["action"]["kind"] == "sigterm"


def test_report_says_when_samples_start_later_than_the_window(demo_report):
    report = mlcostd("report", "--db", str(demo_report["db"]), "--since", "2d", "--json")
    window = json.loads(report.stdout)["window"]
    assert window["first_sample_at"] - window["since"] > 86400
    text = mlcostd("report", "--db", str(demo_report["db"]), "--since", "2d").stdout
    assert "(samples from " in text
