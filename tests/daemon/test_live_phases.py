"""The phase balance is kept in memory as stack samples arrive: a new sample shows in the next
tick's /v1/now, and the balance agrees with the one the store gives (the record, which reports
and replay read).

The daemon is the real one with a real store (tests/daemon/scripted.py); its process samples
are scripted so the process sits in a low-utilization window, and its stack sampler hands over
a recorded py-spy dump (tests/daemon/fixtures/pyspy) instead of running py-spy: the point here
is where a classified sample goes, not how it is taken (test_phases.py runs py-spy)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon import config as config_module
from daemon.analysis.balance import checkpoint_times, phase_balances
from daemon.runtime.attribution import Attribution
from daemon.runtime.daemon import Daemon
from daemon.sources.frames import OK, DumpResult, parse_dump
from daemon.sources.sample import GpuUse
from daemon.store.writer import Store
from daemon.wire import process_key
from tests.daemon.scripted import recording_daemon, sample
from tests.simhost import attach_code, host_toml

FIXTURES = Path(__file__).parent / "fixtures" / "pyspy"


class RecordedSampler:
    """Hands over a recorded dump when the test releases one: at most one per release, taken
    at the scripted host's time (`clock`)."""

    def __init__(self, name: str, clock: Callable[[], float]) -> None:
        self.threads = parse_dump((FIXTURES / f"{name}.json").read_text())
        self.clock = clock
        self.released = 0

    def available(self) -> int:
        return self.released

    async def dump(self, pid: int) -> DumpResult:
        if self.released <= 0:
            return DumpResult(pid, self.clock(), "rate_limited", error="held by the test")
        self.released -= 1
        return DumpResult(pid, self.clock(), OK, self.threads)


def quiet(i: int, t0: float):
    """Tick i of the scripted host with its process holding GPU 1's memory, its kernels idle."""
    s = sample(i, t0=t0)
    (proc,) = s.processes
    return dataclasses.replace(s, processes=(dataclasses.replace(
        proc, gpus=(GpuUse(1, 2 << 30, 0.0),)),))


@pytest.mark.parametrize("fixture, phase", [("loader_starved", "data_wait"),
                                            ("checkpoint_save", "checkpoint")])
def test_a_new_stack_sample_shows_in_the_next_ticks_balance(tmp_path, fixture, phase):
    t0 = time.time() - 60
    daemon = recording_daemon(tmp_path, idle_utilization=5.0, ticks=0, t0=t0)
    script = (quiet(i, t0) for i in itertools.count(1))
    daemon.collect = lambda: next(script)  # type: ignore[method-assign]
    sampler = RecordedSampler(fixture, lambda: daemon.last_sample.ts + 0.5)
    daemon.attribution = Attribution(daemon.config.attribution, daemon.store, sampler,
                                     idle_utilization_pct=5.0, interval_s=1.0)
    key = process_key(4242, 1000.5)

    def shown() -> dict[str, float]:
        (proc,) = daemon.now()["processes"]
        assert proc["key"] == key
        return proc["phases"]

    async def drive() -> tuple[dict[str, float], dict[str, float]]:
        for _ in range(5):  # past min_window: a low-utilization window, no stacks yet
            daemon.tick_now()
        before = shown()
        sampler.released = 1
        daemon.tick_now()  # schedules a dump; the sampler hands over the recorded one
        await daemon.attribution.dumps_finished()  # the dump task keeps its sample
        daemon.tick_now()  # the next tick
        return before, shown()

    try:
        before, after = asyncio.run(drive())
        assert phase not in before and before.get("unknown", 0) > 0  # quiet time, no stacks
        assert after.get(phase, 0) > 0.5  # all of the quiet time now has a sampled phase
        assert sum(after.values()) == pytest.approx(1.0)
        # the details screen's question (GET /v1/processes/{key}/phases) gets the same figure
        found = daemon.phases_in_memory(key, 1800)
        assert found is not None and {p: part["share"] for p, part in found["phases"].items()} == after
        assert 0 < found["since_s"] < 1800  # what memory covers: since the daemon started
        live = daemon.attribution.phases
        until = daemon.last_sample.ts
        in_memory = live.balances(until - 1800, until)
        live_checkpoints = live.checkpoint_times(until - 1800, until)
    finally:
        daemon.store.close()
    # the same balance as the store's record of the same facts
    reader = Store.reader(str(daemon.db))
    try:
        recorded = phase_balances(reader, until - 1800, until, 1.0)
        recorded_checkpoints = checkpoint_times(reader, until - 1800, until)
    finally:
        reader.close()
    assert set(in_memory) == set(recorded) == {(4242, 1000.5)}
    mine, theirs = in_memory[(4242, 1000.5)], recorded[(4242, 1000.5)]
    assert set(mine) == set(theirs)
    for name in mine:
        assert mine[name]["share"] == pytest.approx(theirs[name]["share"], abs=0.02), name
        assert [s["stack_hash"] for s in mine[name]["top_stacks"]] == [
            s["stack_hash"] for s in theirs[name]["top_stacks"]]
    live_by_key = {process_key(*k): v for k, v in live_checkpoints.items()}
    assert set(live_by_key) == set(recorded_checkpoints)
    for name, times in recorded_checkpoints.items():
        assert live_by_key[name] == pytest.approx(times, abs=0.01)  # the store keeps ms
    assert bool(recorded_checkpoints) == (phase == "checkpoint")


def test_facts_older_than_the_window_are_dropped():
    from daemon.analysis.live_phases import LivePhases

    live = LivePhases(interval_s=1.0, window_s=10.0)
    t0 = 1_000_000.0
    live.on_tick(quiet(1, t0))
    live.window_opened((4242, 1000.5), t0 + 1)
    live.add_stack((4242, 1000.5), t0 + 2, 1, "h", [("read", "x.py", 3)], "data_wait", 0.0, "")
    live.window_closed((4242, 1000.5), t0 + 3)
    assert live.balances(t0, t0 + 3)[(4242, 1000.5)]["data_wait"]["share"] > 0
    live.on_tick(dataclasses.replace(quiet(30, t0), processes=()))  # it exited long ago
    assert live.balances(t0, t0 + 30) == {}
    assert not live.covers(t0 + 5) and live.covers(t0 + 25)  # the window moved on


def test_it_covers_from_when_it_was_told_it_is_handed_every_fact():
    """Given the daemon's start, it covers a range from that start before its first tick and
    after it (nothing of the run precedes its start); without it, from the first tick only."""
    from daemon.analysis.live_phases import LivePhases

    t0 = 1_000_000.0
    started = LivePhases(interval_s=1.0, since=t0 - 4)
    assert started.covers(t0 - 4) and not started.covers(t0 - 6)
    assert started.balances(t0 - 4, t0) == {}  # nothing handed yet: no balance, not a guess
    started.on_tick(quiet(1, t0))
    assert started.covers(t0 - 4) and not started.covers(t0 - 6)
    assert set(started.balances(t0 - 4, t0 + 1)) == {(4242, 1000.5)}
    first_tick = LivePhases(interval_s=1.0)
    assert not first_tick.covers(t0 - 4)
    first_tick.on_tick(quiet(1, t0))
    assert first_tick.covers(t0 + 1) and not first_tick.covers(t0 - 4)


def test_a_rules_round_since_the_start_takes_the_balances_kept_in_memory(tmp_path):
    """A real daemon on a simulated host, a few ticks in: a rules round over its whole run so
    far (what it evaluates every 30 s in its first 30 minutes) reads the phase balances it
    keeps, not the store's stack samples again (a read that grew with the run: at 64
    processes ~160 ms a round by its 9th minute)."""
    scenario = tmp_path / "host.toml"
    scenario.write_text('name = "quiet"\n' + host_toml(gpus=1, workloads=[
        {"name": "held", "gpus": [0], "code": attach_code(0, 1)}]))
    config = config_module.from_dict({
        "daemon": {"db": str(tmp_path / "mlcost.db"), "interval": 0.2},
        "attribution": {"stacks": False},
        "api": {"socket": str(tmp_path / "api" / "mlcostd.sock")}}, where="test")
    daemon = Daemon(config, simulate=str(scenario))
    store_reads: list[tuple[float, float]] = []
    read_store = daemon._read_attribution

    def counted(since: float, until: float) -> tuple[dict, dict]:
        store_reads.append((since, until))
        return read_store(since, until)

    daemon._read_attribution = counted  # type: ignore[method-assign]
    found: dict[str, object] = {}

    async def round_after_ticks() -> None:
        try:
            deadline = time.monotonic() + 60.0
            while not (daemon.last_sample is not None and daemon.last_sample.processes
                       and daemon.tick - daemon.first_tick >= 5):
                assert time.monotonic() < deadline, "no GPU process recorded within 60 s"
                await asyncio.sleep(0.05)
            until = daemon.last_sample.ts
            await daemon.evaluate(daemon.started_at, until)
            live = daemon.attribution.phases
            found["balances"] = live.balances(daemon.started_at, until)
            found["range"] = (daemon.started_at, until)
            found["pid"] = daemon.last_sample.processes[0].pid
        finally:
            daemon.request_stop()

    async def main() -> int:
        probe = asyncio.create_task(round_after_ticks())
        code = await daemon.run()
        await probe
        return code

    assert asyncio.run(asyncio.wait_for(main(), 120.0)) == 0
    # (its own rounds in its first minute look 60 s back, before its start: those read the
    # store, which may hold a previous run's samples)
    assert [r for r in store_reads if r[0] >= daemon.started_at] == [], store_reads
    in_memory = found["balances"]
    assert found["pid"] in {pid for pid, _ in in_memory}  # the round had its balance
    reader = Store.reader(str(daemon.db))  # the same as the store's record of the same range
    try:
        recorded = phase_balances(reader, *found["range"], 0.2)
    finally:
        reader.close()
    assert set(in_memory) == set(recorded)
    for key, mine in in_memory.items():
        assert {p: pytest.approx(part["share"], abs=0.02) for p, part in mine.items()} == {
            p: part["share"] for p, part in recorded[key].items()}


def test_a_live_view_rebuilds_a_balance_on_new_facts_or_past_its_drift():
    from daemon.analysis.live_phases import LivePhases

    live = LivePhases(interval_s=1.0)
    t0, key = 1_000_000.0, (4242, 1000.5)
    for i in range(1, 101):
        live.on_tick(quiet(i, t0))
    live.window_opened(key, t0 + 50)
    first = live.balances(t0, t0 + 100, drift=0.01)[key]
    live.on_tick(quiet(101, t0))  # 1 s more of 101 s: within 1 %
    assert live.balances(t0, t0 + 101, drift=0.01)[key] is first
    live.add_stack(key, t0 + 101, 1, "h", [("read", "x.py", 3)], "data_wait", 0.0, "")
    with_sample = live.balances(t0, t0 + 101, drift=0.01)[key]  # a new fact: rebuilt at once
    assert "data_wait" in with_sample and "data_wait" not in first
    for i in range(102, 104):
        live.on_tick(quiet(i, t0))
    later = live.balances(t0, t0 + 103, drift=0.01)[key]  # 2 s of 103: past 1 %
    assert later is not with_sample
    assert later == live.balances(t0, t0 + 103)[key]  # what no drift gives


@pytest.mark.parametrize("window_s, cap", [(10_000.0, 40), (20.0, 4096)])
def test_a_balance_is_the_one_its_samples_in_range_give_as_samples_come_and_go(
        monkeypatch, window_s, cap):
    """The live balance keeps a tally of each process's samples as they arrive, are dropped
    at the per-process cap, come out of order or age out of the window; over any range it
    equals the balance worked out afresh from the samples in that range."""
    import bisect
    import random

    from daemon.analysis import live_phases
    from daemon.analysis.phase_balance import StackSample, phase_balance
    from daemon.sources.frames import Frame

    monkeypatch.setattr(live_phases, "MAX_SAMPLES_PER_PROCESS", cap)
    rng = random.Random(23)
    live = live_phases.LivePhases(interval_s=1.0, window_s=window_s)
    t0, key = 1_000_000.0, (4242, 1000.5)
    stacks = {f"h{i}": [(f"fn{i}", rng.choice(["loader.py", "train.py", "<proc>"]), i)]
              for i in range(6)}
    held: list = []  # what the cap leaves, in time order (no forgetting in the first case)
    for i in range(1, 120):
        tick = dataclasses.replace(quiet(i, t0), ts=t0 + i)
        (proc,) = tick.processes
        live.on_tick(dataclasses.replace(tick, processes=(dataclasses.replace(proc, gpus=()),)))
        for _ in range(rng.randint(0, 3)):
            ts = t0 + i - rng.choice([0.0, 0.0, 0.0, 0.4, 1.5])  # now and then out of order
            stack_hash = rng.choice(list(stacks))
            phase = rng.choice(["data_wait", "idle", "checkpoint", "host_preprocess", "odd"])
            util = rng.choice([0.0, 3.0, 33.333333333333336, 100.0, 140.0])
            reason = rng.choice(["", "read", "sleep"])
            live.add_stack(key, ts, 1, stack_hash, stacks[stack_hash], phase, util, reason)
            if len(held) >= cap:
                del held[0]
            bisect.insort_right(held, (ts, stack_hash, phase, util, reason), key=lambda h: h[0])
        until = t0 + i
        for since in {max(t0, until - window_s), until - 7.3, until - 30.0}:
            if not live.covers(since):
                continue
            for end in (until, until - 0.7):
                got = live.balances(since, end).get(key)
                in_range = [h for h in held if since <= h[0] <= end]
                if not in_range:
                    assert got is None
                    continue
                seen_s = min(until, end) - max(t0 + 1, since) + 1.0
                samples = [StackSample(ts, key[0], 1, stack_hash,
                                       tuple(Frame(*f) for f in stacks[stack_hash]),
                                       phase, util, reason)
                           for ts, stack_hash, phase, util, reason in in_range]
                assert got == phase_balance(samples, seen_s, 0.0), (i, since, end)


def test_a_live_view_does_not_walk_a_process_s_samples_again_for_each_new_one(monkeypatch):
    """A process stalled for the whole window holds thousands of samples: its balance takes
    each new one into its tally, and reads the tally, not all of its samples, each tick."""
    from daemon.analysis import phase_balance
    from daemon.analysis.live_phases import LivePhases

    live = LivePhases(interval_s=1.0, window_s=400.0)
    t0, key = 1_000_000.0, (4242, 1000.5)
    live.window_opened(key, t0)
    for i in range(1, 401):
        live.on_tick(quiet(i, t0))
        for n in range(8):
            live.add_stack(key, t0 + i, 1, f"h{n % 3}", [("read", "x.py", n % 3)],
                           "data_wait" if n % 2 else "idle", 0.0, "")
    live.balances(t0 + 1, t0 + 400, drift=0.01)
    added: list[object] = []
    real_add = phase_balance.SampleTally.add
    monkeypatch.setattr(phase_balance.SampleTally, "add",
                        lambda tally, s: (added.append(s), real_add(tally, s)))
    live.on_tick(quiet(401, t0))
    for _ in range(8):
        live.add_stack(key, t0 + 401, 1, "h0", [("read", "x.py", 0)], "data_wait", 0.0, "")
    balance = live.balances(t0 + 1, t0 + 401, drift=0.01)[key]
    assert len(added) == 8  # the new samples, once each
    assert sum(s["samples"] for s in balance["data_wait"]["top_stacks"]) == 4 * 400 + 8
