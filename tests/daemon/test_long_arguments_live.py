"""One long argument never freezes the daemon (issue 20 item 6): a real mlcostd records a
simulated host where 64 processes each carry one 64 KiB argument (8 GPU processes, each with 7
children, as DataLoader workers would be), in the shapes that made redaction quadratic or
recursive. Ticks keep being recorded and the API keeps answering; each command line is stored
cut, with its marker. No time is asserted (bench/redact.py prints the figures).

One GPU process also names itself with a terminal title sequence and the host name carries one:
the API serves both in their visible form and the daemon's log holds no ESC byte."""

from __future__ import annotations

import json
import sys

import livedaemon
from simhost import poll

from daemon.sources.redact import ARGUMENT_LIMIT

GPUS = 8
CHILDREN = 7  # per GPU process: 8 + 8 * 7 = 64 processes with a long argument
LONG = 64 << 10
SHAPES = ("a" * LONG, "a=" * (LONG // 2), "x+" * (LONG // 2), "ab " * (LONG // 3))
TITLE = "\x1b]0;PWNED-TITLE\x07"

WORKLOAD = """
import subprocess, sys, time
from daemon.sim.device import Device
dev = Device(gpu_index={gpu})
dev.alloc(1 << 30)
long = sys.argv[1]
kids = [subprocess.Popen(["sh", "-c", "sleep 600; :", long[:-1] + str(i)]) for i in range({kids})]
while True:
    dev.kernel(0.05, sm=0.5)
    time.sleep(0.2)
"""


def scenario_text() -> str:
    text = ('name = "long-arguments"\n[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\n'
            f'region = "us-east-1"\n[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = {GPUS}\n')
    for gpu in range(GPUS):
        argv = [sys.executable, "-c", WORKLOAD.format(gpu=gpu, kids=CHILDREN),
                SHAPES[gpu % len(SHAPES)]] + ([TITLE] if gpu == 0 else [])
        text += (f'[[workloads]]\nname = "long{gpu}"\ngpus = [{gpu}]\n'
                 f"command = {json.dumps(argv)}\n")
    return text


def test_64_processes_with_a_64_kib_argument_each_never_stop_the_ticks(tmp_path, monkeypatch):
    path = tmp_path / "long.toml"
    path.write_text(scenario_text())
    monkeypatch.setenv("MLCOST_HOSTNAME", "gpu-host" + TITLE)
    daemon = livedaemon.start(tmp_path / "run", str(path), interval=0.5)
    try:
        def cut_commands() -> list[str]:
            return [p["command"] for p in daemon.now().get("processes") or []
                    if f"<truncated: {LONG} characters>" in p["command"]]

        # every GPU process is seen with its argument cut (children show in the tree below)
        poll(lambda: len(cut_commands()) >= GPUS, 180, f"{GPUS} GPU processes recorded",
             explain=daemon.log_tail)
        assert all(len(c) < 2 * ARGUMENT_LIMIT for c in cut_commands())
        assert any(c.endswith("\\x1b]0;PWNED-TITLE\\x07") for c in cut_commands())
        assert daemon.now()["host"]["hostname"] == "gpu-host\\x1b]0;PWNED-TITLE\\x07"
        watched = poll(lambda: _watched(daemon) >= GPUS * (1 + CHILDREN), 180,
                       "the children with their long arguments watched", explain=daemon.log_tail)
        before = len(daemon.ticks())
        for _ in range(5):  # the API answers between the ticks, throughout
            assert daemon.healthy()
            daemon.now()
        daemon.wait_for_ticks(before + 20, timeout=120)
        assert daemon.healthy()
    finally:
        code = daemon.stop()
    log = daemon.log()
    assert code == 0 and "Traceback" not in log, log[-3000:]
    assert "\x1b" not in log
    assert watched


def _watched(daemon: livedaemon.LiveDaemon) -> int:
    """Processes recorded with a cut argument (GPU processes and their children)."""
    from daemon.store.reader import StoreReader

    if not daemon.db.exists():
        return 0
    reader = StoreReader(str(daemon.db))
    try:
        rows = reader.query("SELECT COUNT(*) AS n FROM processes "
                            "WHERE command LIKE '%<truncated: %'")
    finally:
        reader.close()
    return int(rows[0]["n"]) if rows else 0
