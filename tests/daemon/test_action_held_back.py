"""Daemon.action_held_back's own checks, tick by tick (the live test, test_apply_rechecks_live,
meets whichever refusal comes first on a loaded host: this one, or the hold once an evaluation
has seen the same work)."""

from __future__ import annotations

from types import SimpleNamespace

from daemon.runtime.daemon import Daemon
from daemon.sources.sample import GpuUse, ProcessSample, Sample

START = 1_700_000_000.0
REC = {"id": "r1", "status": "active",
       "action": {"kind": "sigterm", "pid": 42, "start_time": START}}


def held_back(cpu_before: float, cpu_now: float, sm: float = 0.0) -> str | None:
    def tick(ts: float, cpu: float) -> Sample:
        proc = ProcessSample(42, START, 1, "u", "python job.py", (GpuUse(0, 1 << 30, sm),),
                             cpu_seconds=cpu)
        return Sample(ts=ts, tick=int(ts), processes=(proc,))

    daemon = SimpleNamespace(previous_sample=tick(START + 10, cpu_before),
                             last_sample=tick(START + 11, cpu_now),
                             config=SimpleNamespace(idle=SimpleNamespace(utilization=5.0)),
                             ACTION_CPU_MAX_CORES=Daemon.ACTION_CPU_MAX_CORES)
    return Daemon.action_held_back(daemon, REC)  # type: ignore[arg-type]


def test_a_tenth_of_a_cpu_in_the_last_tick_holds_the_sigterm_back():
    said = held_back(5.0, 5.5)
    assert said is not None and "pid 42 used 50% of a CPU in the last tick" in said, said
    assert held_back(5.0, 5.12) is not None  # 12%
    assert held_back(5.0, 5.08) is None  # 8%: a heartbeat thread, a poll


def test_a_process_that_waits_at_no_cpu_and_no_kernels_may_be_stopped():
    assert held_back(5.0, 5.001) is None


def test_its_kernels_in_the_last_ticks_hold_it_back():
    said = held_back(5.0, 5.0, sm=3.0)
    assert said is not None and "runs kernels on GPU 0" in said, said
