"""/v1/idle's `since` on a host idle (or busy) for longer than the hour it looks back first: it
looks further back, over the store's minute rollups, instead of answering the hour's start, which
moved with each call and read "all the history holds" on a store that held hours more (note61
left it). Stores written by the real writer and rolled up by its own maintenance."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from daemon.analysis.idleness import History, answer
from daemon.api.idle import LONG_LOOKBACK_S, LOOKBACK_S, idle_answer
from daemon.sources.sample import GpuSample, Sample
from daemon.store.writer import Store

INTERVAL_S = 10.0
IDLE_PCT = 5.0


def recorded(tmp_path: Path, hours: float, busy: tuple[float, float] | None) -> tuple[Path, float]:
    """A store of one GPU's ticks every 10 s over the last `hours`, busy (90 %) between the two
    times of `busy` (seconds before the last tick), rolled up as the daemon does it."""
    db = tmp_path / "mlcost.db"
    last = float(int(time.time()))
    store = Store(str(db))
    count = int(hours * 3600 / INTERVAL_S)
    for n in range(count + 1):
        ts = last - (count - n) * INTERVAL_S
        ago = last - ts
        utilization = 90.0 if busy is not None and busy[1] <= ago <= busy[0] else 0.0
        assert store.write(Sample(ts=ts, tick=n + 1, gpus=(GpuSample(
            0, "GPU-0", "A100", utilization=utilization, memory_used_bytes=1 << 30,
            memory_total_bytes=40 << 30),)))
    while store.maintain(budget_s=1.0):  # the minute and hour rollups
        pass
    store.close()
    return db, last


def ask(db: Path, last: float, for_s: float = 0.0) -> dict[str, Any]:
    document = {"ts": last, "gpus": [{"index": 0, "uuid": "GPU-0", "status": "ok",
                                      "utilization": 0.0, "busy": False}], "processes": []}
    daemon = SimpleNamespace(
        now=lambda: document, db=db, analyzer=None,
        config=SimpleNamespace(daemon=SimpleNamespace(interval=INTERVAL_S),
                               idle=SimpleNamespace(utilization=IDLE_PCT)))
    return asyncio.run(idle_answer(daemon, for_s))


def test_a_host_idle_for_two_hours_is_idle_since_its_gpu_was_last_busy(tmp_path):
    db, last = recorded(tmp_path, 3.0, busy=(2 * 3600 + 300, 2 * 3600))
    result = ask(db, last, for_s=1800)
    assert result["active"] is False, result["reason"]
    # since the busy stretch ended, two hours ago, at the rollups' resolution; not the hour's
    # start, and not "all the history holds"
    resolution = result["history"]["resolution_s"]
    assert abs(result["since"] - (last - 2 * 3600)) <= 2 * resolution, result
    assert result["since"] < last - LOOKBACK_S
    assert result["since_is_history_start"] is False
    assert "all the history holds" not in result["reason"]
    # the same from one call to the next
    assert ask(db, last, for_s=1800)["since"] == result["since"]


def test_a_host_idle_since_its_store_began_hours_ago_is_idle_since_its_first_tick(tmp_path):
    db, last = recorded(tmp_path, 3.0, busy=None)
    result = ask(db, last)
    assert result["active"] is False, result["reason"]
    assert result["since_is_history_start"] is True
    resolution = result["history"]["resolution_s"]
    assert abs(result["since"] - (last - 3 * 3600)) <= 2 * resolution, result
    assert "(all the history holds)" in result["reason"]


def test_a_host_idle_for_the_last_half_hour_keeps_the_hours_fine_answer(tmp_path):
    db, last = recorded(tmp_path, 3.0, busy=(2400, 1800))
    result = ask(db, last)
    assert result["active"] is False
    assert abs(result["since"] - (last - 1800)) <= 2 * INTERVAL_S, result
    # no second, coarser look: the hour's look-back, at the ticks' resolution
    assert abs(result["history"]["since"] - (last - LOOKBACK_S)) < 60, result["history"]
    assert result["history"]["resolution_s"] < 60


def test_a_stretch_that_reaches_the_longest_look_back_says_it_looked_no_further():
    until = 1_800_000_000.0
    since = until - LONG_LOOKBACK_S
    history = History(since=since, until=until, width_s=144.0, first_tick=since + 10,
                      largest_gap_s=10.0, gpus={0: [(since + 10 + 144 * i, 0.0, 0.0, 0.0)
                                                    for i in range(600)]})
    document = {"ts": until, "gpus": [{"index": 0, "uuid": "GPU-0", "status": "ok",
                                       "utilization": 0.0, "busy": False}], "processes": []}
    result = answer(document, history, for_s=0, idle_utilization_pct=IDLE_PCT,
                    interval_s=INTERVAL_S)
    assert result["active"] is False and result["since_is_history_start"] is True
    assert "(as far back as it looks: 24 h)" in result["reason"], result["reason"]
