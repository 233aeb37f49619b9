"""The HTTP API of a real mlcostd (daemon.runtime.daemon.Daemon recording a simulated host, its
aiohttp server on a real unix socket and on TCP with a token), through the real client: every
endpoint, bad requests, permissions, and the actions behind apply and snooze."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil
import pytest
from simhost import poll

from daemon.api import actions
from daemon.api.server import MAX_BODY_BYTES, ApiError, read_token
from daemon.client import ApiError as ClientApiError
from daemon.client import Client, ClientError, DaemonUnavailable, read_token_file
from daemon.sources.sample import GpuSample, GpuUse, ProcessSample, Sample
from daemon.store.writer import Store
from daemon.wire import TOKEN_MAX_BYTES, TOKEN_MIN_CHARS, ActionResult, process_key, signal_command

T0 = time.time() - 120
RECORDED = process_key(4242, 1000.5)  # a process of the history written before the daemon ran
# idle-host's notebook holds its GPU and does nothing: with these (the shortest allowed) waits
# the daemon advises host_idle (copy the stop commands) and idle_gpu_held (SIGTERM) within ~15 s.
IDLE_CONFIG = {
    "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"},
    "cost": {"evaluate_every": "5s"},
    "api": {"allow_actions": True},  # the last test stops the notebook through the API
}
ADVICE_TIMEOUT_S = 120.0


def write_store(folder: Path) -> None:
    """30 s of history, two minutes ago, in the store the daemon then goes on recording into."""
    store = Store(str(folder / "mlcost.db"))
    for i in range(30):
        store.write(Sample(
            ts=T0 + i, tick=i + 1,
            gpus=(GpuSample(0, "GPU-0", "A10G", utilization=float(i % 2 * 100),
                            memory_used_bytes=1 << 30, memory_total_bytes=24 << 30),),
            processes=(ProcessSample(4242, 1000.5, 1, "alice", "python train.py",
                                     gpus=(GpuUse(0, 1 << 30, 40.0),), cpu_seconds=i),)))
    store.close()


@pytest.fixture(scope="module")
def daemon(mlcostd):
    """idle-host recorded by a real mlcostd on a unix socket and on TCP (token beside the
    socket), going on from a store that already holds some history. Actions are allowed: the
    test after the notebook's own sends it SIGTERM through apply."""
    return mlcostd("idle-host", interval=0.5, config=IDLE_CONFIG, prepare=write_store,
                   args=["--listen", "127.0.0.1:0"])


def advice(daemon, rule: str) -> dict:
    """The daemon's active recommendation from `rule`, once it has one."""
    def find():
        recs = daemon.now().get("recommendations") or []
        return next((r for r in recs if r["rule"] == rule), None)

    return poll(find, ADVICE_TIMEOUT_S, f"a {rule} recommendation from mlcostd", every=0.5,
                explain=daemon.log_tail)


def run(coro):
    return asyncio.run(coro)


async def raw(socket_path: Path, method: str, path: str, data: bytes | None = None,
              headers: dict | None = None) -> tuple[int, dict]:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.request(method, "http://x" + path, data=data,
                                   headers=headers or {}) as response:
            return response.status, await response.json()


def test_health_now_history_over_the_unix_socket(daemon):
    # the notebook loads its model first (the GPU busy), then does nothing
    poll(lambda: daemon.now()["gpus"][0]["utilization"] < 5, ADVICE_TIMEOUT_S,
         "the notebook's GPU idle", every=0.5, explain=daemon.log_tail)

    async def main():
        async with daemon.client() as client:
            health = await client.health()
            assert health.ok and health.tick > 30  # numbered on from the history
            assert health.hostname == socket.gethostname()
            assert health.store["ticks_written"] >= 1
            now = await client.now()
            assert now.gpus[0].uuid.startswith("GPU-") and now.gpus[0].utilization < 5
            history = await client.gpu_history(0, "utilization", since_s=600, points=10)
            assert history.points and all(0 <= p.avg <= 100 for p in history.points)
            # the history written before the daemon started: 40 % SM share
            proc = await client.process_history(RECORDED, "sm_share", 600, 10)
            assert proc.points and proc.points[-1].avg == pytest.approx(40.0)
            wasted = await client.host_history("wasted_per_hour", 600, 5)
            price = (await client.now_raw())["burn"]["price_per_gpu"]
            assert price > 0
            assert wasted.points and all(0 <= p.avg <= price + 1e-9 for p in wasted.points)
            return price

    price = run(main())

    def idle_wasted():  # an idle GPU wastes all of its price
        recent = daemon.call("host_history", "wasted_per_hour", 2, 1).points
        return recent and recent[-1].avg == pytest.approx(price, rel=0.01)

    poll(idle_wasted, 30, f"wasted $/h of the idle host at its price ${price}/h", every=0.5)
    assert stat.S_IMODE(os.stat(daemon.socket).st_mode) == 0o660
    assert stat.S_IMODE(os.stat(daemon.socket.parent).st_mode) == 0o700


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
def test_history_rejects_bad_query_params(daemon, query, message):
    status, body = run(raw(daemon.socket, "GET", f"/v1/history?{query}"))
    assert status == 400 and message in body["error"]


def test_unknown_route_wrong_method_and_unknown_process(daemon):
    async def main():
        # a GPU this host does not have: 404 naming the ones it has (it was 200, no points)
        status, body = await raw(daemon.socket, "GET", "/v1/history?metric=utilization&gpu=99")
        assert status == 404 and "no GPU 99 on this host" in body["error"]
        assert "this host's GPUs: 0" in body["error"]
        assert (await raw(daemon.socket, "GET", "/v1/nope"))[0] == 404
        status, body = await raw(daemon.socket, "GET", "/nope")
        assert status == 404 and "no such endpoint" in body["error"]
        status, body = await raw(daemon.socket, "DELETE", "/v1/now")
        assert status == 405 and "not allowed" in body["error"]
        status, body = await raw(daemon.socket, "GET", "/v1/processes/1:2.000/phases")
        assert status == 404 and "no process 1:2.000" in body["error"]
        status, body = await raw(daemon.socket, "GET", "/v1/processes/bad/phases")
        assert status == 400

    run(main())


def test_phases_of_the_idle_notebook(daemon):
    notebook = poll(lambda: next((p for p in daemon.now()["processes"] if p["gpus"]), None),
                    30, "the notebook in /v1/now", explain=daemon.log_tail)

    seen = []

    def idle_lately():  # it loaded its model first (compute), then nothing
        try:
            found = daemon.call("phases", notebook["key"], 5)
        except ClientApiError as exc:
            assert exc.status == 404, exc  # no stack sampled yet
            return None
        seen.append(found.phases)
        largest = max(found.phases, key=lambda phase: found.phases[phase]["share"], default=None)
        return found if largest == "idle" else None

    found = poll(idle_lately, ADVICE_TIMEOUT_S, f"idle the largest phase of {notebook['key']}",
                 every=0.5, explain=lambda: f"phases: {seen[-1:]}\n{daemon.log_tail()}")
    assert found.key == notebook["key"] and found.since_s == 5
    with pytest.raises(ClientApiError) as info:
        daemon.call("phases", process_key(notebook["pid"], notebook["start_time"] + 1))
    assert info.value.status == 404


def test_a_process_phases_are_the_balance_now_and_the_rules_quote(daemon):
    """The details screen asks for 30 min of phases; it gets the balance /v1/now shows (the one
    kept in memory, as of the last tick), with the window it covers, not another read that says
    83% beside /v1/now's 80%."""
    def same():
        now = {p["key"]: p for p in daemon.now()["processes"] if p["gpus"] and p["phases"]}
        if not now:
            return None
        key, shown = next(iter(now.items()))
        found = daemon.call("phases", key)
        shares = {phase: part["share"] for phase, part in found.phases.items()}
        return found if shares == shown["phases"] else None

    found = poll(same, ADVICE_TIMEOUT_S, "the phases endpoint quoting /v1/now's balance",
                 every=0.5, explain=daemon.log_tail)
    assert 0 < found.since_s < 1800  # what memory covers (the daemon ran < 30 min)


def test_recommendations_apply_and_snooze(daemon):
    rec = advice(daemon, "host_idle")
    assert rec["action"]["kind"] == "copy_commands"
    apply_path = f"/v1/recommendations/{rec['id']}/apply"

    async def main():
        async with daemon.client() as client:
            assert rec["id"] in [r.id for r in await client.recommendations()]
            result = await client.apply(rec["id"])
            assert result.dry_run and result.commands == tuple(rec["action"]["commands"])
            with pytest.raises(ClientApiError) as info:
                await client.apply("nope")
            assert info.value.status == 404 and "no active recommendation" in info.value.message
            status, body = await raw(daemon.socket, "POST", apply_path, b"{not json")
            assert status == 400 and "not valid JSON" in body["error"]
            status, body = await raw(daemon.socket, "POST", apply_path, b"[1]")
            assert status == 400 and "JSON object" in body["error"]
            status, body = await raw(daemon.socket, "POST", apply_path, b'{"dry_run": "yes"}')
            assert status == 400
            status, body = await raw(daemon.socket, "POST", apply_path,
                                     b'{"x": "' + b"a" * (MAX_BODY_BYTES + 10) + b'"}')
            assert status == 413 and "too large" in body["error"]
            status, body = await raw(daemon.socket, "POST",
                                     f"/v1/recommendations/{rec['id']}/snooze", b'{"hours": -1}')
            assert status == 400
            with pytest.raises(ClientApiError):
                await client.snooze("nope", 1)
            until = await client.snooze(rec["id"], 2)
            assert until > time.time() + 7000
            assert rec["id"] not in [r.id for r in await client.recommendations()]
            assert rec["id"] not in [r["id"] for r in
                                     (await client.now_raw()).get("recommendations") or []]
            # a dry run of a snoozed recommendation is refused like an unknown one
            with pytest.raises(ClientApiError) as info:
                await client.apply(rec["id"])
            assert info.value.status == 404

    run(main())


def sigterm_rec(proc: subprocess.Popen) -> dict:
    return {"id": "rec-kill", "rule": "idle_gpu_held", "target": "x", "summary": "idle",
            "savings_per_month": 10.0, "method": "m", "evidence": {},
            "action": {"kind": "sigterm", "pid": proc.pid,
                       "start_time": psutil.Process(proc.pid).create_time()}}


def test_sigterm_needs_allow_actions_and_the_same_process():
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
    finally:
        proc.kill()
        proc.wait()


def test_a_sigterm_to_a_stopped_process_continues_it_so_that_it_ends():
    """A process stopped with SIGSTOP (Ctrl-Z) keeps a SIGTERM pending, and its GPU, until it is
    continued: the action sends SIGCONT after it, as a shell's kill does for a stopped job,
    and its dry run says so. The process then ends."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        rec = sigterm_rec(proc)
        os.kill(proc.pid, signal.SIGSTOP)
        poll(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, 30,
             f"pid {proc.pid} stopped")
        dry = actions.apply(rec, True)
        assert f"SIGTERM to pid {proc.pid} and SIGCONT" in dry.message, dry.message
        assert f"then kill -CONT {proc.pid};" in dry.steps[-1], dry.steps
        done = actions.apply(rec, False, allow_actions=True)
        assert done.done and "and SIGCONT" in done.message, done
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SERVER = """
import socket, sys
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
clients = []
while True:
    conn, _ = listener.accept()
    clients.append(conn)
"""


def test_a_sigterm_is_refused_live_for_a_process_that_is_serving():
    """Whatever a recommendation said when it was made, the action checks again right before
    the signal: a process that listens and has a client connected now is a server, and mlcostd
    never stops a server (409, the process untouched). Once no client is connected, the same
    recommendation's dry run goes through as before."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        rec = sigterm_rec(proc)
        client = socket.create_connection(("127.0.0.1", port))
        try:
            # the connection is the server's once accept() returns: wait for that
            poll(lambda: _dry_run_or_none(rec) is None, 30, "the server's accepted client")
            for dry_run in (True, False):
                with pytest.raises(actions.ActionError) as info:
                    actions.apply(rec, dry_run, allow_actions=True)
                assert info.value.status == 409, info.value
                assert f"listens on TCP port {port}" in str(info.value)
                assert "never stops a server" in str(info.value)
            assert proc.poll() is None
        finally:
            client.close()
        dry = poll(lambda: _dry_run_or_none(rec), 30, "the server with no client connected")
        assert f"SIGTERM to pid {proc.pid}" in dry.message and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def _dry_run_or_none(rec: dict):
    try:
        return actions.apply(rec, True)
    except actions.ActionError:
        return None  # the closed connection may still be ESTABLISHED on the server's side


def test_apply_sigterm_through_the_daemon_stops_the_idle_notebook(daemon):
    # After the tests that look at the notebook: this one stops it.
    rec = advice(daemon, "idle_gpu_held")
    (notebook,) = daemon.workload_pids()
    assert rec["action"]["kind"] == "sigterm" and rec["action"]["pid"] == notebook
    dry = daemon.call("apply", rec["id"])
    assert not dry.done and f"SIGTERM to pid {notebook}" in dry.message
    assert notebook in {p.pid for p in daemon.still_running()}
    result = daemon.call("apply", rec["id"], dry_run=False)
    assert result.done and "sent SIGTERM" in result.message
    poll(lambda: notebook not in {p.pid for p in daemon.still_running()}, 10,
         f"the notebook (pid {notebook}) stopped by the SIGTERM", explain=daemon.log_tail)
    assert daemon.healthy()  # the daemon records on without it


def test_tcp_requires_the_bearer_token(daemon):
    token_file = daemon.socket.with_name("mlcostd.token")  # the default: beside the socket
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert token not in daemon.log()  # never logged
    port = poll(daemon.tcp_port, 10, "the TCP port in the log", explain=daemon.log_tail)
    base = f"http://127.0.0.1:{port}"

    async def main():
        anonymous = Client(base)
        with pytest.raises(ClientApiError) as info:
            await anonymous.health()
        assert info.value.status == 401
        await anonymous.close()
        wrong = Client(base, token="x" * 40)
        with pytest.raises(ClientApiError) as info:
            await wrong.health()
        assert info.value.status == 401 and "bearer token" in info.value.message
        await wrong.close()
        good = Client(base, token=token)
        assert (await good.health()).ok
        await good.close()
        # bytes that are not UTF-8 in the header: a 401, not "internal error", 500
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Authorization: Bearer \xff\xfe\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        # the unix socket needs no token: its permissions are the guard
        assert (await raw(daemon.socket, "GET", "/v1/health"))[0] == 200

    run(main())


def test_token_file_readable_by_others_is_refused(tmp_path, mlcostd):
    token_file = tmp_path / "token"
    token_file.write_text("a" * 40)
    token_file.chmod(0o644)
    with pytest.raises(ApiError, match="chmod 600"):
        read_token(token_file)
    token_file.chmod(0o600)
    assert read_token(token_file) == "a" * 40
    token_file.chmod(0o640)
    refused = mlcostd("idle-host", wait=False,
                      args=["--listen", "127.0.0.1:0", "--token-file", str(token_file)])
    assert refused.wait_exit() == 2
    assert "chmod 600" in refused.log() and "Traceback" not in refused.log()
    # refused before anything starts (it was after the store was made and the workloads ran)
    assert "simulating" not in refused.log() and not refused.db.exists(), refused.log()
    token_file.chmod(0o600)
    token_file.write_text("first line of a token\nsecond\n")
    refused = mlcostd("idle-host", wait=False,
                      args=["--listen", "127.0.0.1:0", "--token-file", str(token_file)])
    assert refused.wait_exit() == 2 and "no usable token" in refused.log(), refused.log()
    assert "simulating" not in refused.log() and not refused.db.exists(), refused.log()


@pytest.mark.parametrize("held", ["x" * (TOKEN_MAX_BYTES + 1), "a" * 20 + "\n" + "b" * 20,
                                  "short"], ids=["over 4096 bytes", "two lines", "too short"])
def test_the_daemon_takes_a_token_only_where_its_client_would_send_it(tmp_path, held):
    """Longer than TOKEN_MAX_BYTES (the daemon used its first 4096 bytes, which no client
    sends: it refuses the file), two lines (no header can carry it), too short: refused at the
    start by both sides, never the file's text in the message."""
    token_file = tmp_path / "token"
    token_file.write_text(held)
    token_file.chmod(0o600)
    with pytest.raises(ApiError, match="no usable token") as refused:
        read_token(token_file)
    with pytest.raises(ClientError) as client_refused:
        read_token_file(token_file)
    for text in (str(refused.value), str(client_refused.value)):
        assert held[:16] not in text and "x" * 16 not in text
    token_file.write_text(held[:40].replace("\n", "") + "\n")
    if len(held) >= TOKEN_MIN_CHARS:
        assert read_token(token_file) == read_token_file(token_file) == held[:40].replace("\n", "")


def test_a_live_socket_is_not_taken_over(mlcostd):
    first = mlcostd("idle-host")
    second = mlcostd("idle-host", wait=False, args=["--socket", str(first.socket)])
    assert second.wait_exit() == 2
    assert "another mlcostd" in second.log()
    # the refused one leaves the socket it never bound: the first one still answers on it
    assert first.socket.exists() and first.healthy()

    def stale_socket(folder: Path) -> None:  # left behind by a daemon that died
        (folder / "api").mkdir(mode=0o700)
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # bound, never unlinked
        stale.bind(str(folder / "api" / "mlcostd.sock"))
        stale.close()

    again = mlcostd("idle-host", prepare=stale_socket)
    assert again.healthy()
    assert again.stop() == 0


def test_no_daemon_is_a_clear_error(tmp_path):
    async def main():
        client = Client(f"unix:{tmp_path}/missing.sock")
        with pytest.raises(DaemonUnavailable, match="no mlcostd at unix:.*mlcost-top --demo"):
            await client.now()
        await client.close()

    run(main())


def test_resize_dry_run_then_aws_systems_manager_resizes_on_moto(moto_endpoint):
    """The dry run asks moto's EC2 whether stop and start are allowed; the resize itself is
    AWS-ResizeInstance started through Systems Manager (the host cannot stop, modify and
    start itself: its stop takes the daemon down), here the simulated SSM (daemon.sim.ssm,
    moto has no Automation) running the runbook's steps against moto's EC2."""
    import boto3

    from daemon.sim import ssm

    # the session's moto server (tests/conftest.py): these instances are this test's own
    env = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

    def ec2(region: str):
        return boto3.client("ec2", region_name=region, endpoint_url=moto_endpoint,
                            **env)

    server = ssm.serve(ssm.Executions(ec2, "us-east-1"))
    ssm_endpoint = f"http://127.0.0.1:{server.server_address[1]}"

    def ssm_client(region: str):
        return boto3.client("ssm", region_name=region, endpoint_url=ssm_endpoint, **env)

    from daemon.sim.ec2 import DEMO_IMAGE

    client = ec2("us-east-1")
    # An image id moto does not check; describe_images() to find one took moto 10-19 s on the
    # 2-core machine (it lists every AMI it knows), two thirds of this test.
    instance = client.run_instances(ImageId=DEMO_IMAGE, MinCount=1, MaxCount=1,
                                    InstanceType="p4d.24xlarge")["Instances"][0]
    instance_id = instance["InstanceId"]
    rec = {"id": "rec-resize", "action": {
        "kind": "resize", "provider": "aws", "region": "us-east-1",
        "from": "p4d.24xlarge", "to": "g5.12xlarge", "instance_id": instance_id}}
    try:
        dry = actions.apply(rec, True, ec2_factory=ec2, ssm_factory=ssm_client)
        assert not dry.done and "would ask AWS Systems Manager" in dry.message
        assert "stop: allowed; start: allowed" in dry.message
        assert dry.steps == (
            "aws ssm start-automation-execution --region us-east-1 --document-name "
            f"AWS-ResizeInstance --parameters InstanceId={instance_id},"
            "InstanceType=g5.12xlarge",)
        with pytest.raises(actions.ActionError):
            actions.apply(rec, False, allow_actions=False, ec2_factory=ec2,
                          ssm_factory=ssm_client)
        done = actions.apply(rec, False, allow_actions=True, ec2_factory=ec2,
                             ssm_factory=ssm_client)
        assert done.done and "AWS-ResizeInstance (execution " in done.message
        execution = done.message.split("(execution ")[1].split(")")[0]

        def finished() -> str | None:
            got = ssm_client("us-east-1").get_automation_execution(
                AutomationExecutionId=execution)["AutomationExecution"]
            status = got["AutomationExecutionStatus"]
            return status if status != "InProgress" else None

        assert poll(finished, 60, "the runbook's end") == "Success"
        # (the simulated SSM runs that runbook only, and says so as SSM would)
        from botocore.exceptions import ClientError

        with pytest.raises(ClientError, match="InvalidDocument"):
            ssm_client("us-east-1").start_automation_execution(
                DocumentName="AWS-RestartEC2Instance", Parameters={"InstanceId": [instance_id]})
        described = client.describe_instances(InstanceIds=[instance_id])
        now = described["Reservations"][0]["Instances"][0]
        assert now["InstanceType"] == "g5.12xlarge" and now["State"]["Name"] == "running"
    finally:
        server.shutdown()


def allowed_ec2(region: str):
    """An EC2 client (botocore's Stubber) whose stop and start dry runs are allowed."""
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("ec2", region_name=region, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    stub = Stubber(client)
    for call in ("stop_instances", "start_instances"):  # the dry runs: allowed
        stub.add_client_error(call, "DryRunOperation", "Request would have succeeded")
    stub.activate()
    return client


def test_resize_asks_ssm_for_the_runbook_as_its_api_defines_it():
    """The call as AWS's SSM model defines it (botocore's Stubber checks the parameters against
    the service model; moto has no Automation backend), and a refusal read back as an error
    that names the runbook and AWS's reason."""
    import boto3
    from botocore.stub import Stubber

    ssm = boto3.client("ssm", region_name="us-west-2", aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    stub = Stubber(ssm)
    EXECUTION = "0a1b2c3d-0000-4000-8000-123456789abc"  # noqa: N806 (the id SSM answers)
    wanted = {"DocumentName": "AWS-ResizeInstance",
              "Parameters": {"InstanceId": ["i-0123456789abcdef0"],
                             "InstanceType": ["g6e.12xlarge"]}}
    stub.add_response("start_automation_execution", {"AutomationExecutionId": EXECUTION},
                      wanted)
    stub.add_client_error("start_automation_execution", "AccessDeniedException",
                          "not authorized to perform: ssm:StartAutomationExecution",
                          expected_params=wanted)
    stub.activate()
    rec = {"id": "rec-resize", "action": {
        "kind": "resize", "provider": "aws", "region": "us-west-2",
        "from": "p4d.24xlarge", "to": "g6e.12xlarge"}}

    def resize() -> ActionResult:
        return actions.apply(rec, False, allow_actions=True, ec2_factory=allowed_ec2,
                             ssm_factory=lambda region: ssm,
                             instance_id="i-0123456789abcdef0")

    done = resize()
    assert done.done and f"(execution {EXECUTION})" in done.message
    with pytest.raises(actions.ActionError) as refused:
        resize()
    assert refused.value.status == 502
    assert "did not start AWS-ResizeInstance" in str(refused.value)
    assert "ssm:StartAutomationExecution" in str(refused.value)
    stub.assert_no_pending_responses()


def test_resize_off_ec2_shows_the_commands_and_calls_no_aws():
    def no_aws(region: str):
        raise AssertionError("no AWS client off EC2")

    rec = {"id": "rec-resize", "action": {
        "kind": "resize", "provider": "aws", "region": "us-east-1",
        "from": "p4d.24xlarge", "to": "g5.12xlarge"}}
    for dry_run in (True, False):
        shown = actions.apply(rec, dry_run, allow_actions=True, ec2_factory=no_aws,
                              ssm_factory=no_aws)
        assert shown.kind == "copy_commands" and not shown.done
        assert "can only show the commands" in shown.message and "not on EC2" in shown.message
        assert any("start-automation-execution" in c and "InstanceType=g5.12xlarge" in c
                   for c in shown.commands)


def test_a_resize_on_preliminary_evidence_is_done_only_when_confirmed_a_second_time():
    """A resize stops every process on the host, a server's too; the demo offered it (and did
    it on one `y`) on 1 min of the 30 h of evidence it needs (probe 125 F14). The daemon, which
    other clients than mlcost-top call, refuses it unless the caller confirms it again."""
    import boto3
    from botocore.stub import Stubber

    ssm = boto3.client("ssm", region_name="us-west-2", aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    stub = Stubber(ssm)
    stub.add_response("start_automation_execution", {"AutomationExecutionId": "0a1b2c3d-0000-4000-8000-123456789abc"})
    stub.activate()
    rec = {"id": "rec-resize", "preliminary": True, "confidence": "low",
           "evidence_seconds": 60.0, "evidence_needed_seconds": 30 * 3600.0,
           "action": {"kind": "resize", "provider": "aws", "region": "us-west-2",
                      "from": "p4d.24xlarge", "to": "g6e.12xlarge"}}

    def resize(dry_run: bool, **kwargs) -> ActionResult:
        return actions.apply(rec, dry_run, allow_actions=True, ec2_factory=allowed_ec2,
                             ssm_factory=lambda region: ssm, instance_id="i-0123456789abcdef0",
                             **kwargs)

    dry = resize(True)
    assert "preliminary, confidence low: 60 s observed of the 30.0 h" in dry.message
    assert "accept_preliminary" in dry.message and dry.refused is None
    with pytest.raises(actions.ActionError) as refused:
        resize(False)
    assert refused.value.status == 409 and "not resized" in str(refused.value)
    assert "every process on the host" in str(refused.value)
    done = resize(False, accept_preliminary=True)  # (the one response SSM was given)
    assert done.done and "(execution 0a1b2c3d-" in done.message
    stub.assert_no_pending_responses()
    # with its evidence complete, one confirmation is enough, as before
    rec.update(preliminary=False, confidence="high", evidence_seconds=31 * 3600.0)
    assert "accept_preliminary" not in resize(True).message


def test_a_sigterm_never_reaches_a_process_that_took_the_targets_pid():
    """Probe 138: the target exited while the action read its /proc (a hostile target can make
    those reads last hundreds of milliseconds) and another user's process took its pid; the
    bare kill(pid) that followed the identity check hit that process. The action now holds the
    target by a pidfd from before the check and signals through it: 410, the other process
    untouched. Run in a pid namespace of its own, where the test alone decides who gets a pid."""
    program = Path(__file__).parent / "programs" / "pid_reuse_apply.py"
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                           str(program)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["taken_by"] == seen["target"], seen  # the pid was taken, as in the attack
    assert not seen["taker_sent_sigterm"], seen
    assert seen.get("status") == 410 and "has exited" in seen["message"], seen


FRONT_END = """
import os, socket, sys, time
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
worker = os.fork()
if worker == 0:  # its GPU worker, fed over a pipe on a real host: here it only waits
    server.close()
    time.sleep(300)
    os._exit(0)
print(worker, flush=True)
clients = []
while True:
    conn, _ = server.accept()
    clients.append(conn)
"""


def test_a_sigterm_is_refused_live_for_the_worker_of_a_parent_that_serves():
    """The rules never offer SIGTERM to the worker of a serving parent (Kind.serving_parent);
    a recommendation made before the parent served stays until the next evaluation, and the
    live check right before the signal looked at the worker alone (probe 138): it now reads
    its parent too, and refuses (409, the worker untouched)."""
    front = subprocess.Popen([sys.executable, "-c", FRONT_END], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert front.stdout is not None
        port, worker = int(front.stdout.readline()), int(front.stdout.readline())
        rec = {"id": "w1", "rule": "idle_gpu_held", "target": f"{worker}:0",
               "action": {"kind": "sigterm", "pid": worker,
                          "start_time": psutil.Process(worker).create_time()}}
        assert f"SIGTERM to pid {worker}" in actions.apply(rec, True).message  # not served yet
        with socket.create_connection(("127.0.0.1", port)):  # a client: it has served
            def refused() -> str | None:
                try:
                    actions.apply(rec, True)
                except actions.ActionError as exc:
                    return f"{exc.status} {exc}"
                return None

            said = poll(refused, 30, "the worker's SIGTERM refused")
            assert said.startswith("409") and f"its parent, pid {front.pid}" in said, said
            with pytest.raises(actions.ActionError):
                actions.apply(rec, False, allow_actions=True)
        assert psutil.Process(worker).status() != psutil.STATUS_ZOMBIE
    finally:
        front.kill()
        front.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


def test_a_copied_kill_leaves_another_process_at_its_pid_alone():
    """The kill a recommendation gives to copy (wire.signal_command), pasted when its pid is
    another process's (started later than the one mlcost saw): nothing is signalled, and it
    says so. The same line for the process it names signals it (tests/tui/test_copied_kill)."""
    now = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        start = psutil.Process(now.pid).create_time()
        seen = signal_command(now.pid, start - 5.0)  # mlcost saw this pid start 5 s earlier
        ran = subprocess.run(["bash", "-c", seen], capture_output=True, text=True, timeout=30)
        assert ran.returncode == 0, ran
        assert f"pid {now.pid} is not the process mlcost saw" in ran.stdout, ran
        assert now.poll() is None and psutil.Process(now.pid).status() != psutil.STATUS_ZOMBIE
    finally:
        now.kill()
        now.wait()
