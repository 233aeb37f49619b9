"""A worker that takes its jobs with a timeout under a real mlcostd (probe 109 BUG 2's timed
form): a queue consumer, as its untimed twin is; never the SIGTERM nor "stop the host", and GET
/v1/idle agrees.

A program in tests/daemon/workloads written as its user would write it: a render worker whose
network thread reads jobs from its connection to a dispatcher and hands them over a
queue.Queue, the main thread taking them with get(timeout=1) so that it looks at its stop flag
between tries. It woke every second and read as a plain "waiting in Condition.wait": the
SIGTERM, the host's stop, /v1/idle "idle" (its untimed twin, socket_fed_worker.py, was a
consumer: test_parent_and_reader_waits_live.py).
"""

from __future__ import annotations

from simhost import poll
from test_broker_waits_live import check_consumer, consumer_advice, consumers_are_batch_inference
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_parent_and_reader_waits_live import dispatcher, idle_answer_for, past_host_after
from test_work_waits_live import QUICK, STOPS, program, rules

from daemon.analysis.stack_rules import JOB_WAIT


def test_a_worker_taking_jobs_with_a_timed_get_is_a_consumer_as_with_an_untimed_one(
        mlcostd, tmp_path):
    """The worker did its first job and waits for the next in `jobs.get(timeout=1)`, waking
    every second: idle_server's consumer advice at its queue's get (the network thread's socket
    read named), no SIGTERM, no host_idle in a round past the event; GET /v1/idle answers active
    for it; and it takes the next job when one comes."""
    name = "polling_socket_worker"
    with dispatcher() as jobs:
        path = scenario_file(tmp_path, [
            {"name": "render", "command": program("polling_socket_worker.py",
                                                  f"127.0.0.1:{jobs['port']}", "--poll-s", "1")}])
        daemon = mlcostd("idle-host", interval=1.0, config=QUICK,
                         args=["--simulate", str(path)])
        found = past_host_after(daemon, (name,), consumer_advice,
                                "idle_server's consumer advice for the worker")
        assert jobs["done"] == ["done job-1"], jobs["done"]
        check_consumer(found, name, "reads from a socket")
        waits = consumer_advice(found, name).evidence["waits_for_jobs"]
        assert "Condition.wait" in waits["reason"], waits
        assert not [r for r in found["host"] if r.rule in STOPS], rules(found)
        assert not [r for r in found[name] if r.rule in STOPS], rules(found)
        consumers_are_batch_inference(daemon, (name,))
        idle = idle_answer_for(daemon, name)
        assert idle["answer"]["active"] is True, idle["answer"]
        assert any(JOB_WAIT in e or "waits for its next job" in e
                   for e in idle["proc"]["evidence"]), idle["proc"]
        jobs["send"].set()
        poll(lambda: jobs["done"] == ["done job-1", "done job-2"], 60,
             "the worker's answer to its second job", explain=lambda: str(jobs["done"]))
        assert daemon.stop() == 0, daemon.log_tail()
