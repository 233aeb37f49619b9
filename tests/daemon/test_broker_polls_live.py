"""GPU workers that wait for jobs in ways their stacks hardly show, under a real mlcostd with
a real py-spy and a real redis-server: each is a queue consumer between jobs, never an idle
process to stop; a stalled training loop beside them still is one.

Programs in tests/daemon/workloads written as their users would write them. A worker polling
a redis list (LPOP or RPOP, then a sleep when it came back empty) shows its sleep line alone
and read "sleeping or waiting"; a redis.asyncio worker awaiting BLPOP shows its event loop's
select and read "waiting in select"; a Celery worker (`--pool=solo`, or a prefork pool's
process) shows kombu's poll or billiard's pipe read and read "main thread blocked with the GPU
idle": each got idle_gpu_held's SIGTERM.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from simhost import poll
from test_broker_waits_live import (  # noqa: F401 (redis_server: a fixture the tests take)
    JOB_EVERY_S,
    check_consumer,
    consumer_advice,
    consumers_are_batch_inference,
    feeding,
    redis_server,
)
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, WORKLOADS, advice_by_program, program, rules


def sigterm_for(found: dict[str, list[Any]], name: str) -> Any | None:
    return next((r for r in found[name] if r.rule == "idle_gpu_held"
                 and (r.action or {}).get("kind") == "sigterm"), None)


def test_workers_polling_a_redis_list_are_consumers_and_a_stalled_loop_is_still_stopped(
        mlcostd, tmp_path, redis_server):  # noqa: F811 (the fixture imported above)
    """Two workers poll a real redis-server's lists, sleeping 1 s when a take came back empty:
    one LPOPs an empty list, one RPOPs a list a producer pushes a job to every JOB_EVERY_S.
    Both get idle_server's consumer advice at their sleep, never idle_gpu_held, a SIGTERM or
    prefetch advice, and neither reads online_inference; the fed one did its jobs. Beside
    them a training loop that counts its steps in the same redis and stalls, sleeping in its
    loop, gets idle_gpu_held with the SIGTERM, and no consumer advice."""
    address, client = redis_server
    names = ("poll-empty", "poll-fed", "stalled_train_loop")
    path = scenario_file(tmp_path, [
        {"name": "empty", "command": program("redis_polling_worker.py", "--server", address,
                                             "--queue", "poll-empty", "--pop", "lpop")},
        {"name": "fed", "command": program("redis_polling_worker.py", "--server", address,
                                           "--queue", "poll-fed", "--pop", "rpop")},
        {"name": "stalled", "command": program("stalled_train_loop.py", "--server", address)}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def consumers_advised_and_stalled_loop_flagged() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        state["done"] = client.llen("poll-fed:done")
        return (state["done"] >= 2 and all(consumer_advice(found, n) for n in names[:2])
                and sigterm_for(found, "stalled_train_loop") is not None)

    with feeding(lambda n: client.lpush("poll-fed", json.dumps(
            {"id": n, "image": f"s3://images/{n}.jpg"}))):
        poll(consumers_advised_and_stalled_loop_flagged, 240,
             "idle_server's consumer advice for both polling workers (the fed one with 2 jobs "
             "done) and idle_gpu_held's SIGTERM for the stalled loop", every=2.0,
             explain=lambda: json.dumps(rules(state.get("recs", {})))
             + f"\njobs done: {state.get('done')}\n" + daemon.log_tail())
    found = state["recs"]
    for name in names[:2]:
        check_consumer(found, name, "from a redis queue it polls")
    assert "r.lpop(args.queue)" in consumer_advice(found, "poll-empty").evidence[
        "waits_for_jobs"]["reason"]
    stalled = sigterm_for(found, "stalled_train_loop")
    assert consumer_advice(found, "stalled_train_loop") is None, rules(found)
    waiting = stalled.evidence["no_sign_of_work"]["waiting_in"]
    assert waiting and waiting[0]["reason"].startswith("sleeping or waiting"), waiting
    consumers_are_batch_inference(daemon, names[:2])
    assert daemon.stop() == 0, daemon.log_tail()


def test_a_redis_asyncio_worker_awaiting_blpop_is_a_consumer(
        mlcostd, tmp_path, redis_server):  # noqa: F811 (the fixture imported above)
    """A worker on asyncio awaits redis.asyncio's BLPOP on an empty list of a real
    redis-server. py-spy shows its event loop's select and no coroutine; its connection to
    redis is open: idle_server's consumer advice at the event loop, never idle_gpu_held, a
    SIGTERM or prefetch advice, and not online_inference."""
    address, _client = redis_server
    name = "redis_async_worker"
    path = scenario_file(tmp_path, [
        {"name": "async", "command": program("redis_async_worker.py", "--server", address)}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def advised() -> bool:
        state["recs"] = found = advice_by_program(daemon, (name,))
        return consumer_advice(found, name) is not None

    poll(advised, 240, "idle_server's consumer advice for the redis.asyncio worker", every=2.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + daemon.log_tail())
    found = state["recs"]
    check_consumer(found, name, "in its asyncio event loop")
    assert "TCP connection" in consumer_advice(found, name).evidence["waits_for_jobs"]["reason"]
    consumers_are_batch_inference(daemon, (name,))
    assert daemon.stop() == 0, daemon.log_tail()


def celery_worker(address: str, hostname: str, *pool: str) -> list[str]:
    """`celery worker` of tests/daemon/workloads/celery_gpu_app.py on the redis broker at
    `address`, named `hostname` (its command line says it: the test finds it by that), with
    its own queue."""
    return [sys.executable, "-m", "celery", "-b", f"redis://{address}/0",
            "--workdir", str(WORKLOADS), "-A", "celery_gpu_app", "worker", *pool,
            "-n", hostname, "-Q", hostname.split("@")[0], "--loglevel=warning",
            "--without-heartbeat", "--without-mingle", "--without-gossip"]


def test_celery_workers_between_tasks_are_consumers(
        mlcostd, tmp_path, redis_server):  # noqa: F811 (the fixture imported above)
    """Two Celery workers of one app on a real redis broker, no task sent: one with the solo
    pool (the worker holds the model's GPU and waits in its consumer's event loop), one with
    a prefork pool of one process (that process holds the GPU and waits for its worker to hand
    it a task). Each GPU holder gets idle_server's consumer advice, never idle_gpu_held, a
    SIGTERM or prefetch advice, and neither reads online_inference."""
    address, _client = redis_server
    names = ("solo@gpu", "prefork@gpu")
    path = scenario_file(tmp_path, [
        {"name": "solo", "command": celery_worker(address, "solo@gpu", "--pool=solo")},
        {"name": "prefork", "command": celery_worker(address, "prefork@gpu", "--pool=prefork",
                                                     "--concurrency=1")}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def advised() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        return all(consumer_advice(found, n) for n in names)

    poll(advised, 240, "idle_server's consumer advice for both Celery workers", every=2.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + daemon.log_tail())
    found = state["recs"]
    check_consumer(found, "solo@gpu", "from a Celery broker")
    check_consumer(found, "prefork@gpu", "from its Celery prefork pool")
    gpu_holders = [p for p in daemon.now()["processes"] if p.get("gpus")]
    assert len(gpu_holders) == 2, gpu_holders  # the solo worker, the prefork pool's process
    consumers_are_batch_inference(daemon, names)
    assert daemon.stop() == 0, daemon.log_tail()
