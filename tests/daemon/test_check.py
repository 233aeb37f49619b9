"""`mlcostd check`: each capability works or says why, with the fix."""

import json
import subprocess
import sys
import time

from daemon.commands.check import check_recorded_stacks
from daemon.sources.sample import ProcessSample, Sample
from daemon.store import facts
from daemon.store.writer import Store

MLCOSTD = [sys.executable, "-m", "daemon"]


def test_check_on_the_simulated_host(tmp_path):
    result = subprocess.run(MLCOSTD + ["check", "--simulate", "idle-host", "--json",
                                       "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60)
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert checks["NVML"]["status"] == "ok" and "NVIDIA A10G" in checks["NVML"]["detail"]
    assert checks["py-spy"]["status"] in ("ok", "warn")
    assert checks["database"]["status"] == "ok"
    for name in ("delay accounting", "pressure (PSI)", "process I/O"):
        check = checks[name]
        assert check["status"] == "ok" or check["fix"], check
    assert result.returncode == 0


def test_check_of_this_hosts_nvml(tmp_path):
    """Without a driver (CI) NVML fails with the fix; on a GPU host it lists the GPUs."""
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        has_nvml = True
    except pynvml.NVMLError:
        has_nvml = False
    result = subprocess.run(MLCOSTD + ["check", "--db", str(tmp_path / "x.db")],
                            capture_output=True, text=True, timeout=60)
    if has_nvml:
        assert "[ok  ] NVML: driver" in result.stdout
    else:
        assert result.returncode == 1
        assert "[FAIL] NVML" in result.stdout and "install the NVIDIA driver" in result.stdout


def test_recorded_stack_statuses_are_reported(tmp_path):
    path = tmp_path / "x.db"
    store = Store(str(path))
    now = time.time()
    procs = (ProcessSample(10, now - 5, 1, "alice", "python train.py"),
             ProcessSample(11, now - 5, 1, "bob", "./server"))
    store.write(Sample(ts=now, tick=1, processes=procs))
    facts.write_stack_status(store, 10, now - 5, now, "ok", None)
    facts.write_stack_status(store, 11, now - 5, now, "permission_denied",
                                    "Permission Denied: needs root or CAP_SYS_PTRACE")
    store.close()
    check = check_recorded_stacks(path)
    assert check.status == "warn"
    assert "1 ok, 1 not" in check.detail and "pid 11 (./server): permission_denied" in check.detail
    assert "CAP_SYS_PTRACE" in check.fix
    assert check_recorded_stacks(tmp_path / "none.db") is None
