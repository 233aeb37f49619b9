"""Races between the event loop and threads, each pinned by a bounded stress test that runs the
conflicting paths concurrently:

- the API's apply path must find the recommendation on the event loop (the analyzer's state is
  mutated there by every tick), and run only the action in a thread;
- `mlcostd run --watch` must read the store off the event loop, so the tick never waits on it.

Both would fail before the fix: the lookup ran inside asyncio.to_thread, and the watch built its
report on the loop."""

from __future__ import annotations

import asyncio
import threading

import aiohttp

from daemon.api.server import ApiServer
from daemon.commands import cli, report
from daemon.runtime.attribution import STATUS_SLACK, Attribution
from daemon.wire import process_key
from tests.daemon.scripted import recording_daemon

COPY_REC = {"id": "rec-copy", "rule": "host_idle", "target": "host", "summary": "stop it",
            "savings_per_month": 100.0, "method": "m", "evidence": {},
            "action": {"kind": "copy_commands", "commands": ["sudo shutdown -h now"]}}
REQUESTS = 40
STRESS_TIMEOUT_S = 60.0


def test_apply_reads_the_analyzer_on_the_loop_while_ticks_run(tmp_path):
    daemon = recording_daemon(tmp_path, idle_utilization=5.0)
    analyzer = daemon.analyzer
    real_recommendations = analyzer.recommendations
    readers: set[int] = set()

    def recommendations():  # who reads the analyzer's advice, with one known recommendation
        readers.add(threading.get_ident())
        return [*real_recommendations(), COPY_REC]

    analyzer.recommendations = recommendations

    async def main() -> tuple[int, list[int], int]:
        loop_thread = threading.get_ident()
        server = ApiServer(daemon, tmp_path / "run" / "mlcostd.sock")
        await server.start()
        stop = asyncio.Event()

        async def tick_forever() -> int:  # the loop mutates the analyzer meanwhile
            ticks = 0
            while not stop.is_set():
                daemon.tick_now()
                ticks += 1
                await asyncio.sleep(0)
            return ticks

        ticking = asyncio.create_task(tick_forever())
        connector = aiohttp.UnixConnector(path=str(server.socket_path))
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                async def apply() -> int:
                    async with session.post("http://x/v1/recommendations/rec-copy/apply",
                                            json={"dry_run": True}) as response:
                        await response.json()
                        return response.status

                statuses = await asyncio.wait_for(
                    asyncio.gather(*(apply() for _ in range(REQUESTS))), STRESS_TIMEOUT_S)
        finally:
            stop.set()
            ticks = await ticking
            await server.stop()
        return loop_thread, list(statuses), ticks

    loop_thread, statuses, ticks = asyncio.run(main())
    daemon.store.close()
    assert statuses == [200] * REQUESTS
    assert ticks > 0  # the requests really ran beside ticks
    assert readers == {loop_thread}, "the analyzer was read from a thread"


def test_watch_reads_the_store_off_the_event_loop(tmp_path, monkeypatch, capsys):
    daemon = recording_daemon(tmp_path, idle_utilization=5.0)
    builders: list[int] = []
    real_build = report.build

    def build(reader, since_s, until=None, **kwargs):
        builders.append(threading.get_ident())
        return real_build(reader, since_s, until, **kwargs)

    monkeypatch.setattr(report, "build", build)

    async def main() -> int:
        loop_thread = threading.get_ident()
        watch = asyncio.create_task(cli._watch(daemon, first_after_s=0.0, every_s=0.0))

        async def tick_until_watched(views: int) -> None:
            while len(builders) < views:  # the recorder keeps writing while the view reads
                daemon.tick_now()
                await asyncio.sleep(0.01)

        try:
            await asyncio.wait_for(tick_until_watched(5), STRESS_TIMEOUT_S)
        finally:
            watch.cancel()
            try:
                await watch
            except asyncio.CancelledError:
                pass
        return loop_thread

    loop_thread = asyncio.run(main())
    daemon.store.close()
    assert len(builders) >= 5
    assert loop_thread not in builders, "the watch read the store on the event loop"
    assert "recording " in (out := capsys.readouterr().out) and "last " in out


def test_a_slow_phases_call_does_not_hold_the_tick(tmp_path):
    """GET /v1/processes/{key}/phases reads the store (1.6 s on a 6-hour store): in a thread.
    Here the read blocks until the test has seen ticks go on beside it."""
    daemon = recording_daemon(tmp_path, idle_utilization=5.0)
    entered, release = threading.Event(), threading.Event()
    released: list[bool] = []

    def slow_phases(key: str, since_s: float) -> dict:
        entered.set()
        # On the loop, this would hold every tick until it timed out: released is [False].
        released.append(release.wait(10))
        return {"phases": {}}

    daemon.phases_for = slow_phases  # type: ignore[method-assign]

    async def main() -> tuple[int, int]:
        server = ApiServer(daemon, tmp_path / "run" / "mlcostd.sock")
        await server.start()
        connector = aiohttp.UnixConnector(path=str(server.socket_path))
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                async def phases() -> int:
                    async with session.get("http://x/v1/processes/1:2.000/phases") as response:
                        return response.status

                call = asyncio.create_task(phases())
                while not entered.is_set():
                    await asyncio.sleep(0.01)
                before = daemon.tick
                for _ in range(5):  # ticks while the phases read is in progress
                    daemon.tick_now()
                    await asyncio.sleep(0)
                ticked = daemon.tick - before
                pending = not call.done()
                release.set()
                return ticked if pending else 0, await asyncio.wait_for(call, STRESS_TIMEOUT_S)
        finally:
            release.set()
            await server.stop()

    ticked, status = asyncio.run(main())
    daemon.store.close()
    assert status == 200
    assert released == [True], "the phases read held the event loop"
    assert ticked == 5


def test_stack_statuses_of_exited_processes_are_pruned(tmp_path):
    """Attribution's statuses are keyed by process: bounded by the live ones plus a slack."""
    daemon = recording_daemon(tmp_path, idle_utilization=5.0)
    try:
        attribution = Attribution(daemon.config.attribution, daemon.store,
                                  idle_utilization_pct=5.0)
        for pid in range(10_000, 10_000 + 3 * STATUS_SLACK):  # exited long ago
            attribution.status_by_key[process_key(pid, 1000.0)] = {"status": "ok"}
        sample = daemon.collect()
        live = {process_key(p.pid, p.start_time) for p in sample.processes}
        for key in live:
            attribution.status_by_key[key] = {"status": "ok"}
        attribution.on_tick(sample)
        assert set(attribution.status_by_key) == live
    finally:
        daemon.store.close()
