"""How often mlcostd names the right phase, and the right line, for programs it was not written
for. Prints the confusion table and the shares right.

The programs are tests/daemon/corpus/*.py, labelled in tests/daemon/corpus/labels.toml (the
largest phase a reader of each program expects, and the user function responsible). They run in
batches on a simulated host under a real `mlcostd run --simulate` (one GPU each; py-spy, /proc
and the store are all real); after `--seconds` the daemon stops and `mlcostd report --json`
gives each process's phase balance and top stacks, the same read path as the report.

Targets: >= 90% of processes with the right largest phase, and the top stack of that phase in
the responsible function for >= 90% of the processes whose label is not compute.
usage: python bench/attribution_accuracy.py [--seconds 45] [--batch 5] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "daemon" / "corpus"
PHASES = ("compute", "data_wait", "host_preprocess", "checkpoint", "eval", "sync", "comm", "idle",
          "unknown")
CONFIG = """
[attribution]
dump_interval = "1s"
dumps_per_second = 5
cpu_budget = 0.3
min_window = "2s"
[idle]
gpu_held_after = "1m"
gpu_unheld_after = "1m"
host_after = "2m"
"""


def labels() -> list[dict[str, Any]]:
    with open(CORPUS / "labels.toml", "rb") as f:
        entries = tomllib.load(f)["process"]
    for entry in entries:
        entry.setdefault("args", [])
        entry["name"] = " ".join([entry["program"], *entry["args"]])
    return entries


def scenario(batch: list[dict[str, Any]]) -> str:
    text = ('[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
            f'[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = {max(len(batch), 1)}\n')
    for i, entry in enumerate(batch):
        argv = [sys.executable, str(CORPUS / entry["program"]), *entry["args"]]
        text += (f'[[workloads]]\nname = "corpus-{i}"\ngpus = [{i}]\n'
                 f"command = {json.dumps(argv)}\n")
    return text


def run_batch(batch: list[dict[str, Any]], seconds: float, folder: Path) -> list[dict[str, Any]]:
    """Run one batch under a real mlcostd; the report's processes (GPU processes only)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.toml").write_text(scenario(batch))
    (folder / "mlcostd.toml").write_text(CONFIG)
    db = folder / "mlcost.db"
    command = [sys.executable, "-m", "daemon", "run", "--simulate", str(folder / "corpus.toml"),
               "--db", str(db), "--socket", str(folder / "api" / "mlcostd.sock"),
               "--config", str(folder / "mlcostd.toml"), "--interval", "1"]
    with open(folder / "mlcostd.log", "wb") as log:
        daemon = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            daemon.wait(timeout=seconds)
            raise SystemExit(f"mlcostd exited early ({daemon.returncode}); see "
                             f"{folder / 'mlcostd.log'}")
        except subprocess.TimeoutExpired:
            pass
        finally:
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(daemon.pid, signal.SIGKILL)
                    daemon.wait()
    out = subprocess.run([sys.executable, "-m", "daemon", "report", "--db", str(db), "--since",
                          f"{int(seconds) + 120}s", "--json"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return [p for p in json.loads(out.stdout)["processes"] if p.get("gpus")]


def match(entry: dict[str, Any], processes: list[dict[str, Any]]) -> dict[str, Any] | None:
    wanted = [str(CORPUS / entry["program"]), *entry["args"]]
    for proc in processes:
        argv = proc["command"].split()
        if any(argv[i:i + len(wanted)] == wanted for i in range(len(argv))):
            return proc
    return None


def verdict(entry: dict[str, Any], proc: dict[str, Any] | None) -> dict[str, Any]:
    if proc is None or not proc.get("phases"):
        return {"got": "missing", "line_ok": False, "where": None, "reason": None}
    phases = proc["phases"]
    got = max(phases, key=lambda p: phases[p]["share"])
    stacks = phases[got].get("top_stacks") or []
    top = stacks[0] if stacks else {}
    function = top.get("function") or ""
    where = f"{os.path.basename(top.get('file') or '?')}:{top.get('line')} {function}"
    # A comprehension or a nested function is in the body of the function that holds it.
    outer = function.split(".<locals>.", 1)[0]
    names = {function, outer, outer.rsplit(".", 1)[-1]}
    line_ok = (bool(top.get("file")) and top["file"].endswith(entry["program"])
               and any(name in names or name.rsplit(".", 1)[-1] in names
                       for name in entry["responsible"]))
    return {"got": got, "line_ok": line_ok, "where": where, "reason": top.get("reason"),
            "shares": {p: round(v["share"], 2) for p, v in phases.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=45.0,
                        help="how long each batch runs under mlcostd")
    parser.add_argument("--batch", type=int, default=5, help="programs run at once")
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    args = parser.parse_args()
    entries = labels()
    if args.only:
        wanted = set(args.only.split(","))
        entries = [e for e in entries if e["program"] in wanted or e["name"] in wanted]
    # Processes of one program (the two ranks) run in the same batch.
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        groups.setdefault(entry["program"], []).append(entry)
    batches: list[list[dict[str, Any]]] = [[]]
    for group in groups.values():
        if batches[-1] and len(batches[-1]) + len(group) > args.batch:
            batches.append([])
        batches[-1].extend(group)
    base = Path(tempfile.mkdtemp(prefix="mlcost-accuracy-"))
    results = []
    started = time.monotonic()
    for n, batch in enumerate(batches):
        print(f"batch {n + 1}/{len(batches)}: {', '.join(e['name'] for e in batch)}", flush=True)
        processes = run_batch(batch, args.seconds, base / f"batch-{n}")
        for entry in batch:
            results.append((entry, verdict(entry, match(entry, processes))))
    print(f"\nran {len(results)} processes in {time.monotonic() - started:.0f} s "
          f"({args.seconds:g} s per batch)\n")
    width = max(len(e["name"]) for e, _ in results)
    for entry, v in results:
        mark = "ok " if v["got"] == entry["phase"] else "BAD"
        line = "line ok" if v["line_ok"] else "line BAD"
        if entry["phase"] == "compute":
            line = ""
        print(f"{mark} {entry['name']:<{width}}  expected {entry['phase']:<15} got "
              f"{v['got']:<15} {line:<8}  {v['where'] or ''}")
        print(f"    {' ' * width}  shares {v.get('shares')}  reason: {v['reason']}")
    confusion = Counter((e["phase"], v["got"]) for e, v in results)
    columns = [p for p in (*PHASES, "missing") if any(c[1] == p for c in confusion)]
    rows = [p for p in PHASES if any(c[0] == p for c in confusion)]
    print("\nconfusion (rows: expected, columns: got)")
    print(" " * 16 + "".join(f"{c[:10]:>11}" for c in columns))
    for row in rows:
        print(f"{row:<16}" + "".join(f"{confusion.get((row, c), 0):>11}" for c in columns))
    right = sum(1 for e, v in results if v["got"] == e["phase"])
    non_compute = [(e, v) for e, v in results if e["phase"] != "compute"]
    lines_right = sum(1 for _, v in non_compute if v["line_ok"])
    print(f"\nlargest phase right: {right}/{len(results)} = {right / len(results):.0%} "
          "(target >= 90%)")
    if non_compute:
        print(f"top stack in the responsible function (non-compute): {lines_right}/"
              f"{len(non_compute)} = {lines_right / len(non_compute):.0%} (target >= 90%)")
    if args.keep:
        print(f"run folders: {base}")
    else:
        subprocess.run(["rm", "-rf", str(base)], check=False)


if __name__ == "__main__":
    main()
