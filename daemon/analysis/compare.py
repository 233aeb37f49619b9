"""Before and after: two report documents (a profile, a snapshot, a range of a store) compared
figure by figure, each with a verdict (better, worse, within noise) whose noise is estimated from
the documents' own timelines (a seeded block bootstrap, floored by the figure's spread over each
run's windows, so two runs of the same code are within noise, both taken between a run's
start-up and its exit; where a run repeats a stall such as a blocking checkpoint, the spread of
its turns from one stall to the next, floored by RUN_TO_RUN of the figure), and the
recommendations that are new, gone or changed.

Pure: documents in, a document out (its shape is the `compare --json` contract in the README).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from daemon import clock
from daemon.analysis.balance import SAMPLED
from daemon.analysis.cost import gpu_wasted_per_hour
from daemon.analysis.ledger import JobLabeler
from daemon.analysis.phase_balance import balance_keys, balance_processes, run_phase_balance
from daemon.wire import COMPUTE, money, process_key

COMPARE_VERSION = 1
RESAMPLES = 1000
SEED = 20261202  # fixed: the same inputs give the same verdicts
Z = 2.576  # a difference counts when it is past 99 % of what the noise alone would give
BETTER, WORSE, NOISE, UNKNOWN = "better", "worse", "within noise", "no figure"
# A figure measured on both sides from too few samples to be judged either way.
INCONCLUSIVE = "inconclusive"
# Stack samples a side's phase shares need before they are judged: the count under which
# `mlcostd profile` warns `few_stack_samples` ("the phase balance is rough"). Four runs of one
# 30-step script, 14-15 samples each, gave 26 %, 93 %, 67 % and 86 % data_wait (2026-12).
MIN_PHASE_SAMPLES = 20
# Under this share of a side's time in the low-utilization windows its samples split, the
# samples cannot move a phase share by more than that many points: it rests on the GPU's time.
MIN_SAMPLED_SHARE = 0.1
SAVINGS_CHANGED = 0.2  # a recommendation "changed" when its savings moved by over 20 %
ENERGY_UNITS = ("kWh/h", "g CO2e/h", "kWh")  # shown in their unit, not as dollars
ENERGY_NOISE = "GPU power over timeline buckets"

# A time a side's window gives (seconds since 1970) is shown as a date: past this (the year
# 5138) no date can be made of it (an edited window.since of 1e300 raised OverflowError).
LATEST_TIME = 1e11

Series = Sequence[float]
Weighted = tuple[float, float]  # a bucket's figure and how many ticks it stands for
Stat = Callable[[Sequence[Any]], float | None]


_LABELER = JobLabeler()  # the script or module a command runs, as `report` labels jobs


def of_job(job: str, command: Any, owner: Any, workload: Any = None,
           labeler: JobLabeler = _LABELER) -> bool:
    """Whether a process is of `job`: its workload (pod, Slurm job, unit: from its owner), or
    the script or module its command runs, the label `report` shows by job
    ('daemon.sim.workloads.data_starved', 'train.py'); with `labeler` built from [cost].jobs,
    also the job name a pattern of it gives."""
    from daemon.sources.owners import workload_label

    owned = owner if isinstance(owner, dict) else {}
    if job in (workload, workload_label(owned) if owned else None):
        return True
    if not (isinstance(command, str) and command):
        return False
    return job in (labeler.label(command, owned or None), _LABELER.label(command))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_document(document: dict[str, Any]) -> None:
    """Refuse (ValueError, naming the field) what a side's document holds that the comparison
    would show but cannot: a window time no date can be made of, a recommendation's savings
    that are no number. A profile.json is a file anyone may have edited; its other fields are
    read as they are typed (a figure of the wrong type is no figure)."""
    window = document.get("window")
    if window is not None and not isinstance(window, dict):
        raise ValueError(f"window is {type(window).__name__}, not an object")
    for key in ("since", "until", "first_recorded"):
        value = (window or {}).get(key)
        if value is not None and not (_number(value) and 0 <= value <= LATEST_TIME):
            raise ValueError(f"window.{key} is {str(value)[:40]!r}, not a time (seconds since "
                             "1970)")
    recorded = (window or {}).get("recorded")
    last = recorded.get("last") if isinstance(recorded, dict) else None
    if last is not None and not (_number(last) and 0 <= last <= LATEST_TIME):
        raise ValueError(f"window.recorded.last is {str(last)[:40]!r}, not a time (seconds "
                         "since 1970)")
    recs = document.get("recommendations")
    if recs is not None and not isinstance(recs, list):
        raise ValueError(f"recommendations is {type(recs).__name__}, not a list")
    for number, rec in enumerate(recs or []):
        saves = rec.get("savings_per_month") if isinstance(rec, dict) else None
        if saves is not None and not _number(saves):
            raise ValueError(f"recommendations[{number}].savings_per_month is "
                             f"{str(saves)[:40]!r}, not a number of dollars")


@dataclass
class Side:
    """One side of a comparison: its report document (a profile's includes `profile`), what
    it is (shown to the reader), and the job it is narrowed to, if any."""

    label: str
    document: dict[str, Any]
    job: str | None = None
    command: str | None = None  # or narrowed to the processes running this command line
    processes: list[dict[str, Any]] = field(init=False)
    gpus: list[int] = field(init=False)

    def __post_init__(self) -> None:
        check_document(self.document)
        procs = [p for p in self.document.get("processes") or [] if isinstance(p, dict)]
        if self.job is not None:
            job = self.job
            procs = [p for p in procs if p.get("job") == job
                     or of_job(job, p.get("command"), p.get("owner"), p.get("workload"))]
        if self.command is not None:
            procs = [p for p in procs if p.get("command") == self.command]
        self.processes = procs
        held = sorted({int(g) for p in procs for g in p.get("gpus") or []
                       if isinstance(g, int)})
        if self.job is None and self.command is None and not held:
            held = sorted({int(g["index"]) for g in self.document.get("gpus") or []
                           if isinstance(g, dict) and isinstance(g.get("index"), int)})
        self.gpus = held

    @property
    def keys(self) -> set[str]:
        return {process_key(p["pid"], float(p["start_time"])) for p in self.processes
                if isinstance(p.get("pid"), int) and isinstance(p.get("start_time"), int | float)}

    @property
    def phase_keys(self) -> set[str]:
        """The keys of the processes its phase balance is of (balance_processes: the GPU
        processes, all when none used a GPU), as `mlcostd profile`'s phase_balance."""
        return balance_keys(self.processes)

    @property
    def buckets(self) -> list[dict[str, Any]]:
        timeline = self.document.get("timeline") or {}
        return [b for b in timeline.get("buckets") or [] if isinstance(b, dict)]

    @property
    def steady_buckets(self) -> list[dict[str, Any]]:
        """The buckets of the run's steady stretch: those after the first and before the last in
        which one of its processes ran kernels (its SM share over 0 in the bucket, as the
        timeline holds it). Before that stretch the command was starting up (importing, loading
        its data, its GPU held but idle), after it the command had exited; the first and last
        buckets with GPU work hold a part of it, by where in the bucket the work began or
        ended (the probe's steady runs: 22 % and 49 % against 99 % in between). Each run has
        one start-up and one exit, not a draw of its loop, so they are left out of the spread
        a side's noise is taken over (noise_sd). A store's range that cut into a run already
        going loses one whole bucket that way, which its spread does not miss.

        All the buckets for a side that is not a run (a host's range, not narrowed to a job
        or a command: its idle stretches are its own), for a timeline without per-process
        figures (rollups), and when fewer than 4 would be left."""
        buckets = self.buckets
        stretch = self._stretch(buckets)
        return buckets if stretch is None else buckets[stretch[0] + 1:stretch[1]]

    @property
    def edge_shares(self) -> list[float]:
        """The shares of the side's ticks in the first and the last bucket of its GPU work
        (steady_buckets), each holding a part of a bucket's work by chance; [] where all its
        buckets are its steady stretch."""
        buckets = self.buckets
        stretch = self._stretch(buckets)
        total = math.fsum(bucket_ticks(b) for b in buckets)
        return [] if stretch is None or total <= 0 else [
            bucket_ticks(buckets[i]) / total for i in stretch]

    def _stretch(self, buckets: list[dict[str, Any]]) -> tuple[int, int] | None:
        """The indexes of the first and the last bucket with the run's GPU work, more than 4
        buckets apart (steady_buckets); None when the side is not a run or they are not
        known."""
        if not (self.profile or self.job is not None or self.command is not None):
            return None
        keys = self.keys
        working = [i for i, bucket in enumerate(buckets)
                   if isinstance(procs := bucket.get("processes"), dict)
                   and any(isinstance(p := procs.get(key), dict) and _finite(p.get("sm_share"))
                           and p["sm_share"] > 0 for key in keys)]
        return (working[0], working[-1]) if working and working[-1] - working[0] > 4 else None

    @property
    def bucket_s(self) -> float:
        return float((self.document.get("timeline") or {}).get("bucket_s") or 1.0)

    @property
    def profile(self) -> dict[str, Any]:
        found = self.document.get("profile")
        return found if isinstance(found, dict) else {}


def price_per_gpu_hour(document: dict[str, Any]) -> float | None:
    """The price per GPU-hour a report document's range was charged at its end (a profile's
    run, one side of a comparison)."""
    found = (document.get("burn") or {}).get("price_per_gpu")
    return float(found) if isinstance(found, int | float) and found > 0 else None


def gpu_models(document: dict[str, Any], used: Sequence[int]) -> list[str]:
    """The models of a report document's GPUs whose indexes are in `used`, each once."""
    return sorted({g["name"] for g in document.get("gpus") or []
                   if isinstance(g, dict) and g.get("index") in used
                   and isinstance(g.get("name"), str)})


def price_moved(before: object, after: object) -> tuple[float, float] | None:
    """Two prices per GPU-hour (a comparison's sides, a profile and its baseline) when both
    are known and differ."""
    if (not isinstance(before, int | float) or not isinstance(after, int | float)
            or before <= 0 or after <= 0 or abs(after - before) <= 1e-9 * before):
        return None
    return float(before), float(after)


def same_gpus(before: object, after: object) -> bool:
    """Whether two lists of GPU models are the same, known on both."""
    return isinstance(after, list) and bool(after) and after == before


def instance_type(document: dict[str, Any]) -> str | None:
    """The instance type a report document's host ran on (`host.instance.type`, else the
    price's), None when not known (a machine without a catalog entry)."""
    host = document.get("host")
    host = host if isinstance(host, dict) else {}
    for part, key in (("instance", "type"), ("price", "instance_type")):
        held = host.get(part)
        found = held.get(key) if isinstance(held, dict) else None
        if isinstance(found, str) and found:
            return found[:80]
    return None


def same_hardware(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two sides (their descriptions: `gpu_models`, `gpus`, `instance_type`) ran on
    the same hardware: the same GPU models, known on both, as many of them, on the same
    instance type (or none known on either). A g5.xlarge's one A10G and a g5.12xlarge's four
    are not: the per-GPU price gap is the larger instance's, not a price move."""
    return (same_gpus(a.get("gpu_models"), b.get("gpu_models"))
            and len(a.get("gpus") or []) == len(b.get("gpus") or [])
            and a.get("instance_type") == b.get("instance_type"))


def hardware_text(side: dict[str, Any]) -> str:
    """A side's hardware as its line shows it: '4 x NVIDIA A10G on g5.12xlarge' ('1 GPU' when
    its model is not known, '' when nothing is)."""
    count = len(side.get("gpus") or [])
    models = " + ".join(str(m) for m in side.get("gpu_models") or [])
    if count:
        said = f"{count} x {models}" if models else f"{count} GPU{'' if count == 1 else 's'}"
    else:
        said = models
    kind = side.get("instance_type")
    if isinstance(kind, str) and kind:
        return f"{said} on {kind}" if said else kind
    return said


def price_note(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """What a comparison says when its sides were charged different prices per GPU-hour. On
    the same hardware (same_hardware) the price's change is not the work's: the cost figures
    are judged but not counted in the overall verdict; on other hardware (other GPUs, another
    count of them, another instance type) they count (a move to other hardware is a change
    of its own), and the note says the hardware changed."""
    moved = price_moved(a.get("price_per_gpu"), b.get("price_per_gpu"))
    if moved is None:
        return None
    before, after = moved
    said = (f"the price moved between the two sides: ${before:.4f}/GPU-h before, "
            f"${after:.4f}/GPU-h after ({100 * (after - before) / before:+.0f}%)")
    if same_hardware(a, b):
        return (f"{said}, on the same GPUs: the cost figures hold the price's change as well "
                f"as the work's and are not counted in the overall verdict "
                f"({NOT_COUNTED_MARK}); GPU utilization, phases and energy per step are")
    return (f"{said}, on {hardware_text(a) or 'unknown GPUs'} before and "
            f"{hardware_text(b) or 'unknown GPUs'} after: the cost figures hold the "
            "hardware's and its price's change as well as the work's")


# -- the bootstrap ------------------------------------------------------------------------


def block_bootstrap_sd(items: Sequence[Any], stat: Stat, rng: random.Random,
                       resamples: int = RESAMPLES) -> float | None:
    """The standard deviation of `stat` over circular block-bootstrap resamples of `items`
    (time-ordered buckets): blocks of about sqrt(n) buckets keep what
    neighbouring buckets share (a slow pass over a shard, a checkpoint), which resampling
    single buckets would count as independent. None with fewer than 4 items (no spread can be
    told from them)."""
    n = len(items)
    if n < 4:
        return None
    block = max(1, round(math.sqrt(n)))
    values = []
    for _ in range(resamples):
        picked: list[Any] = []
        while len(picked) < n:
            start = rng.randrange(n)
            picked += [items[(start + j) % n] for j in range(block)]
        value = stat(picked[:n])
        if value is not None and math.isfinite(value):
            values.append(value)
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


# A stall the run repeats (a blocking checkpoint every N steps, an evaluation): a stretch of
# buckets whose level (GPU utilization, power) is under DIP times the run's median, at
# least MIN_TURNS + 1 of them inside the run (not its start-up or its end), starting at
# intervals none over REGULAR times another (a stall's length varies, a disk's write does).
DIP = 0.9
REGULAR = 1.6
MIN_TURNS = 3
# What another run of the same code may differ by that no run's own turns show (the host's
# load, the disk's speed), as a share of the figure: the least noise of a side whose noise is
# taken over its turns (3 turns tell their spread roughly; turns alike by chance must not make
# a run look exact). Measured 2026-12-06: 12 runs of probe 140's blocking-checkpoint loop
# (some beside a CPU hog) differed by up to 8.5 % on cost per step, at most 0.70 of their noise
# (66 pairs), while its async fix (11 runs, 6-15 % cheaper) read better in 95 of 132 pairs.
RUN_TO_RUN = 0.025
# The same for a run without such a stall, whose windows show what its own run met: two runs
# of the probe's async-checkpoint loop 4 minutes apart, each steady to 0.6 % on cost per step,
# differed by 1.7 % and read 'worse' (1 of 55 pairs of its 11 runs; with this floor every one
# of the 121 same-code pairs above moved at most 0.70 of its noise, the fix still better in 95
# of 132).
STEADY_RUN_TO_RUN = 0.01


def stall_turns(levels: Sequence[float]) -> list[tuple[int, int]] | None:
    """The run's turns of a repeating stall: (first, past-last) index of the buckets from each
    stall's start to the next's, where `levels` (per bucket, as the figure's items) dip under
    DIP times their median at least MIN_TURNS + 1 times at regular intervals (REGULAR); a dip
    at the first or last bucket is the run's start or end, not a stall. None for a run without
    (a steady one, a starved one whose dips come as they come, too few buckets)."""
    n = len(levels)
    if n < 3 * (MIN_TURNS + 1):
        return None
    median = sorted(levels)[n // 2]
    if not (math.isfinite(median) and median > 0):
        return None
    low = [value < DIP * median for value in levels]
    starts = [i for i in range(1, n) if low[i] and not low[i - 1]]
    if starts and all(low[starts[-1]:]):
        starts.pop()  # the run's end
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    if len(gaps) < MIN_TURNS or min(gaps) < 3 or max(gaps) > REGULAR * min(gaps):
        return None
    return list(zip(starts, starts[1:], strict=False))


def _sd(values: Sequence[float]) -> float:
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def window_sd(items: Sequence[Any], stat: Stat) -> float | None:
    """The standard deviation of `stat` over the run's consecutive windows (as many as the
    bootstrap's blocks, each about sqrt(n) buckets long): how far the figure wanders inside
    one run as its conditions change (the host's load, a slow pass over a shard). None with
    fewer than 4 items or 2 windows with a value."""
    n = len(items)
    if n < 4:
        return None
    count = max(2, n // max(1, round(math.sqrt(n))))
    values = [v for k in range(count)
              if (v := stat(items[k * n // count:(k + 1) * n // count])) is not None
              and math.isfinite(v)]
    return _sd(values) if len(values) >= 2 else None


def turns_sd(items: Sequence[Any], stat: Stat, turns: Sequence[tuple[int, int]]) -> float | None:
    """How far the run's figure moves with its stalls: the turns (each holding one stall) differ
    by how long each took (one checkpoint's write against another's) with a standard deviation
    s, and the run's figure moves by the sum of its stalls' moves (its turns and the last stall,
    after them), each of about s times a turn's share of the run's buckets. None with under 2
    turns with a value."""
    values = [v for lo, hi in turns
              if (v := stat(items[lo:hi])) is not None and math.isfinite(v)]
    if len(values) < 2:
        return None
    share = math.fsum(hi - lo for lo, hi in turns) / len(turns) / len(items)
    return _sd(values) * share * math.sqrt(len(turns) + 1)


def noise_sd(items: Sequence[Any], stat: Stat, rng: random.Random,
             levels: Sequence[float] | None = None,
             steady: Sequence[Any] | None = None,
             edges: Sequence[float] | None = None, idle: float = 0.0) -> float | None:
    """A side's noise for the figure `stat` of its buckets.

    The block bootstrap's spread (how well the run pins its own figure down), but never less
    than the spread of the figure over the run's windows. Another run of the same code is
    another draw of the conditions the windows saw, and a run may spend all of itself in one
    of them (load comes and goes slower than a run's buckets), so two runs can differ by as
    much as two windows do; and by STEADY_RUN_TO_RUN of the figure however steady each is.

    Where the items' `levels` (GPU utilization or power, one per item) show a stall the run
    repeats (stall_turns), windows of ~sqrt(n) buckets hold a stall or not by where they start,
    and the bootstrap's blocks likewise: their spread is the stall's size (a checkpoint every
    ~11 s made it ±39 % and hid an async-checkpoint fix 13 % cheaper per step). The noise is
    then the standard error over the run's turns, from one stall to the next, and never less
    than RUN_TO_RUN of the figure: what another run meets that no turn of this one shows.

    `steady`: the items of the run's steady stretch (Side.steady_buckets), when its start-up
    and exit are left out. The bootstrap and the windows are then taken over those: a run
    has one start-up and one exit, and resampled or cut into windows they made the spread of
    a run that never moved (99 % utilization from its second bucket to its last but one) ±6
    points, so that 95 % -> 77 % read within noise. What the edges do differ by from one run
    to the next (where in its bucket the first and the last GPU work fell, how long the
    start-up took) is added to it: `edges`, the shares of the figure's ticks in the first
    and the last bucket of its GPU work, each of which may have held anything from the
    steady stretch's figure to `idle`'s, the figure with no work (0 % utilization, the whole
    price wasted), by where in it the work began or ended: a uniform spread, their difference
    / sqrt(12) times the share.

    None when it cannot be told (too few buckets)."""
    inner = items if steady is None or len(steady) < 4 else steady
    boot = block_bootstrap_sd(inner, stat, rng)  # drawn either way: the next figure's draws
    value = stat(items)
    size = abs(value) if value is not None and math.isfinite(value) else 0.0
    turns = stall_turns(levels) if levels is not None and len(levels) == len(items) else None
    if turns is not None:
        spread = turns_sd(items, stat, turns)
        if spread is not None and size:
            return max(spread, RUN_TO_RUN * size)
    floor = window_sd(inner, stat)
    if boot is None or floor is None:
        return None
    held = stat(inner) if edges and inner is not items else None
    span = abs(held - idle) if held is not None and math.isfinite(held) else 0.0
    chance = span / math.sqrt(12) * math.sqrt(math.fsum(w * w for w in edges or ()))
    return math.hypot(max(boot, floor, STEADY_RUN_TO_RUN * size), chance)


def verdict(a: float | None, b: float | None, sd_a: float | None, sd_b: float | None,
            higher_is_better: bool) -> dict[str, Any]:
    """better / worse / within noise for a figure going from `a` to `b`, where each side's
    noise (standard deviation of its estimate) is `sd_a`, `sd_b`: the change counts when it is
    more than Z times the noise of the difference."""
    if a is None or b is None:
        return {"verdict": UNKNOWN, "change": None, "noise": None}
    change = b - a
    if sd_a is None or sd_b is None:
        return {"verdict": UNKNOWN, "change": change, "noise": None,
                "why": "too few buckets to estimate the noise"}
    noise = Z * math.sqrt(sd_a ** 2 + sd_b ** 2)
    if abs(change) <= noise:
        return {"verdict": NOISE, "change": change, "noise": noise}
    up = change > 0
    return {"verdict": BETTER if up == higher_is_better else WORSE, "change": change,
            "noise": noise}


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) / len(known) if known else None


def _ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    den = math.fsum(p[1] for p in pairs)
    return math.fsum(p[0] for p in pairs) / den if den > 0 else None


def weighted_mean(series: Sequence[Weighted]) -> float | None:
    """The mean of (value, ticks) pairs, each value counted once per tick it stands for."""
    return _ratio([(value * ticks, ticks) for value, ticks in series])


# -- the figures of one side --------------------------------------------------------------


def _of(side: Side, buckets: Sequence[dict[str, Any]] | None) -> Sequence[dict[str, Any]]:
    return side.buckets if buckets is None else buckets


def bucket_ticks(bucket: dict[str, Any]) -> float:
    """How many ticks a timeline bucket holds (its `samples`; 1 in a document without): the
    first and last buckets of a run hold a part, and a per-hour figure that counted them as
    whole ones would not be the report's (a 13-s profile's 2-tick bucket after its command
    exited made its utilization 33 % here and 34.5 % in its profile.json)."""
    ticks = bucket.get("samples")
    return float(ticks) if isinstance(ticks, int | float) and not isinstance(
        ticks, bool) and ticks > 0 else 1.0


def utilization_series(side: Side, buckets: Sequence[dict[str, Any]] | None = None
                       ) -> list[Weighted]:
    """Per bucket (of `buckets`, else all the side's): (mean utilization (%) over the GPUs the
    side's processes held, its ticks); their weighted mean is the report's utilization over
    the same ticks."""
    return [(value, bucket_ticks(bucket)) for bucket in _of(side, buckets)
            if (value := bucket_utilization(side, bucket)) is not None]


def bucket_utilization(side: Side, bucket: dict[str, Any]) -> float | None:
    """A bucket's mean utilization (%) over the GPUs the side's processes held (the host's
    GPUs' for a side without processes)."""
    gpus = bucket.get("gpus") or {}
    values = [(gpus.get(str(i)) or {}).get("utilization") for i in side.gpus]
    value = _mean(values) if side.gpus else bucket.get("utilization")
    return None if value is None else float(value)


def bucket_cost(side: Side, bucket: dict[str, Any]) -> float | None:
    """What the side burns in one bucket, $/h: its processes' burn where the timeline has
    it (a profile, a job), else the host's (None: not known in this bucket, e.g. one holding
    only a worker's stack samples)."""
    keys = side.keys
    procs = bucket.get("processes")
    if isinstance(procs, dict) and keys:
        known = [float(p["burn_per_hour"]) for k in keys
                 if isinstance(p := procs.get(k), dict)
                 and isinstance(p.get("burn_per_hour"), int | float)]
        if known:
            return math.fsum(known)
    if side.job is None and side.command is None and bucket.get("burn_per_hour") is not None:
        return float(bucket["burn_per_hour"])
    return None


def cost_series(side: Side, buckets: Sequence[dict[str, Any]] | None = None) -> list[Weighted]:
    """Per bucket that knows it: (what the side burns in $/h, its ticks)."""
    return [(v, bucket_ticks(b)) for b in _of(side, buckets)
            if (v := bucket_cost(side, b)) is not None]


def wasted_series(side: Side, buckets: Sequence[dict[str, Any]] | None = None
                  ) -> list[Weighted]:
    """Per bucket: (wasted $/h of the side's GPUs (price x (1 - utilization), idle GPUs
    whole), its ticks), at the bucket's own price (the price charged then), else at the
    side's (a document from before buckets carried theirs)."""
    whole = (side.document.get("burn") or {}).get("price_per_gpu")
    out = []
    for bucket in _of(side, buckets):
        per_gpu = bucket.get("price_per_gpu", whole)
        if not isinstance(per_gpu, int | float):
            continue
        gpus = bucket.get("gpus") or {}
        utils = [(gpus.get(str(i)) or {}).get("utilization") for i in side.gpus]
        if any(u is not None for u in utils):
            out.append((math.fsum(gpu_wasted_per_hour(float(per_gpu), u)
                                  for u in utils if u is not None), bucket_ticks(bucket)))
    return out


def idle_wasted(side: Side) -> float:
    """What the side's GPUs waste per hour idle: their price, whole (its edge buckets', else
    its own)."""
    found = [b.get("price_per_gpu") for b in side.buckets]
    prices = [float(v) for v in found if _finite(v)] or [
        v for v in [price_per_gpu_hour(side.document)] if v is not None]
    return max(prices, default=0.0) * len(side.gpus)


def phase_shares(side: Side) -> dict[str, float]:
    """The side's phase balance, as `mlcostd profile`'s phase_balance: each phase's seconds
    over the seconds of its GPU processes (all of its processes when none used a GPU)."""
    return run_phase_balance(side.processes)


def phase_fractions(side: Side) -> list[dict[str, float]]:
    """Per bucket where the side's balanced processes (Side.phase_keys) ran: how their time
    split, as the phase balance splits it: a bucket with stack samples (a low-utilization window) by its samples' phases,
    one without as compute."""
    keys = side.phase_keys
    out = []
    for bucket in side.buckets:
        procs = bucket.get("processes") or {}
        mine = [p for k, p in procs.items() if k in keys and isinstance(p, dict)]
        if not mine:
            continue
        counts: dict[str, int] = {}
        for proc in mine:
            for phase, n in (proc.get("phases") or {}).items():
                counts[str(phase)] = counts.get(str(phase), 0) + int(n)
        total = sum(counts.values())
        out.append({phase: n / total for phase, n in counts.items()} if total
                   else {COMPUTE: 1.0})
    return out


def stack_phase_groups(side: Side) -> list[list[str]]:
    """The phases of the stack samples of the side's balanced processes (Side.phase_keys), per
    timeline bucket, oldest bucket first (within one, the order they were taken in is not kept): what its phase balance
    splits the low-utilization windows' time by."""
    keys = side.phase_keys
    out: list[list[str]] = []
    for bucket in side.buckets:
        found: list[str] = []
        for key, proc in sorted((bucket.get("processes") or {}).items()):
            if key in keys and isinstance(proc, dict):
                for phase, n in sorted((proc.get("phases") or {}).items()):
                    found += [str(phase)] * max(0, int(n))
        if found:
            out.append(found)
    return out


def stack_phases(side: Side) -> list[str]:
    """The phases of the side's stack samples, oldest bucket first (stack_phase_groups)."""
    return [phase for group in stack_phase_groups(side) for phase in group]


def effective_samples(groups: Sequence[Sequence[float]]) -> float:
    """How many independent samples the values in `groups` (consecutive stretches in time
    order, the order inside each unknown) are worth: n (1 - r) / (1 + r), r their lag-1
    autocorrelation (at least 0, at most 0.9). Stack samples of a loop are not independent:
    a sampler whose period is near a multiple of the loop's lands in the same part of it
    sample after sample, and a run of one phase says less than its count. Neighbours inside
    a group count as any two of its values would (the mean over its orderings), so sorting
    a bucket's samples by phase cannot make them look correlated."""
    values = [v for group in groups for v in group]
    n = len(values)
    if n < 3:
        return float(max(n, 1))
    mean = math.fsum(values) / n
    spread = math.fsum((v - mean) ** 2 for v in values)
    if spread <= 0:
        return float(n)
    lagged, before = 0.0, None
    for group in groups:
        if not group:
            continue
        centred = [v - mean for v in group]
        total = math.fsum(centred)
        if len(centred) > 1:  # its len - 1 neighbours, each the mean product of two of them
            lagged += (total * total - math.fsum(c * c for c in centred)) / len(centred)
        if before is not None:  # the last of the group before and the first of this one
            lagged += before * total / len(centred)
        before = total / len(centred)
    r = lagged / spread
    r = min(max(r + (1 + 3 * r) / n, 0.0), 0.9)  # less its bias over few values (Marriott-Pope)
    return max(n * (1 - r) / (1 + r), 1.0)


def sampled_time_share(side: Side) -> float | None:
    """The share of the side's processes' time that its phase balance splits by stack samples
    (daemon.analysis.balance): a GPU process's time in its low-utilization windows and
    middle-band stretches, all of a
    process without a GPU; the rest is compute, known from the GPU alone. None when the
    document does not say (no `events`, no process times)."""
    events = side.document.get("events")
    window = side.document.get("window") or {}
    since, until = window.get("since"), window.get("until")
    if not isinstance(events, list) or not isinstance(since, int | float) or not isinstance(
            until, int | float):
        return None
    interval = (side.document.get("host") or {}).get("interval_s")
    step = float(interval) if isinstance(interval, int | float) and interval > 0 else 1.0
    low: dict[str, float] = {}
    for event in events:
        if not isinstance(event, dict) or event.get("kind") not in SAMPLED or \
                not isinstance(event.get("started_at"), int | float):
            continue
        ended = event.get("ended_at")
        end = min(float(ended) if isinstance(ended, int | float) else until, until)
        key = str(event.get("target"))
        low[key] = low.get(key, 0.0) + max(0.0, end - max(float(event["started_at"]), since))
    seen_total = split_total = 0.0
    for proc in balance_processes(side.processes):
        first, last = proc.get("first_seen"), proc.get("last_seen")
        if not proc.get("phases") or not isinstance(first, int | float) or not isinstance(
                last, int | float) or not isinstance(proc.get("pid"), int) or not isinstance(
                proc.get("start_time"), int | float):
            continue
        seen = float(last) - float(first) + step
        key = process_key(proc["pid"], float(proc["start_time"]))
        seen_total += seen
        split_total += min(low.get(key, 0.0), seen) if proc.get("gpus") else seen
    return split_total / seen_total if seen_total > 0 else None


def phase_noise(side: Side, phase: str, fractions: list[dict[str, float]],
                rng: random.Random) -> float | None:
    """The noise (standard deviation) of the side's share of `phase`. The balance splits the
    time of its low-utilization windows by the phases of the stack samples taken in them, so
    the share is pinned down by those samples, not by the timeline's buckets (a bucket
    without a sample is not compute time): a block bootstrap over the samples in time order
    (blocks keep a slow pass together) of the fraction in `phase`, never under the binomial
    spread of that fraction over the samples' effective number (effective_samples: samples
    in runs of one phase count for fewer), scaled by the share of the run's time the windows
    hold (the rest is compute, known without sampling). With fewer than 4 samples, the spread
    of the phase's fraction over the buckets (`fractions`) instead."""
    groups = stack_phase_groups(side)
    samples = [s for group in groups for s in group]
    if len(samples) < 4:
        return noise_sd([f.get(phase, 0.0) for f in fractions], _mean, rng)
    boot = block_bootstrap_sd([1.0 if s == phase else 0.0 for s in samples], _mean, rng)
    if boot is None:
        return None
    # never under the binomial spread at the add-one rate: a run that happened to sample one
    # phase only (or never) would otherwise claim to know its share exactly
    rate = (samples.count(phase) + 1) / (len(samples) + 2)
    worth = effective_samples([[1.0 if s == phase else 0.0 for s in g] for g in groups])
    boot = max(boot, math.sqrt(rate * (1 - rate) / worth))
    windows = sampled_time_share(side)
    if windows is None:  # window time / all time: the non-compute share over the samples'
        # non-compute fraction (all of it, when every sample was compute)
        counted = {p: samples.count(p) / len(samples) for p in set(samples)}
        shares = phase_shares(side)
        sampled = math.fsum(f for p, f in counted.items() if p != COMPUTE)
        windows = (math.fsum(shares.get(p, 0.0) for p in counted if p != COMPUTE) / sampled
                   if sampled > 0 else 1.0)
    return boot * min(windows, 1.0)


def _relative_sd(series: Sequence[Any], rng: random.Random, stat: Stat = _mean,
                 levels: Sequence[float] | None = None,
                 steady: Sequence[Any] | None = None,
                 edges: Sequence[float] | None = None) -> float | None:
    mean = stat(list(series))
    sd = noise_sd(series, stat, rng, levels, steady, edges)
    if sd is None or not mean:
        return None
    return sd / abs(mean)


@dataclass
class _Figure:
    name: str
    label: str
    unit: str
    a: float | None
    b: float | None
    sd_a: float | None
    sd_b: float | None
    higher_is_better: bool
    noise_from: str
    why_no_noise: str | None = None  # said instead of "too few buckets" when known
    in_overall: bool = True  # counted in the overall verdict
    inconclusive: str | None = None  # why it rests on too few samples to be judged

    def as_dict(self) -> dict[str, Any]:
        judged = verdict(self.a, self.b, self.sd_a, self.sd_b, self.higher_is_better)
        if self.why_no_noise and "why" in judged:
            judged["why"] = self.why_no_noise
        if self.inconclusive and judged["verdict"] in (BETTER, WORSE, NOISE):
            judged["verdict"], judged["why"] = INCONCLUSIVE, self.inconclusive
        return {"name": self.name, "label": self.label, "unit": self.unit, "a": self.a,
                "b": self.b, **judged,
                "higher_is_better": self.higher_is_better, "noise_from": self.noise_from,
                "in_overall": self.in_overall,
                # as compare's text shows them, for a reader without this module (mlcost-top)
                "a_text": figure_text(self.a, self.unit),
                "b_text": figure_text(self.b, self.unit),
                "change_text": change_text(judged["change"], self.unit),
                "noise_text": change_text(judged["noise"], self.unit, signed=False)}


def _levels(series: Sequence[Weighted]) -> list[float]:
    return [value for value, _ in series]


Builder = Callable[[Side, Sequence[dict[str, Any]] | None], list[Weighted]]


def _series_figure(name: str, label: str, unit: str, higher: bool, series: Builder, a: Side,
                   b: Side, rng: random.Random, by_level: bool = False,
                   idle: Callable[[Side], float | None] = lambda side: 0.0) -> _Figure:
    """A figure of a series of (value, ticks) per bucket of each side, its noise over the
    side's steady stretch (noise_sd); `by_level`: the values are what a repeating stall dips
    (utilization), and its turns are found from them; `idle`: the figure in a bucket of the
    side without its work (None: its edge buckets hold what the others do)."""
    sds = []
    for side in (a, b):
        items = series(side, None)
        without = idle(side)
        sds.append(noise_sd(items, weighted_mean, rng, _levels(items) if by_level else None,
                            _steady(side, series), None if without is None else side.edge_shares,
                            without or 0.0))
    return _Figure(name, label, unit, weighted_mean(series(a, None)),
                   weighted_mean(series(b, None)), sds[0], sds[1], higher,
                   "bootstrap over timeline buckets")


def _steady(side: Side, series: Callable[[Side, Any], list[Any]]) -> list[Any] | None:
    """The series over the side's steady stretch (Side.steady_buckets), None when that is all
    of its buckets."""
    steady = side.steady_buckets
    return None if len(steady) == len(side.buckets) else series(side, steady)


def _phase_figures(a: Side, b: Side, rng: random.Random) -> list[_Figure]:
    """Each phase's share of the processes' time, as the report's phase balance says. Noise:
    a block bootstrap over the stack samples the balance splits its windows by (phase_noise)."""
    shares = {"a": phase_shares(a), "b": phase_shares(b)}
    fractions = {"a": phase_fractions(a), "b": phase_fractions(b)}
    phases = sorted(set(shares["a"]) | set(shares["b"]),
                    key=lambda p: (p != COMPUTE, -max(shares["a"].get(p, 0.0),
                                                      shares["b"].get(p, 0.0)), p))
    out = []
    rough = too_few_stack_samples(a, b)
    for phase in phases:
        sds = {"a": phase_noise(a, phase, fractions["a"], rng),
               "b": phase_noise(b, phase, fractions["b"], rng)}
        out.append(_Figure(f"phase.{phase}", f"{phase} share", "share",
                           shares["a"].get(phase, 0.0) if shares["a"] else None,
                           shares["b"].get(phase, 0.0) if shares["b"] else None,
                           sds["a"], sds["b"], phase == COMPUTE,
                           "block bootstrap over the stack samples in time order",
                           inconclusive=rough))
    return out


def too_few_stack_samples(a: Side, b: Side) -> str | None:
    """Why the sides' phase shares are not judged, when a side's rest on fewer than
    MIN_PHASE_SAMPLES stack samples; None when both have enough, or their time is the GPU's
    (a side without samples, or whose samples split under MIN_SAMPLED_SHARE of its time:
    the rest is compute, known from the GPU; it is judged as before)."""
    counts = {"A": len(stack_phases(a)), "B": len(stack_phases(b))}

    def rough(side: Side, n: int) -> bool:
        share = sampled_time_share(side)
        return 0 < n < MIN_PHASE_SAMPLES and (share is None or share >= MIN_SAMPLED_SHARE)

    if not (rough(a, counts["A"]) or rough(b, counts["B"])):
        return None
    how = ("profile longer runs, 30 s or more (about 2 stack samples a second)"
           if a.profile and b.profile else "compare longer runs or ranges")
    return (f"too few stack samples to judge a phase share (A {counts['A']}, B {counts['B']}; "
            f"it takes {MIN_PHASE_SAMPLES} or more on each side): {how}")


# At most this many steps are taken from one progress line (a hostile or garbled count).
MAX_STEPS_PER_LINE = 100_000
StepSpan = tuple[float, float, float]  # (from, to, steps): steps done over a stretch of time


def _finite(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(
        value)


def step_spans(profile: dict[str, Any]) -> list[StepSpan]:
    """The steps a profile reports, each with the stretch of time (Unix time) it was done in.
    `step_times` (when each step ended) gives a point per step. `step_timeline`, what `mlcostd
    profile` writes ([seconds after `started_at`, step number] whenever a progress line raised
    the count), gives the steps a line adds over the time since the line before it (the first
    line's since the command started): a program that prints every 10 steps did them one
    after another over that time, not all at the moment its line was read. Counted at that
    moment, 1-s buckets held 0 or 10 steps, and the cost per step's noise was the logging
    cadence's (a 38 % cut read as within noise)."""
    times = profile.get("step_times")
    if isinstance(times, list):
        return [(float(t), float(t), 1.0) for t in times if _finite(t)]
    timeline, started = profile.get("step_timeline"), profile.get("started_at")
    if not isinstance(timeline, list) or not _finite(started):
        return []
    begun = float(started)
    out: list[StepSpan] = []
    done, before = 0, 0.0
    for entry in timeline:
        if not (isinstance(entry, list) and len(entry) == 2 and all(map(_finite, entry))):
            continue
        at, count = float(entry[0]), min(int(entry[1]), done + MAX_STEPS_PER_LINE)
        if count > done:
            out.append((begun + min(before, at), begun + at, float(count - done)))
            done = count
        before = max(before, at)
    return out


def bucket_steps(side: Side, spans: Sequence[StepSpan]) -> dict[int, float]:
    """Steps done in each of the side's timeline buckets, by the bucket's index from the
    timeline's `since`: each span's steps spread evenly over it (step_spans), a point's in
    the bucket it falls in."""
    since, size = (side.document.get("timeline") or {}).get("since") or 0.0, side.bucket_s
    if not _finite(since) or not (math.isfinite(size) and size > 0):
        return {}
    indexes = sorted({round((float(b["ts"]) - since) / size) for b in side.buckets
                      if _finite(b.get("ts"))})
    steps: dict[int, float] = {}
    for lo, hi, count in spans:
        first, last = int((lo - since) // size), int((hi - since) // size)
        if first == last or hi <= lo:  # a point, or a span inside one bucket
            steps[last] = steps.get(last, 0.0) + count
            continue
        for index in indexes[bisect.bisect_left(indexes, first):
                             bisect.bisect_right(indexes, last)]:
            start = since + index * size
            overlap = min(hi, start + size) - max(lo, start)
            if overlap > 0:
                steps[index] = steps.get(index, 0.0) + count * overlap / (hi - lo)
    return steps


def step_burn(side: Side, bucket: dict[str, Any]) -> float | None:
    """What the side burned in a bucket ($/h) as its cost per step counts it (a profile's is
    its processes' cost): nothing in a bucket that holds none of its processes (after the
    command exited), else bucket_cost."""
    procs = bucket.get("processes")
    keys = side.keys
    if keys and isinstance(procs, dict) and not keys & procs.keys():
        return 0.0
    return bucket_cost(side, bucket)


def step_pairs(side: Side) -> list[tuple[float, float]]:
    """Per bucket of the stretch between the first and the last step the profile reports:
    (dollars spent in its part of the stretch, steps done in it, spread as bucket_steps
    spreads them). Before the first report the steps' pace is not known (the start-up, the
    imports and the first batch are in it) and after the last none are reported (a loop that
    prints every 50 steps and stops at step 220 did 20 more): counted as cost without steps,
    those buckets made the noise the edges' and the cadence's, not the loop's."""
    return [(dollars, done) for dollars, done, _ in step_rows(side)]


def step_rows(side: Side) -> list[tuple[float, float, float | None]]:
    """step_pairs, each with its bucket's GPU utilization (bucket_utilization): what a stall
    the loop repeats dips (stall_turns). Not the steps: they are spread from progress lines
    every N steps, and a line a bucket late dips them as a stall does."""
    spans = sorted(step_spans(side.profile), key=lambda span: span[1])
    since = (side.document.get("timeline") or {}).get("since") or 0.0
    size = side.bucket_s
    if len(spans) < 2 or not _finite(since) or not (math.isfinite(size) and size > 0):
        return []
    lo, hi = spans[0][1], spans[-1][1]
    steps = bucket_steps(side, spans[1:])
    pairs: list[tuple[float, float, float | None]] = []
    for bucket in side.buckets:
        if not _finite(bucket.get("ts")):
            continue
        index = round((float(bucket["ts"]) - since) / size)
        start = since + index * size
        covered = max(0.0, min(hi, start + size) - max(lo, start))
        done = steps.get(index, 0.0)
        burn = step_burn(side, bucket)
        if burn is not None and (covered > 0 or done > 0):
            pairs.append((burn * covered / 3600, done, bucket_utilization(side, bucket)))
    return pairs


def _per_step_figure(a: Side, b: Side, rng: random.Random) -> _Figure | None:
    found = [side.profile.get("cost_per_step") for side in (a, b)]
    values = [float(v) for v in found if isinstance(v, int | float)]
    if len(values) != 2:
        return None
    sds: list[float | None] = []
    sources = []
    for side, value in zip((a, b), values, strict=True):
        rows = step_rows(side)
        pairs = [(dollars, done) for dollars, done, _ in rows]
        levels = [util for _, _, util in rows if util is not None]
        sd = noise_sd(pairs, _ratio, rng, levels) if pairs else None
        if sd is not None and (ratio := _ratio(pairs)):
            sds.append(value * sd / ratio)
            sources.append("bootstrap over steps per bucket")
        else:
            util = utilization_series(side)
            rel = _relative_sd(util, rng, weighted_mean, _levels(util),
                               _steady(side, utilization_series), side.edge_shares)
            sds.append(None if rel is None else value * rel)
            sources.append("GPU utilization buckets (no step times)")
    return _Figure("cost_per_1k_steps", "cost per 1k steps", "$", values[0] * 1000,
                   values[1] * 1000, None if sds[0] is None else sds[0] * 1000,
                   None if sds[1] is None else sds[1] * 1000, False,
                   " / ".join(sorted(set(sources))))


def _unit_figures(a: Side, b: Side, rng: random.Random) -> list[_Figure]:
    """Cost per 1M tokens, per 1k requests ... where both sides measured the same unit."""
    def units(side: Side) -> dict[str, float]:
        found = {}
        for meter in side.document.get("unit_costs") or []:
            if isinstance(meter, dict) and isinstance(meter.get("unit_cost"), int | float):
                if side.command is None and side.job in (None, meter.get("target")):
                    per = f"{float(meter.get('per') or 1):g}".replace("1e+06", "1M").replace(
                        "1000", "1k")
                    found[f"{per} {meter.get('unit') or 'units'}"] = float(meter["unit_cost"])
        return found
    ua, ub = units(a), units(b)
    sides = {"a": a, "b": b}
    util = {k: utilization_series(side) for k, side in sides.items()}
    rel = {k: _relative_sd(util[k], rng, weighted_mean, _levels(util[k]),
                           _steady(sides[k], utilization_series), sides[k].edge_shares)
           for k in util}
    return [_Figure(f"unit_cost.{name}", f"cost per {name}", "$", ua[name], ub[name],
                    None if rel["a"] is None else ua[name] * rel["a"],
                    None if rel["b"] is None else ub[name] * rel["b"], False,
                    "GPU utilization buckets (no per-bucket unit counts)")
            for name in sorted(set(ua) & set(ub))]


def _latency_figures(a: Side, b: Side, rng: random.Random) -> list[_Figure]:
    """p50 and p99 of each latency histogram both sides measured (the report's
    `spend.latency`, by target and metric), lower is better. Noise: the bootstrap over the
    quantiles of the timeline's windows (each window's own requests), floored by their spread
    like every figure's (noise_sd)."""
    def found(side: Side) -> dict[tuple[str, str], dict[str, Any]]:
        return {(str(e.get("target")), str(e.get("metric"))): e
                for e in (side.document.get("spend") or {}).get("latency") or []
                if isinstance(e, dict) and isinstance(e.get("p99_seconds"), int | float)}

    def windows(side: Side, key: tuple[str, str], quantile: str) -> list[float]:
        return [float(w[quantile]) for bucket in side.buckets
                for w in bucket.get("latency") or [] if isinstance(w, dict)
                and (str(w.get("target")), str(w.get("metric"))) == key
                and isinstance(w.get(quantile), int | float)]

    la, lb = found(a), found(b)
    out = []
    for key in sorted(set(la) & set(lb)):
        target = key[0] if len(la) == 1 else f"{key[0]} {key[1]}"
        for quantile in ("p50_seconds", "p99_seconds"):
            out.append(_Figure(
                f"latency.{quantile[:3]}.{key[0]}.{key[1]}", f"{quantile[:3]} latency of {target}",
                "s", la[key][quantile], lb[key][quantile],
                noise_sd(windows(a, key, quantile), _mean, rng),
                noise_sd(windows(b, key, quantile), _mean, rng), False,
                "bootstrap over the timeline windows' quantiles"))
    return out


def memory_peak(side: Side) -> float | None:
    """The most GPU memory the side held at one tick, GiB: its fullest GPU's peak (the
    report's `memory_peak_bytes`), or, narrowed to a job or command, its largest process's
    (`gpu_memory_peak_bytes`). None for a document from before peaks were reported."""
    if side.job is None and side.command is None:
        found = [g.get("memory_peak_bytes") for g in side.document.get("gpus") or []
                 if isinstance(g, dict) and g.get("index") in side.gpus]
    else:
        found = [p.get("gpu_memory_peak_bytes") for p in side.processes]
    peaks = [float(v) for v in found if isinstance(v, int | float) and not isinstance(v, bool)
             and math.isfinite(v) and v >= 0]  # a document is data: Infinity reads as JSON
    return max(peaks) / 2**30 if peaks else None


def gpu_series(side: Side, metric: str, combine: Callable[[list[float]], float],
               buckets: Sequence[dict[str, Any]] | None = None) -> list[float]:
    """Per bucket: `metric` of the side's GPUs in the timeline, combined (summed, the
    largest); buckets where none of them has it (recorded before the timeline carried it, no
    reading) give none."""
    out = []
    for bucket in _of(side, buckets):
        gpus = bucket.get("gpus") or {}
        values = [float(v) for i in side.gpus
                  if isinstance(v := (gpus.get(str(i)) or {}).get(metric), int | float)
                  and math.isfinite(v)]
        if values:
            out.append(combine(values))
    return out


def memory_series(side: Side, buckets: Sequence[dict[str, Any]] | None = None) -> list[float]:
    """Per bucket: the memory of the side's fullest GPU, GiB (the bucket's mean per GPU)."""
    return gpu_series(side, "memory_used_bytes", lambda held: max(held) / 2**30, buckets)


def _most(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def _memory_figure(a: Side, b: Side, rng: random.Random) -> _Figure | None:
    """Peak GPU memory, lower is better, not in the overall verdict (a larger batch that
    keeps the GPU busier holds more on purpose). Noise: the bootstrap of the largest bucket,
    floored by the spread of the windows' largest (noise_sd): a run whose memory climbs has
    noise, a steady one next to none, so a model that grew by a layer shows."""
    peaks = memory_peak(a), memory_peak(b)
    if peaks == (None, None):
        return None
    return _Figure("gpu_memory_peak", "peak GPU memory", "GiB", peaks[0], peaks[1],
                   noise_sd(memory_series(a), _most, rng, None, _steady(a, memory_series)),
                   noise_sd(memory_series(b), _most, rng, None, _steady(b, memory_series)),
                   False, "bootstrap over the timeline buckets' largest GPU memory",
                   in_overall=False)


def power_series(side: Side, buckets: Sequence[dict[str, Any]] | None = None) -> list[float]:
    """Per bucket: the watts the side's GPUs drew (the timeline's per-GPU power; buckets of a
    document recorded before it had power, or GPUs without a reading, give none)."""
    return gpu_series(side, "power_watts", math.fsum, buckets)


def side_energy(side: Side) -> tuple[float | None, float | None, float | None]:
    """(kWh, grams CO2e, hours covered) of the side, from its report's energy (the window's
    document["carbon"], or its processes' "energy" when narrowed to a job or command); None
    where the document has no energy (recorded before it, no power) or carbon is unknown."""
    carbon = side.document.get("carbon")
    if not isinstance(carbon, dict) or not isinstance(carbon.get("kwh"), int | float):
        return None, None, None
    covered = carbon.get("covered_s")
    hours = float(covered) / 3600 if isinstance(covered, int | float) and covered > 0 else None
    if side.job is None and side.command is None:
        grams = carbon.get("co2e_grams")
        return (float(carbon["kwh"]), float(grams) if isinstance(grams, int | float) else None,
                hours)
    figures = [p["energy"] for p in side.processes if isinstance(p.get("energy"), dict)]
    if not figures:
        return 0.0, 0.0 if (carbon.get("grid") or {}).get("g_per_kwh") else None, hours
    grams_each = [f.get("co2e_grams") for f in figures]
    return (math.fsum(float(f.get("kwh") or 0.0) for f in figures),
            math.fsum(grams_each) if all(isinstance(g, int | float) for g in grams_each)
            else None, hours)


def _scaled(value: float | None, factor: float | None) -> float | None:
    return None if value is None or factor is None else value * factor


def _energy_figures(a: Side, b: Side, rng: random.Random) -> list[_Figure]:
    """kWh per hour and grams CO2e per hour of each side (and kWh per 1k steps where both are
    profiles with steps), lower is better. Noise: the relative spread of the side's GPUs' power
    over the timeline buckets (noise_sd, as the other per-hour figures), applied to the
    figure; a document without per-bucket power gives the figures side by side, no verdict."""
    energy = {"a": side_energy(a), "b": side_energy(b)}
    if all(e[0] is None for e in energy.values()):
        return []
    sides = {"a": a, "b": b}
    power = {k: power_series(side) for k, side in sides.items()}
    rel = {k: _relative_sd(power[k], rng, levels=power[k], steady=_steady(sides[k], power_series),
                           edges=sides[k].edge_shares) for k in power}
    why = None if None not in rel.values() else (
        "no per-bucket GPU power in a side's timeline: shown side by side, no verdict")

    def figure(name: str, label: str, unit: str, values: dict[str, float | None],
               in_overall: bool = True) -> _Figure:
        sds = {k: _scaled(v, rel[k]) for k, v in values.items()}
        return _Figure(name, label, unit, values["a"], values["b"], sds["a"], sds["b"], False,
                       ENERGY_NOISE, why, in_overall)

    def per_hour(index: int) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for k, (kwh, grams, hours) in energy.items():
            amount = (kwh, grams)[index]
            out[k] = None if amount is None or not hours else amount / hours
        return out

    # A busier GPU draws more per hour: a fix that runs faster is not worse for it, so the
    # per-hour figures are judged but left out of the overall verdict (per step counts).
    figures = [figure("kwh_per_hour", "kWh per hour", "kWh/h", per_hour(0), False),
               figure("co2e_grams_per_hour", "g CO2e per hour", "g CO2e/h", per_hour(1), False)]
    steps = {k: n for k, side in (("a", a), ("b", b))
             if isinstance(n := side.profile.get("steps"), int) and n > 0}
    if len(steps) == 2:
        figures.append(figure("kwh_per_1k_steps", "kWh per 1k steps", "kWh", {
            k: _scaled(energy[k][0], 1000 / steps[k]) for k in ("a", "b")}))
    return figures


# -- recommendations ----------------------------------------------------------------------


def _recommendations(side: Side) -> dict[str, dict[str, Any]]:
    """The side's recommendations by rule (a run's pids differ from the other's; its rules
    do not). Narrowed to a job: those whose target is one of its processes."""
    keys = side.keys
    found: dict[str, dict[str, Any]] = {}
    for rec in side.document.get("recommendations") or []:
        if not isinstance(rec, dict) or not isinstance(rec.get("rule"), str):
            continue
        if (side.job is not None or side.command is not None) and str(
                rec.get("target")) not in keys:
            continue
        held = found.get(rec["rule"])
        if held is None or (rec.get("savings_per_month") or 0) > (
                held.get("savings_per_month") or 0):
            found[rec["rule"]] = rec
    return found


def recommendation_changes(a: Side, b: Side) -> list[dict[str, Any]]:
    """Each rule seen on either side: new (only after), gone (only before), changed (savings
    moved by more than SAVINGS_CHANGED) or same."""
    ra, rb = _recommendations(a), _recommendations(b)
    out = []
    for rule in sorted(set(ra) | set(rb)):
        before, after = ra.get(rule), rb.get(rule)
        sa = (before or {}).get("savings_per_month")
        sb = (after or {}).get("savings_per_month")
        if before is None:
            status = "new"
        elif after is None:
            status = "gone"
        elif isinstance(sa, int | float) and isinstance(sb, int | float) and abs(sb - sa) > (
                SAVINGS_CHANGED * max(abs(sa), abs(sb), 1e-9)):
            status = "changed"
        else:
            status = "same"
        out.append({"rule": rule, "status": status, "savings_per_month_a": sa,
                    "savings_per_month_b": sb,
                    "summary": str((after or before or {}).get("summary") or "")[:300]})
    return out


# -- runs of a job in a store ------------------------------------------------------------


class NoPreviousRun(LookupError):
    """The store holds no process by that key, or fewer than two runs to compare."""


def previous_runs(db: Path, target: str, timeout_s: float = 5.0) -> tuple[
        str | None, str | None, tuple[float, float], tuple[float, float]]:
    """(job, command, A's range, B's range) for --previous: the runs in the store of job
    `target`, or of the command line of process `target` ('PID:START'), a run being processes
    whose lifetimes overlap; B the latest, A the one before it. NoPreviousRun when the
    store holds fewer than two. One query over the store's GPU processes (blocking)."""
    from daemon.sources.owners import decode_owner
    from daemon.store.queries import recorded_jobs
    from daemon.store.reader import StoreReader, stored_command
    from daemon.wire import parse_process_key

    reader = StoreReader(str(db), tidy=True, timeout_s=timeout_s)
    try:
        jobs = recorded_jobs(reader)  # [cost].jobs as the daemon that recorded it ran
        rows = reader.query(
            "SELECT p.pid, p.start_ms, p.command, p.owner, min(s.ts) AS lo, max(s.ts) AS hi "
            "FROM processes p JOIN proc_samples s ON s.proc = p.id "
            "WHERE p.id IN (SELECT DISTINCT proc FROM proc_gpu_samples) GROUP BY p.id")
    finally:
        reader.close()
    job = command = None
    try:
        pid, start = parse_process_key(target)
    except ValueError:
        job = target
        try:
            labeler = JobLabeler(jobs)
        except ValueError:  # a pattern that is no regex (the daemon refused it at start)
            labeler = _LABELER
        mine = [r for r in rows if of_job(job, r["command"], decode_owner(r["owner"]),
                                          labeler=labeler)]
    else:
        own = [r for r in rows if r["pid"] == pid and abs(r["start_ms"] / 1000 - start) < 0.001]
        if not own:
            raise NoPreviousRun(f"no GPU process {target} in {db}")
        command = own[0]["command"]
        mine = [r for r in rows if r["command"] == command]
    runs: list[list[float]] = []
    for row in sorted(mine, key=lambda r: r["lo"]):
        if runs and row["lo"] / 1000 <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], row["hi"] / 1000)
        else:
            runs.append([row["lo"] / 1000, row["hi"] / 1000])
    if len(runs) < 2:
        what = f"job {target!r}" if job is not None else f"the command line of {target}"
        raise NoPreviousRun(f"{db} holds {len(runs)} run(s) of {what}: nothing to compare "
                            "with yet")
    shown = None if command is None else stored_command(command)  # on its way out of the store
    return job, shown, (runs[-2][0], runs[-2][1]), (runs[-1][0], runs[-1][1])


# -- the comparison -----------------------------------------------------------------------


NOT_COUNTED_MARK = "*"
# Figures in dollars: a price that moved on the same GPUs moves them without the work moving.
COST_FIGURES = ("cost_per_hour", "wasted_per_hour", "cost_per_1k_steps")
UNIT_COST_FIGURE = "unit_cost."
NOT_COUNTED_NOTE = ("* judged, not counted in the overall verdict: a GPU that does more work "
                    "draws more per hour (kWh per 1k steps counts) and may hold more memory "
                    "(a larger batch)")


def shown_verdict(figure: dict[str, Any]) -> str:
    """A figure's verdict as a person reads it: marked when it is left out of the overall
    verdict (energy and carbon per hour), so 'worse' there does not read as a regression."""
    counted = figure.get("in_overall", True) is not False
    return str(figure.get("verdict")) + ("" if counted else NOT_COUNTED_MARK)


def verdict_counts(figures: Sequence[dict[str, Any]]) -> str:
    """'5 better, 0 worse, 2 within noise' over the figures the overall verdict counts (', 2
    inconclusive' when some are), and '; 2 not counted' when some are left out."""
    counted = [f for f in figures if f.get("in_overall", True) is not False]
    text = ", ".join(f"{sum(1 for f in counted if f.get('verdict') == v)} {v}"
                     for v in (BETTER, WORSE, NOISE))
    unjudged = sum(1 for f in counted if f.get("verdict") == INCONCLUSIVE)
    text += f", {unjudged} {INCONCLUSIVE}" if unjudged else ""
    left_out = len(figures) - len(counted)
    return text + (f"; {left_out} not counted" if left_out else "")


def overall(figures: Sequence[dict[str, Any]]) -> str:
    """better (some figures better, none worse), worse (the reverse), mixed (both), or
    within noise (no figure moved past its noise), over the figures `in_overall`."""
    verdicts = {f["verdict"] for f in figures if f.get("in_overall", True)}
    if BETTER in verdicts and WORSE in verdicts:
        return "mixed"
    if BETTER in verdicts:
        return BETTER
    if WORSE in verdicts:
        return WORSE
    return NOISE if NOISE in verdicts else UNKNOWN


def compare(a: Side, b: Side, seed: int = SEED) -> dict[str, Any]:
    """The `compare --json` document: both sides described, the figures with verdicts, the
    recommendation changes and the overall verdict."""
    rng = random.Random(seed)
    figures = [_series_figure("utilization", "GPU utilization", "%", True, utilization_series,
                              a, b, rng, by_level=True),
               # a run's processes are charged by the tick they held a GPU: a bucket they held
               # it part of is charged at the same rate
               _series_figure("cost_per_hour", "cost per hour", "$/h", False, cost_series, a, b,
                              rng, idle=lambda side: None),
               _series_figure("wasted_per_hour", "wasted per hour", "$/h", False,
                              wasted_series, a, b, rng, idle=idle_wasted)]
    per_step = _per_step_figure(a, b, rng)
    if per_step is not None:
        figures.append(per_step)
    figures += _unit_figures(a, b, rng)
    figures += _latency_figures(a, b, rng)
    figures += _energy_figures(a, b, rng)
    memory = _memory_figure(a, b, rng)
    if memory is not None:
        figures.append(memory)
    figures += _phase_figures(a, b, rng)
    side_a, side_b = _describe(a), _describe(b)
    if price_moved(side_a["price_per_gpu"], side_b["price_per_gpu"]) is not None and \
            same_hardware(side_a, side_b):
        for fig in figures:  # the price's change, not the work's
            if fig.name in COST_FIGURES or fig.name.startswith(UNIT_COST_FIGURE):
                fig.in_overall = False
    shown = [f.as_dict() for f in figures]
    return {
        "version": COMPARE_VERSION,
        "a": side_a,
        "b": side_b,
        "price_note": price_note(side_a, side_b),
        "notes": sides_notes(a, b),
        "figures": shown,
        "recommendations": recommendation_changes(a, b),
        "verdict": overall(shown),
        "method": (f"noise: standard deviation of each side's figure over {RESAMPLES} circular "
                   f"block-bootstrap resamples of its timeline buckets (blocks of ~sqrt(n) "
                   f"buckets, seed {seed}), at least its spread over the run's windows of "
                   f"~sqrt(n) buckets (between-run variation) and {STEADY_RUN_TO_RUN:.0%} of "
                   f"the figure, both over a run's buckets after its first bucket of GPU work "
                   f"and before its last (its start-up and exit left out; what those two "
                   f"partial buckets may hold by chance added); where the run repeats a stall "
                   f"such as a checkpoint (its GPU utilization dips at regular intervals), the "
                   f"spread of its turns from one stall to the next, scaled to the run, and at "
                   f"least {RUN_TO_RUN:.1%} of the figure; cost per step: of the buckets "
                   f"between the first and the last step reported, each progress line's steps "
                   f"spread over the time since the line before; phase shares: of their stack "
                   f"samples in time order, at least the binomial spread over what they are "
                   f"worth (lag-1 autocorrelation), scaled by the time in low-utilization "
                   f"windows, inconclusive from under {MIN_PHASE_SAMPLES} samples on a side; a "
                   f"change counts past {Z} x the noise of the difference (99 %)"),
    }


def gpu_uuids(side: Side) -> set[str]:
    """The UUIDs of the side's GPUs (those its processes held, or all of its document's), as
    NVML gives them; empty where the document has none."""
    return {g["uuid"] for g in side.document.get("gpus") or [] if isinstance(g, dict)
            and g.get("index") in side.gpus and isinstance(g.get("uuid"), str) and g["uuid"]}


def _hostname(side: Side) -> str | None:
    host = side.document.get("host")
    found = host.get("hostname") if isinstance(host, dict) else None
    return found[:80] if isinstance(found, str) and found else None


def sides_notes(a: Side, b: Side) -> list[str]:
    """What the reader should know before the verdict about what the sides are: a side in
    which no process ran (an idle store's range: its figures are an idle machine's, not a
    run's), sides that share no GPU (another host's store, another machine: the verdict
    holds the machines' difference as well as the work's)."""
    notes = []
    for name, side in (("A", a), ("B", b)):
        if not side.processes and side.job is None and side.command is None:
            notes.append(f"{name} holds no process: nothing ran in its range, its figures are "
                         "an idle machine's")
    ua, ub = gpu_uuids(a), gpu_uuids(b)
    if ua and ub and not ua & ub:
        hosts = _hostname(a), _hostname(b)
        where = (f" (hosts {hosts[0]} and {hosts[1]})" if None not in hosts
                 and hosts[0] != hosts[1] else "")
        notes.append(f"the sides share no GPU{where}: they ran on other machines or other "
                     "GPUs, and the verdict holds that difference as well as the work's")
    overlap = overlap_note(a, b)
    if overlap is not None:
        notes.append(overlap)
    return notes


def _window(side: Side) -> tuple[float, float] | None:
    window = side.document.get("window")
    if not isinstance(window, dict):
        return None
    since, until = window.get("since"), window.get("until")
    if not (_finite(since) and _finite(until) and until > since):
        return None
    return float(since), float(until)


def overlap_note(a: Side, b: Side) -> str | None:
    """What the reader should know when A and B are ranges of one machine's recording that
    overlap (`2m` against `1m`: B is the last half of A): the ticks of the overlap are counted
    on both sides and pull the figures toward each other, so "within noise" says less than it
    seems; None when they do not overlap (by more than two ticks), or when either is a profile
    (a run of its own command, whatever else ran at the time) or they ran on other GPUs.
    Identical ranges are refused before (`compare 1m 1m`); this is the part-overlap."""
    if a.profile or b.profile:
        return None
    first, second = _window(a), _window(b)
    if first is None or second is None:
        return None
    ua, ub = gpu_uuids(a), gpu_uuids(b)
    if ua and ub and not ua & ub:
        return None  # other machines: "share no GPU" says so
    if not (ua and ub) and _hostname(a) != _hostname(b):
        return None
    lo, hi = max(first[0], second[0]), min(first[1], second[1])
    interval = (a.document.get("host") or {}).get("interval_s")
    step = float(interval) if _finite(interval) and interval > 0 else 1.0
    if hi - lo <= 2 * step:
        return None
    shares = [(hi - lo) / (end - start) for start, end in (first, second)]
    of = " and ".join(f"{'all' if share >= 0.995 else f'{share:.0%}'} of {name}"
                      for name, share in zip(("A", "B"), shares, strict=True))
    length = f"{hi - lo:.0f} s" if hi - lo < 600 else clock.duration(hi - lo)
    return (f"A and B overlap: {length} ({clock.local_time(lo)} to "
            f"{clock.local_time(hi)}) is in both, {of}; its ticks are counted on both sides "
            "and pull their figures toward each other, so a verdict of 'within noise' says "
            "less than it seems; compare ranges that do not overlap (e.g. 1h-ago/1h against "
            "1h)")


def _describe(side: Side) -> dict[str, Any]:
    window = side.document.get("window") or {}
    profile = side.profile
    since, first = window.get("since"), window.get("first_recorded")
    interval = (side.document.get("host") or {}).get("interval_s")
    step = interval if isinstance(interval, int | float) and interval > 0 else 1.0
    # a store whose recording began more than two ticks into the range
    young = (isinstance(since, int | float) and isinstance(first, int | float)
             and first - since > 2 * step)
    # a store whose recording stopped more than two ticks before the range's end (a range
    # ending `now` of a store no daemon records into any more)
    until = window.get("until")
    recorded = window.get("recorded")
    last = recorded.get("last") if isinstance(recorded, dict) else None
    stopped = (isinstance(until, int | float) and isinstance(last, int | float)
               and not isinstance(last, bool) and until - last > 2 * step)
    return {"label": side.label, "job": side.job, "since": since,
            "until": window.get("until"), "ticks": window.get("ticks"),
            # a store younger than its range (a snapshot of 30 min taken 2 min after the start)
            "recorded_from": first if young else None,
            # and a store that stopped inside its range: its last sample
            "recorded_until": last if stopped else None,
            "buckets": len(side.buckets), "bucket_s": side.bucket_s,
            "gpus": side.gpus, "processes": len(side.processes),
            "price_per_gpu": price_per_gpu_hour(side.document),
            "gpu_models": gpu_models(side.document, side.gpus),
            "instance_type": instance_type(side.document),
            "steps": profile.get("steps") if isinstance(profile.get("steps"), int) else None,
            "command": profile.get("command") if isinstance(profile.get("command"), str)
            else None,
            "duration_s": (float(profile["duration_s"]) if isinstance(
                profile.get("duration_s"), int | float) else None),
            "stack_samples": len(stack_phases(side)),
            "warnings": profile_warnings(profile)}


def profile_warnings(profile: dict[str, Any]) -> list[dict[str, str]]:
    """Why a profile says it may not stand for its workload (its `warnings`: too_short,
    few_stack_samples, ...), each {code, message}; [] for a document without them."""
    found = profile.get("warnings")
    return [{"code": str(w["code"])[:40], "message": str(w.get("message") or "")[:400]}
            for w in (found if isinstance(found, list) else [])[:20]
            if isinstance(w, dict) and isinstance(w.get("code"), str)]


def figure_text(value: float | None, unit: str) -> str:
    """A figure in its unit, as compare's text and HTML both show it ('-' when none, or when
    it is no finite number: an edited file's 1e308 made inf)."""
    if value is None or not math.isfinite(value):
        return "-"
    if unit == "%":
        return f"{value:.0f}%"
    if unit == "share":
        return f"{value:.0%}"
    if unit == "$/h":
        return f"${value:.2f}/h"
    if unit == "s":
        return clock.latency_text(value)
    if unit == "GiB":
        return f"{value:.1f} GiB"
    if unit in ENERGY_UNITS:  # the unit is in the label: the columns stay 10 wide
        return f"{value:.3g}"
    return money(value, figures=4)


def change_text(value: float | None, unit: str, signed: bool = True) -> str:
    """A change (signed) or a noise (not) in the figure's unit: points for shares and
    percentages, never a '%' that could read as a relative change."""
    if value is None or not math.isfinite(value):
        return "-"
    sign = ("+" if value >= 0 else "-") if signed else ""
    if unit == "%":
        return f"{sign}{abs(value):.1f} pt"
    if unit == "share":
        return f"{sign}{abs(value) * 100:.1f} pt"
    if unit == "s":
        return sign + clock.latency_text(abs(value))
    if unit == "GiB":
        return f"{sign}{abs(value):.2f} GiB"
    if unit in ENERGY_UNITS:
        return f"{sign}{abs(value):.3g}"
    return sign + money(abs(value), figures=3)
