"""`mlcostd compare` on constructed profiles (probe 140): whose time the phase shares are of,
the noise of a run with a periodic stall, sides on other hardware, and sides that share
nothing."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
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
