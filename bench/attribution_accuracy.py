"""How often mlcostd names the right workload kind, the right phase and the right line for
programs it was not written for, and whether any rule proposed a SIGTERM for a process that
was working. Prints the confusion tables and the shares right.

The programs are tests/daemon/corpus/*.py, labelled in tests/daemon/corpus/labels.toml (the
largest phase and the kind a reader of each program expects, and the user function
responsible). They run in batches on a simulated host under a real `mlcostd run --simulate` (one
GPU per process; py-spy, /proc and the store are all real); `--seconds` after the daemon has
started (its API socket is there) and every program of the batch holds its GPU (a torch
program's imports alone take most of a minute on a loaded host), it stops
and `mlcostd report --json` gives each process's phase balance, top stacks, kind and the
recommendations, the same read path as the report.

The idle thresholds are shortened (a GPU held idle for 10 s is flagged) so that a wrong
"idle" verdict shows up as a SIGTERM proposal within a batch. A process is *working* unless its
label says it waits with nothing to do (phase idle) and it is not a server (a server waiting
for requests is serving): a SIGTERM proposed for a working process is a wrong one.

`--no-stacks` runs the corpus a second time with py-spy off (`[attribution] stacks = false`, as
on a host that denies ptrace: phases from /proc alone, daemon.analysis.proc_phases) and prints
that fallback's largest phase beside the full one's, per process and in total.

`--load N` runs N busy CPU loops beside the corpus, as on a busy training host; `--save FILE`
keeps the verdicts and `--compare FILE` prints where they differ from a saved run (the verdicts
must not change with the machine's load).

Targets: >= 90% of processes with the right kind, >= 90% with the right largest phase, the top
stack of that phase in the responsible function for >= 90% of the processes whose label is not
compute and names a function, and no SIGTERM proposed for a working process: quiet and with --load 2.
usage: python bench/attribution_accuracy.py [--seconds 45] [--batch 6] [--only NAME,...]
                                            [--load N] [--save FILE] [--compare FILE]
                                            [--no-stacks]
"""

from __future__ import annotations

import argparse
import asyncio
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
PHASES = ("compute", "data_wait", "host_preprocess", "checkpoint", "output", "eval", "sync", "comm",
          "idle", "unknown")
KINDS = ("training", "batch_inference", "online_inference", "notebook", "other")
STARTUP_LIMIT_S = 300.0  # how long a batch waits for its mlcostd to start recording
# (The middle band's sampling shortened as the windows' is: at its defaults, 15 s in the band and
# a dump every 10 s, a 45-s batch holds ~3 samples of a process in it.)
CONFIG = """
[attribution]
dump_interval = "1s"
dumps_per_second = 5
cpu_budget = 0.3
min_window = "2s"
mid_after = "5s"
mid_dump_interval = "2s"
mid_dumps_per_second = 2
[idle]
gpu_held_after = "10s"
gpu_unheld_after = "10s"
host_after = "2m"
[cost]
evaluate_every = "5s"
"""


def labels() -> list[dict[str, Any]]:
    with open(CORPUS / "labels.toml", "rb") as f:
        entries = tomllib.load(f)["process"]
    for entry in entries:
        entry.setdefault("args", [])
        entry["name"] = " ".join([entry["program"], *entry["args"]])
        if "rank_gpu" in entry:
            entry["name"] += f" (GPU {entry['rank_gpu']})"
    return entries


def command(entry: dict[str, Any]) -> list[str]:
    """The workload's command: the program, or its launcher starting it."""
    launcher = [str(CORPUS / entry["launcher"])] if entry.get("launcher") else []
    return [sys.executable, *launcher, str(CORPUS / entry["program"]), *entry["args"]]


def workloads(batch: list[dict[str, Any]]) -> list[tuple[list[str], int]]:
    """Each distinct command of a batch and how many GPUs it gets (one per rank_gpu)."""
    found: dict[str, tuple[list[str], int]] = {}
    for entry in batch:
        argv = command(entry)
        _, gpus = found.get(json.dumps(argv), (argv, 0))
        found[json.dumps(argv)] = (argv, max(gpus, int(entry.get("rank_gpu", 0)) + 1))
    return list(found.values())


def scenario(batch: list[dict[str, Any]]) -> tuple[str, dict[str, int]]:
    """The scenario file's text, and each command's first GPU."""
    jobs = workloads(batch)
    total = sum(gpus for _, gpus in jobs)
    text = ('[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
            f'[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = {max(total, 1)}\n')
    first: dict[str, int] = {}
    at = 0
    for i, (argv, gpus) in enumerate(jobs):
        text += (f'[[workloads]]\nname = "corpus-{i}"\ngpus = {list(range(at, at + gpus))}\n'
                 f"command = {json.dumps(argv)}\n")
        first[json.dumps(argv)] = at
        at += gpus
    return text, first


NO_STACKS_CONFIG = CONFIG.replace("[attribution]\n", "[attribution]\nstacks = false\n", 1)


def run_batch(batch: list[dict[str, Any]], seconds: float,
              folder: Path, config: str = CONFIG) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    """Run one batch under a real mlcostd: the report's processes (GPU processes only), its
    recommendations and each command's first GPU."""
    folder.mkdir(parents=True, exist_ok=True)
    text, first_gpu = scenario(batch)
    (folder / "corpus.toml").write_text(text)
    (folder / "mlcostd.toml").write_text(config)
    db = folder / "mlcost.db"
    command = [sys.executable, "-m", "daemon", "run", "--simulate", str(folder / "corpus.toml"),
               "--db", str(db), "--socket", str(folder / "api" / "mlcostd.sock"),
               "--config", str(folder / "mlcostd.toml"), "--interval", "1"]
    with open(folder / "mlcostd.log", "wb") as log:
        daemon = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            # The batch's seconds count from when the daemon records: on a loaded host its
            # start-up alone took 35 of the 45 s, and 8 ticks gave no verdict that needs time.
            started = time.monotonic()
            while (not (folder / "api" / "mlcostd.sock").exists() and daemon.poll() is None
                   and time.monotonic() - started < STARTUP_LIMIT_S):
                time.sleep(0.5)
            # ... and from when every program of the batch uses its GPU: at load 31 on 2 cores
            # finetune_with_loader.py's imports (torch, its DataLoader workers) took 52 s before
            # it took its GPU, 3 s before the batch ended, and it had no kind yet.
            waited = wait_for_gpu_processes(batch, first_gpu, folder / "api" / "mlcostd.sock",
                                            daemon, started + STARTUP_LIMIT_S)
            print(f"  every program held its GPU {waited:.0f} s after mlcostd started", flush=True)
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
    report = json.loads(out.stdout)
    return ([p for p in report["processes"] if p.get("gpus")],
            list(report.get("recommendations") or []), first_gpu)


def wait_for_gpu_processes(batch: list[dict[str, Any]], first_gpu: dict[str, int], socket: Path,
                           daemon: subprocess.Popen[bytes], deadline: float) -> float:
    """Wait until /v1/now shows every process of the batch holding its GPU (or the deadline,
    or the daemon's exit); how long that took."""
    from daemon.client import Client, ClientError

    async def gpu_processes() -> list[dict[str, Any]]:
        async with Client(f"unix:{socket}") as client:
            doc = await client.now_raw()
        return [dict(p, gpus=[g["index"] for g in p["gpus"]]) for p in doc.get("processes") or []
                if p.get("gpus")]

    started = time.monotonic()
    while daemon.poll() is None and time.monotonic() < deadline:
        try:
            processes = asyncio.run(gpu_processes())
        except ClientError:
            processes = []
        if all(match(entry, processes, first_gpu) is not None for entry in batch):
            break
        time.sleep(1.0)
    return time.monotonic() - started


def match(entry: dict[str, Any], processes: list[dict[str, Any]],
          first_gpu: dict[str, int]) -> dict[str, Any] | None:
    wanted = [str(CORPUS / entry["program"]), *entry["args"]]
    gpu = first_gpu.get(json.dumps(command(entry)), 0) + int(entry.get("rank_gpu", 0))
    for proc in processes:
        argv = proc["command"].split()
        if "rank_gpu" in entry and gpu not in proc["gpus"]:
            continue
        if any(argv[i:i + len(wanted)] == wanted for i in range(len(argv))):
            return proc
    return None


def working(entry: dict[str, Any]) -> bool:
    """Working unless it waits with nothing to do and is not a server waiting for requests."""
    return entry["phase"] != "idle" or entry.get("kind") == "online_inference"


def sigterms_for(proc: dict[str, Any] | None, recommendations: list[dict[str, Any]]) -> list[str]:
    """The rules that proposed a SIGTERM for this process during the batch."""
    if proc is None:
        return []
    return sorted({r.get("rule", "?") for r in recommendations
                   if (r.get("action") or {}).get("kind") == "sigterm"
                   and (r.get("action") or {}).get("pid") == proc["pid"]})


def verdict(entry: dict[str, Any], proc: dict[str, Any] | None,
            recommendations: list[dict[str, Any]]) -> dict[str, Any]:
    kind = (proc or {}).get("kind") or "missing"
    sigterm = sigterms_for(proc, recommendations)
    if proc is None or not proc.get("phases"):
        return {"got": "missing", "line_ok": False, "where": None, "reason": None, "kind": kind,
                "kind_evidence": [], "sigterm": sigterm}
    phases = proc["phases"]
    got = max(phases, key=lambda p: phases[p]["share"])
    stacks = phases[got].get("top_stacks") or []
    top = stacks[0] if stacks else {}
    function = top.get("function") or ""
    where = f"{os.path.basename(top.get('file') or '?')}:{top.get('line')} {function}"
    if not stacks:
        where = no_stack(proc)
    # A comprehension or a nested function is in the body of the function that holds it.
    outer = function.split(".<locals>.", 1)[0]
    names = {function, outer, outer.rsplit(".", 1)[-1]}
    line_ok = (bool(top.get("file")) and top["file"].endswith(entry["program"])
               and any(name in names or name.rsplit(".", 1)[-1] in names
                       for name in entry["responsible"]))
    return {"got": got, "line_ok": line_ok, "where": where, "reason": top.get("reason"),
            "shares": {p: round(v["share"], 2) for p, v in phases.items()},
            "sm_share": proc.get("sm_share"), "kind": kind,
            "kind_evidence": list(proc.get("kind_evidence") or []), "sigterm": sigterm}


def no_stack(proc: dict[str, Any]) -> str:
    """Why its largest phase has no top stack. Stacks are taken in low-utilization windows
    only, which open below [attribution].low_sm_share: a simulated kernel is a sleep of fixed
    wall time, so a program's SM share rises as the host's CPU gets faster or quieter (at full
    speed on a quiet host train_shards_mp.py's ranks ran at ~46%, and no window opened)."""
    from daemon.config import AttributionConfig

    low = AttributionConfig().low_sm_share
    share = proc.get("sm_share")
    if share is None:
        return "no stack sample (SM share not known)"
    if share >= low:
        return (f"no stack sample: its SM share ({share:.0f}% on average) kept it out of "
                f"low-utilization windows (below {low:g}%) most of the time")
    return f"no stack sample (SM share {share:.0f}% on average)"


def near_threshold(entry: dict[str, Any], share: float | None) -> bool:
    """A program labelled other than compute whose mean SM share came within 5 points of
    low_sm_share (or over it): too close for a verdict that does not depend on the load."""
    from daemon.config import AttributionConfig

    return (share is not None and entry["phase"] != "compute"
            and share >= AttributionConfig().low_sm_share - 5)


def line_scored(entry: dict[str, Any]) -> bool:
    """Whether the label names a line to find: not for compute, nor where it names no function
    (a server waiting for requests waits in the library's loop, not on a line of its own)."""
    return entry["phase"] != "compute" and bool(entry["responsible"])


def busy_loops(n: int) -> list[subprocess.Popen[bytes]]:
    """N processes that keep a CPU busy each, as other jobs on a busy host do."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             stdin=subprocess.DEVNULL, start_new_session=True)
            for _ in range(n)]


def confusion_table(title: str, pairs: list[tuple[str, str]], names: tuple[str, ...]) -> None:
    confusion = Counter(pairs)
    columns = [p for p in (*names, "missing") if any(c[1] == p for c in confusion)]
    rows = [p for p in names if any(c[0] == p for c in confusion)]
    print(f"\n{title} (rows: expected, columns: got)")
    print(" " * 17 + "".join(f"{c[:10]:>11}" for c in columns))
    for row in rows:
        print(f"{row:<17}" + "".join(f"{confusion.get((row, c), 0):>11}" for c in columns))


def compare(results: list[tuple[dict[str, Any], dict[str, Any]]], path: str) -> None:
    """Where this run's verdicts differ from a saved run's."""
    with open(path) as f:
        saved = {r["name"]: r for r in json.load(f)}
    changed = 0
    for entry, v in results:
        before = saved.get(entry["name"])
        if before is None:
            continue
        for what in ("kind", "got", "line_ok", "sigterm"):
            if before[what] != v[what]:
                changed += 1
                print(f"  {entry['name']}: {what} {before[what]} -> {v[what]}")
    print(f"verdicts changed against {path}: {changed}")


def print_fallback(results: list[tuple[dict[str, Any], dict[str, Any]]],
                   fallback: dict[str, dict[str, Any]]) -> None:
    """The /proc-only run's accuracy beside the full run's (--no-stacks)."""
    pairs = [(e, v, fallback[e["name"]]) for e, v in results if e["name"] in fallback]
    if not pairs:
        return
    confusion_table("phase confusion, no stacks (/proc only)",
                    [(e["phase"], f["got"]) for e, _, f in pairs], PHASES)
    n = len(pairs)
    full = sum(1 for e, v, _ in pairs if v["got"] == e["phase"])
    proc = sum(1 for e, _, f in pairs if f["got"] == e["phase"])
    print(f"\n{'':<44}{'stacks':>12}{'no stacks':>14}")
    print(f"{'largest phase right':<44}{f'{full}/{n} {full / n:.0%}':>12}"
          f"{f'{proc}/{n} {proc / n:.0%}':>14}")
    workers = [(e, v, f) for e, v, f in pairs if working(e)]
    if workers:
        full_kill = sum(1 for _, v, _ in workers if v["sigterm"])
        proc_kill = sum(1 for _, _, f in workers if f["sigterm"])
        w = len(workers)
        print(f"{'SIGTERM proposed for a working process':<44}{f'{full_kill}/{w}':>12}"
              f"{f'{proc_kill}/{w}':>14}")
    per_phase: dict[str, list[bool]] = {}
    for e, _, f in pairs:
        per_phase.setdefault(e["phase"], []).append(f["got"] == e["phase"])
    print("no stacks, right by expected phase: " + ", ".join(
        f"{phase} {sum(oks)}/{len(oks)}" for phase, oks in per_phase.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=45.0,
                        help="how long each batch runs under mlcostd")
    parser.add_argument("--batch", type=int, default=6, help="processes run at once")
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="run N busy CPU loops beside the corpus (a busy host)")
    parser.add_argument("--no-stacks", action="store_true",
                        help="run the corpus again with py-spy off (phases from /proc alone, "
                             "as where ptrace is denied) and print its accuracy beside")
    parser.add_argument("--save", metavar="FILE", help="write the verdicts to FILE (JSON)")
    parser.add_argument("--compare", metavar="FILE",
                        help="print where the verdicts differ from a --save'd run")
    args = parser.parse_args()
    entries = labels()
    if args.only:
        wanted = set(args.only.split(","))
        entries = [e for e in entries if e["program"] in wanted or e["name"] in wanted]
    # Processes of one program (the ranks of a job) run in the same batch.
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
    fallback: dict[str, dict[str, Any]] = {}  # --no-stacks: name -> verdict from /proc alone
    started = time.monotonic()
    loops = busy_loops(args.load)
    try:
        for n, batch in enumerate(batches):
            print(f"batch {n + 1}/{len(batches)}: {', '.join(e['name'] for e in batch)}",
                  flush=True)
            processes, recommendations, first_gpu = run_batch(batch, args.seconds,
                                                              base / f"batch-{n}")
            for entry in batch:
                results.append((entry, verdict(entry, match(entry, processes, first_gpu),
                                               recommendations)))
        if args.no_stacks:
            for n, batch in enumerate(batches):
                print(f"no stacks, batch {n + 1}/{len(batches)}", flush=True)
                processes, recommendations, first_gpu = run_batch(
                    batch, args.seconds, base / f"no-stacks-{n}", NO_STACKS_CONFIG)
                for entry in batch:
                    fallback[entry["name"]] = verdict(
                        entry, match(entry, processes, first_gpu), recommendations)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    load = f", {args.load} busy CPU loops beside it" if args.load else ", quiet"
    print(f"\nran {len(results)} processes in {time.monotonic() - started:.0f} s "
          f"({args.seconds:g} s per batch{load}; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)\n")
    width = max(len(e["name"]) for e, _ in results)
    for entry, v in results:
        mark = "ok " if v["got"] == entry["phase"] else "BAD"
        line = "line ok" if v["line_ok"] else "line BAD"
        if not line_scored(entry):
            line = ""
        kind_mark = "ok " if v["kind"] == entry.get("kind") else "BAD"
        print(f"{mark} {entry['name']:<{width}}  expected {entry['phase']:<15} got "
              f"{v['got']:<15} {line:<8}  {v['where'] or ''}")
        sm = v.get("sm_share")
        print(f"    {' ' * width}  shares {v.get('shares')}  reason: {v['reason']}"
              + (f"  (SM share {sm:.0f}%)" if sm is not None else ""))
        if near_threshold(entry, sm):
            print(f"    {' ' * width}  CALIBRATION: its SM share is near low_sm_share, where "
                  "windows open: its verdict moves with this host's CPU load (no_stack)")
        print(f"    {' ' * width}  kind {kind_mark} expected {entry.get('kind')} got {v['kind']}"
              f": {'; '.join(v['kind_evidence'])}")
        if v["sigterm"]:
            bad = "WRONG: it works" if working(entry) else "it waits"
            print(f"    {' ' * width}  SIGTERM proposed by {', '.join(v['sigterm'])} ({bad})")
        if entry["name"] in fallback:
            alone = fallback[entry["name"]]
            print(f"    {' ' * width}  no stacks: "
                  f"{'ok ' if alone['got'] == entry['phase'] else 'BAD'} got {alone['got']:<15} "
                  f"shares {alone.get('shares')}  reason: {alone['reason']}"
                  + (f"; SIGTERM proposed by {', '.join(alone['sigterm'])}"
                     if alone["sigterm"] else ""))
    confusion_table("phase confusion", [(e["phase"], v["got"]) for e, v in results], PHASES)
    confusion_table("kind confusion", [(e.get("kind", "?"), v["kind"]) for e, v in results],
                    KINDS)
    right = sum(1 for e, v in results if v["got"] == e["phase"])
    kinds_right = sum(1 for e, v in results if v["kind"] == e.get("kind"))
    workers = [(e, v) for e, v in results if working(e)]
    killed = [(e, v) for e, v in workers if v["sigterm"]]
    print(f"\nkind right: {kinds_right}/{len(results)} = {kinds_right / len(results):.0%} "
          "(target >= 90%)")
    non_compute = [(e, v) for e, v in results if line_scored(e)]
    lines_right = sum(1 for _, v in non_compute if v["line_ok"])
    print(f"\nlargest phase right: {right}/{len(results)} = {right / len(results):.0%} "
          "(target >= 90%)")
    if non_compute:
        print(f"top stack in the responsible function (non-compute): {lines_right}/"
              f"{len(non_compute)} = {lines_right / len(non_compute):.0%} (target >= 90%)")
    if workers:
        print(f"SIGTERM proposed for a working process: {len(killed)}/{len(workers)} = "
              f"{len(killed) / len(workers):.0%} (target 0)"
              + (f": {', '.join(e['name'] for e, _ in killed)}" if killed else ""))
    if fallback:
        print_fallback(results, fallback)
    if args.save:
        with open(args.save, "w") as f:
            json.dump([{"name": e["name"], **{k: v[k] for k in ("kind", "got", "line_ok",
                                                                  "sigterm")}}
                       for e, v in results], f, indent=1)
    if args.compare:
        compare(results, args.compare)
    if args.keep:
        print(f"run folders: {base}")
    else:
        subprocess.run(["rm", "-rf", str(base)], check=False)


if __name__ == "__main__":
    main()
