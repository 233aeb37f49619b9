"""How one process's time split between the phases, from its classified stack samples.

`phase_balance` turns classified stack samples of one process over a window into seconds and
shares per phase, with the top stacks of each and the reason they were classified so. The
arithmetic only: the samples come from the store (daemon.analysis.balance) or from memory
(daemon.analysis.live_phases), their phases from the classifier (daemon.analysis.phases).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.analysis.stack_rules import runtime_rules_count, user_frame
from daemon.sources.frames import Frame
from daemon.wire import (
    CHECKPOINT,
    COMPUTE,
    HIGH_CONFIDENCE,
    LOW_CONFIDENCE,
    PHASES,
    UNKNOWN,
    process_key,
)

# A sample classified from /proc without a stack (daemon.analysis.proc_phases) has one
# pseudo-frame, in this file.
NO_STACK_FILE = "<proc>"
_PHASE_ORDER = {phase: i for i, phase in enumerate(PHASES)}  # a phase -> its place in PHASES


@dataclass(frozen=True, slots=True)
class StackSample:
    """One classified stack of one process: what the store keeps per dump."""

    ts: float
    pid: int
    thread_id: int
    stack_hash: str
    frames: tuple[Frame, ...]
    phase: str
    gpu_util: float  # percent (0-100) of the process's GPU(s) when the stack was taken
    reason: str = ""  # the rule or signal that decided the phase (Classification.reason)

    @property
    def from_proc(self) -> bool:
        """Classified from /proc alone, without a Python stack (daemon.analysis.proc_phases)."""
        return bool(self.frames) and self.frames[0].filename == NO_STACK_FILE


def phase_balance(
    samples: Sequence[StackSample], window_s: float, busy_seconds: float, *, top: int = 5
) -> dict[str, dict[str, Any]]:
    """Seconds and shares of `window_s` per phase, for one process.

    The GPU's busy time that stacks did not sample (stacks are taken in low-utilization
    windows) counts as compute; the rest of the window is split by the share of samples in
    each phase (no samples: unknown). Each phase carries its GPU-idle seconds (its time times
    one minus its samples' mean utilization; compute's busy time is not idle) and its top
    stacks by sample count, with the innermost user frame's file and line and the reason the
    stack was put in this phase (its most frequent one), and its confidence: LOW_CONFIDENCE
    when most of its samples came from /proc without a stack, else HIGH_CONFIDENCE.
    Phases with no time are left out; shares add up to 1 when window_s > 0.
    """
    return balance_of(sample_split(samples, top=top), window_s, busy_seconds)


@dataclass(frozen=True, slots=True)
class SampleSplit:
    """What one process's stack samples say, apart from how long it ran (phase_balance in two
    steps: a caller that keeps the samples computes this once per new sample, the time
    arithmetic once per tick). Per phase: its share of the samples, its samples' mean GPU
    utilization (0-1), its top stacks (to be read, never changed), its confidence."""

    parts: tuple[tuple[str, float, float, list[dict[str, Any]], str], ...] = ()


NO_SAMPLES = SampleSplit()


def sample_split(samples: Iterable[StackSample], *, top: int = 5) -> SampleSplit:
    """The split of `samples` (SampleTally's, over them all)."""
    tally = SampleTally()
    for s in samples:
        tally.add(s)
    return tally.split(top)


# Every double is an integer multiple of 2**-1074: utilizations kept as such integers add up
# exactly, so a tally's mean is the same whatever order its samples came and went in.
_UTIL_EXPONENT = 1074


def _exact_util(util: float) -> int:
    """A sample's GPU utilization clamped to 0-100 (not a number: 0), as an exact integer count
    of 2**-1074."""
    u = util if 0.0 <= util <= 100.0 else (100.0 if util > 100.0 else 0.0)
    numerator, denominator = u.as_integer_ratio()  # the denominator is a power of two
    return numerator << (_UTIL_EXPONENT - denominator.bit_length() + 1)


class _PhaseTally:
    """One phase's samples in a tally: how many, their utilizations' exact sum, how many came
    from /proc alone, and per stack its count, frames and reasons (reason -> count)."""

    __slots__ = ("count", "util", "from_proc", "stacks", "frames", "reasons")

    def __init__(self) -> None:
        self.count = 0
        self.util = 0
        self.from_proc = 0
        self.stacks: dict[str, int] = {}
        self.frames: dict[str, tuple[Frame, ...]] = {}
        self.reasons: dict[str, dict[str, int]] = {}

    def copy(self) -> _PhaseTally:
        other = _PhaseTally()
        other.count, other.util, other.from_proc = self.count, self.util, self.from_proc
        other.stacks, other.frames = dict(self.stacks), dict(self.frames)
        other.reasons = {h: dict(said) for h, said in self.reasons.items()}
        return other


class SampleTally:
    """What a split needs of a set of stack samples, kept as samples come and go: a caller that
    keeps a process's samples as they arrive and age out (daemon.analysis.live_phases) adds
    and removes each one once, and a split then costs its phases and distinct stacks, not
    its samples. `version` changes with every sample added or removed."""

    __slots__ = ("count", "phases", "version")

    def __init__(self) -> None:
        self.count = 0
        self.phases: dict[str, _PhaseTally] = {}
        self.version = 0

    def add(self, s: StackSample) -> None:
        phase = s.phase if s.phase in _PHASE_ORDER else UNKNOWN
        kept = self.phases.get(phase)
        if kept is None:
            kept = self.phases[phase] = _PhaseTally()
        kept.count += 1
        kept.util += _exact_util(s.gpu_util)
        kept.from_proc += s.from_proc
        stack_hash = s.stack_hash
        n = kept.stacks.get(stack_hash)
        if n is None:
            kept.stacks[stack_hash] = 1
            kept.frames[stack_hash] = s.frames
        else:
            kept.stacks[stack_hash] = n + 1
        if s.reason:
            said = kept.reasons.setdefault(stack_hash, {})
            said[s.reason] = said.get(s.reason, 0) + 1
        self.count += 1
        self.version += 1

    def remove(self, s: StackSample) -> None:
        """Take away a sample added before (the same one: its phase, stack and reason)."""
        phase = s.phase if s.phase in _PHASE_ORDER else UNKNOWN
        kept = self.phases[phase]
        kept.count -= 1
        if not kept.count:
            del self.phases[phase]
        else:
            kept.util -= _exact_util(s.gpu_util)
            kept.from_proc -= s.from_proc
            stack_hash = s.stack_hash
            n = kept.stacks[stack_hash] - 1
            if n:
                kept.stacks[stack_hash] = n
            else:
                del kept.stacks[stack_hash], kept.frames[stack_hash]
            if s.reason:
                said = kept.reasons[stack_hash]
                left = said[s.reason] - 1
                if left:
                    said[s.reason] = left
                else:
                    del said[s.reason]
                    if not said:
                        del kept.reasons[stack_hash]
        self.count -= 1
        self.version += 1

    def copy(self) -> SampleTally:
        other = SampleTally()
        other.count, other.version = self.count, self.version
        other.phases = {phase: kept.copy() for phase, kept in self.phases.items()}
        return other

    def split(self, top: int = 5) -> SampleSplit:
        """Per phase (in the order of PHASES): its share of the samples, their mean GPU
        utilization (0-1), its top stacks, its confidence (LOW_CONFIDENCE when most of its
        samples came from /proc without a stack)."""
        if not self.count:
            return NO_SAMPLES
        return SampleSplit(tuple(
            (phase, kept.count / self.count,
             kept.util / (1 << _UTIL_EXPONENT) / kept.count / 100.0,
             _top_stacks(kept, top),
             LOW_CONFIDENCE if kept.from_proc * 2 > kept.count else HIGH_CONFIDENCE)
            for phase, kept in sorted(self.phases.items(), key=lambda pk: _PHASE_ORDER[pk[0]])))


def balance_of(split: SampleSplit, window_s: float,
               busy_seconds: float) -> dict[str, dict[str, Any]]:
    """phase_balance from the samples' split, the window and the GPU's busy seconds in it."""
    if window_s <= 0:
        return {}
    busy = min(max(busy_seconds, 0.0), window_s)
    quiet = window_s - busy
    if not split.parts:  # no stacks (most processes, most of the time): compute and unknown
        parts = [(COMPUTE, busy, 0.0), (UNKNOWN, quiet, quiet)]
        if quiet > busy:
            parts.reverse()
        return {phase: {"seconds": spent, "share": spent / window_s, "gpu_idle_seconds": idle,
                        "top_stacks": [], "confidence": HIGH_CONFIDENCE}
                for phase, spent, idle in parts if spent > 0}
    # Each phase's seconds are its share of the quiet time (compute: plus the busy time), its
    # GPU-idle seconds that times one minus its mean utilization; the split has each phase
    # once. Rebuilt for every process whose time moved (a live view: each tick, while young),
    # so one pass and one sort of a few rows.
    # Rows sort as tuples: the longest phase first, equal times in the order of PHASES (each
    # phase once, so no two rows get past their first two items).
    rows: list[tuple[float, int, str, float, float, list[dict[str, Any]], str]] = []
    compute_seen = False
    for phase, share, mean_util, top_stacks, sure in split.parts:
        spent = quiet * share
        idle = spent * (1.0 - mean_util)
        if phase == COMPUTE:
            compute_seen = True
            spent = busy + spent
        rows.append((-spent, _PHASE_ORDER[phase], phase, spent, idle, top_stacks, sure))
    if not compute_seen:
        rows.append((-busy, _PHASE_ORDER[COMPUTE], COMPUTE, busy, 0.0, [], HIGH_CONFIDENCE))
    rows.sort()
    return {phase: {"seconds": spent, "share": spent / window_s, "gpu_idle_seconds": idle,
                    "top_stacks": top_stacks, "confidence": sure}
            for _, _, phase, spent, idle, top_stacks, sure in rows if spent > 0}


@dataclass(frozen=True, slots=True)
class _Stack:
    """What the top stacks say of one stack: its frames as text, where it is (its innermost
    user frame, else its innermost frame) and the user function it is spent in (a
    comprehension or nested function counts as the function that holds it)."""

    frames: tuple[str, ...]
    where: Frame | None
    function: tuple[str, str] | None


# stack hash -> (its frames, runtime rules then, what they say): worked out once per stack, not
# once per split (a live balance's split is redone with each new sample of its process, and
# user_frame's path rules cost ~10 us a stack). Bounded: cleared when full.
_STACKS: dict[str, tuple[tuple[Frame, ...], int, _Stack]] = {}
MAX_STACKS_KEPT = 4096


def _stack(stack_hash: str, frames: tuple[Frame, ...]) -> _Stack:
    rules = runtime_rules_count()
    kept = _STACKS.get(stack_hash)
    if kept is not None and kept[1] == rules and (kept[0] is frames or kept[0] == frames):
        return kept[2]
    where = user_frame(frames) or (frames[0] if frames else None)
    stack = _Stack(tuple(f"{f.filename}:{f.line} {f.name}" for f in frames), where,
                   None if where is None
                   else (where.filename, where.name.split(".<locals>.", 1)[0]))
    if len(_STACKS) >= MAX_STACKS_KEPT:
        _STACKS.clear()
    _STACKS[stack_hash] = (frames, rules, stack)
    return stack


def _top_stacks(kept: _PhaseTally, top: int) -> list[dict[str, Any]]:
    """The stacks of one phase, those of the user function with the most samples first, each
    with its most frequent reason (the first in sort order among equals).

    By function before stack: work spread over a function's lines (a decode loop's
    decompress, slice and comprehension are three stacks) outweighs one cheaper stack that
    always looks the same (freeing the last result on the caller's line)."""
    stack_of = {stack_hash: _stack(stack_hash, frames)
                for stack_hash, frames in kept.frames.items()}
    by_function: Counter[tuple[str, str] | None] = Counter()
    for stack_hash, n in kept.stacks.items():
        by_function[stack_of[stack_hash].function] += n
    order = sorted(kept.stacks.items(), key=lambda kv: (
        -by_function[stack_of[kv[0]].function], -kv[1], kv[0]))
    stacks = []
    for stack_hash, n in order[:top]:
        stack = stack_of[stack_hash]
        said = kept.reasons.get(stack_hash)
        where = stack.where
        stacks.append({
            "stack_hash": stack_hash,
            "frames": list(stack.frames),
            "file": where.filename if where else None,
            "line": where.line if where else None,
            "function": where.name if where else None,
            "samples": n,
            "reason": min(said, key=lambda r: (-said[r], r)) if said else None,
        })
    return stacks


# -- a run's balance over its processes (a profile's `phase_balance`, compare's shares) ----


def balance_processes(processes: Iterable[Any]) -> list[dict[str, Any]]:
    """The processes a run's phase balance is of: those that used a GPU, or every one when none
    did (a CPU-only job); only those with phases. DataLoader workers and a launcher waiting in
    `join` are left out: their waiting is not the GPU's (4 workers waiting 32 s each beside a
    GPU process computing 32 s read as 80 % data_wait)."""
    found = [p for p in processes if isinstance(p, dict) and isinstance(p.get("phases"), dict)
             and p["phases"]]
    used = [p for p in found if p.get("gpus")]
    return used or found


def balance_keys(processes: Iterable[Any]) -> set[str]:
    """The keys ('pid:start_time') of the run's balance_processes: the processes whose stack
    samples its phase balance rests on, and the only ones counted as its stack samples (a
    profile's `stack_samples`, on which --max-data-wait decides or fails closed, and each side
    of `mlcostd compare`). A launcher waiting for its trainer (torchrun, `bash -c`, a
    subprocess.run) is sampled as often as the trainer, and counting it passed the 20-sample
    rule on half as many samples of the GPU's process."""
    return {process_key(p["pid"], float(p["start_time"])) for p in balance_processes(processes)
            if isinstance(p.get("pid"), int) and isinstance(p.get("start_time"), int | float)}


def _seconds(part: object) -> float:
    found = part.get("seconds") if isinstance(part, dict) else None
    return float(found) if isinstance(found, int | float) and not isinstance(
        found, bool) else 0.0


def run_phase_balance(processes: Iterable[Any]) -> dict[str, float]:
    """Seconds per phase of the run's balance_processes, as shares of their time together,
    largest first (unrounded). Each process's phase is its `share` of its phase seconds (the
    share the rules quote: "spends 21% of its last 27 s in evaluation"), not its `seconds`,
    which the report rounds to 0.1 s: 5.4 s of 26.5 s read 20% beside the rule's 21%."""
    seconds: dict[str, float] = {}
    for proc in balance_processes(processes):
        parts = proc["phases"]
        total = sum(_seconds(part) for part in parts.values())
        shares = [part.get("share") if isinstance(part, dict) else None
                  for part in parts.values()]
        exact = all(isinstance(x, int | float) and not isinstance(x, bool) for x in shares)
        for (phase, part), share in zip(parts.items(), shares, strict=True):
            spent = float(share) * total if exact else _seconds(part)  # type: ignore[arg-type]
            seconds[str(phase)] = seconds.get(str(phase), 0.0) + spent
    total = sum(seconds.values())
    if total <= 0:
        return {}
    return {phase: s / total for phase, s in sorted(seconds.items(), key=lambda item: -item[1])}


# A checkpoint sample counts in a low-utilization window that ended up to this long before it.
CHECKPOINT_WINDOW_SLACK_S = 1.0


def checkpoint_starts(samples: Iterable[tuple[float, str]],
                      windows: Sequence[tuple[float, float]]) -> list[float]:
    """When each checkpoint a process's stacks show began (its first sample), from its samples
    ((ts, phase) in time order) and its low-utilization windows ((start, end), the range's end
    for one still open): the observed cadence. Checkpoint samples are one checkpoint until a
    compute sample comes between them (the loop trained again: `mlcostd profile` samples all
    along, and one window may span its whole run) or they fall in another window (between
    two, the GPU was at work). A checkpoint sample in no window is not counted."""
    starts: list[float] = []
    current: tuple[float, float] | None = None  # the window of the checkpoint under way
    for ts, phase in samples:
        if phase == COMPUTE:
            current = None
        if phase != CHECKPOINT:
            continue
        window = next((w for w in windows
                       if w[0] <= ts <= w[1] + CHECKPOINT_WINDOW_SLACK_S), None)
        if window is None or window == current:
            continue
        starts.append(ts)
        current = window
    return starts
