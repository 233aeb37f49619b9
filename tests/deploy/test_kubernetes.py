"""deploy/kubernetes/: the DaemonSet and its objects validate against a current Kubernetes
schema (kubernetes-validate, strict), hold the privileges mlcostd needs and no more, and the
config they mount is a config mlcostd accepts, and a real mlcostd starts with its socket where the
pod puts it; the ServiceMonitor scrapes that Service."""

from __future__ import annotations

import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import livedaemon
import pytest
import tomllib
import yaml
from simhost import poll

from daemon import config as config_module

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kubernetes" / "mlcostd.yaml"
SERVICE_MONITOR = ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml"


def objects(path: Path) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(path.read_text()) if doc}


@pytest.mark.parametrize("kind", ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet",
                                  "Service"])
def test_each_object_validates_against_the_current_schema(kind):
    version = kubernetes_validate.latest_version()
    assert tuple(int(p) for p in version.split(".")[:2]) >= (1, 30)
    kubernetes_validate.validate(objects(MANIFEST)[kind], version, strict=True)


def test_the_schema_check_catches_a_misspelt_field():
    daemonset = objects(MANIFEST)["DaemonSet"]
    daemonset["spec"]["template"]["spec"]["hostPid"] = True  # hostPID, misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, kubernetes_validate.latest_version(),
                                     strict=True)


def test_the_daemonset_has_what_mlcostd_needs_and_no_more():
    pod = objects(MANIFEST)["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostPID"] is True  # the driver reports host pids
    assert pod["runtimeClassName"] == "nvidia"
    assert not pod.get("hostNetwork") and not pod.get("hostIPC")
    [container] = pod["containers"]
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(security["capabilities"]["add"]) <= {"SYS_PTRACE", "SYS_ADMIN", "DAC_READ_SEARCH"}
    assert "SYS_PTRACE" in security["capabilities"]["add"]
    limits = container["resources"]["limits"]
    assert limits["cpu"] and limits["memory"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    pod_resources = volumes["pod-resources"]["hostPath"]
    assert pod_resources == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["pod-resources"]["readOnly"] is True
    assert mounts["pod-resources"]["mountPath"] == "/var/lib/kubelet/pod-resources"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    # Hostname is the node's, as dcgm-exporter's series say it
    assert env["MLCOST_HOSTNAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_mounted_config_is_one_mlcostd_accepts_and_serves_the_metrics_port():
    found = objects(MANIFEST)
    text = found["ConfigMap"]["data"]["mlcostd.toml"]
    loaded = config_module.from_dict(tomllib.loads(text), where="ConfigMap")
    [container] = found["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    [port] = container["ports"]
    assert loaded.api.metrics_listen == f"0.0.0.0:{port['containerPort']}"
    assert container["args"][:3] == ["run", "--config", "/etc/mlcost/mlcostd.toml"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(Path(loaded.daemon.db).parent) in mounts  # the store survives a restart
    # the socket in a folder of its own below a volume (the root file system is read-only):
    # test_the_daemonset_s_socket_layout_starts_a_real_daemon starts one there
    socket_folder = Path(loaded.api.socket).parent
    assert str(socket_folder) not in mounts
    assert any(Path(mount) in socket_folder.parents for mount in mounts)
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}


def test_the_servicemonitor_scrapes_the_service_keeping_the_workload_labels():
    service = objects(MANIFEST)["Service"]
    monitor = objects(SERVICE_MONITOR)["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["honorLabels"] is True  # pod/namespace stay the workload's
    # and mlcostd's own pod's labels land on no series (tests/deploy/test_fleet.py scrapes so)
    assert {"action": "labeldrop", "regex": "(namespace|service|pod|container|endpoint)"} in \
        endpoint["relabelings"]
    # the alerts match the scrape job mlcost*: the Operator names it from this label's value
    assert labels[monitor["spec"]["jobLabel"]].startswith("mlcost")


# -- the pod's socket, on the folders the kubelet makes ------------------------------------

# The mode of an emptyDir's folder as a container sees it: the kubelet makes the folder 0777
# (kubernetes pkg/volume/emptydir/empty_dir.go, `defaultPerm os.FileMode = 0777`); with
# `medium: Memory` it mounts a tmpfs over it without a mode= option, and a tmpfs's root is 1777.
EMPTY_DIR_MODE = {"Memory": 0o1777, "": 0o777}


def socket_argument(container: dict[str, Any], config_text: str) -> str:
    """The socket the container's mlcostd serves: its --socket argument, else the mounted
    config's [api].socket."""
    args = container["args"]
    if "--socket" in args:
        return str(args[args.index("--socket") + 1])
    return str(config_module.from_dict(tomllib.loads(config_text), where="ConfigMap").api.socket)


def socket_volume(pod: dict[str, Any], container: dict[str, Any],
                  socket: str) -> tuple[str, dict[str, Any]]:
    """(mountPath, volume) of the volume the socket is in: the deepest mount above it."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = [m for m in container["volumeMounts"] if Path(m["mountPath"]) in
              Path(socket).parents]
    assert mounts, f"the socket {socket} is on the container's read-only root file system"
    mount = max(mounts, key=lambda m: len(Path(m["mountPath"]).parts))
    return mount["mountPath"], volumes[mount["name"]]


@pytest.fixture
def short_folder() -> Iterator[Path]:
    """A temporary folder with a short path: the pod's socket path below it must stay within a
    unix socket's 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="k8s-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_daemonset_s_socket_layout_starts_a_real_daemon(short_folder):
    """The pod's socket path, on a copy of the folders the pod has (the emptyDir with the
    kubelet's mode, the rest 0755 as on a read-only root file system), with a real mlcostd:
    the socket was the emptyDir itself, which mlcostd refuses (others can write it, sticky or
    not), so the pod exited 2 at every start."""
    found = objects(MANIFEST)
    pod = found["DaemonSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    socket = socket_argument(container, found["ConfigMap"]["data"]["mlcostd.toml"])
    mount_path, volume = socket_volume(pod, container, socket)
    assert "emptyDir" in volume, volume  # the kubelet's folder, made for each pod
    root = short_folder / "pod"
    volume_folder = root / mount_path.lstrip("/")
    volume_folder.mkdir(parents=True, mode=0o755)
    volume_folder.chmod(EMPTY_DIR_MODE[volume["emptyDir"].get("medium", "")])
    mapped = root / socket.lstrip("/")
    daemon = livedaemon.start(short_folder / "daemon", "idle-host", wait=False,
                              args=["--socket", str(mapped)])
    daemon.socket = mapped
    try:
        poll(daemon.healthy, livedaemon.START_TIMEOUT_S, f"mlcostd healthy on {mapped}",
             explain=daemon.log_tail)
        assert mapped.is_socket()
    except BaseException:
        daemon.stop()
        raise
    assert daemon.stop() == 0, daemon.log_tail()
    assert not mapped.exists()  # removed on stop; the folder mlcostd made for it stays
    assert stat.S_IMODE(mapped.parent.stat().st_mode) == 0o700
