"""End to end: real processes in a Kubernetes-shaped and a Slurm-shaped cgroup on the simulated
host, a real kubelet pod-resources server (gRPC on a unix socket) and a Slurm prolog's job file;
mlcostd shows each process's pod and namespace, or its Slurm job, account and partition, in the
API, the report and the TUI, and charges them to their owner jobs.

The cgroups are real: this test runs as root and makes them in the cgroup v1 `pids` hierarchy
(or, on a cgroup v2 host, under /sys/fs/cgroup), moves each workload into its own before it
execs, and removes every cgroup it made.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubelet
import livedaemon
import pytest
from livedaemon import MLCOSTD
from simhost import attach_code, poll

from daemon.client import Client
from daemon.replay import Replay
from daemon.sim import scenario
from daemon.wire import Now
from mlcost_tui.app import MlcostTop
from mlcost_tui.panels.processes import ProcessPanel

POD_UID = str(uuid.uuid4())
CONTAINER_ID = uuid.uuid4().hex + uuid.uuid4().hex
SLURM_JOB = "770077"


def _writable(path: Path, marker: str) -> bool:
    return (path / marker).exists() and os.access(path, os.W_OK)


def _hierarchies() -> dict[str, Path]:
    """The cgroup hierarchies this test may make cgroups in: v1's `pids`, v2's unified one
    (at /sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one)."""
    found = {}
    if _writable(Path("/sys/fs/cgroup/pids"), "cgroup.procs"):
        found["v1"] = Path("/sys/fs/cgroup/pids")
    for v2 in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if _writable(v2, "cgroup.controllers"):
            found["v2"] = v2
            break
    return found


HIERARCHIES = _hierarchies()


@pytest.fixture(params=sorted(HIERARCHIES) or ["none"])
def cgroups(request) -> Iterator[dict[str, Path]]:
    """A Kubernetes container's and a Slurm step's cgroup, shaped as each kind of host makes
    them, under one cgroup of this test's own; all removed afterwards."""
    kind = request.param
    if kind == "none":
        pytest.fail("this test needs root and a writable cgroup hierarchy (v1's "
                    "/sys/fs/cgroup/pids, or v2 at /sys/fs/cgroup): run it as root outside a "
                    "read-only container")
    root = HIERARCHIES[kind]
    base = root / f"mlcost-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if kind == "v1":
        paths = {"pod": base / "kubepods" / "burstable" / f"pod{POD_UID}" / CONTAINER_ID,
                 "slurm": base / "slurm" / "uid_0" / f"job_{SLURM_JOB}" / "step_0"}
    else:
        slice_uid = POD_UID.replace("-", "_")
        paths = {"pod": base / "kubepods.slice" / "kubepods-burstable.slice"
                 / f"kubepods-burstable-pod{slice_uid}.slice"
                 / f"cri-containerd-{CONTAINER_ID}.scope",
                 "slurm": base / "system.slice" / "slurmstepd.scope" / f"job_{SLURM_JOB}"
                 / "step_0"}
    try:
        for path in paths.values():
            path.mkdir(parents=True)
        yield paths
    finally:
        for folder in sorted((p for p in [base, *base.rglob("*")] if p.is_dir()),
                             key=lambda p: len(p.parts), reverse=True):
            for pid in (folder / "cgroup.procs").read_text().split():
                (root / "cgroup.procs").write_text(pid)  # anything left goes back to the root
            folder.rmdir()
        assert not base.exists()


def _in_cgroup(cgroup: Path, code: str) -> list[str]:
    """A workload's argv: join `cgroup`, then exec Python (so its GPU process is born in it)."""
    python = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    return ["/bin/sh", "-c", f"echo $$ > {shlex.quote(str(cgroup / 'cgroup.procs'))} && "
                             f"exec {python}"]


def _scenario(folder: Path, cgroups: dict[str, Path]) -> Path:
    text = ('[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
            '[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = 3\n')
    for name, gpu, where in (("trainer", 0, "pod"), ("slurm-step", 1, "slurm")):
        argv = _in_cgroup(cgroups[where], attach_code(gpu, 2, "time.sleep(60)"))
        text += (f'[[workloads]]\nname = "{name}"\ngpus = [{gpu}]\n'
                 f"command = {json.dumps(argv)}\n")
    path = folder / "owners.toml"
    path.write_text(text)
    return path


def test_pods_and_slurm_jobs_reach_the_api_the_report_and_the_tui(cgroups, tmp_path):
    host = _scenario(tmp_path, cgroups)
    gpu0 = scenario.load(host).gpu_uuid(0)
    jobs = tmp_path / "slurm-jobs"
    jobs.mkdir()
    (jobs / SLURM_JOB).write_text("account=physics\npartition=gpu-a100\n")
    os.chmod(jobs / SLURM_JOB, 0o644)
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    socket.parent.mkdir()
    node = kubelet.list_response([("ml", "trainer-0", [("trainer", [gpu0])])])
    with kubelet.pod_resources_server(socket, node):
        daemon = livedaemon.start(tmp_path / "mlcostd", str(host), interval=0.5, config={
            "owners": {"slurm_job_info_dir": str(jobs), "pod_resources_socket": str(socket)}})
        try:
            _live_checks(daemon)
        finally:
            if daemon.returncode is None:
                daemon.stop(check_tree=False)
        assert daemon.returncode == 0, daemon.log_tail()
        daemon.wait_tree_gone()  # the workloads are gone before their cgroups are removed
    _report_checks(daemon)


def _live_checks(daemon: livedaemon.LiveDaemon) -> None:
    """/v1/now and mlcost-top while it runs."""

    def owned() -> dict[str, dict] | None:
        procs = {p.get("workload"): p for p in daemon.now()["processes"]}
        wanted = ("ml/trainer-0", f"slurm {SLURM_JOB}")
        # owners from discovery; job labels once the ledger has charged a tick
        return procs if all(procs.get(w, {}).get("job") for w in wanted) else None

    procs = poll(owned, 60, "both workloads with their owners in /v1/now",
                 explain=daemon.log_tail)
    pod, step = procs["ml/trainer-0"], procs[f"slurm {SLURM_JOB}"]
    assert pod["owner"] == {"pod_uid": POD_UID, "container_id": CONTAINER_ID,
                            "namespace": "ml", "pod": "trainer-0", "container": "trainer"}
    assert step["owner"] == {"slurm_job": SLURM_JOB, "slurm_step": "0",
                             "slurm_account": "physics", "slurm_partition": "gpu-a100"}
    # the ledger's job label is the workload
    assert (pod["job"], step["job"]) == ("ml/trainer-0", f"slurm {SLURM_JOB}")

    asyncio.run(_tui_checks(daemon))
    asyncio.run(_metrics_checks(daemon))

    # the ledger charges the owner jobs a budget or a unit cost can name
    by_owner = poll(lambda: (daemon.now().get("cost") or {}).get("by_owner"), 30,
                    "spend by owner")
    assert {"namespace:ml", "pod:ml/trainer-0", f"slurm_job:{SLURM_JOB}",
            "slurm_account:physics", "slurm_partition:gpu-a100"} <= set(by_owner)


async def _metrics_checks(daemon: livedaemon.LiveDaemon) -> None:
    """/metrics on the daemon's socket: the pod, namespace and Slurm job as workload labels."""
    import aiohttp

    async def scrape() -> str:
        connector = aiohttp.UnixConnector(path=str(daemon.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get("http://mlcostd/metrics") as response:
                assert response.status == 200
                return await response.text()

    deadline = time.monotonic() + 30
    while True:
        text = await scrape()
        dollars = [line for line in text.splitlines()
                   if line.startswith("mlcost_workload_dollars_total{")]
        pod = [line for line in dollars
               if 'pod="trainer-0"' in line and 'namespace="ml"' in line]
        slurm = [line for line in dollars if f'slurm_job="{SLURM_JOB}"' in line]
        if pod and slurm:
            break
        assert time.monotonic() < deadline, f"no owned workload series in:\n{dollars}"
        await asyncio.sleep(0.2)
    assert 'container="trainer"' in pod[0]


async def _tui_checks(daemon: livedaemon.LiveDaemon) -> None:
    """mlcost-top on the daemon's socket: a job column with the pod and the Slurm job."""
    app = MlcostTop([Client(f"unix:{daemon.socket}")], interval_s=0.3)
    async with app.run_test(size=(220, 48)) as pilot:
        table = app.query_one(ProcessPanel)

        def shown() -> set[str]:
            if "job" not in table.shown_keys:  # the column appears once a process has an owner
                return set()
            column = table.get_column_index("job")
            return {str(table.get_cell_at((row, column))).strip()
                    for row in range(table.row_count)}

        deadline = time.monotonic() + 30
        while not {"ml/trainer-0", f"slurm {SLURM_JOB}"} <= shown():
            assert time.monotonic() < deadline, f"the job column shows only {shown()}"
            await pilot.pause(0.1)
        assert {"ml/trainer-0", f"slurm {SLURM_JOB}"} <= shown()


def _report_checks(daemon: livedaemon.LiveDaemon) -> None:
    """The report reads the store: the same owners, after the daemon is gone."""
    done = subprocess.run(MLCOSTD + ["report", "--db", str(daemon.db), "--since", "10m",
                                     "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    workloads = {p["workload"]: p for p in report["processes"]}
    assert workloads["ml/trainer-0"]["owner"]["namespace"] == "ml"
    assert workloads[f"slurm {SLURM_JOB}"]["owner"]["slurm_account"] == "physics"
    assert "namespace:ml" in report["spend"]["by_owner"]
    text = subprocess.run(MLCOSTD + ["report", "--db", str(daemon.db), "--since", "10m"],
                          capture_output=True, text=True, timeout=120).stdout
    assert "ml/trainer-0" in text and f"slurm {SLURM_JOB}" in text
    # and a replay of the store shows them as the live daemon did
    with Replay(daemon.db) as replay:
        state = replay.state_at(replay.times()[-1])
    replayed = {p.workload: p for p in Now.from_dict(state).processes}
    assert replayed["ml/trainer-0"].owner["pod"] == "trainer-0"
    assert replayed[f"slurm {SLURM_JOB}"].owner["slurm_partition"] == "gpu-a100"


# Names whoever starts a unit or makes a pod chooses: a unit named like a GitHub token, a pod
# like an OpenAI key, and a second pod like another (valid Kubernetes names), time-slicing one
# GPU.
HOSTILE_UNIT = "ghp_abcdefghijklmnopqrstuvwxyz0123456789.service"
HOSTILE_PODS = ("sk-abcdefghijklmnopqrstuvwxyz123456", "sk-zyxwvutsrqponmlkjihgfedcba654321")
HOSTILE_SECRETS = ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", *HOSTILE_PODS)


def test_hostile_unit_and_pod_names_are_redacted_where_read(cgroups, tmp_path):
    """Probe (redaction, fourth round): a process's owner (here a systemd unit, from its cgroup)
    and the kubelet's pod, namespace and container names were shown as read: in /v1/now, every
    /metrics label of the workload and of the pod's GPU allocation, the store and the report.
    Each is redacted where it is read now (daemon.sources.owners, daemon.sources.podresources)."""
    import asyncio

    import aiohttp

    base = cgroups["pod"].parents[3]  # this test's own cgroup: removed with all below it
    unit = base / "system.slice" / HOSTILE_UNIT
    unit.mkdir(parents=True)
    host = tmp_path / "units.toml"
    host.write_text(
        '[instance]\nprovider = "aws"\ntype = "p4d.24xlarge"\nregion = "us-east-1"\n'
        '[gpu]\nmodel = "NVIDIA A100-SXM4-40GB"\ncount = 2\n'
        '[[workloads]]\nname = "unit"\ngpus = [0]\n'
        f"command = {json.dumps(_in_cgroup(unit, attach_code(0, 2, 'time.sleep(60)')))}\n")
    gpu1 = scenario.load(host).gpu_uuid(1)
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    socket.parent.mkdir()
    node = kubelet.list_response([("ml", pod, [("trainer", [gpu1])]) for pod in HOSTILE_PODS])

    async def scrape(daemon: livedaemon.LiveDaemon) -> str:
        connector = aiohttp.UnixConnector(path=str(daemon.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get("http://mlcostd/metrics") as response:
                assert response.status == 200
                return await response.text()

    with kubelet.pod_resources_server(socket, node):
        daemon = livedaemon.start(tmp_path / "mlcostd", str(host), interval=0.5, config={
            "owners": {"pod_resources_socket": str(socket)}})
        try:
            def shown() -> dict[str, str] | None:
                now = daemon.now()
                owned = [p for p in now["processes"] if p.get("owner") and p.get("job")]
                text = asyncio.run(scrape(daemon))
                return {"now": json.dumps(now), "metrics": text} if owned and \
                    "mlcost_container_gpu_allocation{" in text else None

            served = poll(shown, 60, "the unit's process owned and the pod's GPU allocated",
                          explain=daemon.log_tail)
        finally:
            if daemon.returncode is None:
                daemon.stop(check_tree=False)
        assert daemon.returncode == 0, daemon.log_tail()
        daemon.wait_tree_gone()  # the workload is gone before its cgroup is removed
    done = subprocess.run(MLCOSTD + ["report", "--db", str(daemon.db), "--since", "10m",
                                     "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    served["report"] = done.stdout
    leaks = {name: [w for w in HOSTILE_SECRETS if w in text] for name, text in served.items()}
    for stored in daemon.folder.glob("mlcost.db*"):  # the database, its WAL: every byte
        data = stored.read_bytes()
        leaks[stored.name] = [w for w in HOSTILE_SECRETS if w.encode() in data]
    assert not any(leaks.values()), json.dumps({k: v for k, v in leaks.items() if v})
    # the two pods, half of GPU 1 each: two series, not one of a whole GPU
    halves = re.findall(r'^mlcost_container_gpu_allocation\{.*pod="(<redacted> \[[0-9a-f]{4}\])"'
                        r'.*\} 0\.5$', served["metrics"], re.M)
    assert len(set(halves)) == 2, served["metrics"]
    # each shown redacted, with a tag of the name as written (two such pods stay two series)
    owned = [p for p in json.loads(served["now"])["processes"] if p.get("owner")]
    unit_shown = owned[0]["owner"]["systemd_unit"]
    assert re.fullmatch(r"<redacted>\.service \[[0-9a-f]{4}\]", unit_shown), owned
    assert owned[0]["workload"] == unit_shown
