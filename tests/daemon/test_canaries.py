"""No secret anywhere a command line goes: a real mlcostd records a simulated host whose one
workload carries a canary of every secret format in its argv, and every output surface is
searched for them: /v1/now, /v1/recommendations, the SIGTERM dry run, `mlcostd report` (text
and JSON), a budget webhook's body (a local aiohttp receiver), the daemon's log, and the raw
database, WAL and shared-memory files.

The workload holds GPU memory and waits on a socket like an idle notebook, so the daemon
advises SIGTERM for it and the dry run reads its live argv. It re-executes itself with a secret
as argv[0], so even the report's 48-character command column has a canary in it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import psutil
import pytest
from aiohttp import web
from livedaemon import MLCOSTD, ROOT
from simhost import poll

from daemon.analysis.budgets import Webhook
from daemon.sources.redact import REDACTED

ADVICE_TIMEOUT_S = 120.0

# (argument(s), the secret part that must never be seen once mlcostd has read the argv)
CANARIES: list[tuple[tuple[str, ...], str]] = [
    (("-----BEGIN RSA PRIVATE KEY-----\nMIIEcanaryPemBody0001\n-----END RSA PRIVATE KEY-----",),
     "canaryPemBody0001"),
    (("--tls-key-data=-----BEGIN PRIVATE KEY-----\ncanaryPemBody0002",), "canaryPemBody0002"),
    (("eyJhbGciOiJIUzI1NiJ9.eyJjYW5hcnkiOiIwMDAzIn0.canaryJwtSig0003",), "canaryJwtSig0003"),
    (("ghp_canaryGithub0004abcdefghijklmnopqr",), "canaryGithub0004"),
    (("github_pat_11CANARY0005_abcdefghijklmnopqrstuvwxyz",), "CANARY0005"),
    (("glpat-canaryGitlab0006xyzw",), "canaryGitlab0006"),
    (("xoxb-1111-2222-canarySlack0007",), "canarySlack0007"),
    (("hf_canaryHuggingFace0008abcdefgh",), "canaryHuggingFace0008"),
    (("sk-proj-canaryOpenAI0009abcdefghijkl",), "canaryOpenAI0009"),
    (("DefaultEndpointsProtocol=https;AccountName=mlcost;AccountKey=canaryAzureKey0010+/==;"
      "EndpointSuffix=core.windows.net",), "canaryAzureKey0010"),
    (("https://mlcost.blob.core.windows.net/ckpt?sv=2022-11-02&se=2030-01-01"
      "&sig=canarySasSig0011%3D",), "canarySasSig0011"),
    (("AIzaSyCanaryGcp0012abcdefghijklmnopqrs",), "CanaryGcp0012"),
    (("--password", "-canaryDashValue0013"), "canaryDashValue0013"),
    (("--hf-token", "canaryFlagValue0014"), "canaryFlagValue0014"),
    (("AKIACANARY0015ABCDEF",), "AKIACANARY0015ABCDEF"),
    (("https://alice:canaryUrlPw0016@example.com/data",), "canaryUrlPw0016"),
    (("WANDB_API_KEY=canaryEnvKey0017",), "canaryEnvKey0017"),
    # issue 20 item 5: found stored and served in clear
    (("-pcanaryMysql0019",), "canaryMysql0019"),
    (("--private-key-data", "canaryKeyData0020"), "canaryKeyData0020"),
    (("--client-secret-value", "canaryClientSecret0021"), "canaryClientSecret0021"),
    (("-P", "canaryBigP0022"), "canaryBigP0022"),
    (("token", "canaryBareToken0023"), "canaryBareToken0023"),
]
ARGV0 = "AWS_SECRET_ACCESS_KEY=canaryArgvZero0018"  # what the workload calls itself
SECRETS = [secret for _, secret in CANARIES] + ["canaryArgvZero0018"]

# Holds 4 GiB of the simulated GPU and waits for input forever, with no kernel at all.
HOLDER = """
import selectors, socket
from daemon.sim.device import Device
dev = Device(gpu_index=0)
dev.alloc(4 << 30)
shell, frontend = socket.socketpair()
waiting = selectors.DefaultSelector()
waiting.register(shell, selectors.EVENT_READ)
while True:
    waiting.select(timeout=30.0)
"""
# Re-executes the interpreter with a secret as argv[0] and every canary after the code.
REEXEC = ("import os, sys; os.execv(sys.executable, [sys.argv[1], '-c', sys.argv[2]] "
          "+ sys.argv[3:])")


def scenario_text() -> str:
    argv = [sys.executable, "-c", REEXEC, ARGV0, HOLDER]
    argv += [word for words, _ in CANARIES for word in words]
    return ('description = "one idle holder whose argv carries a canary of every secret"\n'
            '[instance]\nprovider = "aws"\ntype = "g5.xlarge"\nregion = "us-east-1"\n'
            'lifecycle = "on-demand"\n[gpu]\nmodel = "NVIDIA A10G"\ncount = 1\n'
            f'[[workloads]]\nname = "canary"\ngpus = [0]\ncommand = {json.dumps(argv)}\n')


class WebhookReceiver:
    """A real aiohttp server on 127.0.0.1 that keeps every body POSTed to /hook."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="webhook-receiver",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the webhook receiver did not start within 10 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    async def _hook(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.text())
        return web.Response(text="ok")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def receiver():
    server = WebhookReceiver()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def host(mlcostd, receiver, tmp_path_factory):
    """The canary host recorded by a real mlcostd, with a host budget it crosses at once."""
    scenario = tmp_path_factory.mktemp("canary-scenario") / "canary.toml"
    scenario.write_text(scenario_text())
    config = {
        "idle": {"gpu_held_after": "10s", "gpu_unheld_after": "10s", "host_after": "10s"},
        "cost": {"evaluate_every": "5s"},
        "cost.budgets": {"webhook": receiver.url},
        "cost.budgets.host": {"daily": 0.0001},
    }
    # The fixture names its folder after a built-in scenario; the later --simulate wins.
    return mlcostd("idle-host", interval=0.5, config=config,
                   args=["--simulate", str(scenario)])


def canary_pid(host) -> int:
    (pid,) = host.workload_pids()
    return pid


def assert_no_canary(text: str, where: str) -> None:
    leaked = [secret for secret in SECRETS if secret in text]
    assert not leaked, f"{where} shows secrets from the workload's argv: {leaked}"


async def raw(socket_path: Path, method: str, path: str, body: dict | None = None) -> str:
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.request(method, "http://mlcostd" + path, json=body) as response:
            text = await response.text()
            assert response.status == 200, f"{method} {path}: {response.status} {text}"
            return text


def test_every_canary_is_in_the_workloads_real_argv(host):
    # The control: the secrets really are on the command line mlcostd reads.
    pid = canary_pid(host)
    argv = poll(lambda: (lambda a: a if a and a[0] == ARGV0 else None)(
        psutil.Process(pid).cmdline()), 30, "the canary workload re-executed",
        explain=host.log_tail)
    line = "\0".join(argv)
    assert all(secret in line for secret in SECRETS)


def test_no_canary_in_now_recommendations_or_the_sigterm_dry_run(host):
    pid = canary_pid(host)

    def sigterm_advice():
        recs = host.now().get("recommendations") or []
        return next((r for r in recs if (r.get("action") or {}).get("kind") == "sigterm"
                     and r["action"].get("pid") == pid), None)

    rec = poll(sigterm_advice, ADVICE_TIMEOUT_S, f"SIGTERM advice for the canary (pid {pid})",
               every=0.5, explain=host.log_tail)
    now = asyncio.run(raw(host.socket, "GET", "/v1/now"))
    (proc,) = [p for p in json.loads(now)["processes"] if p["pid"] == pid]
    assert proc["command"].startswith(ARGV0.split("=")[0] + "=" + REDACTED)
    assert_no_canary(now, "/v1/now")
    recommendations = asyncio.run(raw(host.socket, "GET", "/v1/recommendations"))
    assert str(pid) in recommendations
    assert_no_canary(recommendations, "/v1/recommendations")
    dry = asyncio.run(raw(host.socket, "POST", f"/v1/recommendations/{rec['id']}/apply",
                          {"dry_run": True}))
    assert f"SIGTERM to pid {pid}" in dry and REDACTED in dry  # the live argv, redacted
    assert_no_canary(dry, "the SIGTERM dry run")


@pytest.mark.parametrize("form", [[], ["--json"]], ids=["text", "json"])
def test_no_canary_in_the_report(host, form):
    host.wait_for_ticks(5)
    done = subprocess.run(MLCOSTD + ["report", "--db", str(host.db), "--since", "1h", *form],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert REDACTED in done.stdout  # the canary's command line is in the report
    assert_no_canary(done.stdout + done.stderr, f"mlcostd report {' '.join(form)}")


def test_no_canary_in_the_budget_webhook_body(host, receiver):
    poll(lambda: receiver.bodies, 60, "the host budget's webhook POST", explain=host.log_tail)
    body = "\n".join(receiver.bodies)
    assert "budget_exceeded" in body
    assert_no_canary(body, "the webhook body")


def test_a_webhook_body_is_redacted_on_its_way_out(receiver):
    # Whatever an event carries (a job label, a summary quoting a command line), the body
    # that leaves the host goes through the same redaction.
    webhook = Webhook(receiver.url)
    try:
        webhook.post({"kind": "budget_exceeded", "name": "train.py --hf-token canaryHook0019",
                      "detail": {"command": " ".join(CANARIES[3][0] + CANARIES[12][0])}})
        assert webhook.flush(10) and webhook.sent == 1, webhook.last_error
    finally:
        webhook.close()
    body = next(b for b in receiver.bodies if "train.py" in b)
    assert "canaryHook0019" not in body
    assert_no_canary(body, "a webhook body")


def test_a_failed_webhook_does_not_log_the_secret_in_its_url(caplog):
    # A Slack-style webhook URL is itself a secret; a failed POST names the URL.
    webhook = Webhook("http://127.0.0.1:9/services/T0/B0/x?token=canaryUrlToken0020",
                      timeout_s=2.0)
    try:
        webhook.post({"kind": "budget_exceeded"})
        assert webhook.flush(10) and webhook.failed == 1
    finally:
        webhook.close()
    assert webhook.last_error is not None and "127.0.0.1:9" in webhook.last_error
    assert "canaryUrlToken0020" not in webhook.last_error + caplog.text


def test_no_canary_in_the_database_wal_shm_or_log(host):
    # After the tests above: everything the daemon wrote while they ran is on disk now.
    files = {path.name: path.read_bytes() for path in sorted(host.folder.glob("mlcost.db*"))}
    assert {"mlcost.db", "mlcost.db-wal"} <= set(files), sorted(files)
    assert any(REDACTED.encode() in data for data in files.values())
    for name, data in files.items():
        assert_no_canary(data.decode("latin-1"), name)
    assert host.stop() == 0
    for path in sorted(host.folder.glob("mlcost.db*")):
        assert_no_canary(path.read_bytes().decode("latin-1"), f"{path.name} after the stop")
    assert_no_canary(host.log(), "the daemon's log")
