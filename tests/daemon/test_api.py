"""The HTTP API: every endpoint over a real unix socket (and TCP with a token), through the
real client, with bad requests, permissions and the actions behind apply."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from daemon.api import actions
from daemon.api.server import MAX_BODY_BYTES, ApiError, ApiServer, read_token
from daemon.client import ApiError as ClientApiError
from daemon.client import Client, DaemonUnavailable
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from daemon.wire import process_key

T0 = time.time() - 120


class FakeHealth:
    def as_dict(self) -> dict:
        return {"ticks_written": 3}


class FakeStore:
    health = FakeHealth()


class FakeNvml:
    status = "ok"


class FakeDaemon:
    """The parts of Daemon the API uses, with recommendations fixed by the test."""

    def __init__(self, db: Path, recommendations: list[dict] | None = None,
                 allow_actions: bool = False) -> None:
        self.db = db
        self.tick = 3
        self.last_sample = object()
        self.host = {"hostname": "testhost"}
        self.store = FakeStore()
        self.nvml = FakeNvml()
        self.recs = recommendations or []
        self.allow_actions = allow_actions
        self.snoozed: dict[str, float] = {}

    def now(self) -> dict:
        return {"version": 1, "host": self.host, "ts": time.time(), "tick": self.tick,
                "gpus": [{"index": 0, "uuid": "GPU-0", "name": "A10G", "utilization": 50.0}],
                "processes": [], "recommendations": self.recs,
                "burn": {"price_per_gpu": 2.0, "total_per_hour": 2.0}}

    def apply_recommendation(self, rec_id: str, dry_run: bool = True) -> dict | None:
        rec = next((r for r in self.recs if r["id"] == rec_id), None)
        if rec is None:
            return None
        return actions.apply(rec, dry_run, allow_actions=self.allow_actions).as_dict()

    def snooze_recommendation(self, rec_id: str, hours: float) -> float | None:
        if not any(r["id"] == rec_id for r in self.recs):
            return None
        self.snoozed[rec_id] = time.time() + hours * 3600
        return self.snoozed[rec_id]


def write_store(db: Path) -> None:
    store = Store(str(db))
    for i in range(30):
        store.write(Sample(
            ts=T0 + i, tick=i + 1,
            gpus=(GpuSample(0, "GPU-0", "A10G", utilization=float(i % 2 * 100),
                            memory_used_bytes=1 << 30, memory_total_bytes=24 << 30),),
            processes=(ProcessSample(4242, 1000.5, 1, "alice", "python train.py",
                                     gpus=(GpuUse(0, 1 << 30, 40.0),), cpu_seconds=i),)))
    store.close()


COPY_REC = {"id": "rec-copy", "rule": "host_idle", "target": "host", "summary": "stop it",
            "savings_per_month": 100.0, "method": "m", "evidence": {},
            "action": {"kind": "copy_commands", "commands": ["sudo shutdown -h now"]}}


def run(coro):
    return asyncio.run(coro)


async def serve(daemon, tmp_path: Path, **kwargs) -> ApiServer:
    server = ApiServer(daemon, tmp_path / "run" / "mlcostd.sock", **kwargs)
    await server.start()
    return server


async def raw(server: ApiServer, method: str, path: str, data: bytes | None = None,
              headers: dict | None = None) -> tuple[int, dict]:
    connector = aiohttp.UnixConnector(path=str(server.socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.request(method, "http://x" + path, data=data,
                                   headers=headers or {}) as response:
            return response.status, await response.json()


def test_health_now_history_over_the_unix_socket(tmp_path):
    db = tmp_path / "s.db"
    write_store(db)

    async def main():
        server = await serve(FakeDaemon(db), tmp_path)
        client = Client(f"unix:{server.socket_path}")
        try:
            health = await client.health()
            assert health.ok and health.tick == 3 and health.hostname == "testhost"
            assert health.store == {"ticks_written": 3}
            now = await client.now()
            assert now.gpus[0].utilization == 50.0
            history = await client.gpu_history(0, "utilization", since_s=600, points=10)
            assert history.points and all(0 <= p.avg <= 100 for p in history.points)
            proc = await client.process_history(process_key(4242, 1000.5), "sm_share", 600, 10)
            assert proc.points and proc.points[-1].avg == pytest.approx(40.0)
            wasted = await client.host_history("wasted_per_hour", 600, 5)
            assert wasted.points and 0 <= wasted.points[0].avg <= 2.0
            mode = stat.S_IMODE(os.stat(server.socket_path).st_mode)
            assert mode == 0o660
            assert stat.S_IMODE(os.stat(server.socket_path.parent).st_mode) == 0o700
        finally:
            await client.close()
            await server.stop()
        assert not server.socket_path.exists()

    run(main())


@pytest.mark.parametrize("query, message", [
    ("metric=bogus&gpu=0", "not a GPU metric"),
    ("metric=utilization", "gpu=INDEX"),
    ("metric=utilization&gpu=x", "not a GPU index"),
    ("metric=utilization&gpu=0&since=abc", "not a number"),
    ("metric=utilization&gpu=0&since=-5", "between"),
    ("metric=utilization&gpu=0&points=999999", "between"),
    ("metric=sm_share&process=notakey", "PID:START_TIME"),
    ("metric=utilization&process=1:2.0", "not a process metric"),
])
def test_history_rejects_bad_query_params(tmp_path, query, message):
    async def main():
        server = await serve(FakeDaemon(tmp_path / "none.db"), tmp_path)
        try:
            status, body = await raw(server, "GET", f"/v1/history?{query}")
        finally:
            await server.stop()
        assert status == 400 and message in body["error"]

    run(main())


def test_unknown_route_wrong_method_and_phases_without_stack_sampling(tmp_path):
    async def main():
        server = await serve(FakeDaemon(tmp_path / "none.db"), tmp_path)
        try:
            assert (await raw(server, "GET", "/v1/nope"))[0] == 404
            status, body = await raw(server, "GET", "/nope")
            assert status == 404 and "no such endpoint" in body["error"]
            status, body = await raw(server, "DELETE", "/v1/now")
            assert status == 405 and "not allowed" in body["error"]
            status, body = await raw(server, "GET", "/v1/processes/1:2.00/phases")
            assert status == 404 and "phases" in body["error"]
            status, body = await raw(server, "GET", "/v1/processes/bad/phases")
            assert status == 400
        finally:
            await server.stop()

    run(main())


def test_phases_from_the_daemon(tmp_path):
    daemon = FakeDaemon(tmp_path / "none.db")
    daemon.phases_for = lambda key, since: {"phases": {"compute": {"share": 1.0}},
                                            "stack_status": "ok"} if key == "1:2.00" else None

    async def main():
        server = await serve(daemon, tmp_path)
        client = Client(f"unix:{server.socket_path}")
        try:
            phases = await client.phases("1:2.00", 60)
            assert phases.phases["compute"]["share"] == 1.0 and phases.stack_status == "ok"
            with pytest.raises(ClientApiError) as info:
                await client.phases("3:4.00")
            assert info.value.status == 404
        finally:
            await client.close()
            await server.stop()

    run(main())


def test_recommendations_apply_and_snooze(tmp_path):
    daemon = FakeDaemon(tmp_path / "none.db", [COPY_REC])

    async def main():
        server = await serve(daemon, tmp_path)
        client = Client(f"unix:{server.socket_path}")
        try:
            recs = await client.recommendations()
            assert [r.id for r in recs] == ["rec-copy"]
            result = await client.apply("rec-copy")
            assert result.dry_run and result.commands == ("sudo shutdown -h now",)
            with pytest.raises(ClientApiError) as info:
                await client.apply("nope")
            assert info.value.status == 404 and "no active recommendation" in info.value.message
            status, body = await raw(server, "POST", "/v1/recommendations/rec-copy/apply",
                                     b"{not json")
            assert status == 400 and "not valid JSON" in body["error"]
            status, body = await raw(server, "POST", "/v1/recommendations/rec-copy/apply",
                                     b"[1]")
            assert status == 400 and "JSON object" in body["error"]
            status, body = await raw(server, "POST", "/v1/recommendations/rec-copy/apply",
                                     b'{"dry_run": "yes"}')
            assert status == 400
            status, body = await raw(server, "POST", "/v1/recommendations/rec-copy/apply",
                                     b'{"x": "' + b"a" * (MAX_BODY_BYTES + 10) + b'"}')
            assert status == 413 and "too large" in body["error"]
            status, body = await raw(server, "POST", "/v1/recommendations/rec-copy/snooze",
                                     b'{"hours": -1}')
            assert status == 400
            with pytest.raises(ClientApiError):
                await client.snooze("nope", 1)
            until = await client.snooze("rec-copy", 2)
            assert until > time.time() + 7000
            assert await client.recommendations() == []
        finally:
            await client.close()
            await server.stop()

    run(main())


def sigterm_rec(proc: subprocess.Popen) -> dict:
    import psutil

    return {"id": "rec-kill", "rule": "idle_gpu_held", "target": "x", "summary": "idle",
            "savings_per_month": 10.0, "method": "m", "evidence": {},
            "action": {"kind": "sigterm", "pid": proc.pid,
                       "start_time": psutil.Process(proc.pid).create_time()}}


def test_sigterm_needs_allow_actions_and_the_same_process(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rec = sigterm_rec(proc)
        dry = actions.apply(rec, True)
        assert not dry.done and f"SIGTERM to pid {proc.pid}" in dry.message
        with pytest.raises(actions.ActionError) as info:
            actions.apply(rec, False, allow_actions=False)
        assert info.value.status == 403
        stale = dict(rec, action=dict(rec["action"], start_time=1.0))
        with pytest.raises(actions.ActionError) as info:
            actions.apply(stale, False, allow_actions=True)
        assert info.value.status == 410 and proc.poll() is None

        async def main():
            server = await serve(FakeDaemon(tmp_path / "none.db", [rec], allow_actions=True),
                                 tmp_path)
            client = Client(f"unix:{server.socket_path}")
            try:
                result = await client.apply("rec-kill", dry_run=False)
                assert result.done and "sent SIGTERM" in result.message
            finally:
                await client.close()
                await server.stop()

        run(main())
        assert proc.wait(5) == -15
    finally:
        proc.kill()
        proc.wait()


def test_tcp_requires_the_bearer_token(tmp_path):
    token_file = tmp_path / "token"

    async def main():
        server = await serve(FakeDaemon(tmp_path / "none.db"), tmp_path,
                             listen="127.0.0.1:0", token_file=token_file)
        base = f"http://127.0.0.1:{server.tcp_port}"
        try:
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            token = token_file.read_text().strip()
            with pytest.raises(ClientApiError) as info:
                await Client(base).health()
            assert info.value.status == 401
            wrong = Client(base, token="x" * 40)
            with pytest.raises(ClientApiError) as info:
                await wrong.health()
            assert info.value.status == 401 and "bearer token" in info.value.message
            await wrong.close()
            good = Client(base, token=token)
            assert (await good.health()).ok
            await good.close()
            # the unix socket needs no token: its permissions are the guard
            assert (await raw(server, "GET", "/v1/health"))[0] == 200
        finally:
            await server.stop()

    run(main())


def test_token_file_readable_by_others_is_refused(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("a" * 40)
    token_file.chmod(0o644)
    with pytest.raises(ApiError, match="chmod 600"):
        read_token(token_file)
    token_file.chmod(0o600)
    assert read_token(token_file) == "a" * 40

    async def main():
        token_file.chmod(0o640)
        with pytest.raises(ApiError):
            await serve(FakeDaemon(tmp_path / "none.db"), tmp_path, listen="127.0.0.1:0",
                        token_file=token_file)

    run(main())


def test_no_daemon_is_a_clear_error(tmp_path):
    async def main():
        client = Client(f"unix:{tmp_path}/missing.sock")
        with pytest.raises(DaemonUnavailable, match="no mlcostd at unix:.*mlcost-top --demo"):
            await client.now()
        await client.close()

    run(main())


def test_a_live_socket_is_not_taken_over(tmp_path):
    async def main():
        first = await serve(FakeDaemon(tmp_path / "none.db"), tmp_path)
        try:
            with pytest.raises(ApiError, match="another mlcostd"):
                await serve(FakeDaemon(tmp_path / "none.db"), tmp_path)
        finally:
            await first.stop()
        # a stale socket file (daemon died) is replaced
        stale = tmp_path / "run" / "mlcostd.sock"
        stale.touch()
        again = await serve(FakeDaemon(tmp_path / "none.db"), tmp_path)
        await again.stop()

    run(main())


def test_resize_dry_run_then_stop_modify_start_on_moto():
    import boto3
    from moto import server as moto_server  # moto[server] is in the test extra

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

        def ec2(region: str):
            return boto3.client("ec2", region_name=region, endpoint_url=f"http://{host}:{port}",
                                **env)

        client = ec2("us-east-1")
        image = client.describe_images()["Images"][0]["ImageId"]
        instance = client.run_instances(ImageId=image, MinCount=1, MaxCount=1,
                                        InstanceType="p4d.24xlarge")["Instances"][0]
        rec = {"id": "rec-resize", "action": {
            "kind": "resize", "provider": "aws", "region": "us-east-1",
            "from": "p4d.24xlarge", "to": "g5.12xlarge", "instance_id": instance["InstanceId"]}}
        dry = actions.apply(rec, True, ec2_factory=ec2)
        assert not dry.done and "would stop" in dry.message and len(dry.steps) == 4
        with pytest.raises(actions.ActionError):
            actions.apply(rec, False, allow_actions=False, ec2_factory=ec2)
        done = actions.apply(rec, False, allow_actions=True, ec2_factory=ec2)
        assert done.done
        described = client.describe_instances(InstanceIds=[instance["InstanceId"]])
        now = described["Reservations"][0]["Instances"][0]
        assert now["InstanceType"] == "g5.12xlarge"
    finally:
        server.stop()
