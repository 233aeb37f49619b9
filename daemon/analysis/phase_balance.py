"""How one process's time split between the phases, from its classified stack samples.

`phase_balance` turns classified stack samples of one process over a window into seconds and
shares per phase, with the top stacks of each and the reason they were classified so. The
arithmetic only: the samples come from the store (daemon.analysis.balance) or from memory
(daemon.analysis.live_phases), their phases from the classifier (daemon.analysis.phases).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from daemon.analysis.stack_rules import runtime_rules_count, user_frame
from daemon.sources.frames import Frame
from daemon.wire import COMPUTE, HIGH_CONFIDENCE, LOW_CONFIDENCE, PHASES, UNKNOWN

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


def sample_split(samples: Sequence[StackSample], *, top: int = 5) -> SampleSplit:
    by_phase: dict[str, list[StackSample]] = {}
    for s in samples:
        phase = s.phase if s.phase in _PHASE_ORDER else UNKNOWN
        group = by_phase.get(phase)
        if group is None:
            by_phase[phase] = [s]
        else:
            group.append(s)
    return SampleSplit(tuple(
        (phase, len(group) / len(samples),
         sum(min(max(s.gpu_util, 0.0), 100.0) for s in group) / len(group) / 100.0,
         _top_stacks(group, top), _confidence(group)) for phase, group in by_phase.items()))


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


def _confidence(group: Sequence[StackSample]) -> str:
    from_proc = sum(1 for s in group if s.from_proc)
    return LOW_CONFIDENCE if group and from_proc * 2 > len(group) else HIGH_CONFIDENCE


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


def _top_stacks(group: Sequence[StackSample], top: int) -> list[dict[str, Any]]:
    """The stacks of one phase, those of the user function with the most samples first.

    By function before stack: work spread over a function's lines (a decode loop's
    decompress, slice and comprehension are three stacks) outweighs one cheaper stack that
    always looks the same (freeing the last result on the caller's line)."""
    counts = Counter(s.stack_hash for s in group)
    stack_of: dict[str, _Stack] = {}
    for s in group:
        if s.stack_hash not in stack_of:
            stack_of[s.stack_hash] = _stack(s.stack_hash, s.frames)
    by_function: Counter[tuple[str, str] | None] = Counter()
    for stack_hash, n in counts.items():
        by_function[stack_of[stack_hash].function] += n
    stacks = []
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    for s in group:
        if s.reason:
            reasons[s.stack_hash][s.reason] += 1
    order = sorted(counts.items(), key=lambda kv: (
        -by_function[stack_of[kv[0]].function], -kv[1], kv[0]))
    for stack_hash, n in order[:top]:
        stack = stack_of[stack_hash]
        said = reasons.get(stack_hash)
        where = stack.where
        stacks.append({
            "stack_hash": stack_hash,
            "frames": list(stack.frames),
            "file": where.filename if where else None,
            "line": where.line if where else None,
            "function": where.name if where else None,
            "samples": n,
            "reason": said.most_common(1)[0][0] if said else None,
        })
    return stacks
