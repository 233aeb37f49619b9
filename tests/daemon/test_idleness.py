"""daemon.analysis.idleness: what answers idle, what answers active, and that anything unknown
answers active (fail safe), on /v1/now documents and histories written by hand."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.analysis.idleness import History, answer, fail_safe, process_evidence

TS = 1_800_000_000.0
IDLE_PCT = 5.0


def gpu(index: int = 0, utilization: float | None = 0.0, status: str = "ok") -> dict[str, Any]:
    busy = None if utilization is None else utilization >= IDLE_PCT
    return {"index": index, "uuid": f"GPU-{index}", "status": status,
            "utilization": utilization, "busy": busy}


def proc(**facts: Any) -> dict[str, Any]:
    base = {"key": "10:1.000", "pid": 10, "user": "ana", "command": "python nb.py",
            "gpus": [{"index": 0}], "sm_share": 0.0, "cpu_percent": 0.5,
            "read_bytes_per_s": 0.0, "write_bytes_per_s": 0.0, "io_wait_percent": 0.0,
            "threads_in_d": 0, "phase": "idle", "kind": "notebook", "serves": False}
    return {**base, **facts}


def now(*, gpus: list[dict[str, Any]] | None = None,
        processes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"ts": TS, "gpus": gpus if gpus is not None else [gpu()],
            "processes": processes if processes is not None else [proc()]}


def history(*, busy_until: float | None = None, recorded_s: float = 3600.0,
            gpus: tuple[int, ...] = (0,), hole: tuple[float, float] | None = None,
            largest_gap_s: float = 1.0) -> History:
    """Buckets of 6 s over the last `recorded_s`, busy (90%) up to `busy_until`."""
    width = 6.0
    start = TS - recorded_s
    points = []
    t = start
    while t < TS:
        if not (hole and hole[0] <= t < hole[1]):
            value = 90.0 if busy_until is not None and t + width <= busy_until else 0.0
            points.append((t, value, value, value))
        t += width
    return History(since=TS - 3600, until=TS, width_s=width, first_tick=start,
                   largest_gap_s=largest_gap_s, gpus={i: points for i in gpus})


def ask(document: dict[str, Any], hist: History | None, for_s: float = 0.0) -> dict[str, Any]:
    return answer(document, hist, for_s=for_s, idle_utilization_pct=IDLE_PCT, interval_s=1.0)


def test_a_notebook_holding_an_idle_gpu_for_long_enough_is_idle_since_the_last_busy_moment():
    result = ask(now(), history(busy_until=TS - 1200), for_s=900)
    assert result["active"] is False and result["basis"] == "measured"
    assert result["since"] == TS - 1200 and result["idle_for_s"] == 1200
    assert result["since_is_history_start"] is False
    assert result["processes"][0]["active"] is False


def test_idle_for_less_than_asked_is_active_with_how_long_it_has_been_idle():
    result = ask(now(), history(busy_until=TS - 600), for_s=1800)
    assert result["active"] is True and result["since"] is None
    assert result["idle_for_s"] == 600 and "only for 600 s" in result["reason"]
    # just short of what was asked reads short of it (once 'only for 5 s of the asked 5 s')
    short = ask(now(), history(busy_until=TS - 6.5, recorded_s=3600.6), for_s=7)
    assert short["idle_for_s"] == pytest.approx(6.6)  # the last busy bucket ended at TS - 6.6
    assert short["active"] is True and "only for 6 s of the asked 7 s" in short["reason"]


def test_never_busy_in_the_history_is_idle_since_the_history_began():
    result = ask(now(), history(recorded_s=2400), for_s=1800)
    assert result["active"] is False and result["since_is_history_start"] is True
    assert result["since"] == TS - 2400


def test_a_history_shorter_than_asked_is_active_and_says_so():
    result = ask(now(), history(recorded_s=300), for_s=1800)
    assert result["active"] is True and result["basis"] == "fail_safe"
    assert result["confidence"] == 0 and "less than the asked 1800 s" in result["reason"]


def test_a_hole_in_the_ticks_or_in_a_gpus_readings_is_active():
    gap = ask(now(), history(largest_gap_s=120), for_s=1800)
    assert gap["active"] is True and "no tick for 120 s" in gap["reason"]
    lost = ask(now(), history(hole=(TS - 900, TS - 600)), for_s=1800)
    assert lost["active"] is True and "GPU 0 has no readings" in lost["reason"]


def test_idle_since_stops_at_the_latest_hole_in_the_recording(tmp_path):
    """Probe 121 F14: a daemon stopped 25 s, 28 min ago, then idle: `--for 15m` answered
    "idle for 1697 s, since" before the hole, where `--for 17m` refused the hole. A script that
    reads `idle_for_s` would have counted time nobody saw. The store's ticks (the real writer,
    read by the API's read_history) say where the recording resumed."""
    from daemon.api.idle import read_history
    from daemon.sources.sample import GpuSample, Sample
    from daemon.store.writer import Store

    until = TS
    ticks = [t for t in range(int(TS) - 2000, int(TS) + 1, 5)  # one each 5 s, interval 5 s,
             if not TS - 1700 < t < TS - 1650]                   # and a 50 s hole
    store = Store(str(tmp_path / "mlcost.db"))
    for n, t in enumerate(ticks, 1):
        assert store.write(Sample(ts=float(t), tick=n, gpus=(GpuSample(
            0, "GPU-0", "A100", utilization=0.0, memory_used_bytes=1 << 30,
            memory_total_bytes=40 << 30),)))
    store.close()
    hist, _ = read_history(tmp_path / "mlcost.db", until - 3600, until, 900, [0], 5.0)
    assert hist.resumed_at == TS - 1650  # the first tick after the hole
    result = answer(now(), hist, for_s=900, idle_utilization_pct=IDLE_PCT, interval_s=5.0)
    assert result["active"] is False
    assert result["since"] == TS - 1650 and result["idle_for_s"] == 1650
    assert result["since_is_history_start"] is True
    assert "since the recording resumed after a hole" in result["reason"]
    # Asked over the hole, it cannot tell, as before.
    over = read_history(tmp_path / "mlcost.db", until - 3600, until, 1800, [0], 5.0)[0]
    assert answer(now(), over, for_s=1800, idle_utilization_pct=IDLE_PCT,
                  interval_s=5.0)["active"] is True


def test_a_gpu_without_a_reading_now_is_active():
    result = ask(now(gpus=[gpu(0), gpu(1, None, "lost")]), history(gpus=(0, 1)))
    assert result["active"] is True and result["basis"] == "fail_safe"
    assert "GPU 1 has no utilization reading (lost)" in result["reason"]


def test_no_tick_no_gpus_or_no_history_is_active():
    assert ask({"ts": None, "gpus": [], "processes": []}, history())["active"] is True
    assert ask(now(gpus=[]), history())["active"] is True
    assert ask(now(), None)["active"] is True
    safe = fail_safe("no mlcostd", for_s=60)
    assert safe["active"] is True and safe["confidence"] == 0 and safe["reason"] == "no mlcostd"


def test_a_server_waiting_for_requests_on_an_idle_gpu_is_active():
    server = proc(kind="online_inference", serves=True, kind_confidence=0.9, phase=None)
    result = ask(now(processes=[server]), history(), for_s=1800)
    assert result["active"] is True and result["basis"] == "measured"
    assert result["confidence"] == 0.9 and "serves on a port" in result["reason"]


def test_a_queue_consumer_waiting_for_its_next_job_or_an_online_inference_kind_is_active():
    """A worker on an empty job queue answered idle (and autostop on that answer stops it)
    while host_idle held back for it: a consumer between jobs is at work, as the rules say. So
    is a process of kind online inference that has not been seen serving yet."""
    waiting = {"phases": {"idle": 0.96, "compute": 0.04},
               "phase_reasons": {"idle": "waiting for its next job from a redis list (BLPOP)",
                                 "compute": "GPU busy"}}
    consumer = proc(pid=4242, kind="training", kind_confidence=0.3, **waiting)
    result = ask(now(processes=[consumer]), history(), for_s=1800)
    assert result["active"] is True and result["basis"] == "measured", result
    assert result["reason"].startswith("active now: pid 4242: waits for its next job"), result
    assert result["confidence"] == 0.8
    assert result["processes"][0]["active"] is True
    # idle for another reason, or waiting so too rarely to be one: idle as before
    for facts in ({"phase_reasons": {"idle": "sleeping or waiting with the GPU idle"}},
                  {"phases": {"idle": 0.01, "unknown": 0.99}}):
        assert ask(now(processes=[proc(**{**waiting, **facts})]), history(),
                   for_s=1800)["active"] is False, facts
    # hostile or odd documents: no consumer, no crash
    for facts in ({"phase_reasons": None}, {"phases": "idle"},
                  {"phase_reasons": {"idle": 7}}, {"phases": {"idle": "0.9"}}):
        assert process_evidence(proc(**{**waiting, **facts})) == [], facts
    server = proc(pid=77, kind="online_inference", serves=False, kind_confidence=0.6)
    result = ask(now(processes=[server]), history(), for_s=1800)
    assert result["active"] is True and "pid 77: online inference" in result["reason"], result
    assert result["confidence"] == 0.6


def test_a_process_waiting_for_a_child_process_it_started_is_active():
    """A job waiting for its encoder or download tool answered idle, and an autostop on that
    answer stops the host with the tool mid-way, while host_idle held back for it."""
    waiting = {"phases": {"idle": 0.95, "compute": 0.05}, "phase_reasons": {
        "idle": "waiting for a child process it started (subprocess.py:550 run): its child "
                "processes run on a CPU"}}
    result = ask(now(processes=[proc(pid=4343, **waiting)]), history(), for_s=1800)
    assert result["active"] is True, result
    assert result["reason"].startswith("active now: pid 4343: waits for a child process it "
                                       "started"), result


def test_a_periodic_job_between_runs_is_active_as_host_idle_counts_it():
    """Probe 109's nightly scorer between its runs (its model loaded, `time.sleep(EVERY)`):
    the rules called it periodic ("release the GPU between runs"), yet /v1/idle answered idle
    and an autostop would stop the host before its next run. The rules' own fact (the
    Analyzer's periodic processes, by key) makes it active; a process they did not call so,
    or another process's key, leaves the answer idle."""
    sleeping = proc(pid=3507, key="3507:5.000", kind="batch_inference",
                    command="python nightly_scorer.py", phases={"idle": 0.97, "compute": 0.03},
                    phase_reasons={"idle": "sleeping or waiting: `time.sleep(EVERY)` with the "
                                           "GPU idle"})
    document = now(processes=[sleeping])
    result = answer(document, history(), for_s=0, idle_utilization_pct=IDLE_PCT,
                    interval_s=1.0, periodic={"3507:5.000": 3})
    assert result["active"] is True, result
    assert result["reason"].startswith("active now: pid 3507: a periodic job between runs: its "
                                       "kernels ran in 3 separate runs"), result
    assert result["confidence"] == 0.8 and result["basis"] == "measured"
    [entry] = result["processes"]
    assert entry["active"] is True and "periodic job" in entry["evidence"][0], entry
    for periodic in (None, {}, {"3508:5.000": 3}):
        result = answer(document, history(), for_s=0, idle_utilization_pct=IDLE_PCT,
                        interval_s=1.0, periodic=periodic)
        assert result["active"] is False, (periodic, result)


def test_each_kind_of_evidence_makes_a_quiet_gpus_process_active():
    assert process_evidence(proc()) == []
    assert process_evidence(proc(phase=None)) == []
    assert process_evidence(proc(phase="compute")) == []  # left to the kernels, measured
    for facts, word in (({"sm_share": 40.0}, "kernels"), ({"read_bytes_per_s": 5e6}, "I/O"),
                        ({"threads_in_d": 2}, "disk sleep"), ({"io_wait_percent": 30.0}, "I/O"),
                        ({"cpu_percent": 95.0}, "CPU"), ({"phase": "data_wait"}, "data_wait")):
        found = process_evidence(proc(**facts))
        assert found and word in found[0][0], facts


def test_a_busy_gpu_is_active_since_its_busy_stretch_began():
    result = ask(now(gpus=[gpu(0, 97.0)], processes=[proc(sm_share=97.0, phase="compute")]),
                 history(busy_until=TS + 6, recorded_s=600))
    assert result["active"] is True and result["confidence"] == 1.0
    assert result["since"] == TS - 600


def test_an_unknown_phase_lowers_the_confidence_of_an_idle_answer():
    result = ask(now(processes=[proc(phase=None)]), history(busy_until=TS - 1200), for_s=60)
    assert result["active"] is False and result["confidence"] == 0.8


def test_last_busy_is_never_after_the_latest_tick_nor_before_the_first():
    """Probe 84: `last_busy` read a second after `ts` (the current bucket's end), and with
    `--for 7h` a time before the daemon started (a minute rollup's bucket starts on the
    minute, before the first tick inside it)."""
    # the current bucket, busy, runs 4 s past the latest tick
    current = History(since=TS - 60, until=TS, width_s=6.0, first_tick=TS - 60,
                      largest_gap_s=1.0, gpus={0: [(TS - 8.0, 0, 0, 0), (TS - 2.0, 90, 90, 90)]})
    busy = ask(now(gpus=[gpu(utilization=90.0)]), current)
    [entry] = busy["gpus"]
    assert entry["last_busy"] == TS and busy["history"]["last_gpu_busy"] == TS
    # a minute rollup from 11:05:00, busy, of a daemon whose first tick is 11:05:36; the
    # rollup's step (here 18 s) ends its bucket at 11:05:18, before the daemon was recording
    minute = TS - 3600 - 36
    rolled = History(since=TS - 7 * 3600, until=TS, width_s=18.0, first_tick=minute + 36,
                     largest_gap_s=1.0,
                     gpus={0: [(minute, 90, 0, 90)] + [(minute + 18 * k, 0, 0, 0)
                                                       for k in range(3, 200)]})
    result = ask(now(), rolled, for_s=600)
    [entry] = result["gpus"]
    assert entry["last_busy"] == minute + 36  # the first tick, not 36 s before it
    assert result["history"]["first_tick"] <= entry["last_busy"] <= result["ts"]
