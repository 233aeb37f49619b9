"""The one /v1/now document builder: the live daemon and replay of the same recorded tick agree,
each GPU carries the busy/idle verdict of the configured [idle].utilization, and the wasted $/h
history agrees with the header's burn.

The daemon here is the real Daemon class with a real store, analyzer and API socket; only its
sources are scripted (`collect` returns the samples below), so the values are known exactly."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from daemon.api.server import ApiServer
from daemon.client import Client
from daemon.replay import Replay
from daemon.sources.sample import GPU_FIELDS, GpuSample
from tests.daemon.scripted import recording_daemon


def test_live_and_replay_documents_of_one_tick_agree(tmp_path):
    daemon = recording_daemon(tmp_path, idle_utilization=5.0, t0=time.time() - 30)
    live = daemon.now()
    daemon.store.close()
    with Replay(daemon.db) as replay:
        replayed = replay.state_at(live["ts"])
    assert set(live) == set(replayed)
    assert replayed["ts"] == pytest.approx(live["ts"]) and replayed["tick"] == live["tick"]
    assert replayed["gpus"] == live["gpus"]
    (live_proc,), (replayed_proc,) = live["processes"], replayed["processes"]
    assert set(live_proc) == set(replayed_proc)
    for name in ("key", "cpu_percent", "read_bytes_per_s", "io_wait_percent", "sm_share",
                 "gpu_memory_bytes", "burn_per_hour"):
        assert replayed_proc[name] == pytest.approx(live_proc[name]), name
    # the live daemon learns phases at its next evaluation; ask it the same question directly
    balance = daemon.phases_for(live_proc["key"], 300) or {}
    assert replayed_proc["phases"] == {phase: part["share"] for phase, part in balance.items()}
    assert live_proc["cpu_percent"] == pytest.approx(50.0)  # 0.5 CPU s per 1 s tick
    assert live_proc["read_bytes_per_s"] == pytest.approx(1_000_000)
    assert live_proc["io_wait_percent"] == pytest.approx(10.0)
    assert set(live["burn"]) == set(replayed["burn"])
    for name in ("total_per_hour", "wasted_per_hour", "idle_per_hour", "price_per_gpu"):
        assert replayed["burn"][name] == pytest.approx(live["burn"][name]), name
    assert replayed["price"] == live["price"]
    assert set(live["cost"]) == set(replayed["cost"])


@pytest.mark.parametrize("idle_utilization, gpu0_busy", [(5.0, True), (20.0, False)])
def test_the_idle_setting_decides_each_gpus_verdict_in_v1_now(tmp_path, idle_utilization,
                                                              gpu0_busy):
    daemon = recording_daemon(tmp_path, idle_utilization, t0=time.time() - 30)

    async def main():
        server = ApiServer(daemon, tmp_path / "run" / "mlcostd.sock")
        await server.start()
        try:
            async with Client(f"unix:{server.socket_path}") as client:
                return await client.now()
        finally:
            await server.stop()

    now = asyncio.run(main())
    daemon.store.close()
    busy = {gpu.index: gpu.busy for gpu in now.gpus}
    assert busy == {0: gpu0_busy, 1: True}  # GPU 0 runs at 12 %: busy only under a 5 % setting
    # the cost model follows the same setting: an idle GPU is wasted whole
    gpu0_wasted = next(g for g in now.gpus if g.index == 0).wasted_per_hour
    assert gpu0_wasted == pytest.approx(2.0 if not gpu0_busy else 2.0 * (1 - 0.12))


def test_the_wasted_history_ends_where_the_header_is_for_a_steady_host(tmp_path):
    daemon = recording_daemon(tmp_path, idle_utilization=20.0, ticks=8, t0=time.time() - 30)

    async def main():
        server = ApiServer(daemon, tmp_path / "run" / "mlcostd.sock")
        await server.start()
        try:
            async with Client(f"unix:{server.socket_path}") as client:
                now = await client.now()
                history = await client.host_history("wasted_per_hour", since_s=300, points=60)
                return now, history
        finally:
            await server.stop()

    now, history = asyncio.run(main())
    daemon.store.close()
    assert history.points
    assert history.points[-1].avg == pytest.approx(now.wasted_per_hour)
    # GPU 0 (12 %, idle under 20 %) whole + GPU 1 at 80 %: 2.0 + 0.4
    assert now.wasted_per_hour == pytest.approx(2.0 + 2.0 * 0.2)


def test_a_phase_is_not_known_before_a_dip_could_have_been_seen():
    from daemon.api.document import PHASE_KNOWN_AFTER_S, phase_known

    early = {"compute": {"seconds": PHASE_KNOWN_AFTER_S / 3, "share": 1.0, "top_stacks": []}}
    later = {"compute": {"seconds": PHASE_KNOWN_AFTER_S * 3, "share": 1.0, "top_stacks": []}}
    sampled = {"idle": {"seconds": 2.0, "share": 1.0,
                        "top_stacks": [{"file": "nb.py", "line": 3}]}}
    assert not phase_known(early)  # all compute by default: shown as '-'
    assert phase_known(later) and phase_known(sampled)
    assert not phase_known({}) and not phase_known(None)


def test_energy_per_hour_is_null_not_left_out_without_an_electricity_price(tmp_path):
    """README: a key of the JSON contract is `null` where there is no value, never left out.
    Without [instance].electricity_per_kwh, `gpus[].energy_per_hour` and
    `burn.energy_per_hour` were absent from /v1/now (probe 84)."""
    daemon = recording_daemon(tmp_path, 5.0, t0=time.time() - 30)

    async def main():
        server = ApiServer(daemon, tmp_path / "run" / "mlcostd.sock")
        await server.start()
        try:
            async with Client(f"unix:{server.socket_path}") as client:
                return await client.now_raw()
        finally:
            await server.stop()

    now = asyncio.run(main())
    daemon.store.close()
    assert now["price"].get("electricity_per_kwh") in (None, 0)
    assert now["gpus"] and all("energy_per_hour" in g and g["energy_per_hour"] is None
                               for g in now["gpus"]), now["gpus"]
    assert "energy_per_hour" in now["burn"] and now["burn"]["energy_per_hour"] is None
    from daemon.commands import report
    from daemon.store.reader import StoreReader

    reader = StoreReader(str(daemon.db))
    try:
        document = report.build(reader, 600)
    finally:
        reader.close()
    assert document["gpus"] and all("energy_per_hour" in g and g["energy_per_hour"] is None
                                    for g in document["gpus"]), document["gpus"]


def test_each_gpu_shows_every_field_its_sample_declares(tmp_path):
    """A GPU's fields are declared once (GpuSample): the document's GPU entry shows each, with
    the value the tick read, beside its verdict and its energy's price; a field added to the
    sample reaches /v1/now without a second list to keep."""
    daemon = recording_daemon(tmp_path, idle_utilization=5.0, t0=time.time() - 30)
    live = daemon.now()
    sample = daemon.last_sample
    daemon.store.close()
    assert [g["index"] for g in live["gpus"]] == [g.index for g in sample.gpus]
    for entry, gpu in zip(live["gpus"], sample.gpus, strict=True):
        assert list(entry) == [*GPU_FIELDS, "busy", "energy_per_hour"], list(entry)
        assert {name: entry[name] for name in GPU_FIELDS} == {
            f.name: getattr(gpu, f.name) for f in dataclasses.fields(GpuSample)}
