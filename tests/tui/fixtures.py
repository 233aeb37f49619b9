"""Fixed data for the TUI tests: one /v1/now document with costs, phases and recommendations."""

from __future__ import annotations

from daemon.wire import Now, process_key
from mlcost_tui.messages import HostSnapshot

TS = 1_700_000_000.0
GIB = 1 << 30
# The GPU host's CPU, memory and load as its daemon sends them: the GPU panel's title.
HOST_USAGE = {"cpu_percent": 23.0, "cpus": 16, "memory_used_bytes": 5 * GIB,
              "memory_total_bytes": 16 * GIB, "load": [1.2, 0.9, 0.7]}


def now_document(processes: int = 4, gpus: int = 4, owners: bool = False) -> dict:
    gpu_docs = [{"index": i, "uuid": f"GPU-{i:04d}", "name": "NVIDIA A100-SXM4-40GB",
                 "status": "ok", "utilization": [100.0, 30.0, 0.0, 87.0][i % 4],
                 "busy": i % 4 != 2,  # the daemon's verdict ([idle].utilization)
                 "sm_activity": None, "memory_used_bytes": (10 + i) * GIB,
                 "memory_total_bytes": 40 * GIB, "power_watts": 100.0 + 40 * i,
                 "temperature_c": 40 + 12 * (i % 4)} for i in range(gpus)]
    procs = []
    for i in range(processes):
        pid = 1000 + i
        parent = 1000 if i >= 4 else 1
        procs.append({
            "key": process_key(pid, TS + i), "pid": pid, "start_time": TS + i, "ppid": parent,
            "user": ["alice", "bob", "carol", "dave"][i % 4],
            "command": f"/usr/bin/python3 train_{i}.py --epochs 10",
            "gpus": [{"index": i % gpus, "memory_bytes": 8 * GIB, "sm_share": 10.0 * (i % 10)}]
            if i < 4 else [],
            "gpu_memory_bytes": 8 * GIB if i < 4 else None,
            "sm_share": 10.0 * (i % 10) if i < 4 else None, "cpu_percent": 5.0 * (i % 7),
            "rss_bytes": 2 * GIB, "io_wait_percent": [0.0, 45.0, 12.0, 0.0][i % 4],
            "read_bytes_per_s": 0.0, "state": "S",
            "burn_per_hour": 4.1 - 0.5 * (i % 4) if i < 4 else 0.0, "cost": 1.5 + i,
            "phase": ["compute", "data_wait", "checkpoint", "idle"][i % 4],
            "phases": {"compute": {"share": 0.6, "seconds": 600.0, "top_stacks": []},
                       "data_wait": {"share": 0.3, "seconds": 300.0, "top_stacks": [
                           {"file": "/srv/train.py", "line": 42, "function": "train_step",
                            "samples": 12, "frames": ["/srv/train.py:42 train_step",
                                                      "torch/utils/data/dataloader.py:631 "
                                                      "__next__"]}]},
                       "checkpoint": {"share": 0.1, "seconds": 100.0, "top_stacks": []}},
            "stack_status": "ok",
        })
        if owners:  # who owns it: a pod, a Slurm job, a unit, nobody (daemon.sources.owners)
            procs[-1]["owner"] = [
                {"pod_uid": "8e3b1a2c-4f5d-4e6a-9b7c-1d2e3f4a5b6c", "pod": "trainer-0",
                 "namespace": "ml"}, {"slurm_job": "4242", "slurm_step": "0"},
                {"systemd_unit": "vllm.service"}, {}][i % 4]
            procs[-1]["workload"] = ["ml/trainer-0", "slurm 4242", "vllm.service", None][i % 4]
    return {
        "version": 1, "ts": TS, "tick": 42,
        "host": {"hostname": "gpu-box-1", "simulated": "demo", "nvml_status": "ok",
                 "instance": {"provider": "aws", "type": "p4d.24xlarge", "region": "us-east-1",
                              "lifecycle": "on-demand"}},
        "gpus": gpu_docs, "processes": procs, "host_usage": dict(HOST_USAGE),
        "burn": {"total_per_hour": 32.77, "wasted_per_hour": 15.69, "idle_per_hour": 4.1,
                 "price_per_gpu": 4.1, "price_source": "catalog: aws on-demand",
                 "price": {"per_hour": 32.77, "source": "catalog: aws on-demand",
                           "lifecycle": "on-demand", "instance_type": "p4d.24xlarge"},
                 "gpus": [{"index": i, "price_per_hour": 4.1,
                           "wasted_per_hour": 4.1 * (1 - g["utilization"] / 100)}
                          for i, g in enumerate(gpu_docs)]},
        "cost": {"by_day": {"2023-11-14": 123.45}},
        "events": [{"id": "e1", "kind": "gpu_idle", "target": "gpu 2", "started_at": TS - 900,
                    "ended_at": None, "cost_so_far": 1.02, "detail": "GPU 2 idle for 15 min"}],
        "recommendations": [
            {"id": "rec-idle", "rule": "idle_gpu_held", "target": process_key(1003, TS + 3),
             "summary": "pid 1003 (dave) holds GPU 3 idle for 15 min, burning $2.60/h",
             "savings_per_month": 1898.0, "method": "$2.60/h x 730 h/month",
             "evidence": {"idle_seconds": 900.0, "memory_peak_bytes": 8 * GIB},
             "action": {"kind": "sigterm", "pid": 1003, "start_time": TS + 3,
                        "text": "send SIGTERM to pid 1003 after confirmation"},
             "combined_savings_per_month": 1898.0, "savings_order": 1,
             "savings_scope": {"frees": [3]}, "thresholds_shortened": True,
             "shortened_thresholds": {"idle_held_min_s": {"value": 60.0, "default": 600.0}}},
            {"id": "rec-loader", "rule": "data_loader_starvation", "target": process_key(1001, TS + 1),
             "summary": "train_1 spends 30% of its time waiting for data — /srv/train.py:42",
             "savings_per_month": 897.9, "method": "$4.10/h x 30% x 730 h/month",
             "evidence": {"share": 0.3, "top_stacks": [
                 {"file": "/srv/train.py", "line": 42, "function": "train_step"}]},
             "action": {"kind": "show_patch", "file": "/srv/train.py",
                        "patch": "-DataLoader(ds)\n+DataLoader(ds, num_workers=8, "
                                 "pin_memory=True)"},
             "combined_savings_per_month": 897.9, "savings_order": 2,
             "savings_scope": {"gpus": [1]}},
        ],
        "savings": {"potential_per_month": 2795.9, "bill_per_month": 23922.1,
                    "standalone_sum_per_month": 2795.9, "order": "stop an idle host, ..."},
    }


def snapshot(processes: int = 4, gpus: int = 4, target: str = "unix:/test.sock") -> HostSnapshot:
    return HostSnapshot(target, Now.from_dict(now_document(processes, gpus)), None, 0.01, TS)


class StubClient:
    """A Client stand-in for the tests that need fixed answers (actions, snapshots)."""

    name = "unix:/stub.sock"

    def __init__(self) -> None:
        from daemon.wire import ActionResult

        self.ActionResult = ActionResult
        self.applied: list[tuple[str, bool]] = []
        self.snoozed: list[str] = []
        self.unsnoozed: list[str] = []

    async def now(self):
        return Now.from_dict(now_document())

    async def phases(self, key: str, since_s: float = 1800):
        from daemon.client import ApiError

        raise ApiError(404, "this mlcostd does not record phases yet (no stack sampling)")

    async def compare_previous(self, target: str):
        from daemon.client import ApiError

        raise ApiError(404, f"the store holds 1 run(s) of job {target!r}: nothing to compare")

    async def process_history(self, key: str, metric: str = "sm_share", since_s: float = 3600,
                              points: int = 300):
        from daemon.wire import History, Point

        return History(metric, f"process:{key}", since_s,
                       tuple(Point(TS - 300 + 5 * i, 40.0, 40.0, 40.0) for i in range(60)))

    async def apply(self, rec_id: str, dry_run: bool = True, timeout_s: float = 30.0):
        self.applied.append((rec_id, dry_run))
        if rec_id == "rec-idle":
            return self.ActionResult(rec_id, "sigterm", dry_run, not dry_run,
                                     "would send SIGTERM to pid 1003" if dry_run
                                     else "sent SIGTERM to pid 1003", steps=("kill -TERM 1003",))
        return self.ActionResult(rec_id, "show_patch", dry_run, True, "a patch",
                                 patch="+DataLoader(ds, num_workers=8)")

    async def snooze(self, rec_id: str, hours: float = 24) -> float:
        self.snoozed.append(rec_id)
        return TS + hours * 3600

    async def unsnooze(self, rec_id: str) -> None:
        self.unsnoozed.append(rec_id)

    async def snoozed_recommendations(self):
        """Those snoozed and not brought back, as the daemon lists them (until a day on)."""
        from daemon.wire import Recommendation

        known = {r["id"]: r for r in now_document()["recommendations"]}
        hidden = dict.fromkeys(i for i in self.snoozed
                               if self.snoozed.count(i) > self.unsnoozed.count(i))
        return [Recommendation.from_dict({**known.get(i, {"id": i, "summary": f"advice {i}"}),
                                          "snoozed_until": TS + 24 * 3600}) for i in hidden]

    async def close(self) -> None:
        pass


def changed_document(step: int) -> dict:
    """now_document after `step` more polls: values changed, rows added (step 1: two workers of
    pid 1000 appear) and removed (step 2: pid 1001 exits, recommendation rec-loader goes)."""
    doc = now_document(processes=6 if step >= 1 else 4)
    doc["tick"] = 42 + step
    doc["ts"] = TS + step
    for gpu in doc["gpus"]:
        gpu["utilization"] = (gpu["utilization"] + 7 * step) % 101
        gpu["busy"] = gpu["utilization"] >= 5.0  # as a daemon with [idle].utilization = 5 says
        gpu["temperature_c"] += step
    for proc in doc["processes"]:
        proc["cpu_percent"] += 11.0 * step
        proc["burn_per_hour"] += 0.25 * step
        proc["cost"] += step
    if step >= 2:
        doc["processes"] = [p for p in doc["processes"] if p["pid"] != 1001]
        doc["recommendations"] = [r for r in doc["recommendations"] if r["id"] != "rec-loader"]
        doc["processes"][0]["phase"] = "checkpoint"
    doc["burn"]["total_per_hour"] += step
    return doc


def changed_snapshot(step: int) -> HostSnapshot:
    return HostSnapshot("unix:/test.sock", Now.from_dict(changed_document(step)), None, 0.01,
                        TS + step)


class ScriptedDaemon:
    """A client whose /v1/now answers are given in turn (a Now, or a ClientError to raise)."""

    def __init__(self, name: str, *answers: object) -> None:
        self.name, self.answers = name, list(answers)

    async def now(self) -> Now:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, Now)
        return answer

    async def close(self) -> None:
        pass
