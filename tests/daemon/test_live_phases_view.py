"""The live view of the phase balances (LivePhases.balances with a drift, what /v1/now asks for
every tick) looks only at the processes whose facts changed or whose kept balance may have run
out, and still gives, call after call, what the rule says: each process's balance built anew,
unless its facts and its GPU did not change and the time since its balance was built is within
`drift` of its time in range (then the balance it was last given), listed in the order the
processes were first seen.

The rule is applied here by the test itself, on top of the balances a walk without drift gives
(`balances(since, until)`) of a second LivePhases fed the same facts, over ticks where
processes come and go, take and drop their GPU, are missed by a read, and get windows and stack
samples; calls are skipped now and then, as when no client asks."""

from __future__ import annotations

import random
from typing import Any

import pytest

from daemon.analysis.live_phases import LivePhases
from daemon.sources.sample import GpuUse, ProcessSample, Sample

INTERVAL_S = 1.0
PHASES = ("compute", "data_wait", "checkpoint", "idle")


class Rule:
    """The drift rule over the balances of a walk: what a live view must give."""

    def __init__(self, drift: float) -> None:
        self.drift = drift
        self.facts: dict[Any, int] = {}  # facts handed over, per process
        self.first_seen: dict[Any, float] = {}
        self.last_seen: dict[Any, float] = {}
        self.last_with_gpu: dict[Any, float] = {}
        self.shown: dict[Any, tuple[int, bool, float, dict[str, Any]]] = {}

    def expect(self, fresh: dict[Any, dict[str, Any]], since: float,
               until: float) -> dict[Any, dict[str, Any]]:
        expected = {}
        for key, balance in fresh.items():
            held = self.last_with_gpu.get(key, float("-inf")) >= since
            seen_s = (min(self.last_seen[key], until) - max(self.first_seen[key], since)
                      + INTERVAL_S)
            shown = self.shown.get(key)
            facts = self.facts.get(key, 0)
            if (shown is not None and shown[0] == facts and shown[1] == held
                    and 0 <= until - shown[2] <= self.drift * seen_s):
                expected[key] = shown[3]
            else:
                expected[key] = balance
                self.shown[key] = (facts, held, until, balance)
        return expected


@pytest.mark.parametrize("seed", range(6))
def test_the_live_view_gives_what_the_drift_rule_says_tick_after_tick(seed: int) -> None:
    rnd = random.Random(seed)
    window = 60.0 if seed % 2 else 240.0
    drift = 0.01 if seed % 3 else 0.1
    live = LivePhases(INTERVAL_S, window_s=window)
    walk = LivePhases(INTERVAL_S, window_s=window)
    rule = Rule(drift)
    alive: dict[tuple[int, float], bool] = {}  # process -> holds a GPU
    window_open: dict[tuple[int, float], bool] = {}
    pid, ts, asked = 100, 1e6, 0
    for tick in range(300):
        ts += INTERVAL_S
        if rnd.random() < 0.3 or not alive:
            for _ in range(rnd.randint(1, 4)):
                alive[(pid, ts)] = rnd.random() < 0.7
                pid += 1
        for key in list(alive):
            draw = rnd.random()
            if draw < 0.02:
                del alive[key]  # exits
            elif draw < 0.06:
                alive[key] = not alive[key]  # takes or drops its GPU
        read = [(key, gpu) for key, gpu in alive.items() if rnd.random() > 0.03]
        processes = tuple(ProcessSample(key[0], key[1], 1, "user", "python job.py",
                                        gpus=(GpuUse(0, 1 << 30, 40.0),) if gpu else ())
                          for key, gpu in read)
        sample = Sample(ts=ts, tick=tick, gpus=(), processes=processes)
        for phases in (live, walk):
            phases.on_tick(sample)
        for key, gpu in read:
            rule.first_seen.setdefault(key, ts)
            rule.last_seen[key] = ts
            if gpu:
                rule.last_with_gpu[key] = ts
        for _ in range(rnd.randint(0, 3)):
            if not read:
                break
            key = rnd.choice(read)[0]
            draw, back = rnd.random(), rnd.random()
            stack, phase = f"stack{rnd.randint(0, 5)}", rnd.choice(PHASES)
            for phases in (live, walk):
                if draw < 0.3:
                    phases.window_opened(key, ts - 5 * back)
                elif draw < 0.5:
                    phases.window_closed(key, ts)
                else:
                    phases.add_stack(key, ts - back, 1, stack, [("step", "train.py", 7)], phase,
                                     3.0, None)
            if draw < 0.3 or draw >= 0.5 or window_open.get(key):  # a close of no window:
                rule.facts[key] = rule.facts.get(key, 0) + 1  # no new fact
            if draw < 0.5:
                window_open[key] = draw < 0.3
        if rnd.random() < 0.1:
            continue  # no client asked this tick
        since = ts - window
        given = live.balances(since, ts, drift=drift)
        expected = rule.expect(walk.balances(since, ts), since, ts)
        assert list(given) == list(expected), f"tick {tick}: processes listed differ"
        assert given == expected, f"tick {tick}: a balance differs from the rule's"
        asked += 1
    assert asked > 200

