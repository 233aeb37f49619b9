"""The middle band's dumps on the test's clock (no py-spy): a process whose SM share stays
between low_sm_share and mid_sm_share is dumped in turn, slowly, within mid_dumps_per_second
over all of them; a process in a low-utilization window keeps its turns; a busy one is never
dumped."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Callable

import pytest
from test_fair_dumps import TokenSampler
from test_phases import SITE, STDLIB, USER, stack

from daemon.analysis.balance import LOW_UTILIZATION, MID_UTILIZATION
from daemon.analysis.host_signals import ON_CPU_MIN, HostSignals, gpu_quiet_share
from daemon.analysis.phases import classify
from daemon.config import AttributionConfig
from daemon.runtime import attribution as attribution_module
from daemon.runtime.attribution import Attribution, _weighed_in_band
from daemon.sources.frames import DumpResult, Frame, ThreadStack
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.sources.stacks import OK, RATE_LIMITED
from daemon.store import queries
from daemon.store.reader import StoreReader
from daemon.store.writer import Store


def run_ticks(attribution: Attribution, sampler: TokenSampler, store: Store, start: float,
              ticks: int, gpus: tuple[GpuSample, ...],
              processes: tuple[ProcessSample, ...]
              | Callable[[int], tuple[ProcessSample, ...]]) -> None:
    """`ticks` ticks of the same processes (or those `processes(tick)` gives), one a second
    from `start` on the test's clock, each tick's dumps finished before the next; the store
    closed after."""
    async def run() -> None:
        for tick in range(ticks):
            sampler.next_tick(start + tick)
            at = processes(tick) if callable(processes) else processes
            attribution.on_tick(Sample(start + tick, tick, gpus=gpus, processes=at))
            await attribution.dumps_finished()
        await attribution.stop()

    try:
        asyncio.run(run())
    finally:
        store.close()


def test_the_middle_band_is_dumped_in_turn_within_its_own_limit(tmp_path):
    """64 processes at 45% SM, one at 90%, one at 10% (a window), 160 ticks of 1 s: every
    band process dumped, none in its first mid_after, none twice within mid_dump_interval,
    all of them together at most mid_dumps_per_second; the window's process dumped at each of
    its turns; the busy one never."""
    store = Store(tmp_path / "mlcost.db")
    config = AttributionConfig(min_window=0.5, dump_interval=2.0, dumps_per_second=2.0)
    band = tuple(ProcessSample(50_000 + i, 1000.0 + i, 1, "ann", "python job.py",
                               (GpuUse(i % 8, 1 << 30, 45.0),)) for i in range(64))
    busy = ProcessSample(60_000, 1000.0, 1, "ann", "python busy.py", (GpuUse(0, 1 << 30, 90.0),))
    dip = ProcessSample(60_001, 1000.0, 1, "ann", "python dip.py", (GpuUse(1, 1 << 30, 10.0),))
    gpus = tuple(GpuSample(i, f"u{i}", "A100-SXM4-40GB", "ok", 50.0, None, 40 << 30, 40 << 30)
                 for i in range(8))
    sampler = TokenSampler(config.dump_interval)
    attribution = Attribution(config, store, sampler, interval_s=1.0)  # type: ignore[arg-type]
    when: dict[int, list[float]] = {}
    dump = sampler.dump

    async def noted(pid: int):
        result = await dump(pid)
        when.setdefault(pid, []).append(sampler.now)
        return result

    sampler.dump = noted  # type: ignore[method-assign]
    ticks, start = 160, 4000.0

    run_ticks(attribution, sampler, store, start, ticks, gpus, (*band, busy, dip))
    in_band = Counter({p.pid: len(when.get(p.pid, [])) for p in band})
    assert min(in_band.values()) >= 1, sorted(in_band.items())
    assert sum(in_band.values()) <= config.mid_dumps_per_second * ticks + 1, in_band.total()
    for p in band:
        times = when[p.pid]
        assert times[0] >= start + config.mid_after - 1, (p.pid, times)
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert all(gap >= config.mid_dump_interval - 0.5 for gap in gaps), (p.pid, times)
    assert busy.pid not in when
    assert len(when[dip.pid]) >= ticks / config.dump_interval - 2, when[dip.pid]


class WaitingSampler(TokenSampler):
    """Each dump finds the main thread waiting on a queue.Queue in the user's loop: `idle` in
    a low-utilization window."""

    async def dump(self, pid: int) -> DumpResult:
        result = await super().dump(pid)
        if result.status == RATE_LIMITED:
            return result
        frames = (Frame("Condition.wait", f"{STDLIB}/threading.py", 320),
                  Frame("Queue.get", f"{STDLIB}/queue.py", 171), Frame("serve", USER, 40))
        return DumpResult(pid, self.now, OK, [ThreadStack(1, "MainThread", False, frames)])


def test_a_wait_sampled_in_the_middle_band_is_compute_never_idle(tmp_path):
    """The same waiting stack: `idle` in a window (10% SM), compute in the middle band (35%,
    under high_sm_share: no 'GPU busy meanwhile'), whose stretch is stored from its first
    sample; no idle rule can come of a process at work."""
    store = Store(tmp_path / "mlcost.db")
    config = AttributionConfig(min_window=0.5, dump_interval=2.0, dumps_per_second=2.0,
                               mid_after=3.0, mid_dump_interval=2.0, mid_dumps_per_second=1.0)
    band = ProcessSample(70_000, 1000.0, 1, "ann", "python serve.py", (GpuUse(0, 1 << 30, 35.0),))
    dip = ProcessSample(70_001, 1000.0, 1, "ann", "python serve.py", (GpuUse(1, 1 << 30, 10.0),))
    gpus = tuple(GpuSample(i, f"u{i}", "A100-SXM4-40GB", "ok", 35.0, None, 40 << 30, 40 << 30)
                 for i in range(2))
    sampler = WaitingSampler(config.dump_interval)
    attribution = Attribution(config, store, sampler, interval_s=1.0)  # type: ignore[arg-type]
    start = 4000.0

    run_ticks(attribution, sampler, store, start, 20, gpus, (band, dip))
    reader = StoreReader(str(tmp_path / "mlcost.db"))
    try:
        events = queries.events(reader, 0, 1e12)
    finally:
        reader.close()
    # (the live balance's samples: what the store was handed with them, as _write_stacks does)
    samples = [{"pid": key[0], "ts": s.ts, "phase": s.phase, "reason": s.reason}
               for key, proc in attribution.phases._processes.items() for s in proc.samples]
    phases = {pid: {s["phase"] for s in samples if s["pid"] == pid} for pid in (band.pid, dip.pid)}
    assert phases == {band.pid: {"compute"}, dip.pid: {"idle"}}, phases
    reasons = {s["reason"] for s in samples if s["pid"] == band.pid}
    assert all("middle band" in r for r in reasons), reasons
    [stretch] = [e for e in events if e["kind"] == MID_UTILIZATION]
    first = min(s["ts"] for s in samples if s["pid"] == band.pid)
    assert stretch["target"].startswith(f"{band.pid}:"), stretch
    assert start + config.mid_after - 1 <= stretch["started_at"] <= first, (stretch, first)
    assert not [e for e in events if e["kind"] == LOW_UTILIZATION
                and e["target"].startswith(f"{band.pid}:")], events


# Recorded in the middle band (tests/daemon/workloads/tokenize_inline.py, 40 documents a step,
# two busy CPU loops on 2 cores): 54% SM, its GPU 57% utilized over the signals' 3 s, its main
# thread on a CPU 23% of the time it did not wait for a core, and waiting for one 33% of the
# wall time.
TOKENIZING = HostSignals(seconds=3.0, main_thread_cpu=0.228, main_thread_queued=0.331,
                         process_cpu=0.147, gpu_busy=True, gpu_utilization=0.57)
TOKENIZER = "/home/me/finetune.py"


def test_inline_tokenizing_on_a_loaded_host_is_host_compute_in_the_band():
    """Its demand leaves the time it waited for a core out; the GPU's quiet time is weighed the
    same way: of the thread's own time the GPU was quiet ~15%, all of it the thread running
    (its demand weighed: 1). Against the wall time the GPU was quiet (46%, which holds the
    queueing) it read 0.496, under ON_CPU_MIN, and its `encode` read compute or unknown
    (probe 144, F3). Its samples caught waiting in `loss.item()` on its busy GPU are no host
    compute at that line: the sync's verdict, compute in the band."""
    weighed = _weighed_in_band(TOKENIZING, 54.0)
    assert weighed.main_thread_cpu is not None and weighed.main_thread_cpu >= ON_CPU_MIN
    encode = classify(stack((TOKENIZER, "WordPieceTokenizer.encode", 61),
                            (TOKENIZER, "<listcomp>", 102), (TOKENIZER, "main", 102),
                            active=True),
                      gpu_busy=False, source_line=lambda f: "                ids.append(x)",
                      signals=weighed)
    assert encode.phase == "host_preprocess", encode
    assert encode.frame is not None and encode.frame.name == "WordPieceTokenizer.encode"
    assert "waiting for a CPU core 33%" in encode.reason, encode.reason
    for active in (False, True):  # (runnable again, waiting for a core: py-spy says active)
        item = classify(stack((TOKENIZER, "main", 107), active=active), gpu_busy=False,
                        source_line=lambda f: "            loss.item()", signals=weighed)
        assert item.phase == "sync", (active, item)  # (_rows: compute in the band)


def test_a_dump_at_a_sync_on_a_busy_gpu_takes_no_verdict_from_the_reads_either():
    """A job fed by worker processes (batches over a multiprocessing pipe: reading 0.42 MB/s,
    12.7 MB per CPU-second it got), its GPU 94-99% busy, dumped in `loss.item()` in the band:
    the reads are its workers' batches arriving, not a wait at that line; it read "reading …
    while the GPU idles", data_wait 0.93, and got `dataloader_starvation` (probe 145, H1).
    A job that waits at a sync while its GPU idles keeps what the reads say."""
    fed = HostSignals(seconds=3.0, main_thread_cpu=0.05, main_thread_queued=0.0,
                      process_cpu=0.033, read_per_s=420_000.0, tree_cpu=0.033,
                      gpu_busy=True, gpu_utilization=0.97)
    for active in (False, True):
        item = classify(stack((TOKENIZER, "main", 48), active=active), gpu_busy=False,
                        source_line=lambda f: "        total += loss.item()", signals=fed)
        assert item.phase == "sync", (active, item)  # (_rows: compute in the band)
    idle_gpu = dataclasses.replace(fed, gpu_busy=False, gpu_utilization=0.02)
    waits = classify(stack((TOKENIZER, "main", 48)), gpu_busy=False,
                     source_line=lambda f: "        total += loss.item()", signals=idle_gpu)
    assert waits.phase == "data_wait", waits


def test_the_bands_weighing_leaves_a_busy_gpus_cpu_as_it_is():
    """A scorer whose GPU works all the time the main thread does not wait for a core (98% of
    the wall time, 2% queued): its main thread's CPU ran beside the GPU's work, and is not
    weighed up into host compute; without the GPU's utilization the SM share stands for the
    quiet time, as before."""
    scorer = HostSignals(seconds=3.0, main_thread_cpu=0.1, main_thread_queued=0.02,
                         process_cpu=0.3, gpu_busy=True, gpu_utilization=0.98)
    assert _weighed_in_band(scorer, 50.0).main_thread_cpu == 0.1
    # (before its main thread's clock is read: its process's CPU, likewise)
    assert _weighed_in_band(dataclasses.replace(scorer, main_thread_cpu=None),
                            50.0).process_cpu == 0.3
    assert gpu_quiet_share(0.98, 0.02) is None
    unknown = dataclasses.replace(scorer, gpu_utilization=None)
    assert _weighed_in_band(unknown, 50.0).main_thread_cpu == 0.2
    # No load: the quiet share is the wall's (45 ms of hashing per 50-ms kernel).
    assert gpu_quiet_share(0.52, 0.0) == 0.48
    assert abs(_weighed_in_band(dataclasses.replace(TOKENIZING, main_thread_cpu=0.47,
                                                    main_thread_queued=0.0, gpu_utilization=0.52),
                                49.0).main_thread_cpu - 0.47 / 0.48) < 1e-9


class SyncingSampler(TokenSampler):
    """Each dump finds the main thread in torch.cuda.synchronize on the user's line: `sync`."""

    async def dump(self, pid: int) -> DumpResult:
        result = await super().dump(pid)
        if result.status == RATE_LIMITED:
            return result
        frames = (Frame("synchronize", f"{SITE}/torch/cuda/__init__.py", 1230),
                  Frame("answer", USER, 24))
        return DumpResult(pid, self.now, OK, [ThreadStack(1, "MainThread", False, frames)])


class SleepingSampler(TokenSampler):
    """Each dump finds the main thread in `time.sleep(delay)` on the user's line (a
    rate-limited actor between its kernels, probe 145's L1; the test supplies that line's
    source): `idle` "sleeping or waiting: `time.sleep(delay)` with the GPU idle" in a
    window."""

    SOURCE = {USER: "        time.sleep(delay)"}

    async def dump(self, pid: int) -> DumpResult:
        result = await super().dump(pid)
        if result.status == RATE_LIMITED:
            return result
        frames = (Frame("act", USER, 52),)
        return DumpResult(pid, self.now, OK, [ThreadStack(1, "MainThread", False, frames)])


@pytest.mark.parametrize("sampler, dipped_phase", [(WaitingSampler, "idle"),
                                                   (SleepingSampler, "idle"),
                                                   (SyncingSampler, "sync")])
def test_a_wait_in_a_windows_hysteresis_is_compute_never_idle(tmp_path, monkeypatch, sampler,
                                                             dipped_phase):
    """A server at 35% SM that dipped under low_sm_share for a few ticks: the window stays
    open while its share is under high_sm_share (40%), and its dumps there found its main
    thread waiting: `idle` while it was at 10%, compute once back at 35%, where its GPU works a
    third of the time as in the middle band (a server answering 10 requests a second read idle
    .64: probe 144, F6). Likewise its wait on its own GPU's work (a `.cpu()` of its answer, a
    synchronize): `sync` at 10%, the step's compute at 35%; it got `host_sync` advice, "keep
    values on the GPU", where it needs the copy to answer (probe 145, H2: every process starts
    in a window where its first ticks read 0, and one steady at 35% stays in it)."""
    store = Store(tmp_path / "mlcost.db")
    config = AttributionConfig(min_window=0.5, dump_interval=2.0, dumps_per_second=2.0)
    gpus = (GpuSample(0, "u0", "A100-SXM4-40GB", "ok", 35.0, None, 40 << 30, 40 << 30),)

    def server(share: float) -> ProcessSample:
        return ProcessSample(70_002, 1000.0, 1, "ann", "python serve.py",
                             (GpuUse(0, 1 << 30, share),))

    source = getattr(sampler, "SOURCE", {})  # the user's lines a sampler's frames are at
    monkeypatch.setattr(attribution_module, "source_reader",
                        lambda pid, rights: lambda frame: source.get(frame.filename))
    dumps = sampler(config.dump_interval)
    attribution = Attribution(config, store, dumps, interval_s=1.0)  # type: ignore[arg-type]
    start = 4000.0
    shares = [10.0] * 4 + [35.0] * 12

    run_ticks(attribution, dumps, store, start, len(shares), gpus,
              lambda tick: (server(shares[tick]),))
    reader = StoreReader(str(tmp_path / "mlcost.db"))
    try:
        events = queries.events(reader, 0, 1e12)
    finally:
        reader.close()
    [window] = [e for e in events if e["kind"] == LOW_UTILIZATION]
    assert window["ended_at"] is None, window  # (still open: under high_sm_share)
    samples = [(s.ts, s.phase, s.reason) for proc in attribution.phases._processes.values()
               for s in proc.samples]
    dipped = {phase for ts, phase, _ in samples if ts < start + 4}
    back = [(phase, reason) for ts, phase, reason in samples if ts >= start + 4]
    assert dipped == {dipped_phase}, samples
    assert back and {phase for phase, _ in back} == {"compute"}, samples
    assert all("low_sm_share" in reason for _, reason in back), back
    # (and no reason says its GPU idles: probe 145, L1, "waits while its GPU works …: sleeping
    # or waiting: `time.sleep(delay)` with the GPU idle")
    assert not any("idle" in reason for _, reason in back), back


class TokenizingSampler(TokenSampler):
    """Each dump finds the main thread running the tokenizer's `encode` (py-spy: active)."""

    SOURCE = {TOKENIZER: "                ids.append(self.vocab.setdefault(piece, n))"}

    async def dump(self, pid: int) -> DumpResult:
        result = await super().dump(pid)
        if result.status == RATE_LIMITED:
            return result
        frames = (Frame("WordPieceTokenizer.encode", TOKENIZER, 61),
                  Frame("main", TOKENIZER, 100))
        return DumpResult(pid, self.now, OK, [ThreadStack(1, "MainThread", True, frames)])


@pytest.mark.parametrize("utilization", [0.25, 0.0])
def test_a_loaded_tokenizer_in_a_window_has_its_cpu_weighed_against_its_gpus_quiet_time(
        tmp_path, monkeypatch, utilization):
    """Stop 60's CI run of the live tokenizer: the load slowed its tokenizing to 23% SM, under
    low_sm_share, so it was in a window, where its main thread's demand (0.35, its time queued
    for a core, 46%, left out) was read as it stood: under ON_CPU_MIN, `encode` read `unknown`,
    "a loaded host: it needs a core, not less work", beside host_sync advice. Its GPU worked a
    quarter of the time, while the thread waited on it; of the thread's own time the GPU was
    quiet 54%, all of it tokenizing: host compute at its line, as in the band, the weighing
    said. Where its GPU idles throughout, the same demand stands as it is."""
    loaded = HostSignals(seconds=3.0, main_thread_cpu=0.35, main_thread_queued=0.46,
                         process_cpu=0.3, gpu_busy=utilization > 0.05, gpu_held=True,
                         gpu_utilization=utilization)
    monkeypatch.setattr(Attribution, "host_signals", lambda self, proc, of_job=None: loaded)
    monkeypatch.setattr(attribution_module, "source_reader",
                        lambda pid, rights: lambda frame: TokenizingSampler.SOURCE.get(
                            frame.filename))
    store = Store(tmp_path / "mlcost.db")
    config = AttributionConfig(min_window=0.5, dump_interval=2.0, dumps_per_second=2.0)
    gpus = (GpuSample(0, "u0", "A100-SXM4-40GB", "ok", utilization * 100, None, 40 << 30,
                      40 << 30),)
    tokenizer = ProcessSample(70_003, 1000.0, 1, "ann", f"python {TOKENIZER}",
                              (GpuUse(0, 1 << 30, utilization * 92),))
    dumps = TokenizingSampler(config.dump_interval)
    attribution = Attribution(config, store, dumps, interval_s=1.0)  # type: ignore[arg-type]
    run_ticks(attribution, dumps, store, 4000.0, 10, gpus, (tokenizer,))
    samples = [(s.phase, s.reason) for proc in attribution.phases._processes.values()
               for s in proc.samples]
    assert samples, samples
    if utilization:
        assert {p for p, _ in samples} == {"host_preprocess"}, samples
        assert all("weighed against the time its GPU is quiet, 54% of its own" in reason
                   and "waiting for a CPU core 46%" in reason for _, reason in samples), samples
    else:  # (unknown, then idle as its line repeats: as before)
        assert all(p != "host_preprocess" and "weighed" not in reason
                   for p, reason in samples), samples


def test_a_main_thread_off_a_cpu_at_its_own_line_while_its_gpu_works_is_unknown_not_idle():
    """A CI run of the tokenizer (test_mid_band_live) caught its main thread at `encode` with
    py-spy calling it idle (waiting for the GIL or a core, beside its GPU's stream thread, on a
    loaded host) and no CPU figure of its main thread yet: the bare fallback read `idle`, "main
    thread blocked", which the band turned into compute, "waits while its GPU works". At a line
    of its own that calls nothing known to wait, with its GPU busy meanwhile, nothing says it
    waits, nor on what: unknown. With its GPU idle it stays idle."""
    frames = (Frame("WordPieceTokenizer.encode", TOKENIZER, 61), Frame("<module>", TOKENIZER, 110))
    blocked = [ThreadStack(1, "MainThread", False, frames)]
    busy = HostSignals(seconds=3.0, main_thread_cpu=None, process_cpu=0.3, gpu_busy=True,
                       gpu_utilization=0.57)
    caught = classify(blocked, gpu_busy=False, source_line=lambda frame: None, signals=busy)
    assert caught.phase == "unknown" and "off a CPU" in caught.reason, caught
    quiet = dataclasses.replace(busy, gpu_busy=False, gpu_utilization=0.0)
    idle = classify(blocked, gpu_busy=False, source_line=lambda frame: None, signals=quiet)
    assert idle.phase == "idle" and idle.reason == "main thread blocked with the GPU idle", idle


def test_a_repeating_line_its_main_thread_keeps_running_at_is_no_sync():
    """A CI run of the tokenizer on a loaded host caught `encode` in consecutive dumps with
    py-spy calling its main thread idle (the GIL or a core): "the same user line repeats while
    the host waits" read a sync, which the band made compute, "waits on its own GPU's work".
    Its main thread ran a third of the time it did not queue for a core: no sync, unknown. A
    thread that ran next to none there still reads a sync (a host sync in C leaves no frame)."""
    frames = (Frame("WordPieceTokenizer.encode", TOKENIZER, 61), Frame("<module>", TOKENIZER, 110))
    blocked = [ThreadStack(1, "MainThread", False, frames)]
    line = "                ids.append(self.vocab.setdefault(piece, len(self.vocab) % self.vocab_size))"
    working = HostSignals(seconds=3.0, main_thread_cpu=0.33, process_cpu=0.6, gpu_busy=True,
                          gpu_utilization=0.57)
    caught = classify(blocked, gpu_busy=False, source_line=lambda frame: line,
                      repeated_leaf=True, signals=working)
    assert caught.phase == "unknown" and "off a CPU" in caught.reason, caught
    waiting = dataclasses.replace(working, main_thread_cpu=0.02)
    synced = classify(blocked, gpu_busy=False, source_line=lambda frame: line,
                      repeated_leaf=True, signals=waiting)
    assert synced.phase == "sync", synced
    # A full-suite run of it (stop 61's helper) caught `encode` so again, a sync made compute
    # in the band: before its main thread's clock was read (no CPU figure: nothing says it
    # waits), or with py-spy calling it running (its own code, not a sync).
    unread = dataclasses.replace(working, main_thread_cpu=None, process_cpu=0.2)
    running = [ThreadStack(1, "MainThread", True, frames)]
    for threads, signals, said in ((blocked, unread, "off a CPU"), (running, unread, "running"),
                                   (running, working, "running")):
        found = classify(threads, gpu_busy=False, source_line=lambda frame: line,
                         repeated_leaf=True, signals=signals)
        assert found.phase == "unknown" and said in found.reason, (signals, found)
