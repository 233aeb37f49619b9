"""/v1/now is built at most once per change of what it shows, and every change shows in the next
/v1/now: the next tick, a rules round, a snooze and its undo, a snooze running out, a stack
sampler's status, an incident snapshot taken, the store's health.

The daemon is the real Daemon class (store, analyzer, attribution, snapshot triggers, tick path)
serving its real API on a unix socket; only its sources are scripted (tests/daemon/scripted.py),
and the stack sampler answers when the test lets it."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from daemon import config as config_module
from daemon.api.now_cache import NowCache
from daemon.api.server import ApiServer
from daemon.client import Client
from daemon.runtime.attribution import Attribution
from daemon.runtime.daemon import Daemon
from daemon.runtime.price_host import build_analyzer
from daemon.runtime.snapshots import SnapshotTriggers
from daemon.sources.frames import NOT_PYTHON, DumpResult
from daemon.sources.sample import GpuUse
from daemon.store.writer import Store
from tests.daemon.scripted import PRICE, sample
from tests.daemon.test_book import shrink

WAIT_S = 30.0  # a condition not met by then fails the test


class HeldSampler:
    """A stack sampler whose dumps answer "not Python" once the test releases them."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    def available(self) -> int:
        return 1

    async def dump(self, pid: int) -> DumpResult:
        await self.release.wait()
        return DumpResult(pid, time.time(), NOT_PYTHON, error="not a Python process")


def quiet(i: int, t0: float):
    """Tick i with the process holding GPU 1's memory, its kernels idle: a dip, dumped."""
    s = sample(i, t0=t0)
    (proc,) = s.processes
    return dataclasses.replace(s, processes=(dataclasses.replace(
        proc, gpus=(GpuUse(1, 2 << 30, 0.0),)),))


def scripted_daemon(folder: Path) -> Daemon:
    """A Daemon with a store, an analyzer, attribution (stacks from HeldSampler), incident
    snapshots on a budget crossed (taken at once), a host budget it crosses on its first ticks
    and scripted samples; no tick taken yet."""
    config = config_module.from_dict({
        "daemon": {"db": str(folder / "mlcost.db")},
        "cost": {"budgets": {"host": {"daily": 0.0001}}},
        "snapshots": {"after": 0, "html": False, "recommendation_savings": 0},
    }, where="test")
    daemon = Daemon(config)
    daemon.store = Store(str(daemon.db))
    daemon.host = {"hostname": "testhost", "interval_s": 1.0, "price": PRICE.as_dict(),
                   "idle_utilization_pct": 5.0}
    daemon.store.set_meta("host", daemon.host)
    daemon.analyzer = build_analyzer(config, PRICE, None)
    daemon.attribution = Attribution(config.attribution, daemon.store,
                                     HeldSampler(),  # type: ignore[arg-type]
                                     interval_s=1.0)
    t0 = time.time() - 60
    script = (quiet(i, t0) for i in itertools.count(1))
    daemon.collect = lambda: next(script)  # type: ignore[method-assign]
    return daemon


async def body_of(socket_path: Path) -> bytes:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get("http://x/v1/now") as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "application/json; charset=utf-8"
            return await response.read()


async def until(condition: Any, what: str) -> Any:
    """Wait (on the loop, where the daemon's tasks run) until `condition()` is truthy."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_each_change_shows_in_the_next_v1_now_and_nothing_else_rebuilds_it(tmp_path):
    daemon = scripted_daemon(tmp_path)
    sampler = daemon.attribution.sampler

    async def main() -> None:
        socket_path = tmp_path / "run" / "mlcostd.sock"
        server = ApiServer(daemon, socket_path)
        await server.start()
        daemon.snapshots = SnapshotTriggers(daemon.config, hostname=lambda: "testhost",
                                            on_taken=daemon._snapshot_taken)
        try:
            async with Client(f"unix:{socket_path}") as client:
                for _ in range(3):
                    daemon.tick_now()
                first = await body_of(socket_path)
                # the body is the document: the values json.dumps of it gives
                assert json.loads(first) == json.loads(json.dumps(daemon.now()))
                builds = daemon.now_builds
                # asked again with nothing changed: the same bytes, not built again
                assert await body_of(socket_path) == first
                assert daemon.now_builds == builds

                # the next tick
                tick = json.loads(first)["tick"]
                daemon.tick_now()
                assert (await client.now_raw())["tick"] == tick + 1

                # an incident snapshot taken (the budget crossed at the first ticks): its event
                # names it, with no tick in between
                budget = next(e for e in (await client.now_raw())["events"]
                              if e["kind"] == "budget_exceeded")
                path = await until(lambda: daemon.snapshots.by_event.get(budget["id"]),
                                   "the budget's incident snapshot")
                shown = next(e for e in (await client.now_raw())["events"]
                             if e["id"] == budget["id"])
                assert shown["snapshot"] == path

                # a stack sampler's status arrives between ticks
                (proc,) = (await client.now_raw())["processes"]
                assert proc["stack_status"] is None
                sampler.release.set()
                await daemon.attribution.dumps_finished()
                (proc,) = (await client.now_raw())["processes"]
                assert proc["stack_status"] == NOT_PYTHON

                # a rules round between ticks
                rec = shrink()
                daemon.analyzer.analyze = lambda *args, **kwargs: [rec]  # type: ignore
                until_ts = daemon.last_sample.ts
                await daemon.evaluate(until_ts - 60, until_ts)
                listed = [r["id"] for r in (await client.now_raw())["recommendations"]]
                assert listed == [rec.id]

                # a snooze and its undo
                await client.snooze(rec.id, 2)
                assert (await client.now_raw())["recommendations"] == []
                await client.unsnooze(rec.id)
                assert [r["id"] for r in (await client.now_raw())["recommendations"]] == [
                    rec.id]

                # a snooze that runs out, with no tick: shown again once it has
                await client.snooze(rec.id, 0.5 / 3600)
                assert (await client.now_raw())["recommendations"] == []
                await until(lambda: time.time() > daemon.snoozed[rec.id], "the snooze's end")
                assert [r["id"] for r in (await client.now_raw())["recommendations"]] == [
                    rec.id]

                # the store's health changes between ticks (what is written grows the files)
                before = (await client.now_raw())["store"]
                daemon.store.set_meta("note", {"text": "x" * (256 << 10)})
                after = (await client.now_raw())["store"]
                assert after["bytes_on_disk"] != before["bytes_on_disk"]
                assert after == daemon.store.health.as_dict()
        finally:
            await server.stop()

    try:
        asyncio.run(main())
    finally:
        daemon.store.close()


def test_kept_entry_parts_give_the_entries_process_entry_builds():
    from daemon.analysis.cost_state import ProcessCost
    from daemon.analysis.derive import TickModel
    from daemon.api.document import ProcessEntries, process_entry

    t0 = time.time() - 60
    entries = ProcessEntries()
    balance = {"compute": {"seconds": 20.0, "share": 1.0, "top_stacks": [],
                           "confidence": "high"}}
    kind = {"kind": "training", "kind_confidence": 0.5, "kind_evidence": ["steady"],
            "serves": False, "kind_source": "observed", "inference": None}
    status = None
    for i in range(2, 9):
        if i == 4:  # a new balance (a stack sample arrived), then the same object again
            balance = {"data_wait": {"seconds": 30.0, "share": 1.0, "top_stacks": [
                {"reason": "reads a file"}], "confidence": "high"}}
        if i == 5:  # a new kind document with the same content, then another kind
            kind = dict(kind)
        if i == 6:
            kind = dict(kind, kind="serving", serves=True, inference={
                "runtime": "vllm", "advice": [{"saving_share": 0.5}]})
        if i == 7:
            status = {"status": NOT_PYTHON, "error": None, "ts": 0.0}
        model = TickModel.from_samples(sample(i, t0=t0), sample(i - 1, t0=t0), {})
        (proc,) = model.processes
        owner = {"slurm_job": "42"} if i >= 8 else proc.owner  # its owner learned
        proc = proc._replace(owner=owner)
        cost = ProcessCost(1.5 + i, 0.1 * i, "train", None)
        kept = entries.entry(proc, cost, balance, status, kind)
        built = process_entry(proc, cost, balance, status, kind)
        assert kept == built and list(kept) == list(built), i
        assert json.dumps(kept) == json.dumps(built)
    assert kept["workload"] == "slurm 42" and kept["stack_status"] == NOT_PYTHON
    assert kept["phase"] == "data_wait" and kept["kind"] == "serving"
    assert kept["inference"]["advice"][0]["saving_per_month"] is not None
    entries.keep_only(set())  # it exited: nothing kept for it
    assert entries.entry(proc, cost, balance, status, kind) == built


def test_the_body_is_the_documents_json_whatever_its_keys():
    # NowCache.body encodes as though every key is a string (the document is built so), and
    # encodes again, keys made strings as json.dumps makes them, where one is not
    cache = NowCache()
    built = {"gpus": [{"index": 0, "busy": True}], "burn": {"per_hour": 1.5, "nan": None}}
    cache.put(("a",), built)
    assert cache.body() == json.dumps(built, separators=(",", ":")).encode()
    odd = {"by_gpu": {0: 1.25, 1: 2.5}, "names": {"x": [1, 2]}}
    cache.put(("b",), odd)
    assert json.loads(cache.body()) == json.loads(json.dumps(odd))
    assert cache.body() == b'{"by_gpu":{"0":1.25,"1":2.5},"names":{"x":[1,2]}}'
