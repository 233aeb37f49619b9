"""GPU workers fed by real brokers, under a real mlcostd: each waits for its next job as a queue
consumer, never an idle process to stop, nor a starved loop to prefetch for, nor a server.

Programs in tests/daemon/workloads written as their users would write them. A worker on a
redis list, in redis-py's BLPOP against a real redis-server, read "main thread blocked with
the GPU idle" (idle_gpu_held's SIGTERM). One asking an aiohttp job server for its next job
with urllib.request, the server holding the request open until a job comes (a long poll), read
"reading (socket)" (data wait: dataloader_starvation). Started with `--server HOST:PORT` (the
broker it connects to), each read online_inference on the word "server", whose advice says
"restart the server". A training loop that GETs its samples from redis read "main thread
blocked" (idle_gpu_held's SIGTERM): redis-py reads its socket in C. And GET /v1/idle answered idle for a host whose one GPU process waited on
an empty queue, while the host_idle rule held back for it: an autostop on that answer stops the
service.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web
from simhost import poll
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import (
    HOST_AFTER_S,
    QUICK,
    ROUND_S,
    STARVED,
    STOPS,
    advice_by_program,
    gpus_idle_since,
    program,
    rules,
    starved_past_host_after,
)

# What a consumer is never offered: to be stopped, or prefetch (nothing makes jobs come sooner).
NEVER = {*STOPS, "dataloader_starvation"}
# How often the producer pushes a job for the fed worker: well past [idle].gpu_held_after
# (10 s in QUICK) and the rules' 5-s ticks, so its GPU idles between jobs as an idle worker's.
JOB_EVERY_S = 25.0
LONG_POLL_S = 20.0  # the job server answers 204 after holding a request this long


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path) -> Iterator[tuple[str, redis.Redis]]:
    """A redis-server of its own: in its own directory, on a free loopback port, no
    persistence; its address and a client. Stopped at the end."""
    folder = tmp_path / "redis"
    folder.mkdir()
    binary = shutil.which("redis-server")
    assert binary, "redis-server is installed by .ci/run (Debian package redis-server)"
    def answering(server: subprocess.Popen[bytes], client: redis.Redis) -> bool:
        """PING answered, or the server gone (its port was taken)."""
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return server.poll() is not None

    for _ in range(5):  # a port another process took between the probe and the bind: again
        port = free_port()
        server = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder),
             "--save", "", "--appendonly", "no", "--logfile", str(folder / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=port)
        try:
            poll(functools.partial(answering, server, client), 30,
                 "redis-server answering PING", every=0.1)
        except BaseException:
            server.kill()
            server.wait()
            raise
        if server.poll() is None:
            break
        client.close()
    else:
        pytest.fail("redis-server did not start: " + (folder / "redis.log").read_text()[-2000:])
    try:
        yield f"127.0.0.1:{port}", client
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def job_server() -> Iterator[tuple[str, asyncio.Queue[dict[str, Any]]]]:
    """An aiohttp job server on a free loopback port, in a thread of its own: GET /jobs/next
    holds the request until a job is queued (200, the job) or LONG_POLL_S pass (204); POST
    /jobs/ID/done takes a result. Its address and its (empty) queue of jobs."""
    loop = asyncio.new_event_loop()
    jobs: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    started = threading.Event()
    address: list[str] = []

    async def next_job(_request: web.Request) -> web.Response:
        try:
            job = await asyncio.wait_for(jobs.get(), LONG_POLL_S)
        except TimeoutError:
            return web.Response(status=204)
        return web.json_response(job)

    async def done(_request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_get("/jobs/next", next_job)
    app.router.add_post("/jobs/{id}/done", done)
    runner = web.AppRunner(app, shutdown_timeout=1.0)

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        address.append(f"{host}:{port}")
        started.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        # a long poll still held (its worker killed mid-request) is cancelled and ended here:
        # left pending, its jobs.get() was collected after the loop closed, a warning in
        # whichever later test the garbage collector ran in
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, name="job-server", daemon=True)
    thread.start()
    assert started.wait(30), "the job server did not start"
    try:
        yield address[0], jobs
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def consumer_advice(found: dict[str, list[Any]], name: str) -> Any | None:
    return next((r for r in found[name] if r.rule == "idle_server"
                 and r.evidence.get("waits_for_jobs")), None)


def check_consumer(found: dict[str, list[Any]], name: str, waits_in: str) -> None:
    """`name` got idle_server's consumer advice, waiting in `waits_in`, and nothing that stops
    it or prefetches for it."""
    assert not {r.rule for r in found[name]} & NEVER, rules(found)
    assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
    rec = consumer_advice(found, name)
    assert rec is not None, rules(found)
    assert rec.action["kind"] == "advice" and "queue" in rec.action["text"], rec.action
    waits = rec.evidence["waits_for_jobs"]
    assert waits_in in waits["reason"], waits
    assert rec.evidence["kind"]["kind"] != "online_inference", rec.evidence["kind"]
    assert "restart the server" not in json.dumps(rec.evidence)


def kinds_by_program(daemon: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: p.get("kind") for p in daemon.now()["processes"] if p.get("gpus")
            for n in names if n in p["command"]}


def consumers_are_batch_inference(daemon: Any, names: tuple[str, ...]) -> None:
    """Each of `names` is batch_inference, a job consumer (kinds.JOB_WAIT_WEIGHT), not
    training (its GPU use alone) nor other: polled, as the kinds round follows the rules round
    whose phase balances tell a consumer."""
    poll(lambda: kinds_by_program(daemon, names) == dict.fromkeys(names, "batch_inference"),
         30, f"{', '.join(names)} batch_inference", every=1.0,
         explain=lambda: json.dumps(kinds_by_program(daemon, names)))


@contextlib.contextmanager
def feeding(job: Callable[[int], object], name: str = "producer") -> Iterator[None]:
    """A producer thread that hands job n (0, 1, ...) to `job` every JOB_EVERY_S while the
    block runs: a queue's producer, an uploader. Stopped and joined when the block ends."""
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            job(n)
            n += 1
            stop.wait(JOB_EVERY_S)

    producer = threading.Thread(target=produce, name=name, daemon=True)
    producer.start()
    try:
        yield
    finally:
        stop.set()
        producer.join(30)


def test_redis_workers_in_blpop_are_queue_consumers_fed_or_not(mlcostd, tmp_path, redis_server):
    """Two workers on a real redis-server, each started with `--server HOST:PORT`: one on an
    empty list, one whose list a producer pushes a job to every JOB_EVERY_S. Both wait in
    BLPOP between jobs and get idle_server's consumer advice, never idle_gpu_held, a SIGTERM or
    dataloader_starvation, and neither reads online_inference; the fed one did its jobs."""
    address, client = redis_server
    names = ("jobs-empty", "jobs-fed")
    path = scenario_file(tmp_path, [
        {"name": name, "command": program("redis_job_worker.py", "--server", address,
                                          "--queue", name)} for name in names])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def both_consumers_and_jobs_done() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        state["done"] = client.llen("jobs-fed:done")
        return state["done"] >= 2 and all(consumer_advice(found, n) for n in names)

    with feeding(lambda n: client.rpush("jobs-fed", json.dumps(
            {"id": n, "clip": f"s3://clips/{n}.mp4"}))):
        poll(both_consumers_and_jobs_done, 240,
             "idle_server's consumer advice for both redis workers, the fed one with 2 jobs "
             "done", every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
             + f"\njobs done: {state.get('done')}\n" + daemon.log_tail())
    found = state["recs"]
    for name in names:
        check_consumer(found, name, "redis list (BLPOP)")
    consumers_are_batch_inference(daemon, names)
    assert daemon.stop() == 0, daemon.log_tail()


def test_a_worker_long_polling_an_empty_job_server_is_a_consumer_and_keeps_the_host_active(
        mlcostd, tmp_path, job_server):
    """The host's one GPU process asks an aiohttp job server for its next job with urllib
    (`--server HOST:PORT`); no job ever comes. Its GPU idles, the host's too (the host_idle
    event opens), and: idle_server's consumer advice at the long poll, no SIGTERM, no
    prefetch advice, no host_idle advice in a round past the event, and GET /v1/idle (and
    `mlcostd idle`) answers active, naming its pid."""
    address, _jobs = job_server
    name = "poll_job_worker"
    path = scenario_file(tmp_path, [
        {"name": "poll", "command": program("poll_job_worker.py", "--server", address)}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def advised_past_host_after() -> bool:
        state["recs"] = found = advice_by_program(daemon, (name,))
        rec = consumer_advice(found, name)
        since = gpus_idle_since(daemon)
        return rec is not None and since is not None and (
            rec.evidence["window"]["end"] >= since + HOST_AFTER_S + 2 * ROUND_S)

    poll(advised_past_host_after, 240, "idle_server's consumer advice in a round past "
         "[idle].host_after", every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
         + "\n" + daemon.log_tail())
    found = state["recs"]
    check_consumer(found, name, "HTTPResponse._read_status")
    assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
    consumers_are_batch_inference(daemon, (name,))
    [worker] = [p for p in daemon.now()["processes"] if p.get("gpus")]
    assert any("waits for its next job" in e for e in worker["kind_evidence"]), worker

    answer = daemon.call("idle", 10.0)
    assert answer["active"] is True and answer["basis"] == "measured", answer
    assert f"pid {worker['pid']}: waits for its next job" in answer["reason"], answer["reason"]
    [proc] = answer["processes"]
    assert proc["active"] is True and any("queue consumer" in e for e in proc["evidence"])
    # the command autostop runs: exit 1 (active), so `mlcostd idle && shutdown` never fires
    done = subprocess.run([sys.executable, "-m", "daemon", "idle",
                           "--connect", f"unix:{daemon.socket}", "--for", "10s", "--json"],
                          cwd=Path(__file__).parents[2], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert json.loads(done.stdout)["active"] is True
    assert daemon.stop() == 0, daemon.log_tail()


def test_a_loop_reading_its_samples_from_redis_waits_for_data_and_is_never_stopped(
        mlcostd, tmp_path, redis_server):
    """A training loop whose every step GETs its batch's samples (512 KB each) from a real
    redis-server and runs a short step: its GPU idles while it reads. Its phase is data wait
    at redis-py's read ("reading (redis)"), its advice the input pipeline's, and neither it nor
    its host is offered to be stopped, also once its GPU has read idle past
    [idle].host_after."""
    address, _client = redis_server
    name = "redis_fed_loop"
    path = scenario_file(tmp_path, [
        {"name": "fed", "command": program("redis_fed_loop.py", "--server", address)}])
    # STARVED: its GPU works one 1-ms kernel per batch of 128 GETs, 1-2% of the time where a
    # batch takes 60-80 ms, but above the default 5% on a host whose loopback reads a batch in
    # under 20 ms (a CI run: no GPU idle event opened, the wait for host_after ran out)
    daemon = mlcostd("idle-host", interval=1.0, config=STARVED, args=["--simulate", str(path)])
    found = starved_past_host_after(daemon, (name,))
    assert not {r.rule for r in found[name] + found["host"]} & STOPS, rules(found)
    assert not [r for r in found[name] if (r.action or {}).get("kind") == "sigterm"]
    assert consumer_advice(found, name) is None, rules(found)
    [starved] = [r for r in found[name] if r.rule == "dataloader_starvation"]
    top = starved.evidence["top_stacks"][0]
    assert top["reason"].startswith("reading (redis)"), top
    assert "redis_fed_loop.py" in starved.evidence["where"], starved.evidence["where"]
    [loop] = [p for p in daemon.now()["processes"] if p.get("gpus")]
    assert loop["kind"] != "online_inference", loop["kind_evidence"]
    assert daemon.stop() == 0, daemon.log_tail()
