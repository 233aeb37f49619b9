"""The kubelet pod-resources client against a real gRPC server on a unix socket (tests/kubelet.py):
GPU UUID -> pod, namespace and container; a pod learned from its GPU process also names its
workers; a missing socket or a broken answer is a status, never an exception."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubelet
import pytest

from daemon.sources.owners import OwnerReader
from daemon.sources.podresources import Allocation, PodResources, parse_list_response

CGROUPS = Path(__file__).parent / "fixtures" / "cgroups"
ROOT = Path(__file__).resolve().parents[2]
GPU0, GPU1, GPU2 = (f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3))
POD_UID = "8e3b1a2c-4f5d-4e6a-9b7c-1d2e3f4a5b6c"
TRAINER = "06ea17a8981d25b0315ff17bd1ebad3d95c15a3f8b764eaadb93612d9b61a54e"

NODE = kubelet.list_response([
    ("ml", "trainer-0", [("trainer", [GPU0, GPU1]), ("sidecar", [])]),
    ("serving", "vllm-7f9c", [("vllm", [GPU2 + "::0"])]),  # a time-sliced replica
    ("serving", "vllm-other", [("vllm", [GPU2 + "::1"])]),
])


def test_the_list_answer_maps_each_gpu_to_its_pod_and_container():
    devices = parse_list_response(NODE)
    assert devices[GPU0] == [Allocation("ml", "trainer-0", "trainer")]
    assert devices[GPU1] == [Allocation("ml", "trainer-0", "trainer")]
    assert sorted(a.pod for a in devices[GPU2]) == ["vllm-7f9c", "vllm-other"]


@pytest.mark.parametrize("garbage", [b"\x0a\xff\xff\xff", b"\x0b", b"\x0a\x05ab"])
def test_a_malformed_answer_is_a_value_error(garbage):
    with pytest.raises(ValueError):
        parse_list_response(garbage)


def test_the_client_asks_a_real_grpc_server_and_refreshes_at_most_every_few_seconds(tmp_path):
    socket = tmp_path / "kubelet.sock"
    with kubelet.pod_resources_server(socket, NODE) as requests:
        client = PodResources(str(socket), refresh_s=3600)
        assert client.allocation((GPU0,)) == Allocation("ml", "trainer-0", "trainer")
        assert client.allocation((GPU0, GPU1)) == Allocation("ml", "trainer-0", "trainer")
        # a GPU time-sliced between two pods names neither
        assert client.allocation((GPU2,)) is None
        assert client.allocation(("GPU-unknown",)) is None
        assert client.status == "ok"
        assert requests == [b""]  # one List call served all of these


def test_no_socket_means_no_pod_names_and_no_call(tmp_path):
    client = PodResources(str(tmp_path / "absent.sock"))
    assert not client.available()
    assert client.allocation((GPU0,)) is None
    assert client.status == "not asked yet"


def test_a_socket_nobody_answers_on_is_a_status(tmp_path):
    socket = tmp_path / "dead.sock"
    socket.write_bytes(b"")  # exists, but no server
    client = PodResources(str(socket), timeout_s=0.5)
    assert client.allocation((GPU0,)) is None
    assert client.status != "ok"


def test_the_owner_reader_names_the_pod_of_a_gpu_process_and_then_of_its_workers(tmp_path):
    proc = tmp_path / "proc"
    text = (CGROUPS / "containerd-v2-systemd-driver.cgroup").read_text()
    for pid in (10, 11):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text)
    socket = tmp_path / "kubelet.sock"
    with kubelet.pod_resources_server(socket, NODE):
        reader = OwnerReader(proc_root=str(proc), pod_resources=PodResources(str(socket)))
        assert reader.owner_of(10, (GPU0,)) == {
            "pod_uid": POD_UID, "container_id": TRAINER, "namespace": "ml",
            "pod": "trainer-0", "container": "trainer"}
    # the worker holds no GPU and the server is gone: the pod is remembered by its UID
    assert reader.owner_of(11) == reader.owner_of(10)


def test_check_says_how_many_gpus_the_kubelet_allocates_and_warns_on_a_missing_slurm_folder(
        tmp_path):
    from daemon.commands.check import owner_checks
    from daemon.config import from_dict

    socket = tmp_path / "kubelet.sock"
    config = from_dict({"owners": {"pod_resources_socket": str(socket),
                                   "slurm_job_info_dir": str(tmp_path / "absent")}})
    with kubelet.pod_resources_server(socket, NODE):
        pods, slurm = owner_checks(config)
    assert (pods.name, pods.status) == ("pod names", "ok")
    assert "3 device(s) allocated to pods" in pods.detail
    assert (slurm.name, slurm.status) == ("Slurm job info", "warn")
    assert "absent" in slurm.detail and "prolog" in slurm.fix


def test_a_process_on_a_gpu_time_sliced_within_one_namespace_gets_the_namespace_not_a_pod(
        tmp_path):
    proc = tmp_path / "proc"
    (proc / "10").mkdir(parents=True)
    (proc / "10" / "cgroup").write_text(
        (CGROUPS / "containerd-v2-systemd-driver.cgroup").read_text())
    mixed = kubelet.list_response([("serving", "vllm-a", [("vllm", [GPU2 + "::0"])]),
                                   ("research", "nb-0", [("notebook", [GPU2 + "::1"])])])
    for response, namespace in ((NODE, "serving"), (mixed, None)):
        socket = tmp_path / f"kubelet-{namespace}.sock"
        with kubelet.pod_resources_server(socket, response):
            reader = OwnerReader(proc_root=str(proc), pod_resources=PodResources(str(socket)))
            owner = reader.owner_of(10, (GPU2,))
        assert "pod" not in owner and "container" not in owner  # which replica is unknown
        assert owner.get("namespace") == namespace
        assert owner["pod_uid"] == POD_UID


# In a process of its own: gRPC loaded as the daemon loads it, a kubelet server and a call to it
# (gRPC's threads running), then a fork as a Popen with a preexec_fn does; the child counts its
# threads where it would exec.
_FORK_WHILE_GRPC_RUNS = """
import os, sys
from pathlib import Path
import kubelet
from daemon.sources.podresources import PodResources
with kubelet.pod_resources_server(Path(sys.argv[1]), b"") as requests:
    client = PodResources(sys.argv[1])
    client.allocation(("GPU-x",))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, str(len(os.listdir("/proc/self/task"))).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    print(client.status, len(requests), os.read(read, 16).decode(),
          os.environ.get("GRPC_ENABLE_FORK_SUPPORT"))
"""


def test_a_fork_while_grpc_runs_starts_no_grpc_threads_in_the_child(tmp_path):
    # With gRPC's fork support on (its default), its fork handler starts its pollers again in
    # the child (6-7 threads here), which then race the child closing its descriptors before
    # exec: a Prometheus started so in tests/deploy/test_fleet.py once never ran.
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    out = subprocess.run([sys.executable, "-c", _FORK_WHILE_GRPC_RUNS,
                          str(tmp_path / "kubelet.sock")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    # asked and answered, one thread in the child, and the variable gone again from the
    # process's environment (the children it starts get the user's)
    assert out.stdout.split() == ["ok", "1", "1", "None"], out.stderr
