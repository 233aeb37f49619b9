"""`mlcostd compare` on constructed profiles (probe 140): whose time the phase shares are of,
the noise of a run with a periodic stall, sides on other hardware, and sides that share
nothing."""

from __future__ import annotations

import json
import random
import subprocess
from typing import Any

import pytest

from daemon.analysis import compare
from daemon.commands import compare as compare_command
from daemon.commands import profile as profile_command
from daemon.wire import process_key

T0 = 1_800_000_000.0


def _figure(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in result["figures"] if f["name"] == name)


def _proc(pid: int, gpus: list[int], sampled: list[list[str]], bucket_s: float) -> dict[str, Any]:
    """A process of the tree whose every bucket is in a low-utilization window, its phases'
    seconds split by its samples (as the report's balance splits them)."""
    counted = [p for bucket in sampled for p in bucket]
    window_s = len(sampled) * bucket_s
    seconds = {p: window_s * counted.count(p) / len(counted) for p in set(counted)}
    return {"pid": pid, "start_time": T0, "gpus": gpus, "first_seen": T0,
            "last_seen": T0 + window_s - bucket_s,
            "phases": {p: {"seconds": s, "share": s / window_s} for p, s in seconds.items()}}


def _tree_side(label: str, gpu_mix: dict[str, float], workers: int = 0,
               worker_mix: dict[str, float] | None = None, buckets: int = 60,
               seed: int = 1) -> compare.Side:
    """A profile of a training tree: one GPU process whose stack samples (two a bucket) fall
    into phases by `gpu_mix`, and `workers` forked DataLoader workers (no GPU) sampled by
    `worker_mix`, the whole run one low-utilization window."""
    rng = random.Random(seed)
    bucket_s = 1.0

    def draw(mix: dict[str, float]) -> list[list[str]]:
        return [rng.choices(list(mix), list(mix.values()), k=2) for _ in range(buckets)]

    trees = [(100, [0], draw(gpu_mix))]
    trees += [(200 + w, [], draw(worker_mix or {"data_wait": 1.0})) for w in range(workers)]
    procs = [_proc(pid, gpus, sampled, bucket_s) for pid, gpus, sampled in trees]
    timeline = []
    for i in range(buckets):
        held = {process_key(pid, T0): {"burn_per_hour": 1.0 if gpus else 0.0,
                                       "phases": {p: sampled[i].count(p)
                                                  for p in set(sampled[i])}}
                for pid, gpus, sampled in trees}
        timeline.append({"ts": T0 + i * bucket_s, "utilization": 50.0,
                         "gpus": {"0": {"utilization": 50.0}}, "processes": held})
    events = [{"kind": "low_utilization", "target": process_key(100, T0), "started_at": T0,
               "ended_at": T0 + buckets * bucket_s}]
    document = {"window": {"since": T0, "until": T0 + buckets * bucket_s},
                "host": {"interval_s": 1.0}, "processes": procs, "events": events,
                "gpus": [{"index": 0, "name": "NVIDIA A10G"}],
                "burn": {"price_per_gpu": 1.0},
                "timeline": {"bucket_s": bucket_s, "since": T0, "buckets": timeline}}
    return compare.Side(label, document)


def test_phase_shares_are_the_gpu_processes_as_the_profile_says():
    """Probe 140 F2: a starved loop (no loader workers, the GPU process decoding and waiting)
    against the README's fix, four forked workers decoding on the CPU. The workers wait on
    their queue most of the time; summed with the GPU process, compare read data_wait and
    host_preprocess as worse after the fix while both profiles' phase_balance said data_wait
    fell from 55 % to 15 %. The shares are the GPU processes' (all when none used a GPU), as
    `mlcostd profile` computes them."""
    starved = _tree_side("starved", {"data_wait": 0.55, "compute": 0.3,
                                     "host_preprocess": 0.15}, seed=1)
    fixed = _tree_side("fixed", {"compute": 0.85, "data_wait": 0.15}, workers=4,
                       worker_mix={"data_wait": 0.7, "host_preprocess": 0.3}, seed=2)
    result = compare.compare(starved, fixed)
    assert _figure(result, "phase.data_wait")["verdict"] == compare.BETTER
    assert _figure(result, "phase.compute")["verdict"] == compare.BETTER
    assert _figure(result, "phase.host_preprocess")["verdict"] == compare.BETTER
    assert result["verdict"] == compare.BETTER
    for side in (starved, fixed):  # the profile's own balance, to its 4 decimals
        balance = profile_command._phase_balance(side.document["processes"])
        assert compare.phase_shares(side) == pytest.approx(balance, abs=1e-4)
        assert set(balance) == set(compare.phase_shares(side))
    # the stack samples counted are the GPU process's (2 a bucket), not the workers'
    assert result["b"]["stack_samples"] == 120
    # a tree without a GPU process: all of its processes, as the profile takes them
    cpu = _tree_side("cpu", {"compute": 1.0}, workers=2)
    for proc in cpu.document["processes"]:
        proc["gpus"] = []
    assert set(compare.phase_shares(compare.Side("cpu", cpu.document))) == {"compute",
                                                                            "data_wait"}


def _hardware_side(label: str, per_gpu: float, count: int, instance: str | None,
                   model: str = "NVIDIA A10G", seed: int = 3) -> compare.Side:
    """A side whose `count` GPUs (`model`, on `instance`) were ~50 % busy at `per_gpu`
    $/GPU-h."""
    rng = random.Random(seed)
    buckets = []
    for i in range(60):
        utils = {str(g): {"utilization": 50 + rng.gauss(0, 10)} for g in range(count)}
        buckets.append({"ts": T0 + i, "gpus": utils, "price_per_gpu": per_gpu,
                        "burn_per_hour": per_gpu * count})
    host = {"instance": {"type": instance}} if instance else {}
    return compare.Side(label, {"window": {}, "processes": [], "host": host,
                                "gpus": [{"index": g, "name": model} for g in range(count)],
                                "burn": {"price_per_gpu": per_gpu},
                                "timeline": {"bucket_s": 1, "since": T0, "buckets": buckets}})


def test_another_instance_of_the_same_gpus_is_a_change_of_hardware_not_of_price():
    """Probe 140 F4: one A10G on a g5.xlarge ($1.006/GPU-h) against four on a g5.12xlarge
    ($1.418/GPU-h) was taken for a price move "on the same GPUs": every cost figure was left
    out of the verdict, and nothing said the sides had 1 and 4 GPUs. Another GPU count or
    another instance type is a change of hardware: the cost figures count, the note names
    both, and each side's line says what it ran on."""
    from daemon.report_html.compare import render

    one = _hardware_side("a", 1.006, 1, "g5.xlarge")
    four = _hardware_side("b", 1.418, 4, "g5.12xlarge", seed=4)
    result = compare.compare(one, four)
    cost = _figure(result, "cost_per_hour")
    assert cost["in_overall"] and cost["verdict"] == compare.WORSE
    assert result["verdict"] == compare.WORSE
    assert (result["a"]["instance_type"], result["b"]["instance_type"]) == ("g5.xlarge",
                                                                           "g5.12xlarge")
    assert "on 1 x NVIDIA A10G on g5.xlarge before and 4 x NVIDIA A10G on g5.12xlarge " \
           "after" in result["price_note"]
    header = compare_command.render_text(result).split("\n\n")[0].replace("\n    ", " ")
    assert "A (before): a, 1 x NVIDIA A10G on g5.xlarge\n" in header
    assert "B (after): b, 4 x NVIDIA A10G on g5.12xlarge" in header
    assert "4 x NVIDIA A10G on g5.12xlarge" in render(result)
    # the same count of the same GPUs on another instance type: hardware too
    other = compare.compare(_hardware_side("a", 1.006, 1, "g5.xlarge"),
                            _hardware_side("b", 1.212, 1, "g5.2xlarge", seed=4))
    assert _figure(other, "cost_per_hour")["in_overall"]
    assert "on 1 x NVIDIA A10G on g5.xlarge before" in other["price_note"]
    # the same instance type at another price: the price's move, left out as before
    repriced = compare.compare(_hardware_side("a", 1.006, 4, "g5.12xlarge"),
                               _hardware_side("b", 1.418, 4, "g5.12xlarge", seed=4))
    assert not _figure(repriced, "cost_per_hour")["in_overall"]
    assert "on the same GPUs" in repriced["price_note"]


def _compare_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess:
    from daemon.commands.cli import main

    code = main(["compare", *args])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def test_a_profile_folder_compared_with_itself_is_a_usage_error(tmp_path, capsys):
    """Probe 140 F11: `compare run/ run/` (the folder `mlcostd profile --out` wrote, twice, or
    the folder and its profile.json) answered 'within noise' on every figure; one file named
    twice was refused already."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "profile.json").write_text(json.dumps({"window": {}, "profile": {"steps": 10},
                                                  "gpus": [], "processes": []}))
    for a, b in ((run, run), (run, tmp_path / "." / "run" / ""), (run, run / "profile.json")):
        done = _compare_here(capsys, str(a), str(b))
        assert done.returncode == 2, done
        assert "A and B are the same file" in done.stderr and done.stdout == ""


def test_sides_that_share_nothing_say_so_before_their_verdict(tmp_path):
    """Probe 140 F11: a profile against another host's idle store gave a bare "Verdict: worse".
    A side where no process ran, and sides that share no GPU, are said before the verdict
    (text, page, --json `notes`); two runs on one GPU say nothing of the kind."""
    from daemon.report_html.compare import render

    run = _tree_side("run", {"compute": 1.0})
    for gpu in run.document["gpus"]:
        gpu["uuid"] = "GPU-aaaa"
    run.document["host"]["hostname"] = "trainer"
    idle = _hardware_side("idle", 1.006, 1, None)
    idle.document["gpus"][0]["uuid"] = "GPU-bbbb"
    idle.document["host"]["hostname"] = "elsewhere"
    result = compare.compare(run, idle)
    assert result["notes"] == [
        "B holds no process: nothing ran in its range, its figures are an idle machine's",
        "the sides share no GPU (hosts trainer and elsewhere): they ran on other machines or "
        "other GPUs, and the verdict holds that difference as well as the work's"]
    text = compare_command.render_text(result)
    before_verdict = text.split("Verdict:")[0].replace("\n    ", " ")
    assert "Note: B holds no process" in before_verdict
    assert "Note: the sides share no GPU (hosts trainer and elsewhere)" in before_verdict
    assert "share no GPU" in render(result)
    again = _tree_side("again", {"compute": 1.0}, seed=5)
    for gpu in again.document["gpus"]:
        gpu["uuid"] = "GPU-aaaa"
    again.document["window"] = {"since": T0 + 600, "until": T0 + 660}  # a run after it
    assert compare.compare(run, again)["notes"] == []
    # the same range of the same GPU twice (two report documents of one store): that says so
    again.document["window"] = dict(run.document["window"])
    assert [n[:16] for n in compare.compare(run, again)["notes"]] == ["A and B overlap:"]
