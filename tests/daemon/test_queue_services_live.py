"""GPU workers on queue services, under a real mlcostd with a real py-spy: each waits for its
next job as a queue consumer between jobs, never an idle process to stop; a stalled training
loop beside them still is one.

Programs in tests/daemon/workloads written as their users would write them. An AWS SQS worker
(boto3 on moto's SQS server, which holds a long poll on an empty queue as SQS does) that
short-polls (WaitTimeSeconds=0) and sleeps 1 s when the queue came back empty shows its sleep
line alone and read "sleeping or waiting": idle_gpu_held's SIGTERM, and dataloader_starvation
from the samples that caught its request. One that long-polls (WaitTimeSeconds=20) already got
idle_server, through the HTTP long-poll rule (nothing came to its socket over a tick).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import rq
from simhost import poll
from test_broker_polls_live import sigterm_for
from test_broker_waits_live import (  # noqa: F401 (redis_server: a fixture the tests take)
    check_consumer,
    consumer_advice,
    consumers_are_batch_inference,
    redis_server,
)
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, WORKLOADS, advice_by_program, program, rules


def sqs_credentials(monkeypatch, tmp_path) -> None:
    """boto3's usual chain, for the daemon and the workers it starts: keys moto takes, no
    config or credentials file of the machine's, no instance metadata."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_sqs_workers_long_and_short_polling_are_consumers_and_a_stalled_loop_is_stopped(
        mlcostd, tmp_path, monkeypatch, moto_endpoint, redis_server):  # noqa: F811
    """Two workers receive from their own empty SQS queues on moto's server: one long-polls
    (WaitTimeSeconds=20: the server holds the request), one short-polls (WaitTimeSeconds=0)
    and sleeps 1 s each time the queue came back empty. Both get idle_server's consumer
    advice, never idle_gpu_held, a SIGTERM or prefetch advice, and neither reads
    online_inference. Beside them a training loop stalled in its sleep (its steps counted in
    a real redis) gets idle_gpu_held with the SIGTERM, and no consumer advice."""
    sqs_credentials(monkeypatch, tmp_path)
    address, _client = redis_server
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint)
    tag = uuid.uuid4().hex[:8]  # the session's moto server: queues of this test's own
    queues = {role: f"{role}-{tag}" for role in ("sqs-long", "sqs-short")}
    for queue in queues.values():
        sqs.create_queue(QueueName=queue)
        sqs.create_queue(QueueName=queue + "-done")
    names = (queues["sqs-long"], queues["sqs-short"], "stalled_train_loop")
    path = scenario_file(tmp_path, [
        {"name": "long", "command": program("sqs_job_worker.py", "--endpoint", moto_endpoint,
                                            "--queue", queues["sqs-long"], "--wait", "20")},
        {"name": "short", "command": program("sqs_job_worker.py", "--endpoint", moto_endpoint,
                                             "--queue", queues["sqs-short"], "--wait", "0")},
        {"name": "stalled", "command": program("stalled_train_loop.py", "--server", address)}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def consumers_advised_and_stalled_loop_flagged() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        return (all(consumer_advice(found, n) for n in names[:2])
                and sigterm_for(found, "stalled_train_loop") is not None)

    poll(consumers_advised_and_stalled_loop_flagged, 240,
         "idle_server's consumer advice for both SQS workers and idle_gpu_held's SIGTERM for "
         "the stalled loop", every=2.0,
         explain=lambda: json.dumps(rules(state.get("recs", {}))) + "\n" + daemon.log_tail())
    found = state["recs"]
    check_consumer(found, queues["sqs-long"], "from an SQS queue it receives from")
    check_consumer(found, queues["sqs-short"], "from an SQS queue it polls")
    assert "sqs.receive_message(" in consumer_advice(found, queues["sqs-short"]).evidence[
        "waits_for_jobs"]["reason"]
    assert consumer_advice(found, "stalled_train_loop") is None, rules(found)
    waiting = sigterm_for(found, "stalled_train_loop").evidence["no_sign_of_work"]["waiting_in"]
    assert waiting and waiting[0]["reason"].startswith("sleeping or waiting"), waiting
    consumers_are_batch_inference(daemon, names[:2])
    assert daemon.stop() == 0, daemon.log_tail()


def rq_worker_command(address: str, queue: str) -> list[str]:
    """`rq worker` (the command RQ installs beside this Python) with rq.SimpleWorker on the
    redis server at `address`, taking jobs of tests/daemon/workloads from `queue`."""
    return [str(Path(sys.executable).parent / "rq"), "worker", "--url", f"redis://{address}/0",
            "--path", str(WORKLOADS), "--worker-class", "rq.SimpleWorker", "--quiet", queue]


def test_rq_workers_between_jobs_are_consumers(
        mlcostd, tmp_path, redis_server):  # noqa: F811 (the fixture imported above)
    """Three RQ workers on a real redis-server: `rq worker --worker-class rq.SimpleWorker`,
    whose first job loads the model on the GPU (one job sent, done), and two worker scripts
    that preload it and run rq.SimpleWorker on an empty queue or RQ's default forking Worker
    on two. Each waits in RQ's BLMOVE (one queue) or BLPOP (two) for its next job and gets
    idle_server's consumer advice, never idle_gpu_held, a SIGTERM or prefetch advice, and
    none reads online_inference."""
    address, client = redis_server
    names = ("rq-cli", "rq-simple", "rq-fork")
    path = scenario_file(tmp_path, [
        {"name": "cli", "command": rq_worker_command(address, "rq-cli")},
        {"name": "simple", "command": program("rq_gpu_worker.py", "--server", address,
                                              "--queues", "rq-simple", "--worker-class",
                                              "simple")},
        {"name": "fork", "command": program("rq_gpu_worker.py", "--server", address,
                                            "--queues", "rq-fork", "rq-fork-low",
                                            "--worker-class", "fork")}])
    job = rq.Queue("rq-cli", connection=client).enqueue("rq_gpu_worker.upscale", "s3://img/1.png")
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def advised() -> bool:
        state["recs"] = found = advice_by_program(daemon, names)
        state["job"] = job.get_status(refresh=True)
        return state["job"] == "finished" and all(consumer_advice(found, n) for n in names)

    poll(advised, 240, "idle_server's consumer advice for the three RQ workers, the job done",
         every=2.0, explain=lambda: json.dumps(rules(state.get("recs", {})))
         + f"\njob: {state.get('job')}\n" + daemon.log_tail())
    found = state["recs"]
    for name in names[:2]:
        check_consumer(found, name, "redis list (BLMOVE)")  # one queue: RQ's BLMOVE
    check_consumer(found, "rq-fork", "redis list (BLPOP)")  # two: BLPOP on both
    assert job.return_value() == {"image": "s3://img/1.png", "scale": 4}
    consumers_are_batch_inference(daemon, names)
    assert daemon.stop() == 0, daemon.log_tail()
