"""A torch.distributed job whose ranks deadlock, under a real mlcostd: found as hung.

workloads/halo_deadlock.py: two gloo ranks (torch.multiprocessing.spawn) that, after three good
steps, both post `dist.recv` before `dist.send` and wait for each other for ever, their GPUs
idle and their CPUs still. Both read `comm` 98-99% of the time, and mlcostd called them
`communication_bound` ("overlap and bucket collectives") with no idle finding at all, for as
long as they hung (probe 109). They get `hung_job`: both pids and the line they wait at, the
cost while it hangs, look first and restart; no SIGTERM (a rank waiting on a peer on another
host looks the same), no overlap advice, and /v1/idle's reason says what the ranks wait for.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from simhost import poll
from test_corpus import pytestmark, scenario_file  # noqa: F401
from test_work_waits_live import QUICK, program


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ranks_deadlocked_in_recv_are_a_hung_job_not_slow_communication(mlcostd, tmp_path):
    """Beside it, host_ring_reduce.py: two ranks whose GPUs idle too and whose stacks sit in
    `dist.all_reduce`, but whose gloo ring moves data on their CPUs (~70% each): not hung.
    (Their socket writes also read as a `checkpoint` phase today, which keeps them off on its
    own; test_hung_jobs checks the CPU alone does.)"""
    path = scenario_file(tmp_path, [
        {"name": "halo", "gpus": 2, "command": program("halo_deadlock.py", str(free_port()))},
        {"name": "ring", "gpus": 2,
         "command": program("host_ring_reduce.py", str(free_port()))}])
    daemon = mlcostd("idle-host", interval=1.0, config=QUICK, args=["--simulate", str(path)])
    state: dict[str, Any] = {}

    def ranks() -> list[dict[str, Any]]:
        # the two spawned ranks hold GPUs 0 and 1; their parent (mp.spawn) holds none
        return [p for p in daemon.now()["processes"]
                if {u["index"] for u in p.get("gpus") or []} & {0, 1}]

    def hung_found() -> bool:
        state["recs"] = recs = daemon.call("recommendations")
        return any(r.rule == "hung_job" for r in recs)

    poll(hung_found, 180, "a hung_job finding for the deadlocked ranks", every=2.0,
         explain=lambda: json.dumps(sorted(r.rule for r in state.get("recs", [])))
         + "\n" + daemon.log_tail())
    [first] = [r for r in state["recs"] if r.rule == "hung_job"]

    def a_round_later() -> bool:  # the ring's ranks, as idle as long, were judged too
        state["recs"] = recs = daemon.call("recommendations")
        return any(r.rule == "hung_job" and r.evidence["window"]["end"]
                   >= first.evidence["window"]["end"] + 10 for r in recs)

    poll(a_round_later, 60, "a later round of the rules", every=2.0,
         explain=lambda: daemon.log_tail())
    pids = sorted(p["pid"] for p in ranks())
    assert len(pids) == 2, ranks()
    [hung] = [r for r in state["recs"] if r.rule == "hung_job"]
    assert sorted(r["pid"] for r in hung.evidence["ranks"]) == pids, hung.evidence
    for rank in hung.evidence["ranks"]:
        assert rank["where"].endswith("halo_deadlock.py:38"), rank  # the recv both wait at
        assert f"pid {rank['pid']} " in hung.summary, hung.summary
    assert "halo_deadlock.py:38" in hung.summary and "recv" in hung.summary, hung.summary
    # its ranks' CPU was read, and is (almost) nothing
    assert all(0 <= r["cpu_cores_while_idle"] < 0.1 for r in hung.evidence["ranks"]), hung.evidence
    assert "/h while it hangs" in hung.summary and hung.savings_per_month > 0, hung.summary
    assert "restart" in hung.summary and "restart the job" in hung.action["text"]
    assert hung.action["kind"] == "copy_commands", hung.action
    assert [f"sudo py-spy dump --pid {pid}" for pid in pids] == [
        c for c in hung.action["commands"] if c.startswith("sudo py-spy dump")]
    assert not [c for c in hung.action["commands"] if "kill" in c], hung.action

    # not slow communication, and nothing stops the ranks or the host on this alone
    # (the ranks' command lines are multiprocessing's spawn_main: findings are told by pid)
    every = [r for r in state["recs"]
             if (r.evidence.get("process") or {}).get("pid") in pids or r.target == "host"]
    said = sorted(r.rule for r in every)
    assert not set(said) & {"communication_bound", "idle_gpu_held", "host_idle"}, said
    assert not [r for r in every if (r.action or {}).get("kind") == "sigterm"], said
    # the ring job moves data: one hung job on the host, the deadlocked one
    assert [r.rule for r in state["recs"]].count("hung_job") == 1, sorted(
        r.rule for r in state["recs"])

    # /v1/idle counts the waiting ranks as work (a multi-node wait looks the same from here)
    # and says what they wait for
    answer = daemon.call("idle", 0.0)
    assert answer["active"] is True, answer
    assert "waiting on its peers" in answer["reason"], answer["reason"]
    assert daemon.stop() == 0, daemon.log_tail()
