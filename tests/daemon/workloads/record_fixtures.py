"""Record the py-spy fixtures under tests/daemon/fixtures/pyspy/ from the workloads here.

Run as root: `.venv/bin/python tests/daemon/workloads/record_fixtures.py [NAME ...]`.
Each workload is started, and dumped with `py-spy dump --json --nonblocking` every 0.1 s until
its main thread shows the frames wanted; that dump, trimmed to the main thread (py-spy's own
JSON otherwise unchanged), is saved as NAME.json. For the starved DataLoader, a worker's dump
showing its blocked read is saved too as NAME.worker.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from daemon.sources.stacks import find_py_spy, main_thread, parse_dump, worker_pids

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "fixtures" / "pyspy"

Want = Callable[[list[tuple[str, str]]], bool]  # [(filename, name)] innermost first


def has(file_part: str, name_part: str = "") -> Want:
    return lambda frames: any(file_part in f and name_part in n for f, n in frames)


def both(*wants: Want) -> Want:
    return lambda frames: all(w(frames) for w in wants)


def leaf_in(file_part: str) -> Want:
    return lambda frames: bool(frames) and file_part in frames[0][0]


not_in_kernel: Want = lambda frames: not any("Device.kernel" in n for _, n in frames)  # noqa: E731

SPECS: dict[str, tuple[list[str], Want]] = {
    "loader_inline": (["loader_inline.py"], both(has("_utils/fetch.py"), not_in_kernel)),
    "loader_starved": (["loader_starved.py"], both(has("dataloader.py", "_try_get_data"), not_in_kernel)),
    "checkpoint_save": (["checkpoint_save.py", "256"], has("torch/serialization.py", "save")),
    "eval_no_grad": (["eval_loop.py"], both(has("torch/nn/modules"), not_in_kernel)),
    "opaque_read": (["opaque_read.py"], both(leaf_in("opaque_read.py"), not_in_kernel)),
    "item_loop": (["item_loop.py"], both(leaf_in("item_loop.py"), not_in_kernel)),
    "hf_trainer_eval": (["hf_trainer.py"], has("transformers/trainer.py", "evaluation_loop")),
    "hf_trainer_checkpoint": (["hf_trainer.py"], has("transformers/trainer.py", "_save_checkpoint")),
    "lightning_data_wait": (["lightning_fit.py"], both(has("loops/fetchers.py"), has("dataloader.py", "_try_get_data"))),
    "lightning_eval": (["lightning_fit.py"], both(has("loops/evaluation_loop.py"), not_in_kernel)),
    "lightning_checkpoint": (["lightning_fit.py"], has("", "save_checkpoint")),
}


def dump(py_spy: str, pid: int) -> list[dict] | None:
    r = subprocess.run([py_spy, "dump", "--json", "--nonblocking", "--pid", str(pid)],
                       capture_output=True, text=True, timeout=10)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def frames_of(raw: list[dict]) -> tuple[dict, list[tuple[str, str]]] | None:
    threads = parse_dump(json.dumps(raw))
    main = main_thread(threads)
    if main is None:
        return None
    idx = threads.index(main)
    return raw[idx], [(f.filename, f.name) for f in main.frames]


def record(name: str, py_spy: str, deadline_s: float = 90.0) -> bool:
    argv, want = SPECS[name]
    proc = subprocess.Popen([sys.executable, str(HERE / argv[0]), *argv[1:]],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        while proc.stdout.readline().strip() != "READY":
            if proc.poll() is not None:
                print(f"{name}: exited with {proc.returncode} before READY")
                return False
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            raw = dump(py_spy, proc.pid)
            picked = frames_of(raw) if raw else None
            if picked and want(picked[1]):
                (OUT / f"{name}.json").write_text(json.dumps([picked[0]], indent=1) + "\n")
                print(f"{name}: recorded ({len(picked[1])} frames)")
                if name == "loader_starved":
                    return record_worker(name, py_spy, proc.pid, end)
                return True
            time.sleep(0.1)
        print(f"{name}: no dump matched within {deadline_s}s")
        return False
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()  # DataLoader workers and the slow-storage helper
        proc.kill()
        proc.wait()


def record_worker(name: str, py_spy: str, pid: int, end: float) -> bool:
    while time.monotonic() < end:
        for wpid in worker_pids(pid):
            raw = dump(py_spy, wpid)
            picked = frames_of(raw) if raw else None
            if picked and picked[1] and "loader_starved.py" in picked[1][0][0]:
                (OUT / f"{name}.worker.json").write_text(json.dumps([picked[0]], indent=1) + "\n")
                print(f"{name}: worker {wpid} recorded")
                return True
        time.sleep(0.1)
    print(f"{name}: no worker dump matched")
    return False


def main() -> int:
    if os.geteuid() != 0:
        print("run as root: py-spy needs it to read other processes")
        return 2
    py_spy = find_py_spy()
    assert py_spy, "py-spy not found"
    OUT.mkdir(parents=True, exist_ok=True)
    names = sys.argv[1:] or list(SPECS)
    failed = [n for n in names if not record(n, py_spy)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
